"""Faults injected for real: signals, kills, bad files, NaN, full disks."""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from cosine_metric_learning import queued_trainer, training
from cosine_metric_learning.errors import INTERRUPTED, TrainingError
from tests.conftest import ENV, ROOT, error_lines, one_error_line, read_events
from tests.conftest import run, run_script, small_config
from cosine_metric_learning.datasets.spec import MARKET1501 as MARKET

pytestmark = pytest.mark.slow


def _train_args(dataset_dir, log_dir, *extra):
    return [sys.executable, "train_market1501.py", f"--dataset_dir={dataset_dir}",
            f"--log_dir={log_dir}", "--run_id=run", "--batch_size=16",
            "--loss_mode=triplet", "--log_interval_secs=0.01", *extra]


class _Process:
    """A training process whose stderr is read as it comes."""

    def __init__(self, args):
        self.lines = []
        self.process = subprocess.Popen(args, cwd=ROOT, env=ENV, text=True,
                                        stderr=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stderr:
            self.lines.append(line)

    def wait_for(self, text, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(text in line for line in self.lines):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no '{text}' in:\n" + "".join(self.lines[-30:]))

    def text(self):
        self._reader.join(10)
        return "".join(self.lines)


def _step_of(checkpoint):
    return int(tf.train.load_checkpoint(checkpoint).get_tensor(
        "step/.ATTRIBUTES/VARIABLE_VALUE"))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_saves_the_current_step_and_the_rerun_continues(
        market_dir, tmp_path, signum):
    run = _Process(_train_args(market_dir, tmp_path))
    try:
        run.wait_for(" step 2")
        run.process.send_signal(signum)
        assert run.process.wait(30) == 128 + signum
    finally:
        run.process.kill()
    checkpoint = tf.train.latest_checkpoint(tmp_path / "run")
    step = _step_of(checkpoint)
    assert step >= 2 and checkpoint.endswith(f"ckpt-{step}")
    name = signal.Signals(signum).name
    assert f"Stopped by {name} at step {step}" in run.text()
    assert _producers_gone(run.text())

    result = run_script("train_market1501.py", *_train_args(
        market_dir, tmp_path, f"--number_of_steps={step + 1}")[2:])
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"(step {step})" in result.stderr


@pytest.fixture(scope="module")
def large_market_dir(market_dir, tmp_path_factory):
    """The synthetic set with every training and gallery image 20 times
    (other detection numbers), so that encoding and calibrating take long
    enough to be interrupted on a fast machine."""
    folder = tmp_path_factory.mktemp("large") / "Market-1501-synthetic"
    shutil.copytree(market_dir, folder)
    for split in ("bounding_box_train", "bounding_box_test"):
        for path in sorted((folder / split).glob("*.jpg")):
            stem = path.name.split(".")[0]
            for copy in range(2, 21):
                shutil.copy(path, path.with_name(f"{stem[:-2]}{copy:02d}"
                                                 ".jpg"))
    return str(folder)


@pytest.mark.parametrize("disguised", [True, False])
def test_ctrl_c_that_library_code_turns_into_another_error_is_ctrl_c(
        disguised):
    """A real SIGINT arriving inside code that turns the KeyboardInterrupt
    into another error (as TensorFlow's autograph does while it traces a
    function: a ``TypeError``) is still one line and exit status 130;
    the same error without a Ctrl-C is not taken for one."""
    result = run_script("-c", f"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from cosine_metric_learning import errors

def run():
    try:
        if {disguised}:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)  # the signal arrives here
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        raise TypeError("in user code:")

sys.exit(errors.report_errors(["command"], run, {{}}))""")
    if disguised:
        assert result.returncode == 130, result.stderr[-2000:]
        assert result.stderr.strip() == INTERRUPTED
    else:
        assert result.returncode == 1
        assert "TypeError: in user code:" in result.stderr


def test_ctrl_c_that_a_finaliser_swallows_is_ctrl_c():
    """A real SIGINT arriving while a finaliser runs (Python ignores the
    KeyboardInterrupt there, and the command would go on to exit 0) is
    still one line and exit status 130."""
    result = run_script("-c", """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from cosine_metric_learning import errors

class Finalised:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)  # the signal arrives here

def run():
    Finalised()
    return 0

sys.exit(errors.report_errors(["command"], run, {}))""")
    assert result.returncode == 130, result.stderr[-2000:]
    assert result.stderr.strip() == INTERRUPTED


def test_what_interrupted_code_prints_after_ctrl_c_is_dropped():
    """Where a real SIGINT reaches C code inside an import, the library
    prints the error it became itself (TensorFlow's ``nest``: a
    ``SystemError`` traceback, through ``sys.stderr`` as ``PyErr_Print``
    does) before the command ends: after Ctrl-C only the one line is
    said; what was written before it stays."""
    result = run_script("-c", """
import os, signal, sys, time, traceback
signal.signal(signal.SIGINT, signal.default_int_handler)
from cosine_metric_learning import errors

def run():
    print("before Ctrl-C", file=sys.stderr)
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)  # the signal arrives here
    except KeyboardInterrupt:
        try:
            raise SystemError("<built-in function __import__> returned a "
                              "result with an exception set")
        except SystemError:
            traceback.print_exc()
    return 0

sys.exit(errors.report_errors(["command"], run, {}))""")
    assert result.returncode == 130, result.stderr[-2000:]
    assert result.stderr.splitlines() == ["before Ctrl-C", INTERRUPTED]


@pytest.mark.parametrize("mode, waits_for", [
    (["--mode=test", "--batch_size=1", "--flip_test"], "Encoding"),
    (["--mode=onnx", "--int8", "--calibration_images=3000"],
     "Calibrating int8")])
def test_ctrl_c_in_test_or_export_is_one_line(large_market_dir, trained,
                                              tmp_path, mode, waits_for):
    output = tmp_path / "m_int8.onnx"
    run = _Process(_with_default_sigint([
        "train_market1501.py", *mode, f"--dataset_dir={large_market_dir}",
        f"--restore_path={trained[0]}",
        f"--output_json={tmp_path / 'test.json'}"
        if mode[0] == "--mode=test" else f"--output={output}"]))
    try:
        run.wait_for(waits_for)
        run.process.send_signal(signal.SIGINT)
        assert run.process.wait(60) == 130, run.text()[-3000:]
    finally:
        run.process.kill()
    log = run.text()
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log
    assert error_lines(log) == [INTERRUPTED], log[-3000:]
    assert os.listdir(tmp_path) == []  # no output, whole or half


def test_ctrl_c_while_cutting_tracks_leaves_nothing(tmp_path):
    """The converter writes its folder whole or not at all."""
    from cosine_metric_learning.datasets import synthetic_mot
    first = synthetic_mot.write_mot_sequence(str(tmp_path / "seqs"), seed=1,
                                         name="SEQ-0")
    for k in range(1, 8):  # copies under other names: long enough to stop
        copy = tmp_path / "seqs" / f"SEQ-{k}"
        shutil.copytree(first, copy)
        info = copy / "seqinfo.ini"
        info.write_text(info.read_text().replace("name=SEQ-0",
                                                 f"name=SEQ-{k}"))
    _ctrl_c_leaves_no_folder(tmp_path, "SEQ-0: cutting", [
        "-m", "cosine_metric_learning.datasets.mot",
        f"--sequences={tmp_path / 'seqs'}"])


def test_ctrl_c_while_tracking_leaves_nothing(trained, tmp_path):
    """The tracking evaluation writes its folder whole or not at all."""
    from cosine_metric_learning.datasets import synthetic_mot
    sequence = synthetic_mot.write_mot_sequence(str(tmp_path / "seqs"), seed=1,
                                            name="SEQ-0")
    # after the encoding, eight settings to track
    _ctrl_c_leaves_no_folder(tmp_path, "SEQ-0: encoded", [
        "-m", "cosine_metric_learning.track", f"--model={trained[0]}",
        f"--sequences={sequence}", "--sweep"])


def _ctrl_c_leaves_no_folder(tmp_path, waits_for, args):
    """Ctrl-C once the command ``args`` logged ``waits_for``: one line,
    exit 130, and neither its --output_dir nor a temporary folder."""
    out = tmp_path / "out"
    out.mkdir()
    run = _Process(_with_default_sigint(
        [*args, f"--output_dir={out / 'folder'}"]))
    try:
        run.wait_for(waits_for)
        run.process.send_signal(signal.SIGINT)
        assert run.process.wait(60) == 130, run.text()[-3000:]
    finally:
        run.process.kill()
    log = run.text()
    assert "Traceback" not in log and error_lines(log) == [INTERRUPTED], \
        log[-3000:]
    assert os.listdir(out) == []


def _maps_tensorflow(pid):
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "tensorflow" in f.read()
    except OSError:  # gone
        return True


@pytest.mark.parametrize("command", [
    ["-m", "cosine_metric_learning.track", "--model=none"],
    ["train_market1501.py", "--mode=test", "--restore_path=x"]])
def test_ctrl_c_while_a_command_starts_is_one_line(tmp_path, command):
    """Ctrl-C while TensorFlow loads (its library mapped, its import not
    done): the command's one line, not an import's traceback."""
    for _ in range(3):  # a start that got past the imports first: again
        process = subprocess.Popen(
            _with_default_sigint([*command, f"--dataset_dir={tmp_path}",
                                  f"--sequences={tmp_path}",
                                  f"--output_dir={tmp_path / 'out'}"]),
            cwd=ROOT, env=ENV, text=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        try:
            deadline = time.time() + 120
            while not _maps_tensorflow(process.pid) and \
                    time.time() < deadline:
                time.sleep(0.01)
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=60)
        finally:
            process.kill()
        if process.returncode != 2:  # 2: the bad flags were reached
            break
    assert process.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and error_lines(stderr) == [
        INTERRUPTED], stderr[-3000:]


def _with_default_sigint(args):
    """``args`` run by this Python with SIGINT's default action: a process
    started in the background by a non-interactive shell (as a CI job may
    start the suite) ignores SIGINT, its children inherit that, and Python
    then installs no KeyboardInterrupt handler; the training loop sets its
    own. Set by a small Python that then execs, as for the file size
    limit below."""
    return [sys.executable, "-c",
            "import os, signal, sys; "
            "signal.signal(signal.SIGINT, signal.SIG_DFL); "
            "os.execv(sys.executable, [sys.executable] + sys.argv[1:])",
            *args]


def _producers_gone(log):
    return "did not stop within" not in log


def test_sigkill_loses_at_most_an_interval_and_no_partial_checkpoint(
        market_dir, tmp_path):
    run = _Process(_train_args(market_dir, tmp_path,
                               "--save_interval_secs=0.5"))
    try:
        run.wait_for("(interval)")
        run.process.kill()  # SIGKILL: no handler runs
        run.process.wait(30)
    finally:
        run.process.kill()
    latest = tf.train.latest_checkpoint(tmp_path / "run")
    step = _step_of(latest)
    # a half-written checkpoint: files without an entry in the state file
    for suffix in (".index", ".data-00000-of-00001"):
        (tmp_path / "run" / f"ckpt-99999{suffix}").write_bytes(b"\0" * 100)
    (tmp_path / "run" / "ckpt-99998_temp").mkdir()

    result = run_script("train_market1501.py", *_train_args(
        market_dir, tmp_path, f"--number_of_steps={step + 1}")[2:])
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"Continuing {tmp_path / 'run'} from {latest} (step {step})" \
        in result.stderr
    assert _step_of(tf.train.latest_checkpoint(tmp_path / "run")) == step + 1


def _corrupt_dataset(market_dir, tmp_path, num_bad):
    """A copy of the dataset with ``num_bad`` images of its largest
    training identity truncated or replaced by text."""
    data = tmp_path / "data"
    shutil.copytree(market_dir, data)
    train = data / "bounding_box_train"
    names = sorted(n for n in os.listdir(train) if n.endswith(".jpg"))
    ids = [n[:4] for n in names]
    largest = max(set(ids), key=ids.count)
    assert ids.count(largest) > num_bad
    bad = [n for n in names if n.startswith(largest)][:num_bad]
    for k, name in enumerate(bad):
        path = train / name
        if k % 2:
            path.write_text("this is not an image")
        else:
            path.write_bytes(path.read_bytes()[:200])  # truncated JPEG
    return str(data), [str(train / n) for n in bad], largest


def test_unreadable_images_are_skipped_once_and_counted(market_dir,
                                                        tmp_path):
    data, bad, identity = _corrupt_dataset(market_dir, tmp_path, 3)
    # 36 identities x 4 = 144: every batch draws from the damaged identity.
    # A step of 144 images takes about 13 GB on the CPU: run in a process
    # of its own, so this test's worker does not keep that memory.
    result = run_script("train_market1501.py", *_train_args(
        data, tmp_path, "--batch_size=144", "--queue_capacity=288",
        "--number_of_steps=2", "--max_unreadable_fraction=0.05",
        "--num_enqueue_threads=2", "--save_summaries_secs=0.000001",
        "--log_interval_secs=0.000001")[2:])
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "run"
    assert tf.train.latest_checkpoint(str(run_dir)).endswith("ckpt-2")
    skipped = [line.split("] ", 1)[1] for line in result.stderr.splitlines()
               if "] Skipping unreadable image" in line]
    assert len(skipped) == len(set(skipped)) >= 1  # each path once
    assert all(any(path in m for path in bad) for m in skipped)
    acc = read_events(str(run_dir))
    counts = [float(tf.make_ndarray(e.tensor_proto))
              for e in acc.Tensors("input/unreadable_images")]
    assert counts[-1] == len(skipped)


def test_too_many_unreadable_images_stop_the_run_naming_them(
        market_dir, tmp_path):
    data, bad, _ = _corrupt_dataset(market_dir, tmp_path, 4)
    result = run_script("train_market1501.py", *_train_args(
        data, tmp_path, "--batch_size=144", "--queue_capacity=288",
        "--max_unreadable_fraction=0.001", "--number_of_steps=3")[2:])
    line = one_error_line(result, "training images are unreadable",
                          "more than the 0 allowed", status=1)
    assert any(os.path.basename(p) in line for p in bad)


def test_non_finite_loss_stops_without_saving_it(market_dir, tmp_path):
    config = small_config(market_dir, tmp_path, learning_rate=1e30,
                     number_of_steps=20)
    with pytest.raises(TrainingError, match=r"the loss is not finite at step "
                       r"\d+ \(.*triplet_loss=.*weight_loss=") as info:
        training.train(MARKET, config)
    assert "the last checkpoint" in str(info.value)
    for path in tf.train.get_checkpoint_state(
            config.run_dir).all_model_checkpoint_paths:
        reader = tf.train.load_checkpoint(path)
        for name in reader.get_variable_to_shape_map():
            value = reader.get_tensor(name)
            if np.issubdtype(np.asarray(value).dtype, np.floating):
                assert np.all(np.isfinite(value)), (path, name)


def _with_file_size_limit(megabytes, args):
    """``args`` run where no file may exceed ``megabytes`` (writes past it
    fail with EFBIG, SIGXFSZ ignored). The limit is set by a small Python
    that then execs ``args``, not by a ``preexec_fn``: Python code between
    fork and exec in this many-threaded process can deadlock the child, and
    ``Popen`` would wait for its exec forever."""
    limit = megabytes * 2 ** 20
    return [sys.executable, "-c",
            "import os, resource, signal, sys; "
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
            "os.execv(sys.argv[1], sys.argv[1:])", *args]


def _train_on_a_full_disk(market_dir, log_dir, steps):
    """Train to ``steps`` where no file may exceed 5 MB (a checkpoint is
    33 MB, so its save fails); the run must stop with one error line, which
    is returned."""
    result = run(_with_file_size_limit(5, _train_args(
        market_dir, log_dir, f"--number_of_steps={steps}")))
    return one_error_line(result, "cannot save a checkpoint", status=1)


def test_full_disk_when_saving_keeps_the_previous_checkpoint(
        market_dir, tmp_path):
    first = run_script("train_market1501.py", *_train_args(
        market_dir, tmp_path, "--number_of_steps=1")[2:])
    assert first.returncode == 0, first.stderr[-2000:]
    previous = tf.train.latest_checkpoint(tmp_path / "run")
    size = os.path.getsize(previous + ".data-00000-of-00001")
    error = _train_on_a_full_disk(market_dir, tmp_path, 2)
    assert f"the last checkpoint {previous} is intact" in error
    assert tf.train.latest_checkpoint(tmp_path / "run") == previous
    assert os.path.getsize(previous + ".data-00000-of-00001") == size
    assert sorted(os.listdir(tmp_path / "run")) == sorted(
        [f for f in os.listdir(tmp_path / "run") if "ckpt-2" not in f])
    assert _step_of(previous) == 1


def test_full_disk_at_the_first_save_says_no_checkpoint_was_saved(
        market_dir, tmp_path):
    error = _train_on_a_full_disk(market_dir, tmp_path, 1)
    assert "no checkpoint of this run was saved before" in error
    assert "None" not in error
    assert tf.train.latest_checkpoint(tmp_path / "run") is None


def test_unwritable_log_dir_is_a_clear_error_at_start(market_dir, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a folder")
    result = run_script("train_market1501.py", *_train_args(
        market_dir, blocker / "logs")[2:])
    one_error_line(result, "cannot create", str(blocker))


def test_wrong_layouts_name_the_missing_path(market_dir, mars_dir, tmp_path):
    market = tmp_path / "market"
    shutil.copytree(market_dir, market)
    shutil.rmtree(market / "query")
    result = run_script("train_market1501.py", "--mode=test",
                        f"--dataset_dir={market}",
                        f"--restore_path={tmp_path}")
    one_error_line(result, str(market / "query"), "Market-1501 layout")
    mars = tmp_path / "mars"
    shutil.copytree(mars_dir, mars)
    os.remove(mars / "info" / "tracks_test_info.mat")
    os.remove(mars / "info" / "train_name.txt")
    result = run_script("train_mars.py", f"--dataset_dir={mars}",
                        f"--log_dir={tmp_path / 'logs'}")
    one_error_line(result, os.path.join("info", "train_name.txt"),
                   "MARS evaluation kit layout")


def _rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0


def test_queue_load_eight_producers_no_deadlock_no_leak():
    shape = (8, 4, 3)
    produced = []
    lock = threading.Lock()

    def batches():
        for b in range(10 ** 9):
            labels = np.arange(b * 16, (b + 1) * 16)
            with lock:
                produced.append(b)
            yield np.zeros((16,) + shape, np.uint8), labels

    trainer = queued_trainer.QueuedTrainer(
        batches(), shape, training=False, num_threads=8, capacity=64,
        input_spec=tf.TensorSpec((None,) + shape, tf.uint8))
    dequeue = tf.function(lambda: trainer.dequeue(16))
    seen = set()
    with trainer:
        for step in range(2000):
            if step == 200:
                rss_start = _rss_mb()
            _, labels = dequeue()
            labels = labels.numpy()
            assert not seen.intersection(labels.tolist())  # no duplicates
            seen.update(labels.tolist())
        rss_end = _rss_mb()
    left = trainer.size()
    assert [t for t in threading.enumerate()
            if t.name.startswith("producer-")] == []
    # every enqueued element was dequeued or is still in the closed queue;
    # batches taken from the generator but never enqueued were cancelled
    assert trainer.num_enqueued == len(seen) + left
    assert trainer.num_enqueued % 16 == 0
    assert len(produced) >= trainer.num_enqueued // 16
    assert rss_end - rss_start < 100, (rss_start, rss_end)
