"""The entry points as a user runs them: real processes, real signals."""

import os

import pytest

from tests.conftest import one_error_line, run_script

pytestmark = pytest.mark.slow


def test_missing_dataset_folder(tmp_path):
    missing = str(tmp_path / "Market-1501-v15.09.15")
    result = run_script("train_market1501.py", f"--dataset_dir={missing}",
                        f"--log_dir={tmp_path}")
    one_error_line(result, missing, "not a directory")


def test_mars_without_info_folder(tmp_path):
    (tmp_path / "bbox_train").mkdir()
    result = run_script("train_mars.py", f"--dataset_dir={tmp_path}",
                        f"--log_dir={tmp_path}")
    one_error_line(result, os.path.join("info", "train_name.txt"))


def test_batch_size_not_divisible_and_too_few_identities(market_dir, tmp_path):
    result = run_script("train_market1501.py", f"--dataset_dir={market_dir}",
                        f"--log_dir={tmp_path}", "--batch_size=30")
    one_error_line(result, "--batch_size=30", "--images_per_id=4")
    result = run_script("train_market1501.py", f"--dataset_dir={market_dir}",
                        f"--log_dir={tmp_path}", "--batch_size=256")
    one_error_line(result, "too few identities: 36", "at least 64")


def test_unknown_loss_mode_and_mode(market_dir):
    result = run_script("train_market1501.py", f"--dataset_dir={market_dir}",
                        "--loss_mode=arcface")
    one_error_line(result, "--loss_mode=arcface", "cosine-softmax")
    result = run_script("train_mars.py", "--mode=dance")
    one_error_line(result, "--mode=dance", "train")
