"""Flags and the training loop shared by the dataset entry points.

``train_market1501.py`` and ``train_mars.py`` describe their dataset with a
:class:`DatasetSpec` and call :func:`main`; everything else lives here.
"""

import contextlib
import dataclasses
import enum
import os
import shutil
import signal
import string
import sys
import tempfile
import threading
import time
from typing import Callable, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags, logging

from cosine_metric_learning import checkpoints, evaluation, export, files
from cosine_metric_learning import losses
from cosine_metric_learning import queued_trainer, run_settings
from cosine_metric_learning.errors import TrainingError, UsageError
from cosine_metric_learning.errors import first_line, parse_flags
from datasets import image_folder
from datasets import util as dataset_util
from nets.deep_sort import network_definition

FLAGS = flags.FLAGS


class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"
    EXPORT = "export"
    FINALIZE = "finalize"
    FREEZE = "freeze"
    TEST = "test"
    SAVED_MODEL = "saved_model"


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """What the shared main needs to know about a dataset.

    ``read_train(dataset_dir)`` returns ``(filenames, ids, camera_indices,
    ...)``; extra elements are ignored. ``read_test(dataset_dir)`` returns a
    :class:`datasets.util.TestSplit`. Exported features go to ``--sdk_dir``
    for datasets that have a default for it, else to ``--dataset_dir``.
    """
    name: str
    num_classes: int
    read_train: Callable
    default_dataset_dir: str
    read_test: Optional[Callable] = None
    default_sdk_dir: Optional[str] = None
    num_validation_galleries: int = 10
    image_shape: Tuple[int, int, int] = network_definition.IMAGE_SHAPE
    label_names: Optional[list] = None  # saved as labels.json when set


STRATEGIES = ("none", "mirrored", "multi_worker")
COLLECTIVE_TIMEOUT_SECS = 600

# --mixed_precision -> Keras dtype policy of the network's layers
MIXED_PRECISION_POLICIES = {"none": "float32", "bf16": "mixed_bfloat16",
                            "fp16": "mixed_float16"}


@dataclasses.dataclass
class TrainConfig:
    """Training settings; the flags map one to one onto these fields."""
    dataset_dir: str
    log_dir: str
    run_id: str
    loss_mode: str = "cosine-softmax"
    batch_size: int = 128
    images_per_id: int = 4
    learning_rate: float = 1e-3
    number_of_steps: Optional[int] = None
    restore_path: Optional[str] = None
    restore_classifier: bool = True
    num_enqueue_threads: int = queued_trainer.DEFAULT_NUM_THREADS
    queue_capacity: int = queued_trainer.DEFAULT_CAPACITY
    save_interval_secs: float = 300.0
    save_summaries_secs: float = 60.0
    log_interval_secs: float = 10.0
    max_unreadable_fraction: float = 0.01
    mixed_precision: str = "none"
    strategy: str = "none"
    devices: Optional[str] = None

    def validate(self):
        """Raise a UsageError naming the first setting out of range."""
        if self.loss_mode not in losses.LOSS_MODES:
            raise UsageError(f"--loss_mode={self.loss_mode}: expected one of "
                             f"{', '.join(losses.LOSS_MODES)}")
        positive = ("batch_size", "images_per_id", "num_enqueue_threads",
                    "queue_capacity")
        for name in positive:
            value = getattr(self, name)
            if value < 1:
                raise UsageError(f"--{name}={value}: expected an integer >= 1")
        for name in ("learning_rate", "save_interval_secs",
                     "save_summaries_secs", "log_interval_secs"):
            value = getattr(self, name)
            if not value > 0:
                raise UsageError(f"--{name}={value}: expected a number > 0")
        if self.strategy not in STRATEGIES:
            raise UsageError(f"--strategy={self.strategy}: expected one of "
                             f"{', '.join(STRATEGIES)}")
        if self.mixed_precision not in MIXED_PRECISION_POLICIES:
            raise UsageError(f"--mixed_precision={self.mixed_precision}: "
                             "expected one of "
                             f"{', '.join(MIXED_PRECISION_POLICIES)}")
        if not 0.0 <= self.max_unreadable_fraction < 1.0:
            raise UsageError(f"--max_unreadable_fraction="
                             f"{self.max_unreadable_fraction}: expected a "
                             "number in [0, 1)")
        if self.number_of_steps is not None and self.number_of_steps < 1:
            raise UsageError(f"--number_of_steps={self.number_of_steps}: "
                             "expected an integer >= 1 (or leave it unset "
                             "to train until stopped)")
        if self.batch_size % self.images_per_id:
            raise UsageError(
                f"--batch_size={self.batch_size} is not divisible by "
                f"--images_per_id={self.images_per_id}")
        if self.queue_capacity < self.batch_size:
            raise UsageError(
                f"--queue_capacity={self.queue_capacity}: expected at least "
                f"--batch_size={self.batch_size}")

    @property
    def run_dir(self):
        return os.path.join(self.log_dir, self.run_id)


@dataclasses.dataclass
class TrainResult:
    step: int
    checkpoint: Optional[str]
    signal: Optional[int] = None  # the signal that stopped the run


def random_run_id(length=6):
    """A random run id of lower-case letters and digits, as the original."""
    alphabet = np.array(list(string.ascii_lowercase + string.digits))
    return "".join(np.random.choice(alphabet, length))


# Model ----------------------------------------------------------------------

@dataclasses.dataclass
class TrainingModel:
    """The networks a loss mode trains; the classifier only for cosine-softmax."""

    encoder: keras.Model
    activation_model: keras.Model
    classifier: Optional[keras.Model]

    @property
    def models(self):
        """The models with weights: the encoder and the classifier, if any."""
        return [m for m in (self.encoder, self.classifier) if m is not None]

    @property
    def trainable_variables(self):
        return [v for m in self.models for v in m.trainable_variables]

    @property
    def variables(self):
        """All weights, batch-norm statistics included."""
        return [v for m in self.models for v in m.variables]

    def weight_loss(self):
        return tf.add_n([term for m in self.models for term in m.losses])


@contextlib.contextmanager
def dtype_policy(name):
    """Build layers under a Keras dtype policy, restoring the old one."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def create_model(dataset, loss_mode, mixed_precision="none"):
    """The encoder and, for cosine-softmax, the classifier head.

    With mixed precision the layers compute in bfloat16 or float16 and keep
    float32 weights; the features and the classifier stay float32.
    """
    with dtype_policy(MIXED_PRECISION_POLICIES[mixed_precision]):
        encoder = network_definition.create_encoder(dataset.image_shape)
        classifier = None
        if loss_mode == "cosine-softmax":
            classifier = network_definition.create_classifier(
                dataset.num_classes)
        activations = network_definition.create_activation_model(encoder)
    return TrainingModel(encoder, activations, classifier)


def create_optimizer(learning_rate, mixed_precision="none"):
    """Adam with TF1's defaults (epsilon 1e-8, not Keras' 1e-7); with fp16,
    wrapped in dynamic loss scaling."""
    optimizer = keras.optimizers.Adam(learning_rate=learning_rate,
                                      beta_1=0.9, beta_2=0.999, epsilon=1e-8)
    if mixed_precision == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def make_train_step(model, optimizer, loss_mode, step):
    """One optimisation step on a batch; wrap it in a ``tf.function``.

    Returns
    -------
    callable
        ``step_fn(images, labels) -> dict`` of scalar metrics (every loss,
        the weight loss, accuracy and scale for cosine-softmax, triplet
        diagnostics) and, for summaries, ``images`` and ``activations``.
    """
    variables = model.trainable_variables

    def step_fn(images, labels):
        with tf.GradientTape() as tape:
            features, activations = model.activation_model(images,
                                                           training=True)
            triplet, diagnostics = losses.soft_margin_triplet_loss(labels,
                                                                   features)
            terms = {"triplet_loss": triplet,
                     "magnet_loss": losses.magnet_loss(labels, features)}
            metrics = {f"triplet/{k}": v for k, v in diagnostics.items()}
            if model.classifier is not None:
                logits = model.classifier(features, training=True)
                terms["cosine_softmax_loss"] = losses.cosine_softmax_loss(
                    labels, logits)
                metrics["accuracy"] = losses.accuracy(labels, logits)
                metrics["scale"] = tf.nn.softplus(
                    model.classifier.get_layer("ball").scale)
            weight_loss = tf.cast(model.weight_loss(), tf.float32)
            total = terms[losses.loss_name(loss_mode)] + weight_loss
            # replicas' gradients are summed: each contributes its share
            replicas = tf.distribute.get_replica_context().num_replicas_in_sync
            scaled = total / replicas
            if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
                scaled = optimizer.scale_loss(scaled)
        gradients = tape.gradient(scaled, variables)
        optimizer.apply_gradients(zip(gradients, variables))
        step.assign_add(1)
        metrics.update({f"losses/{k}": v for k, v in terms.items()})
        metrics["losses/weight_loss"] = weight_loss
        metrics["losses/total_loss"] = total
        return {"scalars": metrics, "images": images,
                "activations": activations}

    return step_fn


# Checkpoints ----------------------------------------------------------------

def warm_start(model, path, restore_classifier):
    """Initialise the encoder (and classifier) from another checkpoint."""
    path = checkpoints.resolve_checkpoint(path)
    objects = {"encoder": model.encoder}
    if restore_classifier and model.classifier is not None:
        objects["classifier"] = model.classifier
    checkpoints.restore(path, **objects)
    logging.info("Initialised %s from %s", " and ".join(objects), path)


# Summaries ------------------------------------------------------------------

def write_summaries(writer, step, result, scalars, conv1_1_kernel):
    """Write the step's and the loop's scalars, input images, filters and
    activation histograms."""
    with writer.as_default(step=step):
        for name, value in {**result["scalars"], **scalars}.items():
            tf.summary.scalar(name, value)
        tf.summary.image("input_batch", result["images"], max_outputs=8)
        kernel = tf.transpose(conv1_1_kernel, [3, 0, 1, 2])  # (32, 3, 3, 3)
        low = tf.reduce_min(kernel)
        kernel = (kernel - low) / (tf.reduce_max(kernel) - low + 1e-12)
        tf.summary.image("conv1_1_filters", kernel, max_outputs=32)
        for name, activation in result["activations"].items():
            tf.summary.histogram(f"activations/{name}",
                                 tf.cast(activation, tf.float32))
    writer.flush()


# Training -------------------------------------------------------------------

class _StopSignal:
    """Turns SIGINT/SIGTERM into a stop request checked between steps."""

    def __init__(self):
        self.received = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.received is None:
            self.received = signum
            logging.warning("Received %s: stopping after this step and "
                            "saving a checkpoint (send it again to abort "
                            "without saving)", signal.Signals(signum).name)
        else:
            raise KeyboardInterrupt

    def __exit__(self, *exc_info):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        return False


def read_training_data(dataset, config):
    """The training split (validation identities held out) as arrays."""
    filenames, ids, *_ = dataset.read_train(config.dataset_dir)
    filenames = np.asarray(filenames)
    is_train, _ = dataset_util.split_validation(ids)
    filenames, ids = filenames[is_train], ids[is_train]
    too_large = ids[(ids < 0) | (ids >= dataset.num_classes)]
    if len(too_large):
        raise UsageError(
            f"person id {too_large[0]} in {config.dataset_dir} is outside "
            f"0..{dataset.num_classes - 1} for {dataset.name}")
    return filenames, ids


def create_strategy(name, devices=None):
    """The ``tf.distribute`` strategy of ``--strategy`` (``--devices``)."""
    if name == "none":
        return tf.distribute.get_strategy()
    if name == "multi_worker":  # the cluster comes from TF_CONFIG
        # a worker that died leaves the others in an all-reduce: give up
        # after a while instead of waiting forever
        return tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental
            .CommunicationOptions(timeout_seconds=COLLECTIVE_TIMEOUT_SECS))
    available = [d.name for d in tf.config.list_logical_devices()
                 if d.device_type in ("GPU", "CPU")]
    if devices:
        wanted = [d.strip() for d in devices.split(",") if d.strip()]
        for d in wanted:
            try:
                tf.DeviceSpec.from_string(d)
            except ValueError:
                raise UsageError(
                    f"--devices={devices}: '{d}' is not a device name; "
                    "expected comma-separated names such as /gpu:0,/gpu:1; "
                    f"available: {', '.join(available)}") from None
        unknown = [d for d in wanted
                   if tf.DeviceSpec.from_string(d).to_string() not in
                   {tf.DeviceSpec.from_string(a).to_string()
                    for a in available}]
        if unknown or not wanted:
            raise UsageError(f"--devices={devices}: no such device "
                             f"{', '.join(unknown)}; available: "
                             f"{', '.join(available)}")
        return tf.distribute.MirroredStrategy(wanted)
    return tf.distribute.MirroredStrategy()


def _is_chief(strategy):
    """Whether this process writes checkpoints and summaries."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return resolver.task_type == "chief" or (
        resolver.task_type == "worker" and resolver.task_id == 0 and
        "chief" not in resolver.cluster_spec().as_dict())


def _continue(checkpoint, objects, path, config):
    """Restore a run's own latest checkpoint to continue training it."""
    def mismatch(detail):
        return UsageError(
            f"{config.run_dir} holds a checkpoint of another network or "
            f"loss than --loss_mode={config.loss_mode} ({detail}); choose "
            "another --run_id")

    saved = checkpoints.checkpoint_objects(path) - {"save_counter"}
    if saved != set(objects):
        raise mismatch(f"it has {', '.join(sorted(saved))}; this run has "
                       f"{', '.join(sorted(objects))}")
    try:
        checkpoint.restore(path).assert_existing_objects_matched()
    except (AssertionError, ValueError) as e:
        raise mismatch(first_line(e)) from e


def newest_complete_checkpoint(run_dir):
    """The newest checkpoint of a run that can be read in full.

    A damaged newer one (a truncated data file, a bad index) is named in a
    warning and passed over: the run continues from the one before, and
    trains the steps in between again. UsageError if none is complete.
    """
    state = tf.train.get_checkpoint_state(run_dir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    if state and state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    damaged = []
    for path in reversed(paths):
        try:
            checkpoints.verify(path)
        except checkpoints.DamagedCheckpointError as e:
            damaged.append(str(e))
            continue
        except UsageError:  # its files are gone
            continue
        if damaged:
            logging.warning("%s; continuing from the newest complete "
                            "checkpoint %s (step %d) instead",
                            "; ".join(damaged), path,
                            checkpoints.checkpoint_step(path))
        return path
    raise UsageError(f"{'; '.join(damaged) or 'no checkpoint is readable'}"
                     f"; no complete checkpoint of {run_dir} to continue "
                     "from: choose another --run_id")


def train(dataset, config):
    """Train until ``number_of_steps`` or a stop signal.

    Checkpoints go to ``log_dir/run_id`` every ``save_interval_secs`` and at
    the end; a rerun with the same directory continues from its latest
    checkpoint and step.

    Returns
    -------
    TrainResult
    """
    config.validate()
    strategy = create_strategy(config.strategy, config.devices)
    replicas = strategy.num_replicas_in_sync
    if config.batch_size % (replicas * config.images_per_id):
        raise UsageError(
            f"--batch_size={config.batch_size}: each of the {replicas} "
            f"replicas takes an equal share of whole identities; expected a "
            f"multiple of {replicas} x --images_per_id="
            f"{config.images_per_id}")
    chief = _is_chief(strategy)
    filenames, ids = read_training_data(dataset, config)
    unreadable = set()  # filled by the producers, skipped by the sampler
    feed = queued_trainer.random_sample_identities_forever(
        config.batch_size, config.images_per_id, filenames, ids,
        exclude=unreadable)
    try:
        os.makedirs(config.run_dir, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--log_dir={config.log_dir}: cannot create "
                         f"{config.run_dir}: {e.strerror}") from e
    if not os.access(config.run_dir, os.W_OK):
        raise UsageError(f"--log_dir={config.log_dir}: {config.run_dir} is "
                         "not writable")
    settings = run_settings.settings(dataset.name, config.loss_mode,
                                     dataset.image_shape)
    has_checkpoint = tf.train.get_checkpoint_state(config.run_dir) is not None
    if not (has_checkpoint and run_settings.check(config.run_dir, settings)) \
            and chief:
        run_settings.record(config.run_dir, settings)
    if dataset.label_names is not None:
        path = image_folder.write_label_map(config.run_dir,
                                            dataset.label_names,
                                            config.dataset_dir)
        logging.info("Label numbering of the %d identities: %s",
                     len(dataset.label_names), path)

    trainer = queued_trainer.QueuedTrainer(
        feed, dataset.image_shape, training=True,
        num_threads=config.num_enqueue_threads,
        capacity=config.queue_capacity, unreadable=unreadable,
        max_unreadable=int(config.max_unreadable_fraction * len(filenames)))
    with strategy.scope():
        model = create_model(dataset, config.loss_mode,
                             config.mixed_precision)
        optimizer = create_optimizer(config.learning_rate,
                                     config.mixed_precision)
        optimizer.build(model.trainable_variables)
        step = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="global_step",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    objects = {"step": step, "encoder": model.encoder, "optimizer": optimizer}
    if model.classifier is not None:
        objects["classifier"] = model.classifier
    checkpoint = tf.train.Checkpoint(**objects)
    # workers other than the chief save to a folder of their own (their
    # part of a multi-worker save), which is thrown away
    save_dir = config.run_dir if chief else tempfile.mkdtemp()
    manager = tf.train.CheckpointManager(checkpoint, save_dir,
                                         max_to_keep=None)
    last_path = None
    if manager.latest_checkpoint:
        last_path = newest_complete_checkpoint(config.run_dir)
        _continue(checkpoint, objects, last_path, config)
        logging.info("Continuing %s from %s (step %d)", config.run_dir,
                     last_path, int(step.numpy()))
    elif config.restore_path:
        warm_start(model, config.restore_path, config.restore_classifier)

    step_fn = make_train_step(model, optimizer, config.loss_mode, step)
    per_replica = config.batch_size // replicas

    @tf.function
    def train_step():
        # every replica dequeues its share of the batch from the one queue
        result = strategy.run(
            lambda: step_fn(*trainer.dequeue(per_replica)))

        def first_replica(value):
            return strategy.experimental_local_results(value)[0]

        return {"scalars": {k: strategy.reduce("MEAN", v, axis=None)
                            for k, v in result["scalars"].items()},
                "images": first_replica(result["images"]),
                "activations": {k: first_replica(v) for k, v in
                                result["activations"].items()}}

    writer = (tf.summary.create_file_writer(config.run_dir) if chief
              else tf.summary.create_noop_writer())
    conv1_1_kernel = model.encoder.get_layer("conv1_1").kernel

    logging.info(
        "Training %s on %d images of %d identities (%s, batch %d = %d x %d"
        "%s); writing to %s", dataset.name, len(ids), len(np.unique(ids)),
        config.loss_mode, config.batch_size,
        config.batch_size // config.images_per_id, config.images_per_id,
        f", {replicas} replicas of {per_replica}" if replicas > 1 else "",
        config.run_dir)

    def done():
        return (config.number_of_steps is not None
                and int(step.numpy()) >= config.number_of_steps)

    def save(reason):
        current = int(step.numpy())
        if not all(np.all(np.isfinite(v.numpy())) for v in model.variables):
            raise TrainingError(
                f"the weights are not finite at step {current}: not saving "
                f"them; {_kept(last_path)}")
        try:
            path = manager.save(checkpoint_number=current)
        except (OSError, tf.errors.OpError) as e:
            _remove_partial_checkpoint(config.run_dir, current)
            raise TrainingError(
                f"cannot save a checkpoint in {config.run_dir}: "
                f"{first_line(e)}; {_kept(last_path, 'is intact')}") from e
        logging.info("Saved checkpoint %s (%s)", path, reason)
        return path

    saved_step = int(step.numpy())
    try:
        if done():
            logging.warning("%s is at step %d, already at --number_of_steps="
                            "%d: nothing to train (raise --number_of_steps "
                            "to train on)", config.run_dir, saved_step,
                            config.number_of_steps)
            return TrainResult(saved_step, last_path if chief else None)
        with _StopSignal() as stop, trainer:
            if last_path is None:
                # the evaluator's baseline, the initial weights, once the
                # input is known to be readable
                trainer.wait_for(per_replica,
                                 stop=lambda: stop.received is not None)
                last_path = save("initial weights")
            now = time.time()
            last_save = last_summary = last_log = now
            log_step = int(step.numpy())
            first = True
            while not done() and stop.received is None:
                trainer.raise_if_failed()
                try:
                    result = train_step()
                except (tf.errors.OutOfRangeError, tf.errors.CancelledError):
                    trainer.raise_if_failed()
                    logging.info("The feed generator is exhausted")
                    break
                now = time.time()
                current = int(step.numpy())
                total = float(result["scalars"]["losses/total_loss"])
                if not np.isfinite(total):
                    raise TrainingError(_non_finite_message(
                        current, result["scalars"], last_path))
                finished = done()
                if first or finished or \
                        now - last_log >= config.log_interval_secs:
                    scalars = {k: float(v)
                               for k, v in result["scalars"].items()}
                    rate = (current - log_step) / max(now - last_log, 1e-9)
                    queue_fill = trainer.size() / trainer.capacity
                    _log_progress(config, current, scalars, rate, queue_fill)
                    if first or finished or \
                            now - last_summary >= config.save_summaries_secs:
                        write_summaries(writer, current, result, {
                            "learning_rate": config.learning_rate,
                            "queue/fill_fraction": queue_fill,
                            "performance/images_per_second":
                                rate * config.batch_size,
                            "input/unreadable_images": len(unreadable)},
                            conv1_1_kernel)
                        last_summary = now
                    last_log, log_step = now, current
                if now - last_save >= config.save_interval_secs:
                    last_path, saved_step, last_save = (
                        save("interval"), current, now)
                first = False
            if saved_step != int(step.numpy()):
                reason = ("stopped by " + signal.Signals(stop.received).name
                          if stop.received else "end of training")
                last_path = save(reason)
    finally:
        writer.close()
        if not chief:
            shutil.rmtree(save_dir, ignore_errors=True)
    # a worker's own checkpoints went with its scratch folder
    return TrainResult(int(step.numpy()), last_path if chief else None,
                       stop.received)


def _kept(last_path, state="is kept"):
    if last_path is None:
        return "no checkpoint of this run was saved before"
    return f"the last checkpoint {last_path} {state}"


def _non_finite_message(step, scalars, last_path):
    terms = ", ".join(f"{name[len('losses/'):]}={float(value):.4g}"
                      for name, value in sorted(scalars.items())
                      if name.startswith("losses/"))
    return (f"the loss is not finite at step {step} ({terms}); stopping "
            f"without saving: {_kept(last_path)}. A lower --learning_rate "
            "may help")


def _remove_partial_checkpoint(run_dir, step):
    """Remove what a failed save of ``ckpt-<step>`` left behind."""
    prefix = os.path.join(run_dir, f"ckpt-{step}")
    for path in tf.io.gfile.glob(prefix + "*"):
        if path == prefix + ".index" or path.startswith(
                (prefix + ".", prefix + "_temp")):
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)


def _log_progress(config, step, scalars, steps_per_second, queue_fill):
    total = config.number_of_steps
    chosen = scalars["losses/" + losses.loss_name(config.loss_mode)]
    extra = f"  accuracy {scalars['accuracy']:.3f}" if "accuracy" in scalars \
        else ""
    logging.info(
        "step %d%s  loss %.4f (%s %.4f, weight %.2e)%s  %.2f steps/s  "
        "%.1f images/s  queue %.0f%%", step, f"/{total}" if total else "",
        scalars["losses/total_loss"], config.loss_mode, chosen,
        scalars["losses/weight_loss"], extra, steps_per_second,
        steps_per_second * config.batch_size, 100.0 * queue_fill)


# Entry point ----------------------------------------------------------------

def define_flags(dataset):
    """Define the command-line flags (the original's names and defaults)."""
    flags.DEFINE_enum_class("mode", Mode.TRAIN, Mode, "What to do.")
    flags.DEFINE_string("dataset_dir", dataset.default_dataset_dir,
                        "Path to the dataset.")
    if dataset.default_sdk_dir is not None:
        flags.DEFINE_string("sdk_dir", dataset.default_sdk_dir,
                            "Path to the official evaluation kit.")
    flags.DEFINE_enum("loss_mode", "cosine-softmax", list(losses.LOSS_MODES),
                      "The loss to train with.")
    flags.DEFINE_integer("batch_size", 128, "Images per training batch.")
    flags.DEFINE_integer("images_per_id", 4,
                         "Images of each identity in a training batch.")
    flags.DEFINE_float("learning_rate", 1e-3, "Adam learning rate.")
    # absl.logging already defines --log_dir (for log files it only writes
    # when asked to); the original's flag of that name takes it over.
    FLAGS.set_default("log_dir", f"./output/{dataset.name}/")
    FLAGS["log_dir"].help = "Checkpoints and summaries go to log_dir/run_id."
    flags.DEFINE_string("run_id", None,
                        "Name of the run; random 6 characters if not given.")
    flags.DEFINE_string("eval_log_dir", f"./output/{dataset.name}_eval/",
                        "Evaluation summaries go to eval_log_dir/run_id.")
    flags.DEFINE_integer("number_of_steps", None,
                         "Stop at this global step; unset trains forever.")
    flags.DEFINE_string("restore_path", None,
                        "Checkpoint (or directory) to initialise from.")
    flags.DEFINE_boolean(
        "restore_classifier", True,
        "With --restore_path, also restore the classifier; "
        "--norestore_classifier fine-tunes on other identities.")
    flags.DEFINE_integer("num_enqueue_threads",
                         queued_trainer.DEFAULT_NUM_THREADS,
                         "Producer threads filling the input queue.")
    flags.DEFINE_integer("queue_capacity", queued_trainer.DEFAULT_CAPACITY,
                         "Capacity of the input queue in images.")
    flags.DEFINE_float("save_interval_secs", 300.0,
                       "Seconds between checkpoints.")
    flags.DEFINE_float("save_summaries_secs", 60.0,
                       "Seconds between TensorBoard summaries.")
    flags.DEFINE_float("log_interval_secs", 10.0,
                       "Seconds between progress log lines.")
    flags.DEFINE_enum("strategy", "none", list(STRATEGIES),
                      "Train on several devices (mirrored) or machines "
                      "(multi_worker, configured by TF_CONFIG).")
    flags.DEFINE_string("devices", None,
                        "mirrored: comma-separated devices, e.g. "
                        "/gpu:0,/gpu:1; default: all GPUs (else the CPU).")
    flags.DEFINE_enum("mixed_precision", "none",
                      list(MIXED_PRECISION_POLICIES),
                      "Compute in bfloat16 or float16 (with loss scaling); "
                      "weights, features and losses stay float32.")
    flags.DEFINE_float("max_unreadable_fraction", 0.01,
                       "Skip unreadable training images up to this fraction "
                       "of them; more stops the run.")
    # --mode=eval
    flags.DEFINE_float("eval_interval_secs", 60.0,
                       "eval: seconds between polls for a new checkpoint.")
    flags.DEFINE_integer("max_num_evaluations", None,
                         "eval: stop after this many evaluations.")
    flags.DEFINE_float("eval_timeout_secs", None,
                       "eval: stop when no new checkpoint appeared for this "
                       "long (with --number_of_steps: also stop once that "
                       "step is evaluated).")
    # --mode=test
    flags.DEFINE_string("output_json", None, "test: also write the numbers "
                        "to this JSON file.")
    flags.DEFINE_boolean("flip_test", False, "test: add the features of the "
                         "mirrored images (sum, re-normalised).")
    flags.DEFINE_string("rank_image", None, "test: draw queries and their "
                        "top 10 gallery entries into this PNG file.")
    # --mode=freeze, finalize, saved_model
    flags.DEFINE_string(
        "output", None, "freeze: the .pb file (default <dataset>.pb); "
        "finalize: the checkpoint prefix (default <dataset>.ckpt); "
        "saved_model: the folder (default <dataset>_saved_model).")


def config_from_flags():
    return TrainConfig(
        dataset_dir=FLAGS.dataset_dir, log_dir=FLAGS.log_dir,
        run_id=FLAGS.run_id or random_run_id(), loss_mode=FLAGS.loss_mode,
        batch_size=FLAGS.batch_size, images_per_id=FLAGS.images_per_id,
        learning_rate=FLAGS.learning_rate,
        number_of_steps=FLAGS.number_of_steps,
        restore_path=FLAGS.restore_path,
        restore_classifier=FLAGS.restore_classifier,
        num_enqueue_threads=FLAGS.num_enqueue_threads,
        queue_capacity=FLAGS.queue_capacity,
        save_interval_secs=FLAGS.save_interval_secs,
        save_summaries_secs=FLAGS.save_summaries_secs,
        log_interval_secs=FLAGS.log_interval_secs,
        max_unreadable_fraction=FLAGS.max_unreadable_fraction,
        mixed_precision=FLAGS.mixed_precision, strategy=FLAGS.strategy,
        devices=FLAGS.devices)


def restore_path_from_flags():
    """``--restore_path``, else the latest checkpoint of ``--run_id``."""
    if FLAGS.restore_path is None and FLAGS.run_id is not None:
        return os.path.join(FLAGS.log_dir, FLAGS.run_id)
    return FLAGS.restore_path


def run_mode(dataset):
    """Run the mode the flags ask for; returns the process exit status."""
    mode = FLAGS.mode
    if mode is Mode.TRAIN:
        result = train(dataset, config_from_flags())
        if result.signal is not None:
            print(f"Stopped by {signal.Signals(result.signal).name} at step "
                  f"{result.step}; checkpoint {result.checkpoint}",
                  file=sys.stderr)
            return 128 + result.signal
        return 0
    if mode is Mode.EVAL:
        if FLAGS.run_id is None:
            raise UsageError("--mode=eval needs --run_id: the training run "
                             "in --log_dir to evaluate")
        evaluation.evaluate_checkpoints(dataset, evaluation.EvalConfig(
            dataset_dir=FLAGS.dataset_dir, log_dir=FLAGS.log_dir,
            run_id=FLAGS.run_id, eval_log_dir=FLAGS.eval_log_dir,
            loss_mode=FLAGS.loss_mode, batch_size=FLAGS.batch_size,
            eval_interval_secs=FLAGS.eval_interval_secs,
            max_num_evaluations=FLAGS.max_num_evaluations,
            eval_timeout_secs=FLAGS.eval_timeout_secs,
            number_of_steps=FLAGS.number_of_steps))
        return 0
    if mode in (Mode.TEST, Mode.EXPORT) and dataset.read_test is None:
        raise UsageError(f"--mode={mode.value}: {dataset.name} data has no "
                         "standard test split; --mode=eval gives validation "
                         "numbers")
    if mode is Mode.TEST:
        evaluation.run_test(
            dataset, restore_path_from_flags(), FLAGS.dataset_dir,
            FLAGS.loss_mode, batch_size=FLAGS.batch_size,
            flip_test=FLAGS.flip_test, output_json=FLAGS.output_json,
            rank_image=FLAGS.rank_image)
        return 0
    if mode is Mode.EXPORT:
        output_dir = (FLAGS.sdk_dir if dataset.default_sdk_dir is not None
                      else FLAGS.dataset_dir)
        for path in evaluation.export_features(
                dataset, restore_path_from_flags(), FLAGS.dataset_dir,
                output_dir, batch_size=FLAGS.batch_size):
            print(f"wrote {path}")
        return 0
    if mode in EXPORTERS:
        write, check, default = EXPORTERS[mode]
        output = FLAGS.output or default.format(name=dataset.name)
        check(output)  # before the work: a bad path fails at once
        encoder, path = checkpoints.load_encoder(restore_path_from_flags(),
                                                 dataset.image_shape)
        print(f"wrote {write(encoder, output, dataset.image_shape)} "
              f"(encoder of {path})")
        return 0
    raise UsageError(f"--mode={mode.value}: unknown mode")


# mode -> (writer(encoder, output, image_shape), check(output), default
# output); check refuses a path the writer would not replace
EXPORTERS = {
    Mode.FREEZE: (export.freeze, lambda output: files.check_output(
        output, export.FROZEN_GRAPH), "{name}.pb"),
    Mode.FINALIZE: (lambda encoder, output, _: export.write_encoder_checkpoint(
        encoder, output), export.check_checkpoint_prefix, "{name}.ckpt"),
    Mode.SAVED_MODEL: (export.write_saved_model, lambda output:
                       files.check_output(output, export.SAVED_MODEL),
                       "{name}_saved_model"),
}


def main(dataset, make_dataset=None, extra_flags=None):
    """Entry point: define flags, parse, run; user errors become one line.

    ``make_dataset(dataset, FLAGS)``, if given, completes the dataset from
    the parsed flags (``train_custom.py``); ``extra_flags()`` defines flags
    of its own.
    """
    define_flags(dataset)
    if extra_flags is not None:
        extra_flags()

    def _main(argv):
        if len(argv) > 1:
            print(f"error: unexpected arguments: {' '.join(argv[1:])}; "
                  "flags are written --name=value", file=sys.stderr)
            return 2
        try:
            spec = dataset if make_dataset is None else make_dataset(dataset,
                                                                     FLAGS)
            return run_mode(spec)
        except UsageError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except TrainingError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1

    app.run(_main, flags_parser=parse_flags)

