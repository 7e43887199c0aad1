"""The command line of the entry points: flags, mode dispatch, one-line
errors.

``train_market1501.py``, ``train_mars.py`` and ``train_custom.py`` describe
their dataset with a :class:`datasets.spec.DatasetSpec` and call
:func:`main`. The flags of the training and evaluator settings are derived
from :mod:`cosine_metric_learning.settings`; the flags of the other modes
are defined here.
"""

import dataclasses
import enum
import os
import signal
import sys
import typing

from absl import app, flags

from cosine_metric_learning import backends, checkpoints, deploy, evaluator
from cosine_metric_learning import export, files
from cosine_metric_learning import kit_features, protocol, rerank
from cosine_metric_learning import run_settings, settings, training
from cosine_metric_learning.errors import INTERRUPTED, INTERRUPTED_STATUS
from cosine_metric_learning.errors import ArgumentError, TrainingError
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.errors import parse_flags

FLAGS = flags.FLAGS


class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"
    EXPORT = "export"
    FINALIZE = "finalize"
    FREEZE = "freeze"
    TEST = "test"
    SAVED_MODEL = "saved_model"
    ONNX = "onnx"
    OPENVINO = "openvino"


# mode -> (writer(encoder, output, image_shape, **options), check(output),
# default output); check refuses a path the writer would not replace (or a
# converter that is not installed). Only --int8 passes options.
EXPORTERS = {
    Mode.FREEZE: (export.freeze, lambda output: files.check_output(
        output, export.FROZEN_GRAPH), "{name}.pb"),
    Mode.FINALIZE: (lambda encoder, output, _: export.write_encoder_checkpoint(
        encoder, output), export.check_checkpoint_prefix, "{name}.ckpt"),
    Mode.SAVED_MODEL: (export.write_saved_model, lambda output:
                       files.check_output(output, export.SAVED_MODEL),
                       "{name}_saved_model"),
    Mode.ONNX: (deploy.write_onnx, deploy.check_onnx_output,
                "{name}{int8}.onnx"),
    Mode.OPENVINO: (deploy.write_openvino, deploy.check_openvino_output,
                    "{name}{int8}.xml"),
}

# the modes that take --int8, and the package that quantises
INT8_QUANTISERS = {Mode.ONNX: "onnxruntime", Mode.OPENVINO: "nncf"}


def _define(field, default):
    """Define the flag of a settings field."""
    name, help_text = field.name, field.metadata["help"]
    allowed = settings.choices(field)
    kind = typing.get_args(field.type) or (field.type,)
    if allowed:
        flags.DEFINE_enum(name, default, allowed, help_text)
    elif bool in kind:
        flags.DEFINE_boolean(name, default, help_text)
    elif int in kind:
        flags.DEFINE_integer(name, default, help_text)
    elif float in kind:
        flags.DEFINE_float(name, default, help_text)
    else:
        flags.DEFINE_string(name, default, help_text)


def define_flags(dataset):
    """Define the command-line flags (the original's names and defaults)."""
    flags.DEFINE_enum_class("mode", Mode.TRAIN, Mode, "What to do.")
    defaults = {"dataset_dir": dataset.default_dataset_dir,
                "log_dir": f"./output/{dataset.name}/",
                "eval_log_dir": f"./output/{dataset.name}_eval/"}
    seen = set()
    for config in (settings.TrainConfig, settings.EvalConfig):
        for field in dataclasses.fields(config):
            if field.name in seen:
                continue
            seen.add(field.name)
            default = defaults.get(field.name, field.default)
            if field.name == "log_dir":
                # absl.logging already defines --log_dir (for log files it
                # only writes when asked to); the original's flag takes it
                FLAGS.set_default("log_dir", default)
                FLAGS["log_dir"].help = field.metadata["help"]
            else:
                _define(field, default)
    if dataset.default_sdk_dir is not None:
        flags.DEFINE_string("sdk_dir", dataset.default_sdk_dir,
                            "Path to the official evaluation kit.")
    # --mode=test
    flags.DEFINE_string("output_json", None, "test: also write the numbers "
                        "to this JSON file.")
    flags.DEFINE_boolean("flip_test", False, "test: add the features of the "
                         "mirrored images (sum, re-normalised).")
    flags.DEFINE_string("rank_image", None, "test: draw queries and their "
                        "top 10 gallery entries into this PNG file.")
    flags.DEFINE_boolean("rerank", False, "test: also report the numbers "
                         "after k-reciprocal re-ranking (Zhong et al., 2017).")
    flags.DEFINE_integer("rerank_k1", rerank.K1, "test --rerank: k1, the "
                         "size of the k-reciprocal neighbour lists.")
    flags.DEFINE_integer("rerank_k2", rerank.K2, "test --rerank: k2, the "
                         "neighbours averaged by local query expansion.")
    flags.DEFINE_float("rerank_lambda", rerank.LAMBDA, "test --rerank: the "
                       "weight of the original distance beside the Jaccard "
                       "distance.")
    define_backend_flag("test, export: the runtime of an exported "
                        "--restore_path")
    # --mode=export
    flags.DEFINE_enum("format", "kit", kit_features.FORMATS, "export: kit "
                      "(the official kits' feature files) or pytorch_result "
                      "(one .mat as PyTorch re-id evaluation scripts read "
                      "it, to --output, default <dataset>_pytorch_result"
                      ".mat).")
    # --mode=freeze, finalize, saved_model, onnx, openvino
    flags.DEFINE_string(
        "output", None, "freeze: the .pb file (default <dataset>.pb); "
        "finalize: the checkpoint prefix (default <dataset>.ckpt); "
        "saved_model: the folder (default <dataset>_saved_model); onnx: the "
        ".onnx file (default <dataset>.onnx); openvino: the .xml file, the "
        ".bin goes beside it (default <dataset>.xml, <dataset>_int8.xml).")
    flags.DEFINE_boolean("int8", False, "onnx, openvino: quantise to int8 "
                         "(ONNX Runtime's static quantisation, NNCF), "
                         "calibrated on training images of --dataset_dir "
                         "(default output <dataset>_int8.onnx, "
                         "<dataset>_int8.xml).")
    flags.DEFINE_integer("calibration_images",
                         deploy.DEFAULT_CALIBRATION_IMAGES,
                         "--int8: how many training images to calibrate on "
                         "(spread evenly over the set).")


def define_backend_flag(purpose):
    """``--backend``, for the entry points and the encode command."""
    flags.DEFINE_enum("backend", "auto", backends.NAMES, f"{purpose}: auto "
                      "(tensorflow for TensorFlow formats, onnxruntime for "
                      ".onnx, openvino for .xml), or onnxruntime or openvino "
                      "for .onnx.")


def define_image_shape_flag():
    """``--image_shape``, for ``train_custom.py`` and the encode command."""
    flags.DEFINE_string("image_shape", None, "HEIGHT,WIDTH of the network "
                        "input, e.g. 96,48; images are resized to it. "
                        "Default: a run's own (its run.json; exported models "
                        "carry theirs), else 128,64. Given, it must agree "
                        "with the run's.")


# the flags the library's arguments come from, for its messages
FLAG_NAMES = {"path": "--restore_path", "backend": "--backend",
              "image_shape": "--image_shape"}


def _requested_shape(dataset):
    """The input shape the command line asks for, None if it leaves it to
    the run (only ``train_custom.py`` has ``--image_shape``)."""
    if "image_shape" in FLAGS and FLAGS.image_shape is not None:
        return tuple(dataset.image_shape)
    return None


def config_from_flags(config_class):
    """A TrainConfig or EvalConfig with the values of the flags."""
    values = {field.name: FLAGS[field.name].value
              for field in dataclasses.fields(config_class)}
    if config_class is settings.TrainConfig:
        values["run_id"] = values["run_id"] or training.random_run_id()
    return config_class(**values)


def restore_path_from_flags():
    """``--restore_path``, else the latest checkpoint of ``--run_id``."""
    if FLAGS.restore_path is None and FLAGS.run_id is not None:
        return os.path.join(FLAGS.log_dir, FLAGS.run_id)
    return FLAGS.restore_path


def _train(dataset):
    config = config_from_flags(settings.TrainConfig)
    run = run_settings.describe(config.run_dir) if os.path.isdir(
        config.run_dir) else None
    if run is not None and _requested_shape(dataset) is None:
        # continuing a run: its input shape need not be repeated
        dataset = dataclasses.replace(dataset, image_shape=run.image_shape)
    result = training.train(dataset, config)
    if result.signal is not None:
        print(f"Stopped by {signal.Signals(result.signal).name} at step "
              f"{result.step}; checkpoint {result.checkpoint}",
              file=sys.stderr)
        return 128 + result.signal
    return 0


def _eval(dataset):
    if FLAGS.run_id is None:
        raise UsageError("--mode=eval needs --run_id: the training run in "
                         "--log_dir to evaluate")
    evaluator.evaluate_checkpoints(dataset,
                                   config_from_flags(settings.EvalConfig),
                                   _requested_shape(dataset))
    return 0


def _test(dataset):
    protocol.run_test(
        dataset, restore_path_from_flags(), FLAGS.dataset_dir,
        batch_size=FLAGS.batch_size,
        flip_test=FLAGS.flip_test, output_json=FLAGS.output_json,
        rank_image=FLAGS.rank_image, backend=FLAGS.backend,
        rerank_parameters=(FLAGS.rerank_k1, FLAGS.rerank_k2,
                           FLAGS.rerank_lambda) if FLAGS.rerank else None,
        image_shape=_requested_shape(dataset))
    return 0


def _export_kit_features(dataset):
    if FLAGS.format == "pytorch_result":
        print("wrote " + kit_features.export_pytorch_result(
            dataset, restore_path_from_flags(), FLAGS.dataset_dir,
            FLAGS.output or f"{dataset.name}_pytorch_result.mat",
            batch_size=FLAGS.batch_size,
            image_shape=_requested_shape(dataset)))
        return 0
    output_dir = (FLAGS.sdk_dir if dataset.default_sdk_dir is not None
                  else FLAGS.dataset_dir)
    for path in kit_features.export_features(
            dataset, restore_path_from_flags(), FLAGS.dataset_dir,
            output_dir, batch_size=FLAGS.batch_size,
            image_shape=_requested_shape(dataset)):
        print(f"wrote {path}")
    return 0


def _export_model(dataset):
    write, check, default = EXPORTERS[FLAGS.mode]
    if FLAGS.int8 and FLAGS.mode not in INT8_QUANTISERS:
        raise UsageError(f"--int8 with --mode={FLAGS.mode.value}: int8 "
                         "models are written by --mode=onnx and "
                         "--mode=openvino")
    output = FLAGS.output or default.format(
        name=dataset.name, int8="_int8" if FLAGS.int8 else "")
    check(output)  # before the work: a bad path fails at once
    if FLAGS.int8:
        deploy.require(INT8_QUANTISERS[FLAGS.mode], "--int8")
    encoder, path = checkpoints.load_encoder(restore_path_from_flags(),
                                             _requested_shape(dataset))
    shape = tuple(encoder.input_shape[1:])
    options = {}
    if FLAGS.int8:
        options["calibration"] = deploy.calibration_patches(
            dataset.read_train(FLAGS.dataset_dir).filenames,
            FLAGS.calibration_images, shape)
    print(f"wrote {write(encoder, output, shape, **options)} "
          f"(encoder of {path})")
    return 0


RUNNERS = {Mode.TRAIN: _train, Mode.EVAL: _eval, Mode.TEST: _test,
           Mode.EXPORT: _export_kit_features,
           **{mode: _export_model for mode in EXPORTERS}}


def run_mode(dataset):
    """Run the mode the flags ask for; returns the process exit status."""
    mode = FLAGS.mode
    if mode in (Mode.TEST, Mode.EXPORT) and dataset.read_test is None:
        raise UsageError(f"--mode={mode.value}: {dataset.name} data has no "
                         "standard test split; --mode=eval gives validation "
                         "numbers")
    return RUNNERS[mode](dataset)


def main(dataset, make_dataset=None, extra_flags=None):
    """Entry point: define flags, parse, run; user errors become one line.

    ``make_dataset(dataset, FLAGS)``, if given, completes the dataset from
    the parsed flags (``train_custom.py``); ``extra_flags()`` defines flags
    of its own.
    """
    before = set(FLAGS)
    define_flags(dataset)
    if extra_flags is not None:
        extra_flags()
    for name in set(FLAGS) - before | {"log_dir"}:  # listed by --help
        FLAGS.register_key_flag_for_module(sys.argv[0], FLAGS[name])

    def _main(argv):
        if len(argv) > 1:
            print(f"error: unexpected arguments: {' '.join(argv[1:])}; "
                  "flags are written --name=value", file=sys.stderr)
            return 2
        try:
            spec = dataset if make_dataset is None else make_dataset(dataset,
                                                                     FLAGS)
            return run_mode(spec)
        except ArgumentError as e:
            print(f"error: {e.for_flags(FLAG_NAMES)}", file=sys.stderr)
            return 2
        except UsageError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except TrainingError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(INTERRUPTED, file=sys.stderr)
            return INTERRUPTED_STATUS

    app.run(_main, flags_parser=parse_flags)
