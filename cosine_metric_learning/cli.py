"""The command line of the entry points: flags, mode dispatch, one-line
errors.

``train_market1501.py``, ``train_mars.py``, ``train_veri.py`` and
``train_custom.py`` describe their dataset with a
:class:`datasets.spec.DatasetSpec` and call :func:`main`. Every flag is
derived from a field of the modes' settings classes
(:mod:`cosine_metric_learning.settings`) by the flag system
(:mod:`cosine_metric_learning.commands`); each mode is a function of its
settings object.
"""

import dataclasses
import enum
import sys

from absl import app, flags

from cosine_metric_learning import checkpoints, commands, deploy, evaluator
from cosine_metric_learning import export
from cosine_metric_learning import formats, kit_features, protocol
from cosine_metric_learning import settings, training
from cosine_metric_learning.errors import UsageError, parse_flags

FLAGS = flags.FLAGS


# the modes: training, evaluation, the test protocol, the kits' features,
# and one export mode per format of the registry (formats.FORMATS)
Mode = enum.Enum("Mode", [(m.upper(), m) for m in (
    "train", "eval", "export", "test")] + [
        (f.mode.upper(), f.mode) for f in formats.exported()])

# mode -> (writer(encoder, output, image_shape, **options), check(output),
# default output), from the registry. Only --int8 passes options.
EXPORTERS = {Mode(f.mode): (f.write, f.check_output, f.default_output)
             for f in formats.exported()}
# the modes that take --int8, and the package that quantises
INT8_QUANTISERS = {Mode(f.mode): f.int8 for f in formats.exported()
                   if f.int8}
# the modes that take --export_layout
LAYOUT_MODES = tuple(Mode(f.mode) for f in formats.exported() if f.layouts)
# substrings of a file name from which BoxMOT guesses a model's input size
# (its own networks'): a BoxMOT export's default name holds none of them
BOXMOT_NAME_GUESSES = ("osnet", "mobilenetv2", "mobilenetv4", "lmbn",
                       "hacnn", "veri", "vehicleid")


def default_output(mode, dataset_name, int8, layout):
    """The file an export writes without ``--output``."""
    name = dataset_name
    if layout == export.BOXMOT:
        if any(guess in name.lower() for guess in BOXMOT_NAME_GUESSES):
            name = "cosine_reid"
        name += "_boxmot"
    return EXPORTERS[mode][2].format(name=name,
                                     int8="_int8" if int8 else "")


# the settings of each mode
CONFIGS = {Mode.TRAIN: settings.TrainConfig, Mode.EVAL: settings.EvalConfig,
           Mode.TEST: settings.TestConfig,
           **{mode: settings.ExportConfig for mode in (Mode.EXPORT,
                                                       *EXPORTERS)}}


def define_flags(dataset):
    """Define the command-line flags (the original's names and defaults)."""
    flags.DEFINE_enum_class("mode", Mode.TRAIN, Mode, "What to do.")
    commands.define(dict.fromkeys(CONFIGS.values()), {
        "dataset_dir": dataset.default_dataset_dir,
        "log_dir": f"./output/{dataset.name}/",
        "eval_log_dir": f"./output/{dataset.name}_eval/",
        "sdk_dir": dataset.default_sdk_dir})


def config_from_flags(config_class):
    """A settings object of ``config_class`` with the values of the
    flags, validated."""
    fixed = {}
    if config_class is settings.TrainConfig and not FLAGS.run_id:
        fixed["run_id"] = training.random_run_id()
    return commands.values(config_class, **fixed)


# The modes: each a function of the dataset, its settings and the input
# shape asked for (None: the run's or the model's own) -------------------

def _eval(dataset, config, image_shape):
    if config.run_id is None:
        raise UsageError("--mode=eval needs --run_id: the training run in "
                         "--log_dir to evaluate")
    evaluator.evaluate_checkpoints(dataset, config, image_shape)
    return 0


def _test(dataset, config, image_shape):
    protocol.run_test(
        dataset, config.model_path, config.dataset_dir,
        batch_size=config.batch_size, flip_test=config.flip_test,
        output_json=config.output_json, rank_image=config.rank_image,
        backend=config.backend, rerank_parameters=config.rerank_parameters,
        image_shape=image_shape, ann=config.ann)
    return 0


def _export_kit_features(dataset, config, image_shape):
    if config.format == "pytorch_result":
        print("wrote " + kit_features.export_pytorch_result(
            dataset, config.model_path, config.dataset_dir,
            config.output or f"{dataset.name}_pytorch_result.mat",
            batch_size=config.batch_size, image_shape=image_shape))
        return 0
    output_dir = (config.sdk_dir if dataset.default_sdk_dir is not None
                  else config.dataset_dir)
    for path in kit_features.export_features(
            dataset, config.model_path, config.dataset_dir, output_dir,
            batch_size=config.batch_size, image_shape=image_shape):
        print(f"wrote {path}")
    return 0


def _export_model(mode):
    write, check, _ = EXPORTERS[mode]

    def run(dataset, config, image_shape):
        if config.int8 and mode not in INT8_QUANTISERS:
            raise UsageError(f"--int8 with --mode={mode.value}: int8 "
                             "models are written by --mode=onnx, "
                             "--mode=openvino and --mode=tflite")
        if config.export_layout != export.DEFAULT_LAYOUT and \
                mode not in LAYOUT_MODES:
            raise UsageError(
                f"--export_layout={config.export_layout} with --mode="
                f"{mode.value}: other layouts are written by --mode=onnx, "
                "--mode=openvino and --mode=tflite")
        output = config.output or default_output(
            mode, dataset.name, config.int8, config.export_layout)
        check(output)  # before the work: a bad path fails at once
        options = {}
        if mode in LAYOUT_MODES:
            options["layout"] = config.export_layout
            deploy.check_sidecar(output, config.export_layout)
        if config.int8:
            deploy.require(INT8_QUANTISERS[mode], "--int8")
            try:
                calibration = dataset.read_train(config.dataset_dir)
            except UsageError as e:
                raise UsageError(
                    "--int8 needs a calibration set, the training images "
                    f"of --dataset_dir={config.dataset_dir}, and they "
                    f"cannot be read: {e}") from e
        encoder, path = checkpoints.load_encoder(config.model_path,
                                                 image_shape)
        shape = tuple(encoder.input_shape[1:])
        if config.int8:
            options["calibration"] = deploy.calibration_patches(
                calibration.filenames, config.calibration_images, shape)
        print(f"wrote {write(encoder, output, shape, **options)} "
              f"(encoder of {path})")
        return 0

    return run


RUNNERS = {Mode.TRAIN: training.run, Mode.EVAL: _eval, Mode.TEST: _test,
           Mode.EXPORT: _export_kit_features,
           **{mode: _export_model(mode) for mode in EXPORTERS}}


def run_mode(dataset, mode, config, image_shape=None):
    """Run ``mode`` with its settings; returns the process exit status."""
    if mode in (Mode.TEST, Mode.EXPORT) and dataset.read_test is None:
        raise UsageError(f"--mode={mode.value}: {dataset.name} data has no "
                         "standard test split; --mode=eval gives validation "
                         "numbers")
    return RUNNERS[mode](dataset, config, image_shape)


def with_image_shape(dataset, values):
    """``dataset`` at the ``--image_shape`` of the parsed flags, if given."""
    if not values.image_shape:
        return dataset
    return dataclasses.replace(
        dataset, image_shape=settings.parse_image_shape(values.image_shape))


def main(dataset, make_dataset=None, extra_settings=()):
    """Entry point: define flags, parse, run; user errors become one line.

    ``make_dataset(dataset, FLAGS)``, if given, completes the dataset from
    the parsed flags (``train_custom.py``); ``extra_settings`` are the
    entry point's own settings classes (their fields are flags too).
    """
    define_flags(dataset)
    commands.define(extra_settings)
    FLAGS.register_key_flag_for_module(sys.argv[0], FLAGS["mode"])

    def _main(argv):
        def run():
            spec = dataset if make_dataset is None else make_dataset(dataset,
                                                                     FLAGS)
            # only train_custom.py has --image_shape; unset, the run's own
            given = "image_shape" in FLAGS and FLAGS.image_shape is not None
            return run_mode(spec, FLAGS.mode, config_from_flags(
                CONFIGS[FLAGS.mode]), spec.image_shape if given else None)

        return commands.run(argv, run, [*CONFIGS.values(), *extra_settings])

    app.run(_main, flags_parser=parse_flags)
