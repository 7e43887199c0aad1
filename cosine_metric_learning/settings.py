"""Every setting of a run, defined once: default, help and allowed range.

Each mode's settings are a class: :class:`TrainConfig`, :class:`EvalConfig`,
:class:`TestConfig`, :class:`ExportConfig` (``--mode=export`` and the model
exports) and :class:`EncodeConfig` (the encode command); what several
share is a base class (:class:`Config`, :class:`BackendConfig`,
:class:`ShapeConfig`), so each setting is one field. A field carries its
help text and its check in its metadata; the command-line flags are
derived from the fields (``commands.py``), and ``validate()`` runs every
field's check.
"""

import dataclasses
import os
from typing import Optional

from cosine_metric_learning import ann, backends, deploy, distribute
from cosine_metric_learning import export, formats
from cosine_metric_learning import image_cache, kit_features, losses
from cosine_metric_learning import queued_trainer
from cosine_metric_learning import rerank as rerank_lib
from cosine_metric_learning.commands import Validated, one_of
from cosine_metric_learning.commands import setting
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.model import IMPRINT_IMAGES
from cosine_metric_learning.model import MIXED_PRECISION_POLICIES, Tricks
from cosine_metric_learning.nets.deep_sort import network_definition


# checks: value -> what is expected, or None if the value is fine

def _at_least_1(value):
    return None if value >= 1 else "expected an integer >= 1"


def _positive(value):
    return None if value > 0 else "expected a number > 0"


def _not_negative(value):
    return None if value >= 0 else "expected a number >= 0"


def _fraction(value):
    return None if 0.0 <= value < 1.0 else "expected a number in [0, 1)"


def _in_unit_interval(value):
    return None if 0.0 <= value <= 1.0 else "expected a number in [0, 1]"


def _optional(check, unset):
    def optional(value):
        if value is None:
            return None
        problem = check(value)
        return problem and f"{problem} (or leave it unset {unset})"
    return optional


def recipe_setting(help, check=None):
    """A setting whose default is the ``--recipe``'s (:data:`RECIPES`)."""
    return setting(None, f"{help} (default: the recipe's).",
                   check and _optional(check, "for the recipe's"))


@dataclasses.dataclass
class BatchConfig(Validated):
    """The batch: of training, or of a forward pass."""
    batch_size: int = setting(
        128, "Images per training batch; the other modes and the encode "
        "command: per forward pass.", _at_least_1)


@dataclasses.dataclass
class Config(BatchConfig):
    """Settings every mode shares."""
    dataset_dir: str = setting(None, "Path to the dataset.")
    log_dir: str = setting(
        None, "Checkpoints and summaries go to log_dir/run_id.")
    run_id: Optional[str] = setting(
        None, "Name of the run; random 6 characters if not given. The "
        "other modes use its latest checkpoint unless --restore_path is "
        "given.")
    restore_path: Optional[str] = setting(
        None, "train: a checkpoint (or a run's folder) to initialise from; "
        "eval: unused; test: a checkpoint, a run's folder or an exported "
        f"model ({formats.exported_models()}) to measure; export, "
        f"{', '.join(f.mode for f in formats.exported())}: the "
        "checkpoint or run folder to export (default: the latest of "
        "--run_id). Every mode also takes Deep SORT's published model: "
        "mars-small128.ckpt-68577 (its TF1 checkpoint) or mars-small128.pb.",
        arguments=("path",))

    @property
    def run_dir(self):
        """``log_dir/run_id``: the run's checkpoints and summaries."""
        return os.path.join(self.log_dir, self.run_id)

    @property
    def model_path(self):
        """What the modes after training use: ``--restore_path``, else the
        run folder of ``--run_id`` (its latest checkpoint)."""
        if self.restore_path is None and self.run_id is not None:
            return self.run_dir
        return self.restore_path


@dataclasses.dataclass
class RunConfig(Config):
    """Settings training and the evaluator share."""
    loss_mode: str = setting("cosine-softmax", "The loss to train with.",
                             one_of(losses.LOSS_MODES))
    number_of_steps: Optional[int] = setting(
        None, "Stop at this global step; unset trains forever.",
        _optional(_at_least_1, "to train until stopped"))


# What each --recipe sets; a flag given on the command line wins.
# baseline: this project's default since its start; original: the
# original's numerics; strong: the tricks the learning benchmark found
# best on the look-alike set (benchmarks/learning.py, docs/benchmarks.md).
RECIPE_DEFAULTS = {
    "initial_logit_scale": network_definition.DEFAULT_LOGIT_SCALE,
    **dataclasses.asdict(Tricks()), "bnneck": False}
RECIPES = {
    "original": {"initial_logit_scale":
                 network_definition.ORIGINAL_LOGIT_SCALE},
    "baseline": {},
    "strong": {"triplet_weight": 8.0},
}


@dataclasses.dataclass
class TrainConfig(RunConfig):
    """Training settings; the flags map one to one onto these fields."""
    images_per_id: int = setting(
        4, "Images of each identity in a training batch.", _at_least_1)
    learning_rate: float = setting(1e-3, "Adam learning rate.", _positive)
    recipe: str = setting(
        "baseline", "Sets the settings below that are not given: original "
        "(the original's numerics: --initial_logit_scale=0.6931), baseline "
        "(none of the tricks), strong (the batch-hard triplet loss added to "
        "the cosine-softmax's, the best combination measured; see "
        "docs/training.md).",
        one_of(RECIPES))
    initial_logit_scale: Optional[float] = recipe_setting(
        "cosine-softmax: the classifier's logit scale, softplus(scale), "
        "before training; 0.6931 (softplus(0)) is the original's, which "
        "learns little in the first thousands of steps; baseline: "
        f"{network_definition.DEFAULT_LOGIT_SCALE:g}", _positive)
    warmup_steps: Optional[int] = recipe_setting(
        "Raise the learning rate linearly from a tenth of it over these "
        "steps; 0: none", _not_negative)
    random_erasing: Optional[float] = recipe_setting(
        "The probability that a training image gets a rectangle of noise "
        "(Zhong et al. 2020); 0: none", _in_unit_interval)
    label_smoothing: Optional[float] = recipe_setting(
        "cosine-softmax: smooth the targets by this much (Szegedy et al. "
        "2016); 0: none", _fraction)
    cosine_margin: Optional[float] = recipe_setting(
        "cosine-softmax: subtract this from the true class's cosine "
        "(CosFace, AM-softmax 2018); 0: none", _fraction)
    bnneck: Optional[bool] = recipe_setting(
        "A new run of the paper's network gets a batch norm before the "
        "features' normalisation (a BNNeck, Luo et al. 2019; the features "
        "stay unit-length 128-d)")
    imprint: Optional[bool] = recipe_setting(
        "cosine-softmax: a new classifier starts at each identity's mean "
        "feature under the starting encoder (imprinted weights, Qi et al. "
        f"2018), from up to {IMPRINT_IMAGES} of its training images")
    triplet_weight: Optional[float] = recipe_setting(
        "cosine-softmax, magnet: add the soft-margin batch-hard triplet loss "
        "of the features, times this (the identity and triplet losses "
        "together, Luo et al. 2019); 0: none", _not_negative)
    restore_classifier: bool = setting(
        True, "With --restore_path, also restore the classifier; "
        "--norestore_classifier fine-tunes on other identities.")
    train_from: Optional[str] = setting(
        None, "Train only the encoder's layers from this one on (a layer "
        "name: fc1 is the final fully-connected layer and what follows "
        "it); the layers before it keep their restored weights and "
        "batch-norm statistics. Default: every layer.")
    num_enqueue_threads: int = setting(
        queued_trainer.DEFAULT_NUM_THREADS,
        "Producer threads filling the input queue.", _at_least_1)
    queue_capacity: int = setting(
        queued_trainer.DEFAULT_CAPACITY,
        "Capacity of the input queue in images.", _at_least_1)
    save_interval_secs: float = setting(
        300.0, "Seconds between checkpoints.", _positive)
    save_summaries_secs: float = setting(
        60.0, "Seconds between TensorBoard summaries.", _positive)
    log_interval_secs: float = setting(
        10.0, "Seconds between progress log lines.", _positive)
    max_unreadable_fraction: float = setting(
        0.01, "Skip unreadable training images up to this fraction of them; "
        "more stops the run.", _fraction)
    cache_images: bool = setting(
        False, "Decode every training image once into memory (uint8 at the "
        "input size) before training; the producers then only gather, flip "
        "and enqueue.")
    cache_max_gb: float = setting(
        image_cache.DEFAULT_MAX_GB, "--cache_images: refuse to cache more "
        "than this many GB (default: a quarter of this machine's memory).",
        _positive)
    mixed_precision: str = setting(
        "none", "Compute in bfloat16 or float16 (with loss scaling); "
        "weights, features and losses stay float32.",
        one_of(MIXED_PRECISION_POLICIES))
    strategy: str = setting(
        "none", "Train on several devices (mirrored) or machines "
        "(multi_worker, configured by TF_CONFIG).",
        one_of(distribute.STRATEGIES))
    devices: Optional[str] = setting(
        None, "mirrored: comma-separated devices, e.g. /gpu:0,/gpu:1; "
        "default: all GPUs (else the CPU).")

    @property
    def recipe_settings(self):
        """The settings of :data:`RECIPE_DEFAULTS` this run trains with:
        those given, else the recipe's, else the baseline's."""
        given = {k: getattr(self, k) for k in RECIPE_DEFAULTS
                 if getattr(self, k) is not None}
        return {**RECIPE_DEFAULTS, **RECIPES[self.recipe], **given}

    @property
    def tricks(self):
        """The :class:`model.Tricks` of :attr:`recipe_settings`."""
        values = self.recipe_settings
        return Tricks(**{f.name: values[f.name]
                         for f in dataclasses.fields(Tricks)})

    def validate(self):
        super().validate()
        distribute.check_batch_split(self.batch_size, self.images_per_id)
        if self.queue_capacity < self.batch_size:
            raise UsageError(
                f"--queue_capacity={self.queue_capacity}: expected at least "
                f"--batch_size={self.batch_size}")


@dataclasses.dataclass
class EvalConfig(RunConfig):
    """Settings of the checkpoint-polling evaluator (``--mode=eval``)."""
    eval_log_dir: str = setting(
        None, "Evaluation summaries go to eval_log_dir/run_id.")
    eval_interval_secs: float = setting(
        60.0, "eval: seconds between polls for a new checkpoint.",
        _not_negative)
    max_num_evaluations: Optional[int] = setting(
        None, "eval: stop after this many evaluations.",
        _optional(_at_least_1, "to evaluate until stopped"))
    track_sequences: Optional[str] = setting(
        None, "eval: also track these MOTChallenge sequences (comma-"
        "separated folders, or parents of them) with each checkpoint, at "
        "Deep SORT's defaults, and write HOTA, IDF1 and ID switches beside "
        "the CMC (needs the track extra).", arguments=("sequences",))
    eval_timeout_secs: Optional[float] = setting(
        None, "eval: stop when no new checkpoint appeared for this long "
        "(with --number_of_steps: also stop once that step is evaluated).",
        _optional(_not_negative, "to wait forever"))


@dataclasses.dataclass
class ShapeConfig(Validated):
    """The network's input size (``train_custom.py``, the encode command;
    the datasets of the other entry points have theirs)."""
    image_shape: Optional[str] = setting(
        None, "HEIGHT,WIDTH of the network input, e.g. 96,48; images are "
        "resized to it. Default: a run's own (its run.json; exported models "
        "carry theirs), else 128,64. Given, it must agree with the run's.",
        _optional(lambda text: _image_shape_problem(text), "for the run's"))

    @property
    def shape(self):
        """``(H, W, 3)``, or None where the run's or the model's is used."""
        return None if self.image_shape is None else parse_image_shape(
            self.image_shape)


@dataclasses.dataclass
class BackendConfig(Validated):
    """The runtime an exported model runs on."""
    backend: str = setting(
        "auto", "test, export, encode: the runtime of an exported model: "
        f"auto (the format's own: {formats.default_runtimes()}), fastest "
        "(the fastest installed runtime for the format: openvino, then "
        "onnxruntime, at the processor's own precision), or one of the "
        "runtimes that open it (" + "; ".join(
            f"{f.what}: {', '.join(f.runtimes)}" for f in formats.FORMATS
            if len(f.runtimes) > 1) + ").",
        one_of(backends.NAMES))


@dataclasses.dataclass
class TestConfig(BackendConfig, Config):
    """``--mode=test``: the standard protocol."""
    output_json: Optional[str] = setting(
        None, "test: also write the numbers to this JSON file.")
    flip_test: bool = setting(
        False, "test: add the features of the mirrored images (sum, "
        "re-normalised).")
    rank_image: Optional[str] = setting(
        None, "test: draw queries and their top 10 gallery entries into "
        "this PNG file.")
    rerank: bool = setting(
        False, "test: also report the numbers after k-reciprocal "
        "re-ranking (Zhong et al., 2017).",
        arguments=("rerank_parameters",))
    rerank_k1: int = setting(
        rerank_lib.K1, "test --rerank: k1, the size of the k-reciprocal "
        "neighbour lists.")
    rerank_k2: int = setting(
        rerank_lib.K2, "test --rerank: k2, the neighbours averaged by local "
        "query expansion.")
    rerank_lambda: float = setting(
        rerank_lib.LAMBDA, "test --rerank: the weight of the original "
        "distance beside the Jaccard distance.")
    ann: Optional[str] = setting(
        None, "test: also rank with an approximate-nearest-neighbour index "
        "of the gallery (faiss, the search extra; sq8 or pq4 codes, as "
        "search build makes it): its numbers beside the exact ones, and "
        "the recall of its top 1 and 10 against exact ranking.",
        _optional(one_of(ann.CODES), "for exact ranking alone"))

    @property
    def rerank_parameters(self):
        """``(k1, k2, lambda)`` with ``--rerank``, else None."""
        return ((self.rerank_k1, self.rerank_k2, self.rerank_lambda)
                if self.rerank else None)


@dataclasses.dataclass
class ExportConfig(BackendConfig, Config):
    """``--mode=export`` and the model exports (freeze, finalize,
    saved_model, onnx, openvino, tflite)."""
    format: str = setting(
        "kit", "export: kit (the official kits' feature files) or "
        "pytorch_result (one .mat as PyTorch re-id evaluation scripts read "
        "it, to --output, default <dataset>_pytorch_result.mat).",
        one_of(kit_features.FORMATS))
    sdk_dir: Optional[str] = setting(
        None, "export --format=kit: the official evaluation kit's folder "
        "(Market-1501), where its feature files go.")
    output: Optional[str] = setting(
        None, "export --format=pytorch_result: the .mat file; "
        f"{formats.export_outputs()}.", arguments=("prefix",))
    int8: bool = setting(
        False, f"{', '.join(f.mode for f in formats.exported() if f.int8)}"
        ": quantise to int8 (" + ", ".join(
            f"{f.mode} with {f.int8}" for f in formats.exported()
            if f.int8) + "), calibrated on training images of --dataset_dir "
        f"(default output {formats.int8_outputs()}).")
    calibration_images: int = setting(
        deploy.DEFAULT_CALIBRATION_IMAGES, "--int8: how many training images to "
        "calibrate on (spread evenly over the set).", _at_least_1,
        arguments=("count",))
    export_layout: str = setting(
        export.DEFAULT_LAYOUT, f"{formats.layout_modes()}: the model's "
        "input: default (uint8 BGR crops, NHWC) or boxmot (BoxMOT's float32 "
        "NCHW of ImageNet-normalised RGB, with <output>.metadata.json "
        "giving BoxMOT the input size; default output "
        "<dataset>_boxmot.<extension>).", one_of(export.LAYOUTS))


@dataclasses.dataclass
class EncodeConfig(BackendConfig, ShapeConfig, BatchConfig):
    """The encode command (``python -m cosine_metric_learning.encode``)."""
    model: str = setting(
        None, f"The model: {formats.describe()}.",
        lambda value: None if value else "expected a model",
        arguments=("path",), required=True)
    images: str = setting(
        None, "A folder or a glob of image files.",
        lambda value: None if value else "expected a folder or a glob",
        arguments=("pattern",), required=True)
    output: str = setting(
        None, "features.npy or features.mat.",
        lambda value: None if value else "expected a .npy or .mat file name",
        required=True)


# the largest input: training memory grows with the pixels (a batch of
# 128 at 128x64 takes 2-3 GB; this is 32 times the pixels)
MAX_IMAGE_PIXELS = 512 * 512


def _image_shape_problem(text):
    """What is wrong with a ``"H,W"`` text, or None."""
    try:
        height, width = (int(v) for v in text.split(","))
    except ValueError:
        return "expected HEIGHT,WIDTH, e.g. 128,64"
    if height < 8 or width < 8:
        return ("the network halves the size three times; expected a "
                "height and width of at least 8")
    if height * width > MAX_IMAGE_PIXELS:
        return (f"expected at most {MAX_IMAGE_PIXELS} pixels (512x512): "
                "a patch of one person or vehicle (the paper's is 128x64); "
                "larger ones do not fit a batch in memory")
    return None


def parse_image_shape(text):
    """``"H,W"`` -> ``(H, W, 3)``; UsageError naming the flag if it is
    not one."""
    problem = _image_shape_problem(text)
    if problem:
        raise UsageError(f"--image_shape={text}: {problem}")
    height, width = (int(v) for v in text.split(","))
    return height, width, 3
