"""tf.distribute on the CPU with two logical devices, in a fresh process."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT, run_script

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from cosine_metric_learning import train_app
    from train_market1501 import DATASET

    part, market_dir, log_dir = sys.argv[1:4]
    report = {}

    # one step on the same batch, mirrored over two devices and on one
    rng = np.random.default_rng(0)
    images = tf.constant(rng.random((16, 128, 64, 3), dtype=np.float32))
    labels = tf.constant(np.repeat(np.arange(4) * 3 + 1, 4), tf.int64)
    losses = {}
    # (one strategy per process: collectives of two would get mixed up)
    for name in (("mirrored", "none") if part == "step" else ()):
        tf.keras.utils.set_random_seed(1)
        strategy = train_app.create_strategy(
            name, "/cpu:0,/cpu:1" if name == "mirrored" else None)
        with strategy.scope():
            model = train_app.create_model(DATASET, "cosine-softmax")
            optimizer = train_app.create_optimizer(1e-3)
            optimizer.build(model.trainable_variables)
            step = tf.Variable(0, dtype=tf.int64, aggregation=
                               tf.VariableAggregation.ONLY_FIRST_REPLICA)
        fn = train_app.make_train_step(model, optimizer, "cosine-softmax",
                                       step)
        n = strategy.num_replicas_in_sync

        @tf.function
        def run():
            def replica():
                i = tf.distribute.get_replica_context().replica_id_in_sync_group
                size = 16 // n
                return fn(images[i * size:(i + 1) * size],
                          labels[i * size:(i + 1) * size])["scalars"][
                              "losses/cosine_softmax_loss"]
            return strategy.reduce("MEAN", strategy.run(replica), axis=None)

        losses[name] = [float(run()) for _ in range(3)]
        if name == "mirrored":
            report["replicas"] = n
            report["max_replica_difference"] = max(
                float(np.abs(a - b).max()) for v in model.trainable_variables
                for a, b in [[t.numpy() for t in
                              strategy.experimental_local_results(
                                  getattr(v, "value", v))]])
            report["step"] = int(step.numpy())
    if part == "step":
        report["losses"] = losses
        print("REPORT", json.dumps(report))
        sys.exit(0)

    # the trainer end to end, mirrored
    result = train_app.train(DATASET, train_app.TrainConfig(
        dataset_dir=market_dir, log_dir=log_dir, run_id="run",
        batch_size=16, number_of_steps=3, num_enqueue_threads=2,
        queue_capacity=64, save_summaries_secs=3600, log_interval_secs=3600,
        loss_mode="triplet", strategy="mirrored", devices="/cpu:0,/cpu:1"))
    report["train_step"] = result.step
    report["checkpoint"] = result.checkpoint
    print("REPORT", json.dumps(report))
""")


def test_mirrored_replicas_stay_identical_and_match_one_device(
        market_dir, tmp_path):
    import json
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    report = {}
    for part in ("step", "train"):
        result = subprocess.run(
            [sys.executable, "-c", SCRIPT, part, market_dir, str(tmp_path)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
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
        errors = [l for l in result.stderr.splitlines()
                  if l.startswith("error:")]
        assert result.returncode == 2 and len(errors) == 1, result.stderr
        assert message in errors[0]


WORKER = textwrap.dedent("""
    import json, os, sys
    index, ports, log_dir, market_dir = sys.argv[1:5]
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"localhost:{p}" for p in ports.split(",")]},
        "task": {"type": "worker", "index": int(index)}})
    from cosine_metric_learning import train_app
    from train_market1501 import DATASET
    result = train_app.train(DATASET, train_app.TrainConfig(
        dataset_dir=market_dir, log_dir=log_dir, run_id="run",
        batch_size=16, number_of_steps=3, num_enqueue_threads=2,
        queue_capacity=64, save_summaries_secs=3600, log_interval_secs=3600,
        loss_mode="triplet", strategy="multi_worker"))
    print("RESULT", json.dumps([result.step, result.checkpoint]))
""")


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
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    ports = ",".join(str(p) for p in _free_ports(2))
    workers = [subprocess.Popen(
        [sys.executable, "-c", WORKER, str(i), ports, str(tmp_path),
         market_dir], cwd=ROOT, env=env, stdout=subprocess.PIPE,
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
