"""Encoder throughput on every runtime, one CPU, one run.

Patches per second at batch 32 (Deep SORT's) and batch 1 for the frozen
Deep SORT graph run in a ``tf.compat.v1.Session`` (as the tracker runs it:
the baseline), the SavedModel, the ONNX model on ONNX Runtime in float32
and int8, and the OpenVINO IR in float32 (latency and throughput hints),
int8 (NNCF; and the int8 ONNX model read by OpenVINO) and bfloat16 where
the processor has it, and the TFLite model on LiteRT in float32 and int8
(the int8 models calibrated on the same training images).
Rounds alternate between the methods; medians are printed with the ratio
to the frozen graph and the smallest cosine of each method's features to
the Keras encoder's on real crops of the test split::

    python benchmarks/encoder.py                      # needs the deploy extra
    python benchmarks/encoder.py --restore_path=./output/market1501/run

Without ``--restore_path`` the encoder has random (Glorot-spread) weights;
``--dataset_dir`` defaults to a small synthetic Market-1501 set written to
a temporary folder (crops for the cosine, training images for the int8
calibration).
"""

import argparse
import glob
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# the checkout's root: the tests' weight spreader
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

import numpy as np
import tensorflow as tf
from PIL import Image

from cosine_metric_learning import checkpoints, deploy, export
from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning.datasets import synthetic
from cosine_metric_learning.nets.deep_sort import network_definition
from tests.reference import spread_kernels

SHAPE = network_definition.IMAGE_SHAPE
BASELINE = "TF frozen graph, Session (Deep SORT)"


def _rate(fn, patches, seconds):
    fn(patches)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn(patches)
        count += len(patches)
    return count / (time.perf_counter() - start)


def _session(pb):
    graph_def = tf.compat.v1.GraphDef()
    with open(pb, "rb") as f:
        graph_def.ParseFromString(f.read())
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="net")
    session = tf.compat.v1.Session(graph=graph)
    images = graph.get_tensor_by_name("net/images:0")
    features = graph.get_tensor_by_name("net/features:0")
    return lambda p: session.run(features, {images: p})


def _crops(directory, count):
    paths = sorted(glob.glob(os.path.join(directory, "*.jpg")))[:count]
    return np.stack([np.asarray(Image.open(p).convert("RGB").resize(
        SHAPE[1::-1], Image.Resampling.BILINEAR))[..., ::-1] for p in paths])


def _methods(encoder, tmp, dataset_dir, calibration_images):
    """``{name: encode(patches)}``, the models written to ``tmp``."""
    pb = export.freeze(encoder, os.path.join(tmp, "m.pb"), SHAPE)
    saved = export.write_saved_model(encoder, os.path.join(tmp, "sm"), SHAPE)
    onnx = deploy.write_onnx(encoder, os.path.join(tmp, "m.onnx"), SHAPE)
    xml = deploy.write_openvino(encoder, os.path.join(tmp, "m.xml"), SHAPE)
    calibration = deploy.calibration_patches(sorted(glob.glob(os.path.join(
        dataset_dir, "bounding_box_train", "*.jpg"))), calibration_images,
        SHAPE)
    int8 = deploy.write_openvino(encoder, os.path.join(tmp, "q.xml"), SHAPE,
                                 calibration=calibration)
    onnx_int8 = deploy.write_onnx(encoder, os.path.join(tmp, "q.onnx"),
                                  SHAPE, calibration=calibration)
    tflite = deploy.write_tflite(encoder, os.path.join(tmp, "m.tflite"),
                                 SHAPE)
    tflite_int8 = deploy.write_tflite(encoder, os.path.join(tmp, "q.tflite"),
                                      SHAPE, calibration=calibration)
    f32 = {"INFERENCE_PRECISION_HINT": "f32"}
    latency, throughput = ({"PERFORMANCE_HINT": "LATENCY"},
                           {"PERFORMANCE_HINT": "THROUGHPUT"})
    loaders = {
        "TF SavedModel": lambda: encoder_lib.load(saved),
        "ONNX Runtime": lambda: encoder_lib.load(onnx),
        "ONNX Runtime int8": lambda: encoder_lib.load(onnx_int8),
        "OpenVINO float32, latency hint": lambda: encoder_lib.load(
            xml, openvino_config={**f32, **latency}),
        "OpenVINO float32, throughput hint": lambda: encoder_lib.load(
            xml, openvino_config={**f32, **throughput}),
        "OpenVINO int8, latency hint": lambda: encoder_lib.load(
            int8, openvino_config=latency),
        "OpenVINO int8, throughput hint": lambda: encoder_lib.load(
            int8, openvino_config=throughput),
        "OpenVINO int8 of the int8 ONNX, latency hint": lambda:
            encoder_lib.load(onnx_int8, backend="openvino",
                             openvino_config=latency),
        "TFLite (LiteRT)": lambda: encoder_lib.load(tflite),
        "TFLite int8 (LiteRT)": lambda: encoder_lib.load(tflite_int8),
    }
    import openvino
    if "BF16" in openvino.Core().get_property("CPU",
                                              "OPTIMIZATION_CAPABILITIES"):
        loaders["OpenVINO bfloat16, latency hint"] = lambda: encoder_lib.load(
            xml, openvino_config={"INFERENCE_PRECISION_HINT": "bf16",
                                  **latency})
    methods = {BASELINE: _session(pb)}
    methods.update({name: load() for name, load in loaders.items()})
    return methods


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="per method, batch size and round")
    parser.add_argument("--restore_path", help="a checkpoint or run folder "
                        "(default: random weights)")
    parser.add_argument("--dataset_dir", help="a Market-1501 layout "
                        "(default: a small synthetic one)")
    parser.add_argument("--calibration_images", type=int,
                        default=deploy.DEFAULT_CALIBRATION_IMAGES)
    args = parser.parse_args(argv)
    if args.restore_path:
        encoder, _ = checkpoints.load_encoder(args.restore_path, SHAPE)
    else:
        encoder = spread_kernels(
            network_definition.create_encoder(), seed=0)

    with tempfile.TemporaryDirectory() as tmp:
        dataset_dir = args.dataset_dir or synthetic.write_market1501(
            os.path.join(tmp, "market"), num_train_ids=60, num_test_ids=20,
            seed=0)
        methods = _methods(encoder, tmp, dataset_dir, args.calibration_images)
        crops = _crops(os.path.join(dataset_dir, "bounding_box_test"), 256)
        keras = encoder(crops[..., ::-1].astype(np.float32) / 255.0,
                        training=False).numpy()
        cosines = {}
        for name, fn in methods.items():
            out = np.concatenate([fn(crops[i:i + 32])
                                  for i in range(0, len(crops), 32)])
            cosines[name] = float(np.min(np.sum(out * keras, axis=1) / (
                np.linalg.norm(out, axis=1) * np.linalg.norm(keras, axis=1))))
        results = {}
        for batch in (32, 1):
            patches = crops[:batch]
            rates = {name: [] for name in methods}
            for _ in range(args.rounds):
                for name, fn in methods.items():
                    rates[name].append(_rate(fn, patches, args.seconds))
            results[batch] = {k: float(np.median(v)) for k, v in rates.items()}

    print(f"\n{os.cpu_count()} CPU cores, TensorFlow {tf.__version__}, median "
          f"of {args.rounds} rounds of {args.seconds:g} s, "
          f"{'trained' if args.restore_path else 'random'} weights")
    width = max(map(len, methods))
    print(f"{'':{width}s} {'batch 32':>9s} {'batch 1':>9s}  "
          f"{'x frozen graph':>15s}  {'min cosine to Keras':>19s}")
    for name in methods:
        print(f"{name:{width}s} {results[32][name]:9.1f} "
              f"{results[1][name]:9.1f}"
              f"  {results[32][name] / results[32][BASELINE]:6.2f} / "
              f"{results[1][name] / results[1][BASELINE]:5.2f}"
              f"  {cosines[name]:19.5f}")
    print("(patches/s; ratios at batch 32 / batch 1)")


if __name__ == "__main__":
    main()
