"""Feed generators, the thread-safe iterator and the queue with producers."""

import collections
import itertools
import os
import re
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from cosine_metric_learning import queued_trainer, sampling, summaries
from cosine_metric_learning.errors import UsageError
from tests.conftest import run_script

SHAPE = (8, 4, 3)


# ThreadSafeIterator -----------------------------------------------------------

def test_thread_safe_iterator_hands_out_each_item_once_to_many_threads():
    def slow_counter(n):
        for i in range(n):
            time.sleep(0)  # lets another thread try to enter the generator
            yield i

    iterator = queued_trainer.ThreadSafeIterator(slow_counter(2000))
    seen, errors = [], []

    def consume():
        try:
            for item in iterator:
                seen.append(item)
        except Exception as e:  # "generator already executing" without lock
            errors.append(e)

    threads = [threading.Thread(target=consume) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(seen) == list(range(2000))


# Feed generators ----------------------------------------------------------------

def test_identity_sampler_batch_composition():
    ids = np.repeat(np.arange(10), 6)
    names = np.array([f"f{i}" for i in range(len(ids))])
    feed = sampling.random_sample_identities_forever(
        12, 3, names, ids, seed=0)
    for _ in range(20):
        x, y = next(feed)
        counts = collections.Counter(y.tolist())
        assert len(x) == len(y) == 12
        assert len(counts) == 4 and set(counts.values()) == {3}
        assert len(set(x.tolist())) == 12  # without replacement
        for name, label in zip(x, y):
            assert ids[int(name[1:])] == label  # inputs stay with their labels


def test_identity_sampler_fills_up_from_further_identities():
    # identities 0..3 have a single image; 4 and 5 have plenty
    ids = np.array([0, 1, 2, 3] + [4] * 5 + [5] * 5)
    feed = sampling.random_sample_identities_forever(
        8, 4, np.arange(len(ids)), ids, seed=1)
    for _ in range(30):
        x, y = next(feed)
        assert len(x) == 8 and len(set(x.tolist())) == 8
        np.testing.assert_array_equal(ids[x], y)
        assert max(collections.Counter(y.tolist()).values()) <= 4


def test_identity_sampler_draws_identities_seen_together_together():
    # 12 identities in three groups of 4 seen together (a chain within
    # each: 0-1, 1-2, 2-3); identity 12 was seen with no one
    together = np.zeros((13, 13), bool)
    for group in range(3):
        for a in range(4 * group, 4 * group + 3):
            together[a, a + 1] = together[a + 1, a] = True
    ids = np.repeat(np.arange(13), 3)
    feed = sampling.random_sample_identities_forever(
        12, 3, np.arange(len(ids)), ids, seed=0, seen_together=together)
    groups, loners = collections.Counter(), 0
    for _ in range(200):
        x, y = next(feed)
        np.testing.assert_array_equal(ids[x], y)
        drawn = sorted(set(y.tolist()))
        assert len(drawn) == 4 and len(set(x.tolist())) == 12
        # the batch starts at a random identity; the rest are its group
        # while the group has some left
        if 12 not in drawn:
            assert len({i // 4 for i in drawn}) == 1, drawn
            groups[drawn[0] // 4] += 1
        else:
            loners += 1
            # a loner first: the next is anyone, then the rest of its group
            assert len({i // 4 for i in drawn if i != 12}) == 1, drawn
    # every identity starts a batch about as often (1/13 of the batches)
    assert 5 <= loners <= 35
    assert min(groups.values()) >= 30
    # without it: random identities, a group whole in few batches
    feed = sampling.random_sample_identities_forever(
        12, 3, np.arange(len(ids)), ids, seed=0)
    whole = sum(len({i // 4 for i in set(next(feed)[1].tolist())}) == 1
                for _ in range(200))
    assert whole < 20


def test_identity_sampler_rejects_data_that_cannot_fill_a_batch():
    ids = np.repeat(np.arange(5), 4)
    with pytest.raises(UsageError, match="too few identities: 5 .* at least 8"):
        sampling.random_sample_identities_forever(32, 4, ids, ids)
    with pytest.raises(UsageError, match="batch_size=10 is not a multiple"):
        sampling.random_sample_identities_forever(10, 4, ids, ids)
    with pytest.raises(UsageError, match="too few images: 3 .* needs 8"):
        sampling.random_sample_identities_forever(
            8, 4, np.arange(3), np.arange(3))


def test_run_in_batches_processes_every_sample():
    calls = []

    def fn(batch):
        calls.append(len(batch))
        return batch * 2

    out = sampling.run_in_batches(fn, np.arange(10), 4)
    np.testing.assert_array_equal(out, np.arange(10) * 2)
    assert calls == [4, 4, 2]


# The queue ------------------------------------------------------------------

def _image_batches(num_batches, batch_size):
    """uint8 images whose pixel values encode their label."""
    for b in range(num_batches):
        labels = np.arange(b * batch_size, (b + 1) * batch_size)
        images = np.broadcast_to((labels % 251).astype(np.uint8)[:, None, None,
                                                                None],
                                 (batch_size,) + SHAPE).copy()
        yield images, labels


def _in_memory_trainer(feed, **kwargs):
    return queued_trainer.QueuedTrainer(
        feed, SHAPE, training=False,
        input_spec=tf.TensorSpec((None,) + SHAPE, tf.uint8), **kwargs)


def _producer_threads():
    return [t for t in threading.enumerate() if t.name.startswith("producer-")]


def test_queue_delivers_exactly_what_producers_enqueued_then_ends():
    trainer = _in_memory_trainer(_image_batches(25, 4), num_threads=4,
                                 capacity=16)
    dequeue = tf.function(lambda: trainer.dequeue(5))
    labels = []
    with trainer:
        with pytest.raises(tf.errors.OutOfRangeError):
            while True:
                images, batch_labels = dequeue()
                # preprocessing: float32 / 255 of the encoded pixel value
                np.testing.assert_allclose(
                    images.numpy()[:, 0, 0, 0],
                    (batch_labels.numpy() % 251) / 255.0, rtol=1e-6)
                labels.extend(batch_labels.numpy().tolist())
    assert sorted(labels) == list(range(100))
    assert _producer_threads() == []
    trainer.raise_if_failed()  # an exhausted generator is not a failure


def test_stop_cancels_blocked_producers_and_joins_every_thread():
    def forever():
        while True:
            yield next(_image_batches(1, 8))

    trainer = _in_memory_trainer(forever(), num_threads=6, capacity=8)
    trainer.start()
    deadline = time.time() + 20
    while trainer.size() < 8 and time.time() < deadline:
        time.sleep(0.05)
    assert trainer.size() == 8  # full: every producer now blocks
    # stop() returns (a hang would end in pytest-timeout's report)
    trainer.stop()
    assert _producer_threads() == []
    trainer.raise_if_failed()


def test_feed_generator_error_is_raised_in_the_main_thread():
    def broken():
        yield from _image_batches(2, 4)
        raise KeyError("identity 42 vanished")

    trainer = _in_memory_trainer(broken(), num_threads=3, capacity=64)
    dequeue = tf.function(lambda: trainer.dequeue(4))
    with pytest.raises(queued_trainer.ProducerError,
                       match="feed generator raised KeyError.*42") as info:
        with trainer:
            deadline = time.time() + 30
            while time.time() < deadline:
                trainer.raise_if_failed()
                try:
                    dequeue()
                except tf.errors.OutOfRangeError:
                    trainer.raise_if_failed()
                    raise AssertionError("closed without a failure")
    assert isinstance(info.value.__cause__, KeyError)
    assert _producer_threads() == []


def test_unreadable_file_is_named_in_the_main_thread(tmp_path):
    names = []
    for i in range(4):
        path = tmp_path / f"img{i}.jpg"
        Image.fromarray(np.full((8, 4, 3), 30 * i, np.uint8)).save(path)
        names.append(str(path))
    (tmp_path / "img2.jpg").write_bytes(b"this is no jpeg")
    feed = itertools.repeat((np.array(names), np.arange(4)))
    trainer = queued_trainer.QueuedTrainer(feed, SHAPE, num_threads=2,
                                           capacity=8)
    dequeue = tf.function(lambda: trainer.dequeue(4))
    with pytest.raises(queued_trainer.ProducerError,
                       match=r"cannot load '.*img2\.jpg'"):
        with trainer:
            try:
                dequeue()  # returns only by the queue being closed
            except tf.errors.OutOfRangeError:
                pass
            trainer.raise_if_failed()
    assert _producer_threads() == []


def test_file_names_are_decoded_resized_and_flipped(tmp_path):
    image = np.zeros((16, 8, 3), np.uint8)
    image[:, :4] = 255  # left half white
    path = os.path.join(tmp_path, "a.png")
    Image.fromarray(image).save(path)
    feed = itertools.repeat((np.array([path] * 8), np.zeros(8)))
    trainer = queued_trainer.QueuedTrainer(feed, SHAPE, num_threads=1,
                                           capacity=64)
    with trainer:
        images, _ = tf.function(lambda: trainer.dequeue(64))()
    images = images.numpy()
    assert images.shape == (64,) + SHAPE and images.dtype == np.float32
    left = images[:, :, :2].mean(axis=(1, 2, 3))
    # every image is either as on disk (left white) or mirrored
    assert set(np.round(left, 3).tolist()) <= {0.0, 1.0}
    assert 0 < np.sum(left == 1.0) < 64


def test_bad_pipeline_settings_are_rejected():
    with pytest.raises(ValueError, match="num_threads=0: expected"):
        _in_memory_trainer(iter([]), num_threads=0)
    with pytest.raises(ValueError, match="capacity=0: expected"):
        _in_memory_trainer(iter([]), capacity=0)


# Input monitor --------------------------------------------------------------

def _monitored_steps(trainer, steps, step_secs, batch=4, prefill=0):
    """A consumer like the training loop: wait as the monitor does, dequeue,
    then "compute" for ``step_secs``; returns the interval's scalars.
    With ``prefill`` the steps start once the queue holds that many
    images."""
    dequeue = tf.function(lambda: trainer.dequeue(batch))
    with trainer:
        deadline = time.time() + 120
        while trainer.size() < prefill and time.time() < deadline:
            time.sleep(0.01)
        assert trainer.size() >= prefill
        monitor = queued_trainer.InputMonitor(trainer, time.time())
        for _ in range(steps):
            monitor.before_step(batch)
            dequeue()
            time.sleep(step_secs)
        return monitor.interval(time.time())


def test_monitor_sees_no_starvation_when_producers_outpace_the_step():
    # every image the steps take is in the queue before the first step:
    # no step can wait, however busy the machine
    trainer = _in_memory_trainer(_image_batches(200, 4), num_threads=2,
                                 capacity=128)
    scalars, steps = _monitored_steps(trainer, 30, step_secs=0.02,
                                      prefill=30 * 4)
    assert steps == 29  # the first step (the initial fill) is not counted
    assert scalars["queue/starved_fraction"] == 0.0
    assert scalars["queue/input_wait_fraction"] == 0.0
    assert scalars["queue/enqueue_images_per_second"] > 0
    assert summaries.starvation_warning(scalars, steps) is None


def test_monitor_counts_steps_that_wait_for_a_slow_producer():
    def slow(batches):
        for batch in batches:
            # producing takes far longer than the step: a step finds the
            # next batch ready only if the consumer stalled for 0.2 s
            time.sleep(0.2)
            yield batch

    trainer = _in_memory_trainer(slow(_image_batches(200, 4)), num_threads=1,
                                 capacity=64)
    scalars, steps = _monitored_steps(trainer, 15, step_secs=0.0)
    assert steps == 14
    assert scalars["queue/starved_fraction"] > 0.8
    assert scalars["queue/input_wait_fraction"] > 0.5
    # one 4-image batch per 0.2 s or slower: at most 20 images/s
    assert 0 < scalars["queue/enqueue_images_per_second"] <= 100
    warning = summaries.starvation_warning(scalars, steps)
    assert re.fullmatch(
        r"\d+% of the last 14 steps waited for input \(\d+% of the time\): "
        r"the producers enqueue \d+ images/s; more --num_enqueue_threads or "
        r"--cache_images would feed the step faster", warning), warning
    assert int(warning.split("%")[0]) == round(
        100 * scalars["queue/starved_fraction"])
    # an interval of a few steps says nothing yet
    assert summaries.starvation_warning(scalars, 9) is None


def test_producers_are_placed_on_the_cpu_beside_the_queue():
    """Reading, decoding, flipping and casting never go to an accelerator
    (where the step runs): every op of the producers' function asks for
    the CPU."""
    trainer = queued_trainer.QueuedTrainer(iter(()), SHAPE)
    ops = [op for op in trainer.producer_function().graph.get_operations()
           if op.type not in ("Placeholder", "NoOp")]
    assert ops and all(
        tf.DeviceSpec.from_string(op.device).device_type == "CPU"
        for op in ops), {op.name: op.device for op in ops}


def test_gpu_check_without_a_gpu_says_so_and_exits_0():
    result = run_script("benchmarks/gpu_check.py", timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().startswith("No GPU is visible")
