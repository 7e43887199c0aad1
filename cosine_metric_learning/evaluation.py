"""Evaluation modes: the checkpoint-polling evaluator, test and export.

* :func:`evaluate_checkpoints` (``--mode=eval``) runs beside training on the
  CPU, evaluates each new checkpoint on the validation identities and
  writes CMC and mAP to TensorBoard at the checkpoint's step.
* :func:`run_test` (``--mode=test``) computes the numbers papers report with
  the datasets' standard protocols, without MATLAB.
* :func:`export_features` (``--mode=export``) writes ``.mat`` feature files
  for the official evaluation kits.
"""

import dataclasses
import json
import os
import time
from typing import Optional

import numpy as np
import scipy.io
import tensorflow as tf
from absl import logging
from PIL import Image, ImageDraw, PngImagePlugin
from tensorboard.compat.proto import event_pb2

from cosine_metric_learning import checkpoints, files, metrics
from cosine_metric_learning import preprocessing
from cosine_metric_learning import queued_trainer
from cosine_metric_learning.errors import TrainingError, UsageError
from cosine_metric_learning.errors import first_line
from datasets import util as dataset_util
from nets.deep_sort import network_definition

PRECISION_TAG = "Precision@1"

# What the modes write; an existing file is replaced only if it is one
RESULTS_JSON = files.json_kind(
    {"dataset", "mAP"}, "test numbers written by --mode=test (a JSON object "
    "with 'dataset' and 'mAP')")
KIT_FEATURES = files.mat_kind(
    {"features"}, "a feature file written by --mode=export (a .mat holding "
    "'features' only)")


# Encoding -------------------------------------------------------------------

def make_encode_fn(encoder, image_shape, batch_size, flip_test=False):
    """A function mapping file names to features ``(N, D)``, in batches.

    With ``flip_test`` the features of each image and its mirror image are
    summed and re-normalised.
    """
    load = preprocessing.make_batch_loader(image_shape, training=False)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def encode(filenames):
        images = load(filenames)
        features = encoder(images, training=False)
        if flip_test:
            features += encoder(tf.reverse(images, axis=[2]), training=False)
            features = tf.math.l2_normalize(features, axis=1)
        return features

    return lambda filenames: queued_trainer.run_in_batches(
        lambda batch: encode(batch).numpy(), filenames, batch_size)


def pool_groups(features, groups):
    """Average each group's features and L2-normalise: (len(groups), D)."""
    pooled = np.stack([features[g].mean(axis=0) for g in groups])
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return pooled / np.maximum(norms, 1e-12)


# The evaluator ----------------------------------------------------------------

@dataclasses.dataclass
class EvalConfig:
    dataset_dir: str
    log_dir: str
    run_id: str
    eval_log_dir: str
    loss_mode: str = "cosine-softmax"
    batch_size: int = 128
    eval_interval_secs: float = 60.0
    max_num_evaluations: Optional[int] = None
    eval_timeout_secs: Optional[float] = None
    number_of_steps: Optional[int] = None

    def validate(self):
        if self.batch_size < 1:
            raise UsageError(f"--batch_size={self.batch_size}: expected an "
                             "integer >= 1")
        if not self.eval_interval_secs >= 0:
            raise UsageError(f"--eval_interval_secs={self.eval_interval_secs}"
                             ": expected a number >= 0")
        if self.max_num_evaluations is not None and \
                self.max_num_evaluations < 1:
            raise UsageError(f"--max_num_evaluations="
                             f"{self.max_num_evaluations}: expected >= 1")
        if self.eval_timeout_secs is not None and \
                not self.eval_timeout_secs >= 0:
            raise UsageError(f"--eval_timeout_secs={self.eval_timeout_secs}"
                             ": expected a number >= 0")


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
    filenames, ids, cameras, *_ = dataset.read_train(dataset_dir)
    _, is_validation = dataset_util.split_validation(ids)
    if not np.any(is_validation):
        raise UsageError(f"{dataset_dir}: too few training identities "
                         f"({len(np.unique(ids))}) to hold out 10 % for "
                         "validation; at least 10 are needed")
    return (np.asarray(filenames)[is_validation], ids[is_validation],
            cameras[is_validation])


def evaluate_checkpoints(dataset, config):
    """Poll ``log_dir/run_id`` and evaluate each new checkpoint once, oldest
    first.

    Stops after ``max_num_evaluations`` evaluations, after a checkpoint at
    or beyond ``number_of_steps``, or when no new checkpoint appeared for
    ``eval_timeout_secs``; with none of these it polls until interrupted.

    Returns
    -------
    list of (step, dict)
        The metrics of every checkpoint evaluated by this call.
    """
    config.validate()
    run_dir = os.path.join(config.log_dir, config.run_id)
    eval_dir = os.path.join(config.eval_log_dir, config.run_id)
    filenames, ids, cameras = read_validation_data(dataset,
                                                   config.dataset_dir)
    encoder = network_definition.create_encoder(dataset.image_shape)
    encode = make_encode_fn(encoder, dataset.image_shape, config.batch_size)
    metric = metrics.metric_for_loss(config.loss_mode)
    done_steps = evaluated_steps(eval_dir)
    writer = tf.summary.create_file_writer(eval_dir)
    logging.info("Evaluating checkpoints of %s on %d images of %d validation "
                 "identities (%s distance, %d galleries); summaries to %s",
                 run_dir, len(ids), len(np.unique(ids)), metric,
                 dataset.num_validation_galleries, eval_dir)
    results, failures, handled = [], {}, set()
    last_new = time.time()
    final_step_done = False

    data = {"filenames": filenames, "ids": ids, "cameras": cameras}

    def evaluate(path):
        step = checkpoints.checkpoint_step(path)
        if step in done_steps:
            logging.info("Step %d was evaluated before: skipping %s", step,
                         path)
            return step
        checkpoints.restore(path, encoder=encoder)
        try:
            features = encode_readable(encode, data, dataset.image_shape)
        except TrainingError as e:
            raise _DataError(str(e)) from e  # not the checkpoint's fault
        values = metrics.validation_cmc(
            features, data["ids"], data["cameras"],
            dataset.num_validation_galleries, metric)
        _write_scalars(writer, step, values)
        done_steps.add(step)
        results.append((step, values))
        logging.info("step %d: %s", step, "  ".join(
            f"{k} {v:.3f}" for k, v in values.items()))
        return step

    def stop_reason():
        if config.max_num_evaluations is not None and \
                len(results) >= config.max_num_evaluations:
            return f"{len(results)} evaluations done"
        if final_step_done:
            return (f"evaluated the training run's last step "
                    f"({config.number_of_steps})")
        if config.eval_timeout_secs is not None and \
                time.time() - last_new >= config.eval_timeout_secs:
            return f"no new checkpoint for {time.time() - last_new:.0f} s"
        return None

    warned_empty = False
    while stop_reason() is None:
        pending = pending_checkpoints(run_dir, handled)
        if not pending and not handled and not warned_empty:
            logging.warning("No checkpoint in %s yet%s: waiting for one "
                            "(is --log_dir/--run_id the training run's?)",
                            run_dir, "" if os.path.isdir(run_dir)
                            else " (the folder does not exist)")
            warned_empty = True
        for path in pending:
            last_new = time.time()
            try:
                step = evaluate(path)
            except _DataError as e:
                raise TrainingError(str(e)) from None
            except (tf.errors.OpError, UsageError, ValueError) as e:
                # deleted or still being written: try again at the next poll
                failures[path] = failures.get(path, 0) + 1
                logging.warning("Cannot read checkpoint %s (attempt %d of "
                                "3): %s", path, failures[path],
                                first_line(e))
                if failures[path] >= 3:
                    logging.warning("Skipping %s", path)
                    handled.add(path)
                continue
            handled.add(path)
            final_step_done |= (config.number_of_steps is not None
                                and step >= config.number_of_steps)
            if stop_reason() is not None:
                break
        else:
            time.sleep(config.eval_interval_secs)
    logging.info("Evaluator stopping: %s", stop_reason())
    writer.close()
    return results


class _DataError(Exception):
    """The validation images, not the checkpoint, cannot be encoded."""


def encode_readable(encode, data, image_shape):
    """Features of ``data["filenames"]``; unreadable files are skipped.

    ``data`` holds arrays with a row per image (``filenames``, ``ids``,
    ``cameras``); the rows of an unreadable image are removed from all of
    them, with a warning naming it, so later checkpoints are evaluated on
    the same images.

    Raises
    ------
    TrainingError
        When the images cannot be encoded and no one file is to blame.
    """
    while True:
        try:
            return encode(data["filenames"])
        except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as e:
            bad = preprocessing.unreadable_files(data["filenames"],
                                                 image_shape)
            if not bad:
                raise TrainingError(f"cannot encode the validation images: "
                                    f"{first_line(e)}") from e
        for index, error in bad.items():
            logging.warning("Skipping unreadable validation image '%s': %s",
                            data["filenames"][index], first_line(error))
        keep = np.ones(len(data["filenames"]), bool)
        keep[list(bad)] = False
        if not np.any(keep):
            raise TrainingError("none of the validation images is readable")
        for key in data:
            data[key] = data[key][keep]


def pending_checkpoints(run_dir, handled):
    """Checkpoints of a run not yet in ``handled``, oldest first."""
    state = tf.train.get_checkpoint_state(run_dir)
    if state is None:
        return []
    return [p for p in state.all_model_checkpoint_paths if p not in handled]


def _write_scalars(writer, step, values):
    with writer.as_default(step=step):
        for name, value in values.items():
            tf.summary.scalar(name, value)
    writer.flush()


# The standard test protocol -------------------------------------------------

def test_features(dataset, restore_path, dataset_dir, batch_size,
                  flip_test=False, split=None):
    """Encode the test split (read unless given); returns ``(split, image
    features, checkpoint path)``."""
    if split is None:
        split = dataset.read_test(dataset_dir)
    encoder, path = checkpoints.load_encoder(restore_path,
                                             dataset.image_shape)
    encode = make_encode_fn(encoder, dataset.image_shape, batch_size,
                            flip_test)
    logging.info("Encoding %d test images with %s", len(split.filenames),
                 path)
    try:
        return split, encode(split.filenames), path
    except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as e:
        bad = preprocessing.unreadable_files(split.filenames,
                                             dataset.image_shape)
        if not bad:
            raise
        index, error = next(iter(bad.items()))
        raise UsageError(
            f"cannot read test image '{split.filenames[index]}' "
            f"({first_line(error)}){_and_more(len(bad))}; the standard "
            "protocol needs every image of the test split") from e


def _and_more(count):
    return f" and {count - 1} more" if count > 1 else ""


def evaluate_split(split, features, metric):
    """Standard-protocol metrics and the distance matrix of a test split."""
    query = pool_groups(features, split.query_groups)
    gallery = pool_groups(features, split.gallery_groups)
    distances = metrics.distance_matrix(query, gallery, metric)
    result = metrics.evaluate_ranking(
        distances, split.query_ids, split.gallery_ids, split.query_cameras,
        split.gallery_cameras)
    return result, distances


def run_test(dataset, restore_path, dataset_dir, loss_mode, batch_size=128,
             flip_test=False, output_json=None, rank_image=None):
    """``--mode=test``: print and return rank-k CMC and mAP."""
    if output_json:
        files.check_output(output_json, RESULTS_JSON)
    if rank_image:
        files.check_output(rank_image, files.PNG)
    split, features, path = test_features(dataset, restore_path, dataset_dir,
                                          batch_size, flip_test)
    metric = metrics.metric_for_loss(loss_mode)
    result, distances = evaluate_split(split, features, metric)
    summary = {k: v for k, v in result.items() if k != "cmc"}
    summary.update(dataset=dataset.name, checkpoint=path, metric=metric,
                   flip_test=flip_test)
    print(format_table(summary))
    if output_json:
        files.write_atomically(output_json, lambda f: json.dump(
            summary, f, indent=2), RESULTS_JSON)
        print(f"wrote {output_json}")
    if rank_image:
        draw_rank_image(rank_image, split, distances)
        print(f"wrote {rank_image}")
    return summary


def format_table(summary):
    """The test numbers as a small text table."""
    rows = [(k, summary[k]) for k in summary if k.startswith("rank-")]
    rows += [("mAP", summary["mAP"]),
             ("mAP (non-interpolated)", summary["mAP_noninterpolated"])]
    lines = [f"{summary['dataset']} test, {summary['num_queries']} queries, "
             f"{summary['metric']} distance"
             f"{', flip test' if summary['flip_test'] else ''}",
             f"{'metric':24s} {'value':>7s}", "-" * 32]
    lines += [f"{name:24s} {100 * value:6.2f}%" for name, value in rows]
    return "\n".join(lines)


def draw_rank_image(path, split, distances, num_queries=8, top=10,
                    seed=0, tile=(64, 128), border=4):
    """A grid of queries and their top gallery entries (junk removed).

    Each row is a query followed by its ``top`` nearest gallery entries;
    matches are framed green and non-matches red.
    """
    rng = np.random.RandomState(seed)
    chosen = np.sort(rng.choice(len(split.query_groups),
                                min(num_queries, len(split.query_groups)),
                                replace=False))
    width, height = tile
    cell_w, cell_h = width + 2 * border, height + 2 * border
    canvas = Image.new("RGB", (cell_w * (top + 1) + border, cell_h * len(
        chosen)), "white")
    draw = ImageDraw.Draw(canvas)

    def paste(group, col, row, color):
        x, y = col * cell_w + (border if col else 0), row * cell_h
        if color:
            draw.rectangle([x, y, x + cell_w - 1, y + cell_h - 1], fill=color)
        image = Image.open(split.filenames[group[0]]).convert("RGB")
        canvas.paste(image.resize(tile), (x + border, y + border))

    for row, q in enumerate(chosen):
        paste(split.query_groups[q], 0, row, None)
        q_id, q_cam = split.query_ids[q], split.query_cameras[q]
        junk = (split.gallery_ids == -1) | (
            (split.gallery_ids == q_id) & (split.gallery_cameras == q_cam))
        order = [g for g in np.argsort(distances[q], kind="stable")
                 if not junk[g]][:top]
        for col, g in enumerate(order, start=1):
            match = split.gallery_ids[g] == q_id
            paste(split.gallery_groups[g], col, row,
                  (0, 170, 0) if match else (220, 0, 0))
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", files.PNG_SOFTWARE)
    files.write_atomically(path, lambda f: canvas.save(
        f, format="PNG", pnginfo=info), files.PNG, binary=True)


# Export -----------------------------------------------------------------------

def export_features(dataset, restore_path, dataset_dir, output_dir,
                    batch_size=128):
    """``--mode=export``: ``.mat`` files (key ``features``, a row per image).

    Returns
    -------
    list of str
        The files written.
    """
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {output_dir}: {e.strerror}") from e
    split = dataset.read_test(dataset_dir)
    for name in split.exports:
        files.check_output(os.path.join(output_dir, name), KIT_FEATURES)
    split, features, _ = test_features(dataset, restore_path, dataset_dir,
                                       batch_size, split=split)
    written = []
    for name, indices in split.exports.items():
        path = os.path.join(output_dir, name)
        files.write_atomically(path, lambda f, i=indices: scipy.io.savemat(
            f, {"features": features[i]}), KIT_FEATURES, binary=True)
        logging.info("Wrote %s: features %s", path, features[indices].shape)
        written.append(path)
    return written
