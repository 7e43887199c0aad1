"""Exports for the runtimes trackers load today: ONNX, OpenVINO IR and
TFLite, float32 or int8.

All keep the frozen graph's contract: input ``images``, uint8 BGR
``(N, H, W, 3)`` with a dynamic batch; output ``features``, float32
``(N, 128)``, L2-normalised; the preprocessing is inside the model, so a
consumer feeds raw crops. The ONNX model is converted (``tf2onnx``) from
the frozen graph, which is made from the inference function every export
uses; the OpenVINO IR is converted (``openvino.convert_model``) from that
ONNX model. ``--int8`` quantises after training, calibrated on training
images read through the project's preprocessing (no labels needed): the
IR with NNCF, the ONNX model with ONNX Runtime's static quantisation.
Both int8 models keep their weights in 7 bits, so that the 16-bit sums of
x86 processors without VNNI cannot saturate, and end in a float
normalisation after the quantised part, so their features are unit-length
as the float models' are.

The TFLite model is converted by TensorFlow's own converter from the
same frozen function; ``--int8`` is its full-integer post-training
quantisation (int8 kernels from the input's cast to fc1), calibrated
likewise, the final L2 normalisation kept in float. It runs on LiteRT
(``ai-edge-litert``), TensorFlow's interpreter being deprecated.

The converters and runtimes are the optional ``deploy`` dependencies;
:func:`require` says how to install them when they are missing.
"""

import json
import os
import tempfile
import xml.etree.ElementTree as ElementTree

import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow.python.util import deprecation

from cosine_metric_learning import export, files, preprocessing
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.extras import require

ONNX_OPSET = 17
# the normalisation's floor of the squared norm, as tf.math.l2_normalize
NORM_EPSILON = 1e-12
DEFAULT_CALIBRATION_IMAGES = 300


def _is_onnx_encoder(path):
    onnx = require("onnx", "an ONNX export")
    graph = onnx.load(path, load_external_data=False).graph
    return ([i.name for i in graph.input] == [export.INPUT_NAME] and
            [o.name for o in graph.output] == [export.OUTPUT_NAME])


def _is_openvino_encoder(path):
    root = ElementTree.parse(path).getroot()
    names = {layer.get("name") for layer in root.iter("layer")}
    return root.tag == "net" and export.INPUT_NAME in names


def _openvino_weights_kind(xml_path):
    """The ``.bin`` beside an IR: ours if the ``.xml`` beside it is."""
    return files.Kind(f"the weights of the OpenVINO encoder {xml_path}",
                      lambda _: OPENVINO_IR.matches(xml_path))


ONNX_MODEL = files.Kind(f"an ONNX encoder ('{export.INPUT_NAME}' -> "
                        f"'{export.OUTPUT_NAME}')", _is_onnx_encoder)
OPENVINO_IR = files.Kind(f"an OpenVINO encoder IR (.xml with an "
                         f"'{export.INPUT_NAME}' input)", _is_openvino_encoder)


def check_onnx_output(output):
    """UsageError unless ``output`` can be written as an ONNX encoder (and
    the converter is installed)."""
    require("tf2onnx", "an ONNX export")
    if not output.endswith(".onnx"):
        raise ArgumentError("output", output, "expected a file name ending in "
                            ".onnx")
    return files.check_output(output, ONNX_MODEL)


def check_openvino_output(output):
    """UsageError unless ``output`` (the ``.xml``) and the ``.bin`` beside it
    can be written (and the converters are installed)."""
    for module in ("tf2onnx", "openvino"):
        require(module, "an OpenVINO export")
    if not output.endswith(".xml"):
        raise ArgumentError("output", output, "expected the IR's .xml file "
                            "name (its .bin is written beside it)")
    files.check_output(output, OPENVINO_IR)
    files.check_output(output[:-4] + ".bin", _openvino_weights_kind(output))
    return output


def onnx_model(encoder, image_shape, layout=export.DEFAULT_LAYOUT):
    """The encoder as an ONNX ``ModelProto`` (``images`` -> ``features``),
    its input in ``layout`` (:data:`export.LAYOUTS`)."""
    tf2onnx = require("tf2onnx", "an ONNX export")
    graph_def = export.frozen_graph_def(encoder, image_shape, layout)
    inputs, outputs = f"{export.INPUT_NAME}:0", f"{export.OUTPUT_NAME}:0"
    with deprecation.silence():  # tf2onnx's calls of TF1 functions
        model, _ = tf2onnx.convert.from_graph_def(
            graph_def, name="cosine_metric_learning", input_names=[inputs],
            output_names=[outputs], opset=ONNX_OPSET,
            tensors_to_rename={inputs: export.INPUT_NAME,
                               outputs: export.OUTPUT_NAME})
    batch = model.graph.input[0].type.tensor_type.shape.dim[0]
    batch.dim_param = "N"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    return model


def write_onnx(encoder, output, image_shape, calibration=None,
               layout=export.DEFAULT_LAYOUT):
    """Write the ONNX encoder to ``output`` (a ``.onnx`` file), its input
    in ``layout`` (BoxMOT's: with the sidecar, :func:`write_sidecar`).

    With ``calibration`` (uint8 BGR patches ``(N, H, W, 3)``) the model is
    quantised to int8 (:func:`quantize_onnx`).
    """
    check_onnx_output(output)
    check_sidecar(output, layout)
    model = onnx_model(encoder, image_shape, layout)
    if calibration is not None:
        model = quantize_onnx(model, export.layout_input(calibration, layout))
    _describe_onnx(model, layout)
    files.write_atomically(output, lambda f: f.write(model.SerializeToString()),
                           ONNX_MODEL, binary=True)
    write_sidecar(output, image_shape, layout)
    logging.info("Wrote %s (opset %d, %s)", output, ONNX_OPSET,
                 "int8" if calibration is not None else "float32")
    return output


def quantize_onnx(model, calibration):
    """An int8 copy of an ONNX encoder, calibrated on uint8 BGR patches
    with ONNX Runtime's static quantisation.

    QDQ format (QuantizeLinear/DequantizeLinear pairs around float
    operators), which ONNX Runtime runs as int8 kernels and OpenVINO reads
    as well; int8 weights per output channel in 7 bits
    (``reduce_range``: the int16 sums of processors without VNNI cannot
    saturate), uint8 activations with ranges from the patches (min/max).
    """
    require("onnxruntime", "int8 quantisation of an ONNX export")
    from onnxruntime import quantization

    class Patches(quantization.CalibrationDataReader):
        def __init__(self):
            self._patches = iter(calibration)

        def get_next(self):
            patch = next(self._patches, None)
            return None if patch is None else {export.INPUT_NAME: patch[None]}

    onnx = require("onnx", "int8 quantisation of an ONNX export")
    with tempfile.TemporaryDirectory() as tmp:
        source, prepared, quantised = (os.path.join(tmp, name) for name in (
            "float32.onnx", "prepared.onnx", "int8.onnx"))
        with open(source, "wb") as f:
            f.write(model.SerializeToString())
        # graph optimisation and shape inference, as the quantiser expects
        quantization.quant_pre_process(source, prepared,
                                       skip_symbolic_shape=True)
        quantization.quantize_static(
            prepared, quantised, Patches(),
            quant_format=quantization.QuantFormat.QDQ, per_channel=True,
            reduce_range=True,
            activation_type=quantization.QuantType.QUInt8,
            weight_type=quantization.QuantType.QInt8)
        return normalise_onnx_output(onnx.load(quantised))


def normalise_onnx_output(model):
    """``model`` (an ONNX ``ModelProto``, changed in place) with its
    ``features`` output L2-normalised in float32 after everything else:
    ``x / sqrt(max(sum(x^2), NORM_EPSILON))``, as the frozen graph."""
    onnx = require("onnx", "an ONNX export")
    helper, graph = onnx.helper, model.graph
    output = export.OUTPUT_NAME
    raw, square_sum, floor, norm = (f"{output}_{part}" for part in (
        "unnormalised", "square_sum", "floor", "norm"))
    for node in graph.node:
        for names in (node.input, node.output):
            for i, name in enumerate(names):
                if name == output:
                    names[i] = raw
    graph.initializer.append(onnx.numpy_helper.from_array(
        np.array(NORM_EPSILON, np.float32), floor))
    graph.node.extend([
        helper.make_node("ReduceSumSquare", [raw], [square_sum], axes=[-1],
                         keepdims=1, name=square_sum),
        helper.make_node("Max", [square_sum, floor], [f"{norm}_squared"],
                         name=f"{norm}_squared"),
        helper.make_node("Sqrt", [f"{norm}_squared"], [norm], name=norm),
        helper.make_node("Div", [raw, norm], [output], name=output)])
    return model


def write_openvino(encoder, output, image_shape, calibration=None,
                   layout=export.DEFAULT_LAYOUT):
    """Write the OpenVINO IR: ``output`` (``.xml``) and the ``.bin`` beside
    it, its input in ``layout`` (BoxMOT's: with the sidecar).

    With ``calibration`` (uint8 BGR patches ``(N, H, W, 3)``) the model is
    quantised to int8 with NNCF's post-training quantisation.
    """
    check_openvino_output(output)
    check_sidecar(output, layout)
    ov = require("openvino", "an OpenVINO export")
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = os.path.join(tmp, "encoder.onnx")
        with open(onnx_path, "wb") as f:
            f.write(onnx_model(encoder, image_shape,
                               layout).SerializeToString())
        model = ov.convert_model(onnx_path)
    if calibration is not None:
        model = quantize(model, export.layout_input(calibration, layout))
    for key, value in description(layout).items():
        model.set_rt_info(value, [DESCRIPTION_PREFIX, key])
    files.replace_parts_atomically(
        output[:-len(".xml")], lambda tmp: _save_ir(ov, model, tmp),
        r"\.xml|\.bin", errors=(RuntimeError,))
    write_sidecar(output, image_shape, layout)
    logging.info("Wrote %s and its .bin (%s)", output,
                 "int8" if calibration is not None else "float32")
    return output


def _save_ir(ov, model, prefix):
    # compress_to_fp16 would halve the file but round every weight
    ov.save_model(model, prefix + ".xml", compress_to_fp16=False)
    return prefix


def quantize(model, calibration):
    """An int8 copy of an OpenVINO model, calibrated on uint8 BGR patches,
    its features normalised after the quantised part
    (:func:`normalise_openvino_output`).

    The patches go through one at a time (the statistics are per image);
    every given patch is used. NNCF's overflow fix on every layer keeps
    the weights in 7 bits: with 8, the int8 convolutions of processors
    without VNNI (pairs of u8 x s8 products summed in 16 bits) saturate.
    """
    nncf = require("nncf", "int8 quantisation of an OpenVINO export")
    dataset = nncf.Dataset([patch[None] for patch in calibration])
    quantised = nncf.quantize(
        model, dataset, subset_size=len(calibration),
        preset=nncf.QuantizationPreset.MIXED,
        advanced_parameters=nncf.AdvancedQuantizationParameters(
            overflow_fix=nncf.OverflowFix.ENABLE))
    return normalise_openvino_output(quantised)


def normalise_openvino_output(model):
    """``model`` (an ``openvino.Model``, changed in place) with a float
    NormalizeL2 between its ``features`` and the output, the floor of
    :data:`NORM_EPSILON` as the frozen graph's."""
    ops = require("openvino.opset13", "an OpenVINO export")
    result = model.get_results()[0]
    source = result.input_value(0)
    names = source.get_names()
    normalised = ops.normalize_l2(
        source, ops.constant(np.array([-1], np.int64)), NORM_EPSILON, "max",
        name=f"{export.OUTPUT_NAME}_normalised")
    result.input(0).replace_source_output(normalised.output(0))
    source.get_tensor().set_names(set())
    normalised.output(0).get_tensor().set_names(set(names))
    model.validate_nodes_and_infer_types()
    return model


def _is_tflite_encoder(path):
    from tensorflow.lite.tools import flatbuffer_utils
    with open(path, "rb") as f:
        content = f.read()
    if content[4:8] != b"TFL3":
        return False
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(content))
    return any([t.name for t in signature.inputs] == [
        export.INPUT_NAME.encode()] for signature in model.signatureDefs)


TFLITE_MODEL = files.Kind(f"a TFLite encoder ('{export.INPUT_NAME}' -> "
                          f"'{export.OUTPUT_NAME}')", _is_tflite_encoder)


def check_tflite_output(output):
    """UsageError unless ``output`` can be written as a TFLite encoder."""
    if not output.endswith(".tflite"):
        raise ArgumentError("output", output, "expected a file name ending in "
                            ".tflite")
    return files.check_output(output, TFLITE_MODEL)


def tflite_model(encoder, image_shape, calibration=None,
                 layout=export.DEFAULT_LAYOUT):
    """The encoder as a TFLite flatbuffer (bytes): signature
    ``serving_default``, input ``images`` uint8 BGR ``(N, H, W, 3)`` (N
    dynamic), output ``features`` float32, L2-normalised.

    With ``calibration`` (uint8 BGR patches) full-integer post-training
    quantisation: int8 kernels where TFLite has them, calibrated one
    patch at a time, the L2 normalisation left in float (an int8 one
    rounds the norms to about 1e-2).
    """
    from tensorflow.lite.tools import flatbuffer_utils
    # the variables folded: the converter's own freezing leaves Keras 3's
    # variables as uninitialised resources
    frozen = export.frozen_function(encoder, image_shape, layout)
    if calibration is not None:
        calibration = export.layout_input(calibration, layout)

    def converter():
        return tf.lite.TFLiteConverter.from_concrete_functions(
            [frozen], tf.Module())

    content = converter().convert()
    if calibration is not None:
        # the ops of the normalisation, named in the float model
        normalisation = _ops_after(content, ("fc1_elu", "ball_bn"))
        converter = converter()
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
            tf.lite.OpsSet.TFLITE_BUILTINS]

        def patches():
            return ([patch[None]] for patch in calibration)

        converter.representative_dataset = patches
        debugger = tf.lite.experimental.QuantizationDebugger(
            converter=converter,
            debug_dataset=lambda: ({export.INPUT_NAME: p}
                                   for [p] in patches()),
            debug_options=tf.lite.experimental.QuantizationDebugOptions(
                denylisted_nodes=normalisation))
        content = debugger.get_nondebug_quantized_model()
    # the converter names the signature's tensors after the function's
    # internals (serving_default_images:0, output_0): give them the
    # frozen graph's names
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(content))
    graph, signature = model.subgraphs[0], model.signatureDefs[0]
    for ends, name in ((signature.inputs, export.INPUT_NAME),
                       (signature.outputs, export.OUTPUT_NAME)):
        for end in ends:
            end.name = graph.tensors[end.tensorIndex].name = name.encode()
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _ops_after(content, layers):
    """The output tensor names of the ops of a TFLite model that come
    after the last op of one of the Keras ``layers``."""
    from tensorflow.lite.tools import flatbuffer_utils
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(content))
    graph = model.subgraphs[0]
    names = [[graph.tensors[i].name.decode() for i in op.outputs]
             for op in graph.operators]
    last = max(i for i, outputs in enumerate(names) if any(
        f"/{layer}" in name for name in outputs for layer in layers))
    return [name for outputs in names[last + 1:] for name in outputs]


def write_tflite(encoder, output, image_shape, calibration=None,
                 layout=export.DEFAULT_LAYOUT):
    """Write the TFLite encoder (:func:`tflite_model`) to ``output``, its
    input in ``layout`` (BoxMOT's: NCHW, with the sidecar)."""
    check_tflite_output(output)
    check_sidecar(output, layout)
    content = tflite_model(encoder, image_shape, calibration, layout)
    files.write_atomically(output, lambda f: f.write(content), TFLITE_MODEL,
                           binary=True)
    write_sidecar(output, image_shape, layout)
    logging.info("Wrote %s (%s)", output,
                 "int8" if calibration is not None else "float32")
    return output


# BoxMOT reads the input size of an OpenVINO or TFLite model from this
# file beside it (its ONNX models' from the graph), and nothing else there
SIDECAR_SUFFIX = ".metadata.json"
SIDECAR = files.json_kind({"model_kwargs"}, "BoxMOT's description of an "
                          "export (a JSON object with 'model_kwargs')")
# the export's own description, in the model's metadata (ONNX
# metadata_props, OpenVINO rt_info), where BoxMOT does not look
DESCRIPTION_PREFIX = "cosine_metric_learning"


def description(layout):
    """What an export says of itself: its input layout and features."""
    return {"layout": layout, "input": export.INPUT_NAME,
            "output": export.OUTPUT_NAME, "feature_dim": "128",
            "features": "L2-normalised"}


def _describe_onnx(model, layout):
    for key, value in description(layout).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = f"{DESCRIPTION_PREFIX}.{key}", str(value)


def check_sidecar(output, layout):
    """With BoxMOT's layout, UsageError unless the sidecar of ``output``
    can be written (new, or an earlier one)."""
    if layout not in export.LAYOUTS:
        raise ArgumentError("layout", layout,
                            f"expected one of {', '.join(export.LAYOUTS)}")
    if layout == export.BOXMOT:
        files.check_output(output + SIDECAR_SUFFIX, SIDECAR)


def write_sidecar(output, image_shape, layout):
    """With BoxMOT's layout, ``<output>.metadata.json``: the input size as
    BoxMOT reads it (``{"model_kwargs": {"img_size": [H, W]}}``). With
    the default layout, the sidecar an earlier BoxMOT-layout export left
    there is removed: it no longer describes the model, and BoxMOT would
    read it."""
    path = output + SIDECAR_SUFFIX
    if layout != export.BOXMOT:
        if SIDECAR.matches(path):
            os.remove(path)
            logging.info("Removed %s: it described an earlier export of "
                         "BoxMOT's layout", path)
        return None
    height, width = (int(d) for d in image_shape[:2])
    files.write_atomically(path, lambda f: json.dump(
        {"model_kwargs": {"img_size": [height, width]}}, f, indent=1),
        SIDECAR)
    return path


def calibration_patches(filenames, count, image_shape):
    """uint8 BGR patches of ``count`` training images spread evenly over
    ``filenames`` (a fixed choice), read as the pipeline reads them;
    unreadable files are skipped."""
    if count < 1:
        raise ArgumentError("count", count, "expected an integer >= 1")
    chosen = np.unique(np.linspace(0, len(filenames) - 1,
                                   min(count, len(filenames))).astype(int))
    patches = []
    for index in chosen:
        try:
            patches.append(preprocessing.read_patches([filenames[index]],
                                                      image_shape)[0])
        except (tf.errors.OpError, ValueError):
            logging.warning("Skipping unreadable calibration image %s",
                            filenames[index])
    if not patches:
        raise UsageError("no readable training image to calibrate with")
    logging.info("Calibrating int8 on %d training images", len(patches))
    return np.stack(patches)
