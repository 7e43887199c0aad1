"""The queued input pipeline: producer threads filling a FIFO queue.

A feed generator (``sampling.py``) yields batches of inputs (file names or
uint8 images) and int labels. Producer threads take batches from one
``ThreadSafeIterator``
over it, each runs a ``tf.function`` that reads, decodes, resizes and
preprocesses the batch and ``enqueue_many``s it onto a ``tf.queue.FIFOQueue``
on the CPU. The training step dequeues ``batch_size`` elements at a time.

A producer that fails stops the pipeline: the queue is closed with pending
enqueues cancelled, so a blocked dequeue returns, and the failure is raised
in the main thread as a :class:`ProducerError` naming the file or batch.
"""

import threading
import time

import numpy as np
import tensorflow as tf
from absl import logging

from cosine_metric_learning import preprocessing
from cosine_metric_learning.errors import TrainingError
from cosine_metric_learning.errors import first_line

DEFAULT_CAPACITY = 512
DEFAULT_NUM_THREADS = 4


class ProducerError(TrainingError):
    """A producer thread failed; raised in the thread that consumes (the
    command line prints it as one line)."""


class UnreadableDataError(ProducerError):
    """More training images are unreadable than the run allows."""


def too_many_unreadable(names, allowed):
    """The message of :class:`UnreadableDataError`, naming examples."""
    examples = ", ".join(f"'{n}'" for n in sorted(names)[:3])
    return (f"{len(names)} training images are unreadable, more than the "
            f"{allowed} allowed; e.g. {examples}")


class ThreadSafeIterator:
    """Serialises ``next()`` on one iterator for several threads."""

    def __init__(self, iterable):
        self._iterator = iter(iterable)
        self._lock = threading.Lock()

    def __iter__(self):
        return self

    def __next__(self):
        with self._lock:
            return next(self._iterator)


# The queue and its producers ------------------------------------------------

class QueuedTrainer:
    """A FIFO queue on the CPU filled by producer threads.

    Parameters
    ----------
    feed_generator : iterator
        Yields ``(inputs, labels)``: file names (strings) or uint8 images
        ``(N, H, W, 3)``, and integer labels ``(N,)``.
    image_shape : tuple
        ``(height, width, 3)`` of the images in the queue.
    training : bool
        Apply the training preprocessing (random flip).
    num_threads : int
        Number of producer threads.
    capacity : int
        Queue capacity in images.
    input_spec : tf.TensorSpec or None
        Signature of one batch of inputs; default: a vector of file names.
    max_unreadable : int or None
        With file name inputs: how many unreadable files to skip (each is
        logged once and replaced in its batch by another image of the same
        identity) before failing with :class:`UnreadableDataError`. None
        fails on the first one.
    unreadable : set or None
        Where skipped files are collected; share it with the feed
        generator's ``exclude`` so it stops drawing them.

    Use as a context manager around the training loop: entering starts the
    producers, leaving stops them. Inside a ``tf.function``,
    :meth:`dequeue` takes one batch.
    """

    def __init__(self, feed_generator, image_shape, training=True,
                 num_threads=DEFAULT_NUM_THREADS, capacity=DEFAULT_CAPACITY,
                 input_spec=None, max_unreadable=None, unreadable=None):
        # the settings were checked as flags (settings.TrainConfig); these
        # are the class's own arguments
        if num_threads < 1:
            raise ValueError(f"num_threads={num_threads}: expected at "
                             "least 1")
        if capacity < 1:
            raise ValueError(f"capacity={capacity}: expected at least 1")
        self.image_shape = tuple(image_shape)
        self.capacity = capacity
        self.num_threads = num_threads
        self._iterator = ThreadSafeIterator(feed_generator)
        with tf.device("/cpu:0"):
            self.queue = tf.queue.FIFOQueue(
                capacity, [tf.float32, tf.int64],
                shapes=[self.image_shape, []], name="input_queue")
        input_spec = input_spec or tf.TensorSpec([None], tf.string)
        load = preprocessing.make_batch_loader(self.image_shape, training)

        @tf.function(input_signature=[input_spec,
                                      tf.TensorSpec([None], tf.int64)])
        def enqueue(inputs, labels):
            # read, decode, flip and cast on the CPU beside the queue, not
            # on the accelerator the step runs on
            with tf.device("/cpu:0"):
                self.queue.enqueue_many([load(inputs), labels])

        self._enqueue = enqueue
        self._threads = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._error = None
        self._num_finished = 0
        self.max_unreadable = max_unreadable
        self.unreadable = set() if unreadable is None else unreadable
        self.num_enqueued = 0  # elements; for accounting and the load test

    # -- consumer side --

    def dequeue(self, batch_size):
        """``(images, labels)`` of one batch; call inside a tf.function."""
        images, labels = self.queue.dequeue_many(batch_size)
        return images, labels

    def producer_function(self):
        """The producers' concrete function (to inspect its placement)."""
        return self._enqueue.get_concrete_function()

    def size(self):
        """Number of images in the queue now."""
        return int(self.queue.size())

    def wait_for(self, num_images, stop=lambda: False, poll_secs=0.05):
        """Block until the queue holds ``num_images``, the producers have
        finished or ``stop()`` is true; a producer's failure is raised.

        Returns the seconds waited (0.0 if the images were there).
        """
        if self.size() >= num_images:
            return 0.0
        start = time.perf_counter()
        while self.size() < num_images and not stop():
            self.raise_if_failed()
            with self._lock:
                if self._num_finished == self.num_threads:
                    break
            time.sleep(poll_secs)
        self.raise_if_failed()
        return time.perf_counter() - start

    def raise_if_failed(self):
        """Raise the first producer failure, if any, in the calling thread."""
        if self._error is not None:
            error_class, message, cause = self._error
            raise error_class(message) from cause

    # -- lifecycle --

    def start(self):
        """Start the producer threads (once)."""
        if self._threads:
            return
        self._threads = [
            threading.Thread(target=self._produce, args=(i,), daemon=True,
                             name=f"producer-{i}")
            for i in range(self.num_threads)]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout=30.0):
        """Close the queue, cancel pending enqueues and join the producers."""
        self._stop.set()
        self._close(cancel=True)
        for thread in self._threads:
            thread.join(timeout)
            if thread.is_alive():
                logging.warning("%s did not stop within %.0f s",
                                thread.name, timeout)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()
        return False

    def _close(self, cancel):
        try:
            self.queue.close(cancel_pending_enqueues=cancel)
        except tf.errors.OpError:  # already closed
            pass

    # -- producer side --

    def _produce(self, index):
        try:
            while not self._stop.is_set():
                try:
                    inputs, labels = next(self._iterator)
                except StopIteration:
                    return
                except Exception as e:
                    self._fail(f"producer-{index}: the feed generator raised "
                               f"{type(e).__name__}: {e}", e)
                    return
                labels = np.asarray(labels, np.int64)
                while inputs is not None and not self._enqueued(
                        index, inputs, labels):
                    inputs = self._replace_unreadable(index, inputs, labels)
        finally:
            with self._lock:
                self._num_finished += 1
                all_finished = self._num_finished == self.num_threads
            if all_finished:
                # A finite generator is exhausted: let the consumer drain
                # what is left, then get OutOfRangeError.
                self._close(cancel=self._error is not None)

    def _enqueued(self, index, inputs, labels):
        """Enqueue a batch: True when done with it (enqueued, or stopping),
        False when an input could not be read."""
        try:
            self._enqueue(inputs, labels)
        except tf.errors.CancelledError:
            self._stop.set()  # the queue was closed: we are stopping
            return True
        except tf.errors.InvalidArgumentError:
            return self._stop.is_set()
        except Exception as e:
            if not self._stop.is_set():
                self._fail(f"producer-{index}: failed on a batch of "
                           f"{len(labels)} inputs: {first_line(e)}", e)
            return True
        with self._lock:
            self.num_enqueued += len(labels)
        return True

    def _replace_unreadable(self, index, inputs, labels):
        """The batch with its unreadable files replaced by other images of
        the same identity; None to drop it (stopping, or nothing to fill a
        hole with)."""
        inputs = np.array(inputs)
        bad = {}
        if inputs.dtype.kind in "SUO":
            bad = preprocessing.unreadable_files(inputs, self.image_shape)
        if not bad:  # it fails as a whole only: not one file's fault
            self._fail(f"producer-{index}: failed on a batch of "
                       f"{len(inputs)} inputs", None)
            return None
        for j, error in bad.items():
            name = _text(inputs[j])
            if self.max_unreadable is None:
                self._fail(f"producer-{index}: cannot load '{name}': "
                           f"{first_line(error)}", error)
                return None
            with self._lock:
                if self._error is not None:  # another producer gave up
                    return None
                new = name not in self.unreadable
                self.unreadable.add(name)
                count = len(self.unreadable)
                if new:
                    logging.warning("Skipping unreadable image '%s': %s",
                                    name, first_line(error))
                too_many = count > self.max_unreadable
                if too_many:  # counted and failed under one lock: the
                    # message's count is the number of warnings above
                    self._error = (
                        UnreadableDataError, too_many_unreadable(
                            self.unreadable, self.max_unreadable), error)
            if too_many:
                self._fail(self._error[1], error)
                return None
        readable = [k for k in range(len(inputs)) if k not in bad]
        for j in bad:
            same = [k for k in readable if labels[k] == labels[j]]
            if not same:
                return None  # nothing to fill it with: take the next batch
            inputs[j] = inputs[same[j % len(same)]]
        return inputs

    def _fail(self, message, cause, error_class=ProducerError):
        with self._lock:
            if self._error is None:
                self._error = (error_class, message, cause)
        logging.error("%s; stopping the input pipeline", message)
        self._stop.set()
        self._close(cancel=True)


class InputMonitor:
    """Whether the queue keeps the training step fed, per interval.

    Before each step :meth:`before_step` waits until the queue holds a
    whole batch: a step that had to wait is *starved*, and the time it
    waited is input wait that the step's dequeue would otherwise have spent
    blocked. :meth:`interval` returns, since the previous call:

    - ``queue/starved_fraction``: the fraction of steps that waited,
    - ``queue/input_wait_fraction``: the time waited over the wall time,
    - ``queue/enqueue_images_per_second``: what the producers enqueued.

    The first step of a run (waiting for the queue's initial fill) is not
    counted.
    """

    POLL_SECS = 0.001  # short: a fast accelerator's step takes milliseconds

    def __init__(self, trainer, now):
        self._trainer = trainer
        self._first = True
        self._reset(now)

    def _reset(self, now):
        self._start, self._steps, self._starved, self._waited = now, 0, 0, 0.0
        self._enqueued = self._trainer.num_enqueued

    def before_step(self, batch_size, stop=lambda: False):
        """Wait for a batch in the queue, counting the wait."""
        waited = self._trainer.wait_for(batch_size, stop, self.POLL_SECS)
        if self._first:
            self._first = False
            return
        self._steps += 1
        self._starved += waited > 0.0
        self._waited += waited

    def interval(self, now):
        """The scalars of the interval since the last call; starts anew."""
        seconds = max(now - self._start, 1e-9)
        scalars = {
            "queue/starved_fraction": self._starved / max(self._steps, 1),
            "queue/input_wait_fraction": min(self._waited / seconds, 1.0),
            "queue/enqueue_images_per_second":
                (self._trainer.num_enqueued - self._enqueued) / seconds}
        steps = self._steps
        self._reset(now)
        return scalars, steps


def _text(item):
    return item.decode() if isinstance(item, bytes) else str(item)
