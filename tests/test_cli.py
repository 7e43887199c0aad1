"""The entry points as a user runs them: real processes, real signals."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _run(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def _assert_one_line_error(result, *fragments):
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [l for l in result.stderr.splitlines()
             if "error" in l.lower() and all(f in l for f in fragments)]
    assert lines, result.stderr[-2000:]


def test_missing_dataset_folder(tmp_path):
    missing = str(tmp_path / "Market-1501-v15.09.15")
    result = _run("train_market1501.py", f"--dataset_dir={missing}",
                  f"--log_dir={tmp_path}")
    assert result.returncode == 2
    _assert_one_line_error(result, missing, "not a directory")


def test_mars_without_info_folder(tmp_path):
    (tmp_path / "bbox_train").mkdir()
    result = _run("train_mars.py", f"--dataset_dir={tmp_path}",
                  f"--log_dir={tmp_path}")
    assert result.returncode == 2
    _assert_one_line_error(result, os.path.join("info", "train_name.txt"))


def test_batch_size_not_divisible_and_too_few_identities(market_dir, tmp_path):
    result = _run("train_market1501.py", f"--dataset_dir={market_dir}",
                  f"--log_dir={tmp_path}", "--batch_size=30")
    _assert_one_line_error(result, "--batch_size=30", "--images_per_id=4")
    result = _run("train_market1501.py", f"--dataset_dir={market_dir}",
                  f"--log_dir={tmp_path}", "--batch_size=256")
    _assert_one_line_error(result, "too few identities: 36", "at least 64")


def test_unknown_loss_mode_and_mode(market_dir):
    result = _run("train_market1501.py", f"--dataset_dir={market_dir}",
                  "--loss_mode=arcface")
    _assert_one_line_error(result, "--loss_mode=arcface", "cosine-softmax")
    result = _run("train_mars.py", "--mode=dance")
    _assert_one_line_error(result, "--mode=dance", "train")


def test_ctrl_c_writes_a_final_checkpoint_and_the_rerun_continues(
        market_dir, tmp_path):
    args = [sys.executable, "train_market1501.py",
            f"--dataset_dir={market_dir}", f"--log_dir={tmp_path}",
            "--run_id=interrupted", "--batch_size=16", "--loss_mode=triplet",
            "--log_interval_secs=0.01", "--save_interval_secs=3600"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    process = subprocess.Popen(args, cwd=ROOT, env=env, text=True,
                               stderr=subprocess.PIPE,
                               stdout=subprocess.DEVNULL)
    lines, trained = [], threading.Event()

    def read():
        for line in process.stderr:
            lines.append(line)
            if " step 3" in line:
                trained.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert trained.wait(180), "".join(lines[-20:])
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 128 + signal.SIGINT
    finally:
        process.kill()
    reader.join(10)
    run_dir = os.path.join(tmp_path, "interrupted")
    checkpoint = tf.train.latest_checkpoint(run_dir)
    assert checkpoint is not None, "".join(lines[-20:])
    step = int(tf.train.load_checkpoint(checkpoint).get_tensor(
        "step/.ATTRIBUTES/VARIABLE_VALUE"))
    assert step >= 3 and checkpoint.endswith(f"ckpt-{step}")
    assert any(f"Stopped by SIGINT at step {step}" in l for l in lines)

    result = _run(*args[1:], f"--number_of_steps={step + 1}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"(step {step})" in result.stderr  # "Continuing ... (step N)"
    assert tf.train.latest_checkpoint(run_dir).endswith(f"ckpt-{step + 1}")
