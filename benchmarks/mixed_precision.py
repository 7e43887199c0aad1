"""Training step throughput in float32 and bfloat16, and feature agreement.

Both run the same training step on one batch in memory (the compute
bound), in interleaved rounds; then the float32 weights are copied into the
bfloat16 network (kernels re-drawn at Glorot scale so that features differ
from image to image) and the features of the same images are compared by
their cosine::

    python benchmarks/mixed_precision.py [--batch_size=128]
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# the checkout's root: the tests' weight spreader
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

import numpy as np
import tensorflow as tf

from cosine_metric_learning import model as model_lib
from cosine_metric_learning.datasets.spec import MARKET1501 as DATASET
from tests.reference import spread_kernels


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps_per_round", type=int, default=3)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    images = tf.constant(rng.random((args.batch_size,) + DATASET.image_shape,
                                    dtype=np.float32))
    labels = tf.constant(np.repeat(np.arange(args.batch_size // 4) + 1, 4),
                         tf.int64)
    models, steps = {}, {}
    for precision in ("none", "bf16"):
        model = model_lib.create_model(DATASET, "cosine-softmax", precision)
        optimizer = model_lib.create_optimizer(1e-3, precision)
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64)
        fn = tf.function(model_lib.make_train_step(model, optimizer,
                                                   "cosine-softmax", step))
        fn(images, labels)  # trace
        models[precision], steps[precision] = model, fn

    rates = {p: [] for p in steps}
    for _ in range(args.rounds):
        for precision, fn in steps.items():
            start = time.perf_counter()
            for _ in range(args.steps_per_round):
                out = fn(images, labels)
            float(out["scalars"]["losses/total_loss"])
            rates[precision].append(args.steps_per_round /
                                    (time.perf_counter() - start))
    median = {p: float(np.median(r)) for p, r in rates.items()}

    # Glorot-scaled kernels: a freshly initialised net maps every image to
    # nearly the same feature, which would agree trivially
    spread_kernels(models["none"].encoder, seed=1)
    models["bf16"].encoder.set_weights(models["none"].encoder.get_weights())
    a = models["none"].encoder(images, training=False).numpy()
    b = models["bf16"].encoder(images, training=False).numpy()
    cosine = np.sum(a * b, axis=1)

    print(f"\nbatch {args.batch_size}, {os.cpu_count()} CPU cores, "
          f"TensorFlow {tf.__version__}, median of {args.rounds} rounds")
    print(f"float32   {median['none']:7.3f} steps/s "
          f"{median['none'] * args.batch_size:8.1f} images/s")
    print(f"bfloat16  {median['bf16']:7.3f} steps/s "
          f"{median['bf16'] * args.batch_size:8.1f} images/s  "
          f"(x{median['bf16'] / median['none']:.2f})")
    spread = float(np.mean(a @ a.T))
    print(f"feature cosine, bfloat16 vs float32 on the same weights: "
          f"mean {cosine.mean():.4f}, min {cosine.min():.4f} (between "
          f"different images: mean {spread:.3f})")


if __name__ == "__main__":
    main()
