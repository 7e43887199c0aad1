"""The training loop: from the training split to checkpoints.

:func:`train` reads the split, starts the queued input pipeline, builds
the model (``model.py``) under the ``tf.distribute`` strategy
(``distribute.py``), continues the run from its newest complete checkpoint
or warm-starts it, and steps until ``--number_of_steps`` or a stop signal,
with checkpoints, summaries (``summaries.py``) and progress lines on their
own intervals.
"""

import dataclasses
import os
import shutil
import signal
import string
import sys
import tempfile
import time
from typing import Optional

import numpy as np
import tensorflow as tf
from absl import logging

from cosine_metric_learning import checkpoints, distribute, model as model_lib
from cosine_metric_learning import features as features_lib
from cosine_metric_learning import image_cache, queued_trainer, release
from cosine_metric_learning import run_settings, sampling
from cosine_metric_learning import step_control, summaries
from cosine_metric_learning.errors import TrainingError, UsageError
from cosine_metric_learning.errors import first_line
from cosine_metric_learning.datasets import spec as dataset_spec
from cosine_metric_learning.datasets import util as dataset_util
from cosine_metric_learning.nets.deep_sort import network_definition


@dataclasses.dataclass
class TrainResult:
    step: int
    checkpoint: Optional[str]
    signal: Optional[int] = None  # the signal that stopped the run


def random_run_id(length=6):
    """A random run id of lower-case letters and digits, as the original."""
    alphabet = np.array(list(string.ascii_lowercase + string.digits))
    return "".join(np.random.choice(alphabet, length))


# Before the first step ---------------------------------------------------------

def read_training_data(dataset, config):
    """The training split (validation identities held out) as arrays."""
    split = dataset.read_train(config.dataset_dir)
    is_train, _ = dataset_util.split_validation(split.ids)
    filenames, ids = split.filenames[is_train], split.ids[is_train]
    too_large = ids[(ids < 0) | (ids >= dataset.num_classes)]
    if len(too_large):
        raise UsageError(
            f"person id {too_large[0]} in {config.dataset_dir} is outside "
            f"0..{dataset.num_classes - 1} for {dataset.name}")
    return filenames, ids


def _continues_recorded_run(dataset, config):
    """True if ``run_dir`` holds checkpoints and settings that match the
    run's; UsageError if its settings or its custom data's label numbering
    differ. Writes nothing."""
    settings = run_settings.settings(dataset.name, config.loss_mode,
                                     dataset.image_shape, dataset.network)
    if tf.train.get_checkpoint_state(config.run_dir) is None:
        return False
    if dataset.label_names is not None:
        run_settings.check_label_map(config.run_dir, dataset.label_names)
    return run_settings.check(config.run_dir, settings)


def prepare_run_dir(dataset, config, chief):
    """Create ``log_dir/run_id``; check or record the run's settings and
    write the label map of custom data."""
    try:
        os.makedirs(config.run_dir, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--log_dir={config.log_dir}: cannot create "
                         f"{config.run_dir}: {e.strerror}") from e
    if not os.access(config.run_dir, os.W_OK):
        raise UsageError(f"--log_dir={config.log_dir}: {config.run_dir} is "
                         "not writable")
    if not _continues_recorded_run(dataset, config) and chief:
        run_settings.record(config.run_dir, {
            **run_settings.settings(dataset.name, config.loss_mode,
                                    dataset.image_shape, dataset.network),
            "recipe": config.recipe,
            "recipe_settings": config.recipe_settings,
            # every setting of the run, as it started
            "config": run_settings.as_json(config)})
    if dataset.label_names is not None:
        path = run_settings.write_label_map(config.run_dir,
                                            dataset.label_names,
                                            config.dataset_dir)
        logging.info("Label numbering of the %d identities: %s",
                     len(dataset.label_names), path)


# The run -----------------------------------------------------------------------

class _Run:
    """A training run's state: model, optimizer, step, checkpoints, writer."""

    def __init__(self, dataset, config, strategy, chief, trainer):
        self.config, self.strategy, self.chief = config, strategy, chief
        self.trainer, self.seen_together = trainer, dataset.seen_together
        with strategy.scope():
            self.model = model_lib.create_model(
                dataset, config.loss_mode, config.mixed_precision,
                config.recipe_settings["initial_logit_scale"])
            model_lib.train_from(self.model.encoder, config.train_from)
            self.optimizer = model_lib.create_optimizer(
                config.learning_rate, config.mixed_precision,
                config.tricks.warmup_steps)
            self.optimizer.build(self.model.trainable_variables)
            self.step = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="global_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        objects = {"step": self.step, "encoder": self.model.encoder,
                   "optimizer": self.optimizer}
        if self.model.classifier is not None:
            objects["classifier"] = self.model.classifier
        checkpoint = tf.train.Checkpoint(**objects)
        # workers other than the chief save to a folder of their own (their
        # part of a multi-worker save), which is thrown away
        self.save_dir = config.run_dir if chief else tempfile.mkdtemp()
        self.manager = tf.train.CheckpointManager(checkpoint, self.save_dir,
                                                  max_to_keep=None)
        self.last_path = None
        # a classifier neither continued nor restored starts at random
        self.new_classifier = self.model.classifier is not None and not (
            self.manager.latest_checkpoint
            or (config.restore_path and config.restore_classifier))
        if self.manager.latest_checkpoint:
            self.last_path = checkpoints.newest_complete(config.run_dir)
            checkpoints.continue_run(checkpoint, objects, self.last_path,
                                     config.run_dir, config.loss_mode)
            logging.info("Continuing %s from %s (step %d)", config.run_dir,
                         self.last_path, self.current_step())
        elif config.restore_path:
            checkpoints.warm_start(self.model, config.restore_path,
                                   config.restore_classifier)
        self.per_replica = config.batch_size // strategy.num_replicas_in_sync
        # what the replicas of this process dequeue per step
        self.local_batch = self.per_replica * distribute.local_replicas(
            strategy)
        # the step that returns what summaries show (a sample of the
        # activations, a few images) runs only when a summary is due; the
        # workers of a multi-worker run always run it, since their clocks
        # cannot agree on when one is due and each step's collectives must
        self.summary_step = self._distributed_step(summaries=True)
        self.train_step = (self.summary_step
                           if config.strategy == "multi_worker"
                           else self._distributed_step(summaries=False))
        self.writer = (tf.summary.create_file_writer(config.run_dir)
                       if chief else tf.summary.create_noop_writer())

    def _distributed_step(self, summaries):
        step_fn = model_lib.make_train_step(self.model, self.optimizer,
                                            self.config.loss_mode, self.step,
                                            summaries, self.config.tricks,
                                            self.seen_together)
        strategy, trainer, size = self.strategy, self.trainer, \
            self.per_replica

        @tf.function
        def train_step():
            # every replica dequeues its share of the batch from the queue
            result = strategy.run(lambda: step_fn(*trainer.dequeue(size)))
            scalars = {k: strategy.reduce("MEAN", v, axis=None)
                       for k, v in result["scalars"].items()}
            # what summaries show comes from the first replica
            return {"scalars": scalars, **{
                key: tf.nest.map_structure(
                    lambda v: strategy.experimental_local_results(v)[0],
                    result[key])
                for key in ("images", "activations") if key in result}}

        return train_step

    def current_step(self):
        return int(self.step.numpy())

    def done(self):
        total = self.config.number_of_steps
        return total is not None and self.current_step() >= total

    def is_last_step(self):
        """Whether the next step is the run's last."""
        total = self.config.number_of_steps
        return total is not None and self.current_step() + 1 >= total

    def save(self, reason):
        """Save the current step; TrainingError if it cannot be saved."""
        current = self.current_step()
        if not all(np.all(np.isfinite(v.numpy()))
                   for v in self.model.variables):
            raise TrainingError(
                f"the weights are not finite at step {current}: not saving "
                f"them; {_kept(self.last_path)}")
        try:
            path = self.manager.save(checkpoint_number=current)
        except (OSError, tf.errors.OpError) as e:
            checkpoints.remove_partial(self.config.run_dir, current)
            raise TrainingError(
                f"cannot save a checkpoint in {self.config.run_dir}: "
                f"{first_line(e)}; {_kept(self.last_path, 'is intact')}"
            ) from e
        logging.info("Saved checkpoint %s (%s)", path, reason)
        self.last_path = path
        return path

    def step_once(self, summary=False):
        """Train one step, with what summaries show if ``summary``; None
        when the feed generator is exhausted."""
        self.trainer.raise_if_failed()
        try:
            result = (self.summary_step if summary else self.train_step)()
        except (tf.errors.OutOfRangeError, tf.errors.CancelledError):
            self.trainer.raise_if_failed()
            logging.info("The feed generator is exhausted")
            return None
        total = float(result["scalars"]["losses/total_loss"])
        if not np.isfinite(total):
            raise TrainingError(_non_finite_message(
                self.current_step(), result["scalars"], self.last_path))
        return result

    def report(self, result, rate, summary, feed):
        """The progress line and, if ``summary``, TensorBoard summaries;
        ``feed`` is ``(scalars, steps)`` of :class:`InputMonitor`."""
        config, current = self.config, self.current_step()
        scalars = {k: float(v) for k, v in result["scalars"].items()}
        queue_fill = self.trainer.size() / self.trainer.capacity
        feed_scalars, feed_steps = feed
        summaries.log_progress(config, current, scalars, rate, queue_fill,
                               feed_scalars["queue/input_wait_fraction"])
        warning = summaries.starvation_warning(feed_scalars, feed_steps)
        if warning:
            logging.warning("%s", warning)
        if summary:
            summaries.write_summaries(self.writer, current, result, {
                "learning_rate": self.learning_rate(),
                "queue/fill_fraction": queue_fill, **feed_scalars,
                "performance/images_per_second": rate * config.batch_size,
                "input/unreadable_images": len(self.trainer.unreadable)},
                self.model.encoder.get_layer("conv1_1").kernel)

    def learning_rate(self):
        """The optimizer's learning rate now (warm-up included)."""
        rate = self.optimizer.learning_rate
        return float(rate.numpy() if hasattr(rate, "numpy") else rate)

    def close(self):
        self.writer.close()
        if not self.chief:
            shutil.rmtree(self.save_dir, ignore_errors=True)


def _loop(run, stop):
    """Step until done or stopped, with the periodic actions; the last step
    is saved."""
    config = run.config
    if run.last_path is None:
        # the evaluator's baseline, the initial weights, once the input is
        # known to be readable
        run.trainer.wait_for(run.per_replica,
                             stop=lambda: stop.received is not None)
        run.save("initial weights")
    saved_step = log_step = run.current_step()
    now = time.time()
    logs = step_control.Periodic(config.log_interval_secs, now)
    writes = step_control.Periodic(config.save_summaries_secs, now)
    saves = step_control.Periodic(config.save_interval_secs, now)
    monitor = queued_trainer.InputMonitor(run.trainer, now)
    first = True
    while not run.done() and stop.received is None:
        monitor.before_step(run.local_batch,
                            stop=lambda: stop.received is not None)
        if stop.received is not None:
            break
        # the first and last steps are shown; whether a summary is due is
        # known before the step, which then returns what it shows
        now = time.time()
        edge = first or run.is_last_step()
        summary = logs.due(now, edge) and writes.due(now, edge)
        result = run.step_once(summary)
        if result is None:
            break
        now, current = time.time(), run.current_step()
        if summary or logs.due(now, edge):
            rate = (current - log_step) / max(now - logs.last, 1e-9)
            run.report(result, rate, summary, monitor.interval(now))
            if summary:
                writes.ran(now)
            logs.ran(now)
            log_step = current
        if saves.due(now):
            run.save("interval")
            saved_step = current
            saves.ran(now)
        first = False
    if saved_step != run.current_step():
        run.save("stopped by " + signal.Signals(stop.received).name
                 if stop.received else "end of training")


def network_of_run(dataset, config):
    """The dataset with the network a new run trains: ``--bnneck`` (or
    its recipe's) turns the paper's into ``deep_sort_bnneck``. A run
    that continues, or starts from a model of another network, keeps its
    network; asking for a BNNeck there is one line."""
    if not config.recipe_settings["bnneck"]:
        return dataset
    bnneck = network_definition.DEEP_SORT_BNNECK.name
    if dataset.network == network_definition.DEEP_SORT.name and not (
            config.restore_path or tf.train.get_checkpoint_state(
                config.run_dir)):
        return dataclasses.replace(dataset, network=bnneck)
    if dataset.network != bnneck:
        raise UsageError(
            f"--bnneck: the network is {dataset.network} (the run's, or the "
            "model's it starts from), which has no BNNeck; train a new run "
            "without --restore_path, or pass --nobnneck")
    return dataset


def train(dataset, config):
    """Train until ``number_of_steps`` or a stop signal.

    Checkpoints go to ``log_dir/run_id`` every ``save_interval_secs`` and at
    the end; a rerun with the same directory continues from its newest
    complete checkpoint and step.

    Returns
    -------
    TrainResult
    """
    config.validate()
    dataset = network_of_run(dataset, config)
    strategy = distribute.create_strategy(config.strategy, config.devices)
    replicas = strategy.num_replicas_in_sync
    distribute.check_batch_split(config.batch_size, config.images_per_id,
                                 replicas)
    chief = distribute.is_chief(strategy)
    filenames, ids = read_training_data(dataset, config)
    _continues_recorded_run(dataset, config)  # refuse other settings now
    # the run's folder is written once the input is ready (a cache refused
    # by --cache_max_gb leaves no run behind)
    trainer = _input_pipeline(dataset, config, filenames, ids)
    prepare_run_dir(dataset, config, chief)
    run = _Run(dataset, config, strategy, chief, trainer)
    logging.info(
        "Training %s on %d images of %d identities (%s, batch %d = %d x %d"
        "%s); writing to %s", dataset.name, len(ids), len(np.unique(ids)),
        config.loss_mode, config.batch_size,
        config.batch_size // config.images_per_id, config.images_per_id,
        f", {replicas} replicas of {run.per_replica}" if replicas > 1 else "",
        config.run_dir)
    stop = step_control.StopSignal()
    try:
        if run.done():
            logging.warning("%s is at step %d, already at --number_of_steps="
                            "%d: nothing to train (raise --number_of_steps "
                            "to train on)", config.run_dir,
                            run.current_step(), config.number_of_steps)
        else:
            with stop, trainer:
                # a stop while imprinting keeps the imprinted start
                if config.tricks.imprint and run.new_classifier:
                    _imprint(run.model, dataset.image_shape, filenames, ids,
                             config.batch_size)
                _loop(run, stop)
    finally:
        run.close()
    # a worker's own checkpoints went with its scratch folder
    return TrainResult(run.current_step(), run.last_path if chief else None,
                       stop.received)


def _imprint(model, image_shape, filenames, ids, batch_size):
    """Start the classifier at the identities' mean features
    (:func:`model.imprint`) of up to :data:`model.IMPRINT_IMAGES` training
    images each, chosen at random (seeded); unreadable ones are left
    out."""
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    chosen = np.concatenate([
        rng.permutation(np.flatnonzero(ids == label))[
            :model_lib.IMPRINT_IMAGES]
        for label in np.unique(ids)])
    encode = features_lib.make_encode_fn(model.encoder, image_shape,
                                         batch_size)
    features, bad = features_lib.encode_or_blame(
        encode, filenames[chosen], image_shape)
    if bad:
        chosen = np.delete(chosen, sorted(bad))
        if not len(chosen):  # the trainer names them and stops
            logging.warning("No image to imprint the classifier with: it "
                            "starts at random")
            return
        features = encode(filenames[chosen])
    count = model_lib.imprint(model.classifier, features, ids[chosen])
    logging.info("Imprinted the classifier's %d identities from %d images "
                 "in %.1f s", count, len(chosen),
                 time.perf_counter() - start)


def _input_pipeline(dataset, config, filenames, ids):
    """The QueuedTrainer over the training files, or over their decoded
    images with ``--cache_images``."""
    max_unreadable = int(config.max_unreadable_fraction * len(filenames))
    if config.cache_images:
        cache, kept = image_cache.fill(filenames, dataset.image_shape,
                                       config.cache_max_gb, max_unreadable)
        rows = sampling.random_sample_identities_forever(
            config.batch_size, config.images_per_id, np.arange(len(kept)),
            ids[kept], seen_together=dataset.seen_together)
        feed = image_cache.feed(cache, rows)
        # the skipped files, for the summary
        unreadable = {str(f) for f in np.delete(filenames, kept)}
        input_spec = tf.TensorSpec((None,) + cache.shape[1:], tf.uint8)
    else:
        unreadable = set()  # filled by the producers, skipped by the sampler
        feed = sampling.random_sample_identities_forever(
            config.batch_size, config.images_per_id, filenames, ids,
            exclude=unreadable, seen_together=dataset.seen_together)
        input_spec = None  # file names
    return queued_trainer.QueuedTrainer(
        feed, dataset.image_shape, training=True,
        num_threads=config.num_enqueue_threads,
        capacity=config.queue_capacity, input_spec=input_spec,
        unreadable=unreadable, max_unreadable=max_unreadable)


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


def run(dataset, config, image_shape=None):
    """``--mode=train``: :func:`train` the network of the run, with a
    line on stderr where a signal stopped it; returns the exit status
    (0, or 128 + the signal).

    A continued run trains its own network at its own input size (unless
    ``image_shape`` says otherwise); a new run trains the network of the
    model it starts from (``config.restore_path``), at a TF1 release's
    input size. The training identities are numbered as the dataset's
    spec asks (:func:`datasets.spec.relabelled`)."""
    dataset = dataset_spec.relabelled(dataset, config.dataset_dir)
    described = run_settings.describe(config.run_dir) if os.path.isdir(
        config.run_dir) else None
    if described is not None:
        dataset = dataclasses.replace(
            dataset, network=described.network,
            image_shape=described.image_shape if image_shape is None
            else dataset.image_shape)
    elif config.restore_path:
        dataset = dataclasses.replace(
            dataset, network=checkpoints.network_of(config.restore_path))
        if release.is_tf1(config.restore_path):
            dataset = dataclasses.replace(dataset, image_shape=(
                release.input_shape(config.restore_path, image_shape)))
    result = train(dataset, config)
    if result.signal is not None:
        print(f"Stopped by {signal.Signals(result.signal).name} at step "
              f"{result.step}; checkpoint {result.checkpoint}",
              file=sys.stderr)
        return 128 + result.signal
    return 0
