"""Check on a GPU machine that the queue keeps the accelerator fed.

One table: where the queue, its producers and the convolutions run (read
from the placed ops), training steps/s at batch 128 in float32 and
bfloat16 fed by the queue and by a batch already on the device, the
fraction of queued steps that waited for input, producer capacity (a
consumer that only dequeues) at 4, 8 and 16 threads, and peak device
memory. A few minutes on a GPU::

    python benchmarks/gpu_check.py
    python benchmarks/gpu_check.py --device=/cpu:0 --seconds=2   # try it here

Without a GPU (and without ``--device``) it says so in one line and exits
with status 0. For scale: the original trained at about 11 steps/s of
batch 128 on a GTX 1080 (about 1,400 images/s, its paper's setting); a
current GPU is an order of magnitude faster, which is what the producers
must keep up with.
"""

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from cosine_metric_learning import model as model_lib
from cosine_metric_learning import queued_trainer, sampling
from cosine_metric_learning.datasets import market1501, synthetic
from cosine_metric_learning.datasets.spec import MARKET1501 as DATASET

SHAPE = DATASET.image_shape
# each QueuedTrainer traces its own enqueue function: not a problem
tf.get_logger().setLevel("ERROR")


def _device_type(name):
    return tf.DeviceSpec.from_string(name).device_type or "?"


def _steps_per_second(step, seconds, before=lambda: None):
    for _ in range(2):  # warm-up: tracing, autotuning
        before()
        step()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        before()
        result = step()
        count += 1
    float(result["scalars"]["losses/total_loss"])  # wait for the device
    return count / (time.perf_counter() - start)


def placement(trainer, device, batch):
    """Device types the ops ran on: the dequeue (eager), the producers'
    ops (their function's placement) and a convolution (eager)."""
    images, _ = trainer.queue.dequeue_many(batch)
    graph = trainer.producer_function().graph
    producer = {_device_type(op.device) for op in graph.get_operations()
                if op.type not in ("Placeholder", "NoOp")}
    with tf.device(device):
        conv = tf.nn.conv2d(images, tf.ones((3, 3, 3, 8)), 1, "SAME")
    return {"queue (dequeue)": _device_type(images.device),
            "producers (read, decode, flip, cast)": "/".join(sorted(producer)),
            "convolutions": _device_type(conv.device)}


def training_rates(trainer, device, batch, seconds, precision):
    """Steps/s fed by the queue and by a batch on the device, and the
    fraction of queued steps that waited for input."""
    with tf.device(device):
        model = model_lib.create_model(DATASET, "cosine-softmax", precision)
        optimizer = model_lib.create_optimizer(1e-3, precision)
        optimizer.build(model.trainable_variables)
        step_fn = model_lib.make_train_step(
            model, optimizer, "cosine-softmax", tf.Variable(0, tf.int64))
        images, labels = trainer.queue.dequeue_many(batch)
        images, labels = tf.identity(images), tf.identity(labels)
    on_device = tf.function(lambda: step_fn(images, labels))
    queued = tf.function(lambda: step_fn(*trainer.dequeue(batch)))
    monitor = queued_trainer.InputMonitor(trainer, time.time())

    def run(fn):
        with tf.device(device):
            return fn()

    fed = _steps_per_second(lambda: run(queued), seconds,
                            before=lambda: monitor.before_step(batch))
    starved = monitor.interval(time.time())[0]["queue/starved_fraction"]
    return fed, _steps_per_second(lambda: run(on_device), seconds), starved


def producer_capacity(sampler, threads, batch, seconds):
    trainer = queued_trainer.QueuedTrainer(sampler(), SHAPE,
                                           num_threads=threads)
    take = tf.function(lambda: trainer.dequeue(batch))
    with trainer:
        trainer.wait_for(trainer.capacity)
        for _ in range(trainer.capacity // batch):
            take()  # drain the initial fill
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            take()
            count += batch
        return count / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", help="default: the first GPU")
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="per measurement")
    args = parser.parse_args(argv)
    device = args.device
    if device is None:
        gpus = tf.config.list_logical_devices("GPU")
        if not gpus:
            print("No GPU is visible to TensorFlow here: nothing to check "
                  "(run it on a GPU machine; --device=/cpu:0 tries it on "
                  "the CPU)")
            return 0
        device = gpus[0].name
    batch = args.batch_size
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        split = market1501.read_train_split_to_str(synthetic.write_market1501(
            os.path.join(tmp, "market"), num_train_ids=100, num_test_ids=2,
            num_distractors=0, num_junk=0))

        def sampler():
            return sampling.random_sample_identities_forever(
                batch, 4, split.filenames, split.ids, seed=0)

        trainer = queued_trainer.QueuedTrainer(sampler(), SHAPE)
        with trainer:
            trainer.wait_for(batch)
            rows += [(f"placement: {k}", v) for k, v in
                     placement(trainer, device, batch).items()]
            for precision in ("none", "bf16"):
                fed, bound, starved = training_rates(
                    trainer, device, batch, args.seconds, precision)
                name = "float32" if precision == "none" else "bfloat16"
                rows += [
                    (f"{name}: steps/s fed by the queue",
                     f"{fed:.2f} ({fed * batch:.0f} images/s)"),
                    (f"{name}: steps/s on a batch on the device",
                     f"{bound:.2f} (queue/device x{fed / bound:.2f})"),
                    (f"{name}: starved fraction", f"{starved:.2f}")]
        for threads in (4, 8, 16):
            rate = producer_capacity(sampler, threads, batch, args.seconds)
            rows.append((f"producer capacity, {threads} threads",
                         f"{rate:.0f} images/s"))
    if _device_type(device) == "GPU":
        spec = tf.DeviceSpec.from_string(device)  # "GPU:0", as it asks
        peak = tf.config.experimental.get_memory_info(
            f"GPU:{spec.device_index or 0}")["peak"]
        rows.append(("peak device memory", f"{peak / 2**30:.2f} GiB"))
    print(f"\n{device}, batch {batch}, TensorFlow {tf.__version__}")
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:{width}s}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
