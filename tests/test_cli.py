"""The entry points as a user runs them: real processes, real signals."""

import os
import subprocess
import sys

import pytest

from tests.conftest import ENV, ROOT

pytestmark = pytest.mark.slow


def _run(*args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=ENV,
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
