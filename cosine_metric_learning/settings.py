"""Every setting of a run, defined once: default, help and allowed range.

:class:`TrainConfig` and :class:`EvalConfig` are the settings of training
and of the evaluator; each field carries its help text and its check in
the field's metadata. The command-line flags are derived from these fields
(``cli.py``), and ``validate()`` runs every field's check, so a setting's
default, help and range live in one place.
"""

import dataclasses
import os
from typing import Optional

from cosine_metric_learning import distribute, image_cache, losses
from cosine_metric_learning import queued_trainer
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.model import MIXED_PRECISION_POLICIES
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


def _one_of(choices):
    def check(value):
        return None if value in choices else \
            f"expected one of {', '.join(choices)}"
    check.choices = list(choices)
    return check


def _optional(check, unset):
    def optional(value):
        if value is None:
            return None
        problem = check(value)
        return problem and f"{problem} (or leave it unset {unset})"
    return optional


def setting(default, help, check=None):
    """A config field with its flag help and its check."""
    return dataclasses.field(default=default,
                             metadata={"help": help, "check": check})


def choices(field):
    """The allowed values of an enum setting, else None."""
    return getattr(field.metadata.get("check"), "choices", None)


@dataclasses.dataclass
class RunConfig:
    """Settings training and the evaluator share."""
    dataset_dir: str = setting(None, "Path to the dataset.")
    log_dir: str = setting(
        None, "Checkpoints and summaries go to log_dir/run_id.")
    run_id: Optional[str] = setting(
        None, "Name of the run; random 6 characters if not given.")
    loss_mode: str = setting("cosine-softmax", "The loss to train with.",
                             _one_of(losses.LOSS_MODES))
    batch_size: int = setting(128, "Images per training batch.", _at_least_1)
    number_of_steps: Optional[int] = setting(
        None, "Stop at this global step; unset trains forever.",
        _optional(_at_least_1, "to train until stopped"))

    def validate(self):
        """Raise a UsageError naming the first setting out of range."""
        for field in dataclasses.fields(self):
            check = field.metadata.get("check")
            value = getattr(self, field.name)
            problem = check(value) if check else None
            if problem:
                raise UsageError(f"--{field.name}={value}: {problem}")

    @property
    def run_dir(self):
        """``log_dir/run_id``: the run's checkpoints and summaries."""
        return os.path.join(self.log_dir, self.run_id)


@dataclasses.dataclass
class TrainConfig(RunConfig):
    """Training settings; the flags map one to one onto these fields."""
    images_per_id: int = setting(
        4, "Images of each identity in a training batch.", _at_least_1)
    learning_rate: float = setting(1e-3, "Adam learning rate.", _positive)
    initial_logit_scale: float = setting(
        network_definition.DEFAULT_LOGIT_SCALE,
        "cosine-softmax: the classifier's logit scale, softplus(scale), "
        "before training; 0.6931 (softplus(0)) is the original's, which "
        "learns little in the first thousands of steps.", _positive)
    restore_path: Optional[str] = setting(
        None, "Checkpoint (or directory) to initialise from.")
    restore_classifier: bool = setting(
        True, "With --restore_path, also restore the classifier; "
        "--norestore_classifier fine-tunes on other identities.")
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
        _one_of(MIXED_PRECISION_POLICIES))
    strategy: str = setting(
        "none", "Train on several devices (mirrored) or machines "
        "(multi_worker, configured by TF_CONFIG).",
        _one_of(distribute.STRATEGIES))
    devices: Optional[str] = setting(
        None, "mirrored: comma-separated devices, e.g. /gpu:0,/gpu:1; "
        "default: all GPUs (else the CPU).")

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
    eval_timeout_secs: Optional[float] = setting(
        None, "eval: stop when no new checkpoint appeared for this long "
        "(with --number_of_steps: also stop once that step is evaluated).",
        _optional(_not_negative, "to wait forever"))


def parse_image_shape(text):
    """``"H,W"`` -> ``(H, W, 3)``; the net halves the size three times."""
    try:
        height, width = (int(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--image_shape={text}: expected HEIGHT,WIDTH, "
                         "e.g. 128,64") from None
    if height < 8 or width < 8:
        raise UsageError(f"--image_shape={text}: the network halves the size "
                         "three times; expected a height and width of at "
                         "least 8")
    return height, width, 3
