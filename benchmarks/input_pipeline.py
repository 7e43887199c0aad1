"""Training throughput of four ways to feed the same training step.

(a) the QueuedTrainer fed from JPEG files on disk,
(b) the same step on one batch already in memory (the compute-only bound),
(c) a tf.data pipeline doing the same reading and preprocessing with
    AUTOTUNE parallelism and prefetch,
(d) a plain loop that loads a batch, then trains on it, with no overlap.

All four run in one process on the same model, identity sampler and batch
size, in interleaved rounds; the median rates and the ratios a/b, a/c and
a/d are printed at the end.

The producer part measures what the feed can deliver to an infinitely fast
accelerator: a consumer that only dequeues, from the QueuedTrainer at 1, 2,
4 and 8 producer threads, from the QueuedTrainer over ``--cache_images``'s
decoded images (4 threads), and from ``tf.data`` with AUTOTUNE doing the
same reading and preprocessing of the same files; images/s, the ratio of
each to ``tf.data``, and the headroom: producer capacity over what the
training step (b) consumes on this machine. Run from the repository root::

    python benchmarks/input_pipeline.py                # batch 128, both parts
    python benchmarks/input_pipeline.py --part=producers
    python benchmarks/input_pipeline.py --batch_size=32 --rounds=9
"""

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

# several QueuedTrainers trace their own enqueue functions: not a problem
tf.get_logger().setLevel("ERROR")

from cosine_metric_learning import image_cache, preprocessing
from cosine_metric_learning import queued_trainer
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
    parser.add_argument("--part", choices=("training", "producers", "both"),
                        default="both")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        dataset_dir = args.dataset_dir or synthetic.write_market1501(
            os.path.join(tmp, "market"), num_train_ids=300, num_test_ids=2,
            num_distractors=0, num_junk=0)
        split = market1501.read_train_split_to_str(dataset_dir)

        def sampler():
            return sampling.random_sample_identities_forever(
                args.batch_size, 4, split.filenames, split.ids, seed=0)

        compute_rate = None
        if args.part in ("training", "both"):
            rates = training_part(args, sampler)
            compute_rate = rates["b"] * args.batch_size
        if args.part in ("producers", "both"):
            producer_part(args, sampler, split, compute_rate)


def _loader(shape, training):
    def load_one(filename, label):
        image = preprocessing.read_image(filename, shape)
        return preprocessing.preprocess(image, training=training), label
    return load_one


def _tf_data(sampler, batch_size, shape):
    data = tf.data.Dataset.from_generator(
        sampler, output_signature=(tf.TensorSpec([batch_size], tf.string),
                                   tf.TensorSpec([batch_size], tf.int64)))
    return iter(data.unbatch()
                .map(_loader(shape, True), num_parallel_calls=tf.data.AUTOTUNE)
                .batch(batch_size)
                .prefetch(tf.data.AUTOTUNE))


def training_part(args, sampler):
    """Steps/s of the training step fed four ways (a-d)."""
    shape = DATASET.image_shape
    model = model_lib.create_model(DATASET, "cosine-softmax")
    optimizer = model_lib.create_optimizer(1e-3)
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    step_fn = model_lib.make_train_step(model, optimizer, "cosine-softmax",
                                        step)
    on_batch = tf.function(step_fn)
    load = tf.function(preprocessing.make_batch_loader(shape, True))
    methods = {}

    # (a) the QueuedTrainer from JPEG files
    trainer = queued_trainer.QueuedTrainer(
        sampler(), shape, num_threads=args.num_enqueue_threads)
    methods["a"] = tf.function(
        lambda: step_fn(*trainer.dequeue(args.batch_size)))

    # (b) compute only: one batch already in memory
    x, y = next(sampler())
    images, labels = load(x), tf.constant(y)
    methods["b"] = lambda: on_batch(images, labels)

    # (c) tf.data with AUTOTUNE and prefetch
    iterator = _tf_data(sampler, args.batch_size, shape)
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
    return rates


def _images_per_second(take, batch_size, seconds):
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        take()
        count += batch_size
    return count / (time.perf_counter() - start)


def producer_part(args, sampler, split, compute_rate):
    """Images/s a consumer that only dequeues gets from each feed."""
    shape, batch = DATASET.image_shape, args.batch_size
    feeds, trainers = {}, []
    for threads in (1, 2, 4, 8):
        trainer = queued_trainer.QueuedTrainer(sampler(), shape,
                                               num_threads=threads)
        trainers.append(trainer)
        feeds[f"QueuedTrainer, {threads} threads"] = (
            trainer, tf.function(lambda t=trainer: t.dequeue(batch)))
    cache, kept = image_cache.fill(split.filenames, shape, 1e9, 0)
    rows = sampling.random_sample_identities_forever(
        batch, 4, np.arange(len(kept)), split.ids[kept], seed=0)
    trainer = queued_trainer.QueuedTrainer(
        image_cache.feed(cache, rows), shape, num_threads=4,
        input_spec=tf.TensorSpec((None,) + shape, tf.uint8))
    trainers.append(trainer)
    feeds["QueuedTrainer, 4 threads, --cache_images"] = (
        trainer, tf.function(lambda: trainer.dequeue(batch)))
    iterator = _tf_data(sampler, batch, shape)
    feeds["tf.data, AUTOTUNE + prefetch"] = (None, lambda: next(iterator))
    for trainer in trainers:
        trainer.start()
    rates = {name: [] for name in feeds}
    try:
        for _ in range(args.rounds):
            for name, (trainer, take) in feeds.items():
                # drain what was buffered while the others ran
                for _ in range((trainer.capacity if trainer else 0) // batch):
                    take()
                rates[name].append(_images_per_second(take, batch, 2.0))
    finally:
        for trainer in trainers:
            trainer.stop()
    rates = {name: float(np.median(r)) for name, r in rates.items()}
    base = rates["tf.data, AUTOTUNE + prefetch"]
    print(f"\nProducers only (a consumer that only dequeues), batch {batch}, "
          f"median of {args.rounds} interleaved rounds of 2 s")
    for name, rate in rates.items():
        headroom = (f"  {rate / compute_rate:6.1f}x the training step"
                    if compute_rate else "")
        print(f"{name:44s} {rate:9.0f} images/s  x{rate / base:.2f} of "
              f"tf.data{headroom}")


if __name__ == "__main__":
    main()
