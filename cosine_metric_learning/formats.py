"""The model formats the project writes and opens: one record each.

The export modes (``--mode=freeze``, ``onnx``, ...), their default file
names, ``--int8`` and ``--export_layout``, ``adapt --export``, which
paths :mod:`checkpoints` takes for an exported model, which runtimes
:mod:`backends` opens a format on, and the help strings that list the
formats are all derived from :data:`FORMATS`. Adding a format is one
record here and its writer (``docs/architecture.md`` lists what else a
new format may want: a runtime in :mod:`backends`, a test).

The writers are named (``"module.function"``) and imported when used, so
that reading the registry loads no converter.
"""

import dataclasses
import importlib
from typing import Callable, Optional, Tuple, Union

# the runtimes of cosine_metric_learning.backends
TENSORFLOW = "tensorflow"
ONNXRUNTIME = "onnxruntime"
OPENVINO = "openvino"
LITERT = "litert"


@dataclasses.dataclass(frozen=True)
class Format:
    """A model format.

    ``name``: the format's name (:func:`backends.model_format`);
    ``mode``: the export mode that writes it, None where none does;
    ``extension``: its file name's ending ("" for a folder, None for a
    checkpoint, found by elimination); ``default_output``: the file the
    mode writes without ``--output`` (``{name}`` the dataset, ``{int8}``
    ``_int8`` with ``--int8``); ``runtimes``: the runtimes that open it,
    the first the default; ``writer`` and ``check``: ``writer(encoder,
    output, image_shape, **options)`` and ``check(output)``, which refuses
    a path the writer would not replace (or a converter that is not
    installed), each a function or the ``"module.function"`` of this
    package that is one; ``int8``: the package that
    quantises it (``--int8``), None where it cannot be; ``layouts``:
    whether it takes ``--export_layout``; ``companions``: the other
    files' endings of a model of it; ``what``: how the help names it.
    """
    name: str
    mode: Optional[str]
    extension: Optional[str]
    default_output: str
    runtimes: Tuple[str, ...]
    writer: Union[str, Callable]
    check: Union[str, Callable]
    what: str
    int8: Optional[str] = None
    layouts: bool = False
    companions: Tuple[str, ...] = ()

    def write(self, *args, **kwargs):
        return _function(self.writer)(*args, **kwargs)

    def check_output(self, output):
        return _function(self.check)(output)


FORMATS = (
    Format("frozen", "freeze", ".pb", "{name}.pb", (TENSORFLOW,),
           "export.freeze", "export.check_frozen_output",
           "a frozen graph (.pb), as Deep SORT loads it"),
    Format("checkpoint", "finalize", None, "{name}.ckpt", (TENSORFLOW,),
           "export.write_checkpoint", "export.check_checkpoint_prefix",
           "a checkpoint (a prefix, or a training run's folder)"),
    Format("saved_model", "saved_model", "", "{name}_saved_model",
           (TENSORFLOW,), "export.write_saved_model",
           "export.check_saved_model_output", "a SavedModel folder"),
    Format("onnx", "onnx", ".onnx", "{name}{int8}.onnx",
           (ONNXRUNTIME, OPENVINO), "deploy.write_onnx",
           "deploy.check_onnx_output", "an ONNX file (.onnx)",
           int8="onnxruntime", layouts=True),
    Format("openvino", "openvino", ".xml", "{name}{int8}.xml", (OPENVINO,),
           "deploy.write_openvino", "deploy.check_openvino_output",
           "an OpenVINO IR (.xml, its .bin beside it)", int8="nncf",
           layouts=True, companions=(".bin",)),
    Format("tflite", "tflite", ".tflite", "{name}{int8}.tflite", (LITERT,),
           "deploy.write_tflite", "deploy.check_tflite_output",
           "a TFLite file (.tflite)", int8="tensorflow", layouts=True),
)


def _function(name):
    if callable(name):
        return name
    module, function = name.rsplit(".", 1)
    return getattr(importlib.import_module(
        f"cosine_metric_learning.{module}"), function)


def by_name(name):
    """The :class:`Format` named ``name``."""
    return next(f for f in FORMATS if f.name == name)


def exported():
    """The formats the export modes write."""
    return [f for f in FORMATS if f.mode is not None]


def file_endings():
    """The endings of the files of exported models (a model's own and its
    companions'), lower case."""
    return tuple(ending for f in FORMATS if f.extension
                 for ending in (f.extension, *f.companions))


def of_path(path):
    """The name of the format of the model file ``path``, from its ending;
    ``"checkpoint"`` for any other path (a SavedModel folder is told by
    its contents: :func:`backends.model_format`)."""
    for f in FORMATS:
        if f.extension and path.lower().endswith(f.extension):
            return f.name
    return "checkpoint"


def describe(kinds=None):
    """The help strings' list of the formats (``kinds``: their names;
    default every one a model can be given as)."""
    chosen = [f for f in FORMATS if kinds is None or f.name in kinds]
    return ", ".join(f.what for f in chosen)


def exported_models():
    """The help strings' list of the exported models a command opens."""
    return describe([f.name for f in exported() if f.name != "checkpoint"])


def export_outputs():
    """The help of ``--output`` for each export mode: what it writes and
    its default file."""
    return "; ".join(
        f"{f.mode}: {f.what} (default "
        f"{f.default_output.format(name='<dataset>', int8='')})"
        for f in exported())


def int8_outputs():
    """The modes that take ``--int8`` and their default files."""
    return ", ".join(f.default_output.format(name="<dataset>",
                                             int8="_int8")
                     for f in exported() if f.int8)


def layout_modes():
    """The modes that take ``--export_layout``."""
    return ", ".join(f.mode for f in exported() if f.layouts)


def default_runtimes():
    """Each format's default runtime, for the help of ``--backend``."""
    return ", ".join(f"{f.runtimes[0]} for {f.what}" for f in FORMATS)
