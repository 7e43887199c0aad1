"""The real trainer with a summary at every step beside a bare Keras step.

Each runs in a process of its own, at each batch size: the trainer with
its queue and producers on a synthetic Market-1501 set, summaries
(scalars, input images, filters, activation histograms) due at every
step (``--save_summaries_secs=0.000001``) and a progress line at every
step; the bare step is the same encoder and cosine-softmax head on one constant batch
(forward, loss, gradients, Adam) with nothing else. Printed: seconds per
step (median over the timed steps, after warm-up) and the process's peak
resident memory, and the trainer's ratio to the bare step::

    python benchmarks/summaries.py [--batch_sizes=128,32] [--steps=5]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
WARMUP_STEPS = 2

# a child process: prints {"seconds_per_step": ..., "peak_mb": ...}
BARE_STEP = """
import json, resource, sys, time
import numpy as np
import tensorflow as tf
from cosine_metric_learning import model as model_lib
from cosine_metric_learning.datasets.spec import MARKET1501 as DATASET
batch, steps, warmup = map(int, sys.argv[1:4])
rng = np.random.default_rng(0)
images = tf.constant(rng.random((batch,) + DATASET.image_shape,
                                dtype=np.float32))
labels = tf.constant(np.repeat(np.arange(batch // 4) + 1, 4), tf.int64)
model = model_lib.create_model(DATASET, "cosine-softmax")
optimizer = model_lib.create_optimizer(1e-3)
optimizer.build(model.trainable_variables)
step = tf.Variable(0, dtype=tf.int64)
fn = tf.function(model_lib.make_train_step(model, optimizer,
                                           "cosine-softmax", step))
times = []
for i in range(warmup + steps):
    start = time.perf_counter()
    float(fn(images, labels)["scalars"]["losses/total_loss"])
    times.append(time.perf_counter() - start)
print(json.dumps({
    "seconds_per_step": float(np.median(times[warmup:])),
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

TRAINER = """
import json, resource, sys
from absl import logging
from cosine_metric_learning import settings, training
from cosine_metric_learning.datasets.spec import MARKET1501
dataset_dir, log_dir, batch, steps = sys.argv[1], sys.argv[2], \\
    int(sys.argv[3]), int(sys.argv[4])
logging.set_verbosity(logging.INFO)
config = settings.TrainConfig(
    dataset_dir=dataset_dir, log_dir=log_dir, run_id="run",
    batch_size=batch, number_of_steps=steps, loss_mode="cosine-softmax",
    save_summaries_secs=1e-6, log_interval_secs=1e-6,
    save_interval_secs=10 ** 6)
training.train(MARKET1501, config)
print(json.dumps({
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

# the progress line's rate: "step 5/7  loss ...  0.10 steps/s"
RATE = re.compile(r"step (\d+)/\d+ .* ([0-9.]+) steps/s")


def run(code, *args):
    result = subprocess.run([sys.executable, "-c", code, *map(str, args)],
                            cwd=ROOT, env=ENV, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"benchmark process failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


def trainer(dataset_dir, batch, steps):
    with tempfile.TemporaryDirectory() as log_dir:
        numbers, log = run(TRAINER, dataset_dir, log_dir, batch,
                           WARMUP_STEPS + steps)
    rates = [float(rate) for step, rate in RATE.findall(log)
             if int(step) > WARMUP_STEPS]
    if len(rates) < steps:
        sys.exit(f"expected {steps} progress lines after warm-up, found "
                 f"{len(rates)}:\n{log[-3000:]}")
    rates.sort()
    numbers["seconds_per_step"] = 1.0 / rates[len(rates) // 2]
    return numbers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch_sizes", default="128,32")
    parser.add_argument("--steps", type=int, default=5,
                        help="timed steps after %d of warm-up" % WARMUP_STEPS)
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    from cosine_metric_learning.datasets import synthetic
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        dataset_dir = synthetic.write_market1501(
            os.path.join(tmp, "Market-1501-synthetic"), num_train_ids=60,
            num_test_ids=2, num_distractors=0, num_junk=0, seed=0)
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            bare, _ = run(BARE_STEP, batch, args.steps, WARMUP_STEPS)
            real = trainer(dataset_dir, batch, args.steps)
            rows.append((batch, real, bare))
            print(f"batch {batch} done", file=sys.stderr)
    print(f"\n{os.cpu_count()} CPU cores; median s/step of {args.steps} "
          f"steps after {WARMUP_STEPS} of warm-up; peak resident memory")
    header = (f"{'batch':>5}  {'trainer s/step':>14}  {'bare s/step':>11}  "
              f"{'ratio':>5}  {'trainer MB':>10}  {'bare MB':>7}  "
              f"{'ratio':>5}")
    print(header)
    print("-" * len(header))
    for batch, real, bare in rows:
        print(f"{batch:5d}  {real['seconds_per_step']:14.2f}  "
              f"{bare['seconds_per_step']:11.2f}  "
              f"{real['seconds_per_step'] / bare['seconds_per_step']:5.2f}  "
              f"{real['peak_mb']:10.0f}  {bare['peak_mb']:7.0f}  "
              f"{real['peak_mb'] / bare['peak_mb']:5.2f}")


if __name__ == "__main__":
    main()
