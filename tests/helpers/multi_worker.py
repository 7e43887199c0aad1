"""Run by tests/test_distribute.py, one process per worker:
``python -m tests.helpers.multi_worker INDEX PORTS LOG_DIR MARKET_DIR``;
prints ``RESULT <json>``."""

import json
import os
import sys

index, ports, log_dir, market_dir = sys.argv[1:5]
os.environ["TF_CONFIG"] = json.dumps({
    "cluster": {"worker": [f"localhost:{p}" for p in ports.split(",")]},
    "task": {"type": "worker", "index": int(index)}})
from cosine_metric_learning import settings, training
from cosine_metric_learning.datasets.spec import MARKET1501 as DATASET
result = training.train(DATASET, settings.TrainConfig(
    dataset_dir=market_dir, log_dir=log_dir, run_id="run",
    batch_size=16, number_of_steps=3, num_enqueue_threads=2,
    queue_capacity=64, save_summaries_secs=3600, log_interval_secs=3600,
    loss_mode="triplet", strategy="multi_worker"))
print("RESULT", json.dumps([result.step, result.checkpoint]))
