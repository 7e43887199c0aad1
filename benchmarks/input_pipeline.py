"""Training throughput of four ways to feed the same training step.

(a) the QueuedTrainer fed from JPEG files on disk,
(b) the same step on one batch already in memory (the compute-only bound),
(c) a tf.data pipeline doing the same reading and preprocessing with
    AUTOTUNE parallelism and prefetch,
(d) a plain loop that loads a batch, then trains on it, with no overlap.

All four run in one process on the same model, identity sampler and batch
size, in interleaved rounds; the median rates and the ratios a/b, a/c and
a/d are printed at the end. Run from the repository root::

    python benchmarks/input_pipeline.py                # batch 128
    python benchmarks/input_pipeline.py --batch_size=32 --rounds=9
"""

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from cosine_metric_learning import preprocessing, queued_trainer
from cosine_metric_learning import model as model_lib, sampling
from cosine_metric_learning.datasets import market1501, synthetic
from cosine_metric_learning.datasets.spec import MARKET1501 as DATASET


def _steps_per_second(step, steps):
    start = time.perf_counter()
    for _ in range(steps):
        result = step()
    float(result["scalars"]["losses/total_loss"])  # wait for the last step
    return steps / (time.perf_counter() - start)


def measure(methods, warmup, rounds, steps_per_round):
    """Median steps/s of each method over interleaved rounds.

    Rounds alternate between the methods so that a slow spell of a shared
    machine hits all of them alike, not the one that happened to run then.
    """
    for step in methods.values():
        _steps_per_second(step, warmup)
    rates = {key: [] for key in methods}
    for _ in range(rounds):
        for key, step in methods.items():
            rates[key].append(_steps_per_second(step, steps_per_round))
    return {key: float(np.median(r)) for key, r in rates.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset_dir", default=None,
                        help="a Market-1501 folder; default: write a "
                             "synthetic one to a temporary folder")
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds; the median is reported")
    parser.add_argument("--steps_per_round", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--num_enqueue_threads", type=int,
                        default=queued_trainer.DEFAULT_NUM_THREADS)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        dataset_dir = args.dataset_dir or synthetic.write_market1501(
            os.path.join(tmp, "market"), num_train_ids=300, num_test_ids=2,
            num_distractors=0, num_junk=0)
        split = market1501.read_train_split_to_str(dataset_dir)
        filenames, ids = split.filenames, split.ids
        per_id = 4
        shape = DATASET.image_shape

        def sampler():
            return sampling.random_sample_identities_forever(
                args.batch_size, per_id, filenames, ids, seed=0)

        model = model_lib.create_model(DATASET, "cosine-softmax")
        optimizer = model_lib.create_optimizer(1e-3)
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64)
        step_fn = model_lib.make_train_step(model, optimizer,
                                            "cosine-softmax", step)
        on_batch = tf.function(step_fn)
        load = tf.function(preprocessing.make_batch_loader(shape, True))
        methods = {}

        # (a) the QueuedTrainer from JPEG files
        trainer = queued_trainer.QueuedTrainer(
            sampler(), shape, num_threads=args.num_enqueue_threads)
        queued_step = tf.function(
            lambda: step_fn(*trainer.dequeue(args.batch_size)))
        methods["a"] = queued_step

        # (b) compute only: one batch already in memory
        x, y = next(sampler())
        images, labels = load(x), tf.constant(y)
        methods["b"] = lambda: on_batch(images, labels)

        # (c) tf.data with AUTOTUNE and prefetch
        def load_one(filename, label):
            image = preprocessing.read_image(filename, shape)
            return preprocessing.preprocess(image, training=True), label

        data = tf.data.Dataset.from_generator(
            sampler, output_signature=(
                tf.TensorSpec([args.batch_size], tf.string),
                tf.TensorSpec([args.batch_size], tf.int64)))
        data = (data.unbatch()
                .map(load_one, num_parallel_calls=tf.data.AUTOTUNE)
                .batch(args.batch_size)
                .prefetch(tf.data.AUTOTUNE))
        iterator = iter(data)
        tf_data_step = tf.function(lambda it: step_fn(*next(it)))
        methods["c"] = lambda: tf_data_step(iterator)

        # (d) load, then train: no overlap
        plain = sampler()

        def plain_step():
            x, y = next(plain)
            return on_batch(load(x), tf.constant(y))

        methods["d"] = plain_step

        with trainer:
            rates = measure(methods, args.warmup, args.rounds,
                            args.steps_per_round)

    names = {"a": "QueuedTrainer, JPEG files on disk",
             "b": "images in memory (compute bound)",
             "c": "tf.data, AUTOTUNE + prefetch",
             "d": "plain loop, load then train"}
    print(f"\nbatch {args.batch_size}, median of {args.rounds} interleaved "
          f"rounds of {args.steps_per_round} steps, "
          f"{os.cpu_count()} CPU cores, TensorFlow {tf.__version__}, "
          f"devices: {[d.device_type for d in tf.config.list_logical_devices()]}")
    for key, name in names.items():
        print(f"({key}) {name:36s} {rates[key]:7.3f} steps/s "
              f"{rates[key] * args.batch_size:8.1f} images/s")
    for other in "bcd":
        print(f"a/{other} = {rates['a'] / rates[other]:.3f}")


if __name__ == "__main__":
    main()
