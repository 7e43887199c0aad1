"""Run by tests/test_distribute.py in a fresh process (two logical CPUs):
``python -m tests.helpers.mirrored step|train MARKET_DIR LOG_DIR``; prints
``REPORT <json>``."""

import json
import sys

import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from cosine_metric_learning import distribute, settings, training
from cosine_metric_learning import model as model_lib
from cosine_metric_learning.datasets.spec import MARKET1501 as DATASET
from cosine_metric_learning.nets.deep_sort import network_definition

part, market_dir, log_dir = sys.argv[1:4]
report = {}

# one step on the same batch, mirrored over two devices and on one
rng = np.random.default_rng(0)
images = tf.constant(rng.random((16, 128, 64, 3), dtype=np.float32))
labels = tf.constant(np.repeat(np.arange(4) * 3 + 1, 4), tf.int64)
losses = {}
# (one strategy per process: collectives of two would get mixed up)
for name in (("mirrored", "none") if part == "step" else ()):
    tf.keras.utils.set_random_seed(1)
    strategy = distribute.create_strategy(
        name, "/cpu:0,/cpu:1" if name == "mirrored" else None)
    with strategy.scope():
        # the original's small logit scale: a large one multiplies the
        # per-replica batch-norm differences in the loss
        model = model_lib.create_model(
            DATASET, "cosine-softmax",
            initial_logit_scale=network_definition.ORIGINAL_LOGIT_SCALE)
        optimizer = model_lib.create_optimizer(1e-3)
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, aggregation=
                           tf.VariableAggregation.ONLY_FIRST_REPLICA)
    fn = model_lib.make_train_step(model, optimizer, "cosine-softmax",
                                   step)
    n = strategy.num_replicas_in_sync

    @tf.function
    def run():
        def replica():
            i = tf.distribute.get_replica_context().replica_id_in_sync_group
            size = 16 // n
            return fn(images[i * size:(i + 1) * size],
                      labels[i * size:(i + 1) * size])["scalars"][
                          "losses/cosine_softmax_loss"]
        return strategy.reduce("MEAN", strategy.run(replica), axis=None)

    losses[name] = [float(run()) for _ in range(3)]
    if name == "mirrored":
        report["replicas"] = n
        report["max_replica_difference"] = max(
            float(np.abs(a - b).max()) for v in model.trainable_variables
            for a, b in [[t.numpy() for t in
                          strategy.experimental_local_results(
                              getattr(v, "value", v))]])
        report["step"] = int(step.numpy())
if part == "step":
    report["losses"] = losses
    print("REPORT", json.dumps(report))
    sys.exit(0)

# the trainer end to end, mirrored
result = training.train(DATASET, settings.TrainConfig(
    dataset_dir=market_dir, log_dir=log_dir, run_id="run",
    batch_size=16, number_of_steps=3, num_enqueue_threads=2,
    queue_capacity=64, save_summaries_secs=3600, log_interval_secs=3600,
    loss_mode="triplet", strategy="mirrored", devices="/cpu:0,/cpu:1"))
report["train_step"] = result.step
report["checkpoint"] = result.checkpoint
print("REPORT", json.dumps(report))
