"""tf.distribute on the CPU with two logical devices, in a fresh process."""

import os
import subprocess
import sys

import pytest

from tests.conftest import ENV, ROOT, one_error_line, run_script

pytestmark = pytest.mark.slow



def test_mirrored_replicas_stay_identical_and_match_one_device(
        market_dir, tmp_path):
    import json
    report = {}
    for part in ("step", "train"):
        result = run_script("-m", "tests.helpers.mirrored", part,
                            market_dir, str(tmp_path), timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        report.update(json.loads(result.stdout.split("REPORT", 1)[1]))
    assert report["replicas"] == 2 and report["step"] == 3
    assert report["max_replica_difference"] == 0.0
    mirrored, single = report["losses"]["mirrored"], report["losses"]["none"]
    # not bit-equal: dropout draws differ and batch norm normalises each
    # replica's half of the batch by its own statistics
    assert abs(mirrored[0] - single[0]) < 5e-3 * single[0], (mirrored, single)
    for a, b in zip(mirrored, single):
        assert abs(a - b) < 5e-2 * b, (mirrored, single)
    assert mirrored[-1] < mirrored[0] and single[-1] < single[0]
    assert report["train_step"] == 3
    assert report["checkpoint"].endswith("ckpt-3")
    names = os.listdir(tmp_path / "run")
    assert sum(n.startswith("events.out.tfevents") for n in names) == 1


def test_strategy_settings_are_checked(market_dir, tmp_path):
    common = [f"--dataset_dir={market_dir}", f"--log_dir={tmp_path}",
              "--strategy=mirrored"]
    for args, message in (
            (["--devices=/gpu:7"], "--devices=/gpu:7: no such device"),
            (["--devices=/cpu:0", "--batch_size=18", "--images_per_id=6",
              "--queue_capacity=64"], None)):
        result = run_script("train_market1501.py", *common, *args,
                            "--number_of_steps=1")
        if message is None:
            assert result.returncode == 0, result.stderr[-2000:]
            continue
        one_error_line(result, message)




def _free_ports(count):
    import socket
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_multi_worker_on_two_local_processes(market_dir, tmp_path):
    import json
    ports = ",".join(str(p) for p in _free_ports(2))
    workers = [subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.multi_worker", str(i), ports,
         str(tmp_path), market_dir], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        outputs = [w.communicate(timeout=300) for w in workers]
    finally:
        for w in workers:
            w.kill()
    for worker, (out, err) in zip(workers, outputs):
        assert worker.returncode == 0, err[-3000:]
    results = [json.loads(out.split("RESULT", 1)[1]) for out, _ in outputs]
    assert results[0] == [3, str(tmp_path / "run" / "ckpt-3")]
    assert results[1] == [3, None]  # not the chief: nothing of its own kept
    names = os.listdir(tmp_path / "run")
    assert sum(n.startswith("events.out.tfevents") for n in names) == 1
    assert sorted(n for n in names if n.endswith(".index")) == [
        "ckpt-0.index", "ckpt-3.index"]
