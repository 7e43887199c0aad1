"""The checkpoint-polling evaluator (``--mode=eval``).

It runs beside training on the CPU, evaluates each new checkpoint of a run
on the validation identities and writes to TensorBoard at the checkpoint's
step: CMC, mAP and mINP, the Deep SORT gate, histograms of same- and
different-identity cosine distances, and a ranked-retrieval picture of
fixed validation probes.
"""

import os
import time

import numpy as np
import tensorflow as tf
from absl import logging
from tensorboard.compat.proto import event_pb2

from cosine_metric_learning import checkpoints, features, metrics
from cosine_metric_learning import backends, mot_sequences, pictures
from cosine_metric_learning import tracking
from cosine_metric_learning import run_settings
from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning.errors import TrainingError, UsageError
from cosine_metric_learning.errors import first_line
from cosine_metric_learning.datasets import util as dataset_util

PRECISION_TAG = "Precision@1"
RANKED_RETRIEVAL_TAG = "validation/ranked_retrieval"
MAX_ATTEMPTS = 3  # reads of a checkpoint before it is skipped


def evaluated_steps(eval_dir):
    """Steps that already have a ``Precision@1`` value in ``eval_dir``.

    Read back from the event files, so a restarted evaluator does not write
    a second value for a step.
    """
    steps = set()
    if not tf.io.gfile.isdir(eval_dir):
        return steps
    for name in tf.io.gfile.listdir(eval_dir):
        if "tfevents" not in name:
            continue
        try:
            for record in tf.data.TFRecordDataset(os.path.join(eval_dir,
                                                               name)):
                event = event_pb2.Event.FromString(record.numpy())
                if any(v.tag == PRECISION_TAG for v in event.summary.value):
                    steps.add(int(event.step))
        except tf.errors.DataLossError:  # a truncated last record
            logging.warning("Skipped the damaged end of %s", name)
    return steps


def read_validation_data(dataset, dataset_dir):
    """File names, ids and cameras of the held-out validation identities."""
    split = dataset.read_train(dataset_dir)
    _, is_validation = dataset_util.split_validation(split.ids)
    if not np.any(is_validation):
        raise UsageError(f"{dataset_dir}: too few training identities "
                         f"({len(np.unique(split.ids))}) to hold out 10 % "
                         "for validation; at least 10 are needed")
    return (split.filenames[is_validation], split.ids[is_validation],
            split.cameras[is_validation])


def pending_checkpoints(run_dir, handled):
    """Checkpoints of a run not yet in ``handled``, oldest first."""
    state = tf.train.get_checkpoint_state(run_dir)
    if state is None:
        return []
    return [p for p in state.all_model_checkpoint_paths if p not in handled]


class _Evaluator:
    """The validation data, the encoder and what has been evaluated."""

    def __init__(self, dataset, config, image_shape=None):
        self.dataset, self.config = dataset, config
        self.run_dir = config.run_dir
        self.eval_dir = os.path.join(config.eval_log_dir, config.run_id)
        self.filenames, self.ids, self.cameras = read_validation_data(
            dataset, config.dataset_dir)
        # built at the first checkpoint, at the input shape of the run's
        # run.json (written before it)
        self.requested_shape = image_shape
        self.encoder = self.encode = self.image_shape = None
        # --track_sequences: read and checked now, tracked at each step
        self.sequences = []
        if config.track_sequences:
            tracking.require_tracker()
            tracking.require_trackeval()
            self.sequences = mot_sequences.read_sequences(
                config.track_sequences)
            for sequence in self.sequences:
                mot_sequences.check_ground_truth(sequence)
                logging.info("%s", tracking.describe_scores(
                    sequence, [("Deep SORT's --min_confidence",
                                tracking.DEFAULTS["min_confidence"])]))
                tracking.detection_rows(sequence, "det",
                                        tracking.DEFAULTS["min_confidence"],
                                        tracking.DEFAULTS["nms_max_overlap"])
        self.done_steps = evaluated_steps(self.eval_dir)
        self.writer = tf.summary.create_file_writer(self.eval_dir)
        self.results, self.failures, self.handled = [], {}, set()
        self.last_new = time.time()
        self.final_step_done = False

    def encode_readable(self):
        """Features of the validation images; an unreadable one is named
        and left out of this and every later evaluation."""
        while True:
            try:
                values, bad = features.encode_or_blame(
                    self.encode, self.filenames, self.image_shape)
            except tf.errors.OpError as e:  # not the checkpoint's fault
                raise TrainingError("cannot encode the validation images: "
                                    f"{first_line(e)}") from e
            if not bad:
                return values
            for index, error in bad.items():
                logging.warning("Skipping unreadable validation image '%s': "
                                "%s", self.filenames[index], first_line(error))
            keep = np.ones(len(self.filenames), bool)
            keep[list(bad)] = False
            if not np.any(keep):
                raise TrainingError("none of the validation images is "
                                    "readable")
            self.filenames, self.ids, self.cameras = (
                self.filenames[keep], self.ids[keep], self.cameras[keep])

    def restore(self, path):
        """``(step, restored)``: the step of a checkpoint, and whether its
        encoder was restored (not when the step was evaluated before)."""
        step = checkpoints.checkpoint_step(path)
        if step in self.done_steps:
            logging.info("Step %d was evaluated before: skipping %s", step,
                         path)
            return step, False
        checkpoints.restore(path, encoder=self.encoder)
        return step, True

    def build_encoder(self):
        """The encoder at the run's input shape (its run.json is written
        before its first checkpoint); an image_shape that contradicts it
        is raised."""
        self.encoder = checkpoints.run_encoder(
            run_settings.describe(self.run_dir), self.requested_shape)
        self.image_shape = tuple(self.encoder.input_shape[1:])
        self.encode = features.make_encode_fn(
            self.encoder, self.image_shape, self.config.batch_size)
        # the same network as a tracker's encoder of uint8 BGR patches
        self.patch_encoder = encoder_lib.Encoder(backends.keras_backend(
            self.encoder, self.run_dir))

    def evaluate(self, step):
        """Evaluate the restored encoder of ``step``."""
        features = self.encode_readable()
        values = metrics.validation_cmc(
            features, self.ids, self.cameras,
            self.dataset.num_validation_galleries)
        pairs, same = metrics.pair_distances(features, self.ids)
        # the --max_cosine_distance Deep SORT should use with it
        values["gate/max_cosine_distance"] = metrics.equal_error_gate(
            pairs, same)["threshold"]
        tracked = tracking.track_and_score(self.patch_encoder,
                                           self.sequences)
        for name in ("HOTA", "IDF1", "IDSW"):
            if tracked is not None:
                values[f"tracking/{name}"] = tracked[name]
        picture = self.ranked_retrieval(features)
        with self.writer.as_default(step=step):
            for name, value in values.items():
                tf.summary.scalar(name, value)
            tf.summary.histogram("cosine_distance/same_identity", pairs[same])
            tf.summary.histogram("cosine_distance/different_identity",
                                 pairs[~same])
            tf.summary.image(RANKED_RETRIEVAL_TAG, picture[None])
        self.writer.flush()
        self.done_steps.add(step)
        self.results.append((step, values))
        logging.info("step %d: %s", step, "  ".join(
            f"{k} {v:.3f}" for k, v in values.items()))

    def ranked_retrieval(self, features, num_probes=8, top=10):
        """The picture of fixed probes of the first validation gallery and
        their ``top`` nearest gallery images, as a uint8 array."""
        probes, gallery = metrics.single_shot_gallery(
            self.ids, self.cameras, metrics.VALIDATION_GALLERY_SEED)
        distances = metrics.distance_matrix(features[probes],
                                            features[gallery])
        nothing = np.zeros(len(gallery), bool)
        rows = [(self.filenames[probes[p]], [
            (self.filenames[gallery[g]], self.ids[gallery[g]] ==
             self.ids[probes[p]])
            for g in pictures.nearest(distances[p], nothing, top)])
            for p in pictures.fixed_sample(len(probes), num_probes)]
        return np.asarray(pictures.ranked_retrieval(rows))

    def try_evaluate(self, path):
        """Evaluate ``path``; a checkpoint that cannot be read is tried
        again at the next poll and skipped after MAX_ATTEMPTS. The wait
        for the next checkpoint counts from the end of this attempt, as
        TF1's checkpoint iterator counted it: a slow evaluation does not
        eat into it."""
        try:
            self._try_evaluate(path)
        finally:
            self.last_new = time.time()

    def _try_evaluate(self, path):
        if self.encoder is None:
            self.build_encoder()
        try:
            step, restored = self.restore(path)
        except (tf.errors.OpError, UsageError, ValueError) as e:
            # deleted or still being written: try again at the next poll
            self.failures[path] = self.failures.get(path, 0) + 1
            logging.warning("Cannot read checkpoint %s (attempt %d of %d): "
                            "%s", path, self.failures[path], MAX_ATTEMPTS,
                            first_line(e))
            if self.failures[path] >= MAX_ATTEMPTS:
                logging.warning("Skipping %s", path)
                self.handled.add(path)
            return
        if restored:  # what fails here is not the checkpoint's doing
            self.evaluate(step)
        self.handled.add(path)
        total = self.config.number_of_steps
        self.final_step_done |= total is not None and step >= total

    def stop_reason(self):
        config, waited = self.config, time.time() - self.last_new
        if config.max_num_evaluations is not None and \
                len(self.results) >= config.max_num_evaluations:
            return f"{len(self.results)} evaluations done"
        if self.final_step_done:
            return (f"evaluated the training run's last step "
                    f"({config.number_of_steps})")
        if config.eval_timeout_secs is not None and \
                waited >= config.eval_timeout_secs:
            return f"no new checkpoint for {waited:.0f} s"
        return None


def evaluate_checkpoints(dataset, config, image_shape=None):
    """Poll ``log_dir/run_id`` and evaluate each new checkpoint once, oldest
    first, at the run's input shape (``image_shape``, if given, must agree
    with it).

    Stops after ``max_num_evaluations`` evaluations, after a checkpoint at
    or beyond ``number_of_steps``, or when no new checkpoint appeared for
    ``eval_timeout_secs``; with none of these it polls until interrupted.

    Returns
    -------
    list of (step, dict)
        The metrics of every checkpoint evaluated by this call.
    """
    config.validate()
    run = _Evaluator(dataset, config, image_shape)
    logging.info("Evaluating checkpoints of %s on %d images of %d validation "
                 "identities (cosine distance, %d galleries); summaries to %s",
                 run.run_dir, len(run.ids), len(np.unique(run.ids)),
                 dataset.num_validation_galleries, run.eval_dir)
    warned_empty = False
    while run.stop_reason() is None:
        pending = pending_checkpoints(run.run_dir, run.handled)
        if not pending and not run.handled and not warned_empty:
            logging.warning("No checkpoint in %s yet%s: waiting for one "
                            "(is --log_dir/--run_id the training run's?)",
                            run.run_dir, "" if os.path.isdir(run.run_dir)
                            else " (the folder does not exist)")
            warned_empty = True
        for path in pending:
            run.try_evaluate(path)
            if run.stop_reason() is not None:
                break
        else:
            time.sleep(config.eval_interval_secs)
    logging.info("Evaluator stopping: %s", run.stop_reason())
    run.writer.close()
    return run.results
