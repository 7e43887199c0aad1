"""What a training run shows: the progress line and the TensorBoard
summaries."""

import tensorflow as tf
from absl import logging

from cosine_metric_learning import losses

# the input images a summary shows
SUMMARY_IMAGES = 8
# the values of an activation its histogram is drawn from: TensorFlow's
# histogram summary holds a one-hot of every value over its buckets (8 GB
# for conv1_1_elu at batch 128), so a summary takes a uniform sample
HISTOGRAM_VALUES = 1 << 16

# warn when more than this fraction of an interval's steps waited for input
STARVED_WARNING = 0.1
# ... and the interval had at least this many steps
STARVED_MIN_STEPS = 10


def sample_values(tensor, count=HISTOGRAM_VALUES):
    """At most ``count`` values of ``tensor`` (float32, flat), drawn
    uniformly at random over all of them; all if there are no more.
    Works inside a ``tf.function``."""
    flat = tf.reshape(tf.cast(tensor, tf.float32), [-1])
    size = tf.size(flat, out_type=tf.int64)
    return tf.cond(
        size <= count, lambda: flat, lambda: tf.gather(
            flat, tf.random.uniform([count], 0, size, dtype=tf.int64)))


def write_summaries(writer, step, result, scalars, conv1_1_kernel):
    """Write the step's and the loop's scalars, input images, filters and
    activation histograms (of the sampled values in
    ``result["activations"]``)."""
    with writer.as_default(step=step):
        for name, value in {**result["scalars"], **scalars}.items():
            tf.summary.scalar(name, value)
        tf.summary.image("input_batch", result["images"],
                         max_outputs=SUMMARY_IMAGES)
        kernel = tf.transpose(conv1_1_kernel, [3, 0, 1, 2])  # (32, 3, 3, 3)
        low = tf.reduce_min(kernel)
        kernel = (kernel - low) / (tf.reduce_max(kernel) - low + 1e-12)
        tf.summary.image("conv1_1_filters", kernel, max_outputs=32)
        for name, values in result["activations"].items():
            tf.summary.histogram(f"activations/{name}", values)
    writer.flush()


def log_progress(config, step, scalars, steps_per_second, queue_fill,
                 input_wait):
    """The progress line: step, losses (each term of the total),
    accuracy (if the loss has one), throughput, queue fill and the share
    of time spent waiting for input."""
    total = config.number_of_steps
    chosen = scalars["losses/" + losses.get(config.loss_mode).summary_name]
    extra = f"  accuracy {scalars['accuracy']:.3f}" if "accuracy" in scalars \
        else ""
    weight = config.tricks.added_triplet_weight(config.loss_mode)
    added = (f", {weight:g} x triplet {scalars['losses/triplet_loss']:.4f}"
             if weight else "")
    logging.info(
        "step %d%s  loss %.4f (%s %.4f%s, weight %.2e)%s  %.2f steps/s  "
        "%.1f images/s  queue %.0f%%  input wait %.0f%%", step,
        f"/{total}" if total else "", scalars["losses/total_loss"],
        config.loss_mode, chosen, added, scalars["losses/weight_loss"],
        extra, steps_per_second, steps_per_second * config.batch_size,
        100.0 * queue_fill, 100.0 * input_wait)


def starvation_warning(feed_scalars, steps):
    """The warning line for an interval in which more than
    ``STARVED_WARNING`` of the steps waited for input, else None;
    ``feed_scalars, steps`` are what
    :meth:`queued_trainer.InputMonitor.interval` returns."""
    starved = feed_scalars["queue/starved_fraction"]
    if starved <= STARVED_WARNING or steps < STARVED_MIN_STEPS:
        return None
    return (f"{100 * starved:.0f}% of the last {steps} steps waited for "
            f"input ({100 * feed_scalars['queue/input_wait_fraction']:.0f}% "
            "of the time): the producers enqueue "
            f"{feed_scalars['queue/enqueue_images_per_second']:.0f} images/s;"
            " more --num_enqueue_threads or --cache_images would feed the "
            "step faster")
