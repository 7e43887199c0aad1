"""Shared fixtures: small synthetic datasets written once per session."""

import atexit
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import pytest  # noqa: E402

from cosine_metric_learning.datasets import synthetic  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the environment of every subprocess a test starts: quiet TensorFlow, CPU
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
# the int8 runtimes capped to AVX2 kernels, as on x86 processors without
# VNNI or AVX-512: oneDNN (OpenVINO's convolutions) and OpenVINO's own
# kernels read one variable each
WITHOUT_VNNI = {"ONEDNN_MAX_CPU_ISA": "AVX2", "OV_CPU_MAX_ISA": "AVX2"}


@pytest.fixture
def absl_log(caplog):
    """``caplog`` with absl's INFO lines in it (absl's logger may not
    propagate to the root logger once a test has parsed absl flags)."""
    absl_logger = logging.getLogger("absl")
    absl_logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="absl"):
            yield caplog
    finally:
        absl_logger.removeHandler(caplog.handler)


@pytest.fixture(scope="session")
def market_dir(tmp_path_factory):
    """A small synthetic Market-1501 set: 40 training, 10 test identities."""
    path = str(tmp_path_factory.mktemp("data") / "Market-1501-synthetic")
    return synthetic.write_market1501(path, num_train_ids=40, num_test_ids=10,
                                      num_distractors=5, num_junk=3, seed=7)


@pytest.fixture(scope="session")
def mars_dir(tmp_path_factory):
    """A small synthetic MARS set: 12 training, 6 test identities."""
    path = str(tmp_path_factory.mktemp("data") / "MARS-synthetic")
    return synthetic.write_mars(path, num_train_ids=12, num_test_ids=6,
                                frames_per_tracklet=(3, 5), seed=3)


class _ForkServer:
    """The client of ``tests.helpers.forkserver``: one per test process,
    started on first use; it starts the project's programs with TensorFlow
    already imported (about 5 s of CPU less per command)."""

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.forkserver"], cwd=ROOT,
            env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.answers, self.next_id, self.ended = {}, 0, False
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            answer = json.loads(line)
            with self.changed:
                self.answers.setdefault(answer["id"], {}).update(answer)
                self.changed.notify_all()
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def run(self, command, cwd, timeout):
        """As ``subprocess.run(command, capture_output=True, text=True,
        timeout=timeout)`` does."""
        with tempfile.TemporaryDirectory() as tmp:
            output = [os.path.join(tmp, name) for name in ("out", "err")]
            with self.changed:
                number, self.next_id = self.next_id, self.next_id + 1
                self.process.stdin.write(json.dumps({
                    "id": number, "argv": command[1:], "cwd": cwd,
                    "env": ENV, "stdout": output[0],
                    "stderr": output[1]}) + "\n")
                self.process.stdin.flush()
                deadline, killed = time.monotonic() + timeout, False
                while "status" not in self.answers.get(number, {}):
                    if self.ended:
                        raise RuntimeError("the fork server ended")
                    pid = self.answers.get(number, {}).get("pid")
                    if time.monotonic() > deadline and pid and not killed:
                        os.kill(pid, signal.SIGKILL)
                        killed = True
                    self.changed.wait(1.0)
                status = self.answers.pop(number)["status"]
            stdout, stderr = (open(path).read() if os.path.exists(path)
                              else "" for path in output)
        if killed:
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
        return subprocess.CompletedProcess(command, status, stdout, stderr)

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


_fork_server = []
_fork_server_lock = threading.Lock()  # started once, whatever the threads


def _forkable(command, env, kwargs):
    """Whether ``command`` is one of the project's programs, run as it
    would be in a fresh interpreter: this Python on a script of the
    repository or a module of the project, the tests' environment
    unchanged."""
    if env or set(kwargs) - {"cwd"} or os.environ.get("TESTS_FORK") == "0":
        return False
    if len(command) < 2 or command[0] != sys.executable:
        return False
    if command[1] == "-m":
        return len(command) > 2 and command[2].startswith(
            ("cosine_metric_learning", "tests."))
    return command[1].endswith(".py") and os.path.abspath(
        os.path.join(kwargs.get("cwd", ROOT), command[1])).startswith(ROOT)


def run(command, timeout=300, env=None, **kwargs):
    """Run a command (a list) in a real subprocess, its output captured as
    text; ``cwd`` defaults to the repository, ``env`` adds variables to the
    quiet CPU environment.

    The project's own programs are forked from a process that has
    TensorFlow imported (``tests.helpers.forkserver``; ``TESTS_FORK=0``
    starts each in a fresh interpreter instead)."""
    kwargs.setdefault("cwd", ROOT)
    if _forkable(command, env, kwargs):
        with _fork_server_lock:
            if not _fork_server:
                _fork_server.append(_ForkServer())
                atexit.register(_fork_server[0].close)
        return _fork_server[0].run(command, os.fspath(kwargs["cwd"]),
                                   timeout)
    return subprocess.run(command, env=dict(ENV, **(env or {})),
                          capture_output=True, text=True, timeout=timeout,
                          **kwargs)


def run_script(script, *args, **kwargs):
    """Run an entry point of the repository with this Python (see
    :func:`run`).

    ``script`` is a file of the repository, or ``-m`` (``-c``) followed by
    a module (a program) in ``args``.
    """
    if script not in ("-m", "-c"):
        script = os.path.join(ROOT, script)
    return run([sys.executable, script, *args], **kwargs)


def error_lines(text):
    """The ``error:`` lines a command printed."""
    return [line for line in text.splitlines() if line.startswith("error:")]


def one_error_line(result, *fragments, status=2):
    """The run failed with ``status`` and one ``error:`` line holding every
    fragment, and no traceback; returns the line."""
    assert result.returncode == status, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr[-3000:]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def read_events(directory):
    """The TensorBoard event files of a folder, read back (every tensor
    event kept)."""
    from tensorboard.backend.event_processing import event_accumulator
    events = event_accumulator.EventAccumulator(
        str(directory), size_guidance={event_accumulator.TENSORS: 0})
    events.Reload()
    return events


def small_config(dataset_dir, log_dir, run_id="run", **kwargs):
    """A TrainConfig for a few quick triplet steps on a synthetic set."""
    from cosine_metric_learning import settings
    values = dict(batch_size=16, images_per_id=4, number_of_steps=2,
                  num_enqueue_threads=2, queue_capacity=64,
                  save_summaries_secs=3600, log_interval_secs=3600,
                  loss_mode="triplet")
    values.update(kwargs)
    return settings.TrainConfig(dataset_dir=dataset_dir, log_dir=str(log_dir),
                                run_id=run_id, **values)


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """A training-style checkpoint (step, encoder, classifier) with
    non-trivial weights and batch-norm statistics, and its encoder."""
    import keras
    import numpy as np
    import tensorflow as tf
    from cosine_metric_learning.nets.deep_sort import network_definition
    from tests.reference import spread_kernels
    encoder = spread_kernels(
        network_definition.create_encoder(), seed=3)
    rng = np.random.default_rng(3)
    for layer in encoder.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            n = layer.moving_mean.shape[0]
            layer.moving_mean.assign(rng.normal(0, 0.1, n))
            layer.moving_variance.assign(rng.uniform(0.5, 2.0, n))
            layer.beta.assign(rng.normal(0, 0.1, n))
    classifier = network_definition.create_classifier(1502)
    path = tf.train.Checkpoint(
        step=tf.Variable(7, dtype=tf.int64), encoder=encoder,
        classifier=classifier).save(
            str(tmp_path_factory.mktemp("train") / "ckpt"))
    return path, encoder
