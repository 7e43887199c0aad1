"""The runtimes an :class:`encoder.Encoder` runs on, one loader each.

Every loader returns a :class:`Backend`: a function from uint8 BGR patches
``(N, H, W, 3)`` (a NumPy array) to float32 features ``(N, D)``, with the
input shape and feature size the model carries. The ONNX Runtime and
OpenVINO loaders import their runtime only when called (the optional
``deploy`` dependencies).
"""

import dataclasses
import importlib.util
import os
from typing import Any, Callable, Tuple

import numpy as np
import tensorflow as tf

from cosine_metric_learning import checkpoints, deploy, export, formats
from cosine_metric_learning.errors import ArgumentError, first_line
from cosine_metric_learning.formats import LITERT, ONNXRUNTIME, OPENVINO
from cosine_metric_learning.formats import TENSORFLOW
FASTEST = "fastest"
NAMES = ("auto", FASTEST, TENSORFLOW, ONNXRUNTIME, OPENVINO, LITERT)
# float32 on every processor: OpenVINO's CPU plugin otherwise computes in
# bfloat16 where the processor has it (features off by about 3e-3)
OPENVINO_FLOAT32 = {"INFERENCE_PRECISION_HINT": "f32"}
# --backend=fastest: the runtimes from the fastest on a CPU (measured by
# benchmarks/tracking.py), the first installed one that runs the format;
# OpenVINO at its own precision (bfloat16 where the processor has it) and
# tuned for a frame's batch at a time
FASTEST_ORDER = (OPENVINO, ONNXRUNTIME, LITERT, TENSORFLOW)
OPENVINO_FASTEST = {"PERFORMANCE_HINT": "LATENCY"}
RUNTIME_MODULES = {OPENVINO: "openvino", ONNXRUNTIME: "onnxruntime",
                   LITERT: "ai_edge_litert", TENSORFLOW: "tensorflow"}


@dataclasses.dataclass
class Backend:
    run: Callable[[np.ndarray], Any]
    image_shape: Tuple[int, int, int]
    feature_dim: int
    name: str
    keep_alive: Any = None  # what ``run`` needs alive (a loaded model)
    source: str = ""  # the file it was loaded from (a checkpoint's prefix)


def model_format(path):
    """``"frozen"``, ``"saved_model"``, ``"onnx"``, ``"openvino"``,
    ``"tflite"`` or ``"checkpoint"`` (a prefix or a folder of them, or a
    TF1 checkpoint), from the path."""
    if path is None:
        raise ArgumentError("path", path, "expected a model file or folder, "
                            "a checkpoint or a training run's folder")
    if os.path.isdir(path) and tf.saved_model.contains_saved_model(path):
        return "saved_model"
    name = formats.of_path(path)
    if formats.by_name(name).extension and not os.path.isfile(path):
        raise ArgumentError("path", path, "no such file")
    return name


# the backends that can run each format; the first is the default
RUNS_ON = {f.name: f.runtimes for f in formats.FORMATS}


def resolve(path, backend):
    """``(format, backend)`` of the model at ``path``: ``"auto"`` becomes
    the format's default runtime; ArgumentError for an unknown backend or
    one that cannot run the format."""
    if backend not in NAMES:
        raise ArgumentError("backend", backend,
                            f"expected one of {', '.join(NAMES)}")
    fmt = model_format(path)
    if backend == "auto":
        backend = RUNS_ON[fmt][0]
    elif backend == FASTEST:
        backend = next((b for b in FASTEST_ORDER if b in RUNS_ON[fmt]
                        and _installed(RUNTIME_MODULES[b])),
                       RUNS_ON[fmt][0])
    if backend not in RUNS_ON[fmt]:
        raise ArgumentError("backend", backend,
                            f"cannot run {path} (a {fmt} model); it runs "
                            f"on {' or '.join(RUNS_ON[fmt])}")
    return fmt, backend


def _installed(module):
    return importlib.util.find_spec(module) is not None


def load(path, backend, image_shape=None, openvino_config=None):
    """A :class:`Backend` for the model at ``path`` (see
    :func:`encoder.load`); ``image_shape`` is for checkpoints (None: the
    run's, see :func:`checkpoints.load_encoder`)."""
    if openvino_config is None:
        openvino_config = (OPENVINO_FASTEST if backend == FASTEST
                           else OPENVINO_FLOAT32)
    fmt, backend = resolve(path, backend)
    if fmt == "checkpoint":
        encoder, prefix = checkpoints.load_encoder(path, image_shape)
        return keras_backend(encoder, prefix)
    if fmt == "frozen":
        loaded = _frozen_graph(path)
    elif fmt == "saved_model":
        loaded = _saved_model(path)
    elif fmt == "tflite":
        loaded = _litert(path)
    elif backend == ONNXRUNTIME:
        loaded = _onnxruntime(path)
    else:
        loaded = _openvino(path, openvino_config)
    if image_shape is not None and tuple(image_shape[:2]) != \
            loaded.image_shape[:2]:
        raise ArgumentError("image_shape", tuple(image_shape),
                            f"the model {path} takes patches of "
                            f"{loaded.image_shape[0]}x"
                            f"{loaded.image_shape[1]}; leave it out to use "
                            "that")
    loaded.source = path
    return loaded


def keras_backend(encoder, source):
    """A :class:`Backend` of a Keras encoder (of float images), through
    the inference function every export uses: uint8 BGR patches in."""
    shape = tuple(encoder.input_shape[1:])
    return Backend(export.inference_function(encoder, shape), shape,
                   encoder.output_shape[-1], TENSORFLOW, encoder, source)


def _frozen_graph(path):
    graph_def = export.read_graph_def(path)
    names = {node.name: node for node in graph_def.node}
    if export.INPUT_NAME not in names or export.OUTPUT_NAME not in names:
        raise ArgumentError("path", path, "expected a graph with an "
                            f"'{export.INPUT_NAME}' input and a "
                            f"'{export.OUTPUT_NAME}' output")
    shape = [d.size for d in
             names[export.INPUT_NAME].attr["shape"].shape.dim][1:]

    # Importing the graph inside a tf.function runs it without a Session.
    @tf.function(input_signature=[tf.TensorSpec([None] + shape, tf.uint8)])
    def run(images):
        features, = tf.graph_util.import_graph_def(
            graph_def, input_map={f"{export.INPUT_NAME}:0": images},
            return_elements=[f"{export.OUTPUT_NAME}:0"], name="net")
        return features

    feature_dim = run.get_concrete_function().structured_outputs.shape[-1]
    return Backend(run, _check_shape(path, shape), feature_dim, TENSORFLOW)


def _saved_model(path):
    if not os.path.isdir(os.path.join(path, "variables")):
        raise ArgumentError("path", path, "the SavedModel has no variables/ "
                            "folder beside its saved_model.pb (copy the "
                            "whole folder)")
    try:
        model = tf.saved_model.load(path)
    except (OSError, ValueError, tf.errors.OpError) as e:
        raise ArgumentError("path", path, "TensorFlow cannot load the "
                            f"SavedModel ({first_line(e)})") from e
    serve = model.signatures["serving_default"]
    spec = serve.structured_input_signature[1][export.SAVED_MODEL_INPUT]
    feature_dim = serve.structured_outputs[export.OUTPUT_NAME].shape[-1]

    def run(images):
        return serve(**{export.SAVED_MODEL_INPUT: images})[export.OUTPUT_NAME]

    return Backend(run, _check_shape(path, spec.shape[1:]), feature_dim,
                   TENSORFLOW, model)


def _check_shape(path, shape, dtype="uint8"):
    """The model's ``(H, W, 3)``; ArgumentError unless it takes uint8
    NHWC."""
    shape = tuple(shape)
    # float32 as ONNX Runtime, LiteRT (NumPy) and OpenVINO name it
    if dtype in ("float", "float32", "f32") and len(shape) == 3 and \
            shape[0] == 3:
        raise ArgumentError("path", path, "its input is float (N, 3, H, "
                            "W), BoxMOT's layout (--export_layout=boxmot): "
                            "load it in BoxMOT; this project's encoder "
                            "takes the default layout's exports")
    if (dtype != "uint8" or len(shape) != 3 or shape[2] != 3 or
            not all(isinstance(d, int) and d > 0 for d in shape)):
        raise ArgumentError("path", path, f"its input is {dtype} (N,) + "
                            f"{shape}; expected a model exported by this "
                            "project: uint8 BGR (N, H, W, 3) patches")
    return shape


def _onnxruntime(path):
    ort = deploy.require("onnxruntime", f"the ONNX model {path}")
    try:
        # CUDA where this is onnxruntime-gpu on a GPU machine
        available = ort.get_available_providers()
        session = ort.InferenceSession(path, providers=[
            p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
            if p in available])
    except Exception as e:  # onnxruntime's own exception types
        raise ArgumentError("path", path, "ONNX Runtime cannot load it "
                            f"({first_line(e)})") from e
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if [i.name for i in inputs] != [export.INPUT_NAME] or \
            export.OUTPUT_NAME not in [o.name for o in outputs]:
        raise ArgumentError("path", path, "expected an ONNX model with an "
                            f"'{export.INPUT_NAME}' input and a "
                            f"'{export.OUTPUT_NAME}' output, found inputs "
                            f"{[i.name for i in inputs]}")
    dtype = inputs[0].type.replace("tensor(", "").rstrip(")")
    shape = _check_shape(path, inputs[0].shape[1:], dtype)
    feature_dim = [o for o in outputs
                   if o.name == export.OUTPUT_NAME][0].shape[-1]

    def run(images):
        return session.run([export.OUTPUT_NAME],
                           {export.INPUT_NAME: images})[0]

    return Backend(run, shape, int(feature_dim), ONNXRUNTIME, session)


def _litert(path):
    interpreter_lib = deploy.require("ai_edge_litert.interpreter",
                                     f"the TFLite model {path}")
    try:
        # every core, as the other runtimes use (LiteRT's default is one)
        interpreter = interpreter_lib.Interpreter(
            model_path=path, num_threads=os.cpu_count())
        runner = interpreter.get_signature_runner()
    except (ValueError, RuntimeError) as e:
        raise ArgumentError("path", path, "LiteRT cannot load it "
                            f"({first_line(e)})") from e
    inputs = runner.get_input_details()
    outputs = runner.get_output_details()
    if list(inputs) != [export.INPUT_NAME] or \
            export.OUTPUT_NAME not in outputs:
        raise ArgumentError("path", path, "expected a TFLite model whose "
                            f"signature takes '{export.INPUT_NAME}' and "
                            f"gives '{export.OUTPUT_NAME}', found inputs "
                            f"{list(inputs)}")
    details = inputs[export.INPUT_NAME]
    shape = _check_shape(path, [int(d) for d in details["shape_signature"][
        1:]], np.dtype(details["dtype"]).name)
    feature_dim = int(outputs[export.OUTPUT_NAME]["shape_signature"][-1])

    def run(images):
        return runner(**{export.INPUT_NAME: images})[export.OUTPUT_NAME]

    return Backend(run, shape, feature_dim, LITERT, interpreter)


# Open Model Zoo's re-identification models (person-reidentification-
# retail-*): one float input of BGR crops, 0-255, (N, 3, H, W), named
# "data" (the normalisation is inside the IR), and one (N, D) embedding;
# recognised by them
OMZ_INPUT_NAME = "data"


def _omz_layout(model):
    """``(H, W)`` of an Open Model Zoo re-identification model's input,
    None for another model."""
    if len(model.inputs) != 1 or len(model.outputs) != 1 or \
            model.output(0).get_partial_shape().rank.get_length() != 2:
        return None  # one input, one (N, D) output: not a detector's
    port = model.input(0)
    shape = port.get_partial_shape()
    if OMZ_INPUT_NAME not in port.get_names() or shape.rank.get_length() \
            != 4 or not all(d.is_static for d in list(shape)[1:]) or \
            shape[1].get_length() != 3 or \
            port.get_element_type().to_string() != "f32":
        return None
    return shape[2].get_length(), shape[3].get_length()


def omz_input(patches):
    """uint8 BGR patches ``(N, H, W, 3)`` as an Open Model Zoo model
    takes them: float32 BGR, 0-255, ``(N, 3, H, W)``."""
    return np.ascontiguousarray(
        np.asarray(patches, np.float32).transpose(0, 3, 1, 2))


def _openvino(path, config):
    ov = deploy.require("openvino", f"the OpenVINO model {path}")
    core = ov.Core()
    try:
        model = core.read_model(path)
        omz = _omz_layout(model)
        if omz is not None:  # its batch of 1 made any
            model.reshape({model.input(0): ov.PartialShape([-1, 3, *omz])})
        compiled = core.compile_model(model, "CPU", config)
    except RuntimeError as e:
        hint = ("; an IR is the .xml and the .bin written with it, side by "
                "side" if path.lower().endswith(".xml") else "")
        raise ArgumentError("path", path, "OpenVINO cannot load it: "
                            f"{_openvino_reason(e)}{hint}") from e
    names = [name for port in compiled.inputs for name in port.get_names()]
    if omz is None and (export.INPUT_NAME not in names
                        or len(compiled.inputs) != 1):
        raise ArgumentError("path", path, "expected a model with one "
                            f"'{export.INPUT_NAME}' input (this project's "
                            "export) or Open Model Zoo's re-identification "
                            f"layout (one float '{OMZ_INPUT_NAME}' input of "
                            f"(N, 3, H, W) BGR crops), found {names}")
    port = compiled.input(0)
    if omz is not None:
        shape = (*omz, 3)
    else:
        dims = tuple(d.get_length() if d.is_static else None
                     for d in port.get_partial_shape())
        dtype = port.get_element_type().to_string().replace("u8", "uint8")
        shape = _check_shape(path, dims[1:], dtype)
    output = compiled.output(0)
    feature_dim = int(output.get_partial_shape()[-1].get_length())
    if str(config.get("PERFORMANCE_HINT", "")).upper() == "THROUGHPUT":
        run = _openvino_streams(compiled)
    else:
        request = compiled.create_infer_request()

        def run(images):
            return request.infer({0: images})[output].copy()

    if omz is not None:  # its crops as it takes them; compared by cosine,
        infer = run      # its features made unit, as ours are

        def run(images):
            return _unit(infer(omz_input(images)))

    return Backend(run, shape, feature_dim, OPENVINO, compiled)


def _unit(features):
    features = np.asarray(features, np.float32)
    return features / np.maximum(
        np.linalg.norm(features, axis=1, keepdims=True), 1e-12)


def _openvino_reason(error):
    """The reason in an OpenVINO exception: its last line that is not the
    ``Exception from <source file>`` or ``Check '...' failed`` trail."""
    lines = [line.strip() for line in str(error).splitlines()]
    reasons = [line for line in lines if line and not line.startswith(
        ("Exception from ", "Check '"))]
    return reasons[-1].rstrip(":") if reasons else first_line(error)


def _openvino_streams(compiled):
    """Run a batch as parts on all of the compiled model's streams at once
    (the THROUGHPUT hint makes several; one request would use one).

    Plain infer requests, started and waited for here: no Python callback
    runs on OpenVINO's threads, which would need the GIL while the
    compiled model's destructor, holding it, waits for those threads.
    """
    jobs = int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
    requests = [compiled.create_infer_request() for _ in range(jobs)]

    def run(images):
        parts = np.array_split(images, min(jobs, len(images)))
        for request, part in zip(requests, parts):
            request.start_async({0: np.ascontiguousarray(part)})
        results = []
        for request, _ in zip(requests, parts):
            request.wait()
            results.append(request.get_output_tensor(0).data.copy())
        return np.concatenate(results)

    return run
