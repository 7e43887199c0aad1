"""Encoder throughput: frozen graph, SavedModel and Keras encoder, one CPU.

Patches per second at batch 32 (Deep SORT's) and batch 1, for the frozen
Deep SORT graph run in a ``tf.compat.v1.Session`` (as the tracker runs it),
the same graph through :func:`cosine_metric_learning.encoder.load`, the
SavedModel's ``serving_default`` signature and the Keras encoder called in a
``tf.function``. Rounds alternate between the four; medians are printed,
with the ratios to the Keras encoder::

    python benchmarks/encoder.py
"""

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import export, preprocessing
from cosine_metric_learning.nets.deep_sort import network_definition


def _rate(fn, patches, seconds):
    fn(patches)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn(patches)
        count += len(patches)
    return count / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="per method, batch size and round")
    args = parser.parse_args(argv)
    shape = network_definition.IMAGE_SHAPE
    encoder = network_definition.create_encoder()

    with tempfile.TemporaryDirectory() as tmp:
        pb = export.freeze(encoder, os.path.join(tmp, "m.pb"), shape)
        saved = export.write_saved_model(encoder, os.path.join(tmp, "sm"),
                                         shape)
        graph_def = tf.compat.v1.GraphDef()
        with open(pb, "rb") as f:
            graph_def.ParseFromString(f.read())
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="net")
        session = tf.compat.v1.Session(graph=graph)
        images = graph.get_tensor_by_name("net/images:0")
        features = graph.get_tensor_by_name("net/features:0")

        @tf.function(input_signature=[tf.TensorSpec((None,) + shape,
                                                    tf.uint8)])
        def keras_encoder(patches):
            return encoder(preprocessing.preprocess(patches,
                                                    input_is_bgr=True),
                           training=False)

        loaded_pb = encoder_lib.load(pb)
        loaded_sm = encoder_lib.load(saved)
        methods = {
            "frozen graph, Session (Deep SORT)":
                lambda p: session.run(features, {images: p}),
            "frozen graph, encoder.load": lambda p: loaded_pb(p),
            "SavedModel, encoder.load": lambda p: loaded_sm(p),
            "Keras encoder, tf.function":
                lambda p: keras_encoder(tf.constant(p)).numpy(),
        }
        rng = np.random.default_rng(0)
        results = {}
        for batch in (32, 1):
            patches = rng.integers(0, 256, (batch,) + shape, dtype=np.uint8)
            rates = {name: [] for name in methods}
            for _ in range(args.rounds):
                for name, fn in methods.items():
                    rates[name].append(_rate(fn, patches, args.seconds))
            results[batch] = {k: float(np.median(v)) for k, v in rates.items()}

    print(f"\n{os.cpu_count()} CPU cores, TensorFlow {tf.__version__}, median "
          f"of {args.rounds} rounds of {args.seconds:.0f} s")
    print(f"{'':36s} {'batch 32':>12s} {'batch 1':>12s}  (patches/s)")
    keras_name = "Keras encoder, tf.function"
    for name in methods:
        print(f"{name:36s} {results[32][name]:12.1f} {results[1][name]:12.1f}"
              f"  x{results[32][name] / results[32][keras_name]:.2f} / "
              f"x{results[1][name] / results[1][keras_name]:.2f} of Keras")


if __name__ == "__main__":
    main()
