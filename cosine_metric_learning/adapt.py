"""Adapt a descriptor to your own cameras from unlabeled video, in one
command.

    python -m cosine_metric_learning.adapt \
        --model=./output/market1501/cosine-softmax \
        --sequences=./my_videos --output_dir=./adapted

1. The last ``--holdout`` share of each sequence's frames is held out.
   The confident motion-only tracklets of the frames before it become
   identity folders (:mod:`datasets.tracklets`, whose thresholds
   ``--track_min_confidence``, ``--min_confidence``, ``--max_overlap``,
   ``--min_length``, ``--frame_stride`` and ``--min_height`` it takes),
   each detection cut as the box encoder cuts it for the model (its
   width set to the input's aspect ratio), so that the model is fitted
   to what the tracker will give it: ``OUT/tracklets/``.
2. The batch-norm statistics of ``--model`` are re-estimated on the
   tracklets' crops (at most {statistics_images} of them), layer after
   layer: a model trained elsewhere normalises what your camera shows
   with another dataset's means and variances (and a short training's
   moving averages are still on their way from their initial values):
   ``OUT/statistics/``. That model is fine-tuned on the tracklets (its
   network and input size) with the soft-margin batch-hard triplet
   loss, only its last fully-connected layer and what follows it
   trained (the convolutions keep what they learnt from labelled
   people), at a tenth of training's learning rate: ``OUT/run/``. A
   tracklet's negatives are only the tracklets seen in one frame with
   it (different people for sure): one person's tracklets before and
   after an occlusion are not pushed apart. Those found again are one
   identity of the fine-tuning: a tracklet and one starting at most
   {link_max_gap} frames after it ends (Deep SORT's ``max_age``), each the
   other's nearest such under the re-estimated model, their mean features
   closer than all but {link_false_accept} of the pairs seen together.
3. The self-calibrated gate of the model before and after, measured on
   the tracklets of the whole sequences: the cosine distance that lets
   {false_accept} of the same-frame (different people) pairs through,
   raised where that would cut more than {false_reject} of the
   same-tracklet pairs; the report gives both shares at the gate. Where
   the sequences have ``gt/gt.txt``, the IDF1 of Deep SORT at each
   model's calibrated gate.
4. The check, on the held-out frames' tracklets, which the fine-tuning
   never saw: how often a same-tracklet pair is closer than a same-frame
   pair under each model, and an interval of the difference from
   resampling the tracklets. The verdict is ``better``, ``worse``, ``no
   clear difference`` or ``unchecked`` (too few held-out tracklets).
   ``--keep=auto`` exports the better of the two there: the adapted
   model where it ranks the held-out pairs better (the verdict
   ``better``, or ``no clear difference`` with a difference above 0),
   the model it started from otherwise (``worse``, ``unchecked``, or no
   gain at all); ``--keep=adapted`` or ``--keep=start`` choose.
5. The kept encoder exported as ``--export`` asks (Deep SORT's frozen
   graph by default): ``OUT/adapted.pb``; the numbers, the verdict and
   its reason go to ``OUT/adapt.json``, with the model, the sequences and
   the settings.

``--output_dir`` must be new or empty, or hold a run of this command:
``adapt.json`` is written first and records the model (its checkpoint
and a digest of it), the sequences (their ``det.txt``'s digests) and
every setting that shapes the run. A rerun with the same inputs continues
that run (a stopped training goes on; a finished one keeps its
measurements and exports the model ``--keep`` asks for); with any other
input it is
refused, naming what differs. Each sequence's detection scores and what
the thresholds keep of them are logged before the work; a run refused
before its training began leaves nothing behind.
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf
from absl import app, logging

from cosine_metric_learning import adapt_report, appearance, checkpoints
from cosine_metric_learning import commands
from cosine_metric_learning import export as export_lib
from cosine_metric_learning import features as features_lib
from cosine_metric_learning import formats, gates, metrics
from cosine_metric_learning import mot_sequences, preprocessing
from cosine_metric_learning import run_settings, settings, tracking, training
from cosine_metric_learning import model as model_lib
from cosine_metric_learning.datasets import image_folder, linking, tracklets
from cosine_metric_learning.datasets.spec import DatasetSpec
from cosine_metric_learning.commands import one_of, setting
from cosine_metric_learning.errors import ArgumentError, parse_flags

# the fine-tuning: the soft-margin batch-hard triplet loss over the
# tracklets, only the encoder's last fully-connected layer and what
# follows it trained, at a tenth of training's learning rate
DEFAULT_STEPS = 300
DEFAULT_BATCH_SIZE = 32
LOSS = "triplet"
TRAIN_FROM = "fc1"
LEARNING_RATE = 1e-4
# the last share of each sequence's frames held out of the fine-tuning,
# for the check of the adapted model on data it did not fit
HOLDOUT = 0.2
# which model to export; auto: the one that separates the people of the
# held-out frames better (the adapted one never where it is worse there,
# or where nothing was checked)
KEEP = ("auto", "adapted", "start")
# --export: the export modes of the file formats (formats.FORMATS), or none
EXPORTS = {**{f.mode: (f, f"adapted{f.extension}")
              for f in formats.exported() if f.extension},
           "none": (None, None)}
REPORT_NAME = adapt_report.REPORT_NAME
# the model it started from, its batch-norm statistics re-estimated on
# the tracklets: what the fine-tuning starts from
STATISTICS = "statistics"
# crops the statistics are estimated on, at most
STATISTICS_IMAGES = 2000
# how the fine-tuning is made, as adapt.json records it: a rerun whose
# release makes it otherwise is refused (its tracklets and statistics are
# of the earlier method)
METHOD = {"loss_mode": LOSS, "train_from": TRAIN_FROM,
          "learning_rate": LEARNING_RATE,
          "batch_norm_statistics": "re-estimated on the tracklets' crops",
          "negatives": "seen_together: tracklets seen in one frame",
          "link_max_gap": linking.LINK_MAX_GAP,
          "link_false_accept": linking.LINK_FALSE_ACCEPT}
# what the command writes in --output_dir
OWN = {"tracklets", STATISTICS, "run", REPORT_NAME,
       *(name for _, name in EXPORTS.values() if name)}
# the settings that shape a run: a rerun continues it only with the same
SETTINGS = ("number_of_steps", "batch_size", "track_min_confidence",
            "holdout", *tracklets.DEFAULTS)


__doc__ = __doc__.format(  # the numbers as the code sets them
    false_accept=f"{100 * gates.GATE_FALSE_ACCEPT:g} %",
    false_reject=f"{100 * gates.GATE_FALSE_REJECT:g} %",
    statistics_images=f"{STATISTICS_IMAGES:,}",
    link_max_gap=linking.LINK_MAX_GAP,
    link_false_accept=f"{100 * linking.LINK_FALSE_ACCEPT:g} %")


def _numbers(path, sequences, rows_of, scored, cache):
    """A model's gate and, with ground truth, its IDF1 at that gate."""
    gate = appearance.calibrate(path, sequences, rows_of, tracking.DEFAULTS,
                                cache)
    numbers = {"self_calibrated_gate": gate}
    if scored and gate is not None:
        numbers["IDF1"] = tracking.track_and_score_features(
            scored, rows_of, {s.name: cache.features(
                path, s, rows_of[s.name]) for s in scored},
            {**tracking.DEFAULTS, "max_cosine_distance": gate["gate"]})["IDF1"]
    return numbers


def reestimate_statistics(checkpoint, filenames, directory, seed=0):
    """The model at ``checkpoint`` with every batch-norm layer's moving
    statistics re-estimated on the images ``filenames`` (at most
    :data:`STATISTICS_IMAGES` of them, drawn at random;
    :func:`model.reestimate_batch_norm`), written as the encoder
    checkpoint ``directory/ckpt-1`` beside its ``run.json``; returns its
    prefix. One written earlier is taken as it is."""
    prefix = os.path.join(directory, "ckpt-1")
    if os.path.isfile(prefix + ".index"):
        return prefix
    encoder, _ = checkpoints.load_encoder(checkpoint)
    shape = tuple(encoder.input_shape[1:])
    filenames = np.asarray(filenames)
    if len(filenames) > STATISTICS_IMAGES:
        filenames = np.sort(np.random.default_rng(seed).choice(
            filenames, STATISTICS_IMAGES, replace=False))
    images = preprocessing.make_batch_loader(shape)(
        tf.constant([str(f) for f in filenames])).numpy()
    names = model_lib.reestimate_batch_norm(encoder, images)
    logging.info("Re-estimated the statistics of %d batch-norm layers on "
                 "%d crops", len(names), len(images))
    os.makedirs(directory, exist_ok=True)
    run_settings.record(directory, run_settings.settings(
        "tracklets", LOSS, shape, checkpoints.network_of(checkpoint)))
    return export_lib.write_encoder_checkpoint(encoder, prefix)


def tracklet_features(checkpoint, identities):
    """The unit mean of the unit features of each tracklet's crops under
    the model at ``checkpoint``: ``(C, D)`` over ``identities.ids``."""
    encoder, _ = checkpoints.load_encoder(checkpoint)
    encode = features_lib.make_encode_fn(
        encoder, tuple(encoder.input_shape[1:]), batch_size=64)
    features = encode(np.asarray([str(f) for f in identities.filenames]))
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    labels = len(identities.label_names)
    means = np.zeros((labels, features.shape[1]))
    np.add.at(means, identities.ids, features)
    return means / np.linalg.norm(means, axis=1, keepdims=True)


def split_in_time(sequence, holdout):
    """``(training part, held-out part, first held-out frame)``: the
    sequence with its detections before, and from, the first frame of its
    last ``holdout`` share of frames. The held-out part is named
    ``<name>-held-out``; neither keeps the ground truth."""
    first = int(round((1.0 - holdout) * sequence.num_frames)) + 1
    frames = sequence.detections[:, 0]
    return (dataclasses.replace(sequence, ground_truth=None,
                                detections=sequence.detections[frames < first]),
            dataclasses.replace(sequence, name=f"{sequence.name}-held-out",
                                ground_truth=None,
                                detections=sequence.detections[
                                    frames >= first]),
            first)


def held_out_gain(check):
    """Whether :func:`held_out_check` found the adapted model the better
    of the two: ``better``, or ``no clear difference`` leaning its way."""
    return check["verdict"] == "better" or (
        check["verdict"] == "no clear difference" and check["difference"] > 0)


def kept_why(keep, check):
    """Why ``--keep=keep`` kept the model it did, after ``check``."""
    if keep != "auto":
        return f"--keep={keep}"
    if check["verdict"] == "unchecked":
        return "nothing held out to check the adapted model on"
    lean = {"better": "the adapted model ranks the held-out pairs better",
            "worse": "the adapted model ranks the held-out pairs worse"}
    if check["verdict"] in lean:
        return lean[check["verdict"]]
    side = "better" if check["difference"] > 0 else "no better"
    return (f"the adapted model ranks the held-out pairs {side} "
            f"({check['difference']:+.4f}), within the interval's doubt")


def _held_out(paths, parts, rows_of, cache, cut):
    """:func:`held_out_check` of the models ``paths`` (before, after) on the
    held-out parts' motion-only tracklets (of their ``rows_of``); with
    their counts."""
    same, different = {p: [] for p in paths}, {p: [] for p in paths}
    same_piece, different_pieces, offset = [], [], 0
    for part in parts:
        rows = rows_of[part.name]
        pieces = cache.motion_pieces(part, rows, **cut)
        pairs_same, pieces_same, pairs_different, pieces_different = \
            gates.pairs(rows, pieces)
        for path in paths:
            features = cache.features(path, part, rows)
            for store, chosen in ((same, pairs_same),
                                  (different, pairs_different)):
                store[path].append(metrics.pair_cosine_distances(features,
                                                                 chosen))
        same_piece.append(pieces_same + offset)
        different_pieces.append(pieces_different + offset)
        offset += len(pieces)
    def joined(parts, shape, dtype=float):  # no held-out part: empty
        return np.concatenate(parts) if parts else np.zeros(shape, dtype)

    before, after = ((joined(same[p], (0,)), joined(different[p], (0,)))
                     for p in paths)
    check = metrics.held_out_check(
        before, after, joined(same_piece, (0,), int),
        joined(different_pieces, (0, 2), int), offset)
    check.update(tracklets=offset, same_pairs=int(len(before[0])),
                 different_pairs=int(len(before[1])))
    return check


def adapt(model, sequence_folders, output_dir, number_of_steps=DEFAULT_STEPS,
          batch_size=DEFAULT_BATCH_SIZE, export="freeze",
          track_min_confidence=tracklets.TRACK_MIN_CONFIDENCE,
          holdout=HOLDOUT, keep="auto", **cut):
    """The steps of the module's docstring (``cut``: the keywords of
    :func:`tracklets.cut_tracklets`); returns the report written to
    ``OUT/adapt.json``, or the exit status of a training stopped by a
    signal."""
    if export not in EXPORTS:
        raise ArgumentError("export", export,
                            f"expected one of {', '.join(EXPORTS)}")
    if keep not in KEEP:
        raise ArgumentError("keep", keep, f"expected one of {', '.join(KEEP)}")
    if number_of_steps < 1:
        raise ArgumentError("number_of_steps", number_of_steps,
                            "expected at least 1 step")
    if not 0.0 < holdout < 1.0:
        raise ArgumentError("holdout", holdout, "expected a share of the "
                            "frames above 0 and below 1")
    cut = {**tracklets.DEFAULTS, **cut}
    tracklets.check_cut(**cut)
    tracklets.check_track_min_confidence(track_min_confidence)
    # every input checked before the work, the output folder first
    recorded = adapt_report.earlier_run(output_dir, OWN)
    encoder, prefix = checkpoints.load_encoder(model)
    shape = tuple(encoder.input_shape[1:])
    sequences = tracklets.read_checked(sequence_folders,
                                       track_min_confidence, cut)
    scored = [s for s in sequences if s.ground_truth is not None]
    for sequence in scored:
        mot_sequences.check_ground_truth(sequence)
    rows_of = {s.name: tracklets.tracked_rows(s, track_min_confidence)
               for s in sequences}
    split = [split_in_time(s, holdout) for s in sequences]
    training_parts = [train for train, _, _ in split]
    held_parts = [held for _, held, _ in split]
    inputs = adapt_report.inputs(model, prefix, sequences, METHOD, {
        "number_of_steps": number_of_steps, "batch_size": batch_size,
        "track_min_confidence": track_min_confidence, "holdout": holdout,
        **cut, "export": export})
    if recorded is not None:
        adapt_report.check_same(output_dir, recorded, inputs, SETTINGS)
    folder = os.path.join(output_dir, "tracklets")
    config = settings.TrainConfig(
        dataset_dir=folder, log_dir=output_dir, run_id="run",
        restore_path=prefix, restore_classifier=False, loss_mode=LOSS,
        train_from=TRAIN_FROM, learning_rate=LEARNING_RATE,
        number_of_steps=number_of_steps, batch_size=batch_size)
    config.validate()
    report_path = os.path.join(output_dir, REPORT_NAME)
    exported, name = EXPORTS[export]
    if exported is not None and recorded is not None:  # an earlier export
        exported.check_output(os.path.join(output_dir, name))
    if _finished(output_dir, recorded, number_of_steps):
        logging.info("%s: a finished run of these inputs; its measurements "
                     "kept, the model to export chosen with --keep=%s",
                     output_dir, keep)
        return _keep_and_export(recorded, keep, prefix, export, output_dir,
                                shape)
    created = not os.path.isdir(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    if recorded is None:  # what a rerun compares itself with
        adapt_report.write_report(report_path, {**inputs, "before": None,
                                    "after": None})
    try:
        if not os.path.isfile(os.path.join(folder, "manifest.json")):
            manifest = tracklets.extract_sequences(
                training_parts, folder, "none", track_min_confidence,
                patch_shape=shape, **cut)
        else:  # an earlier run's, of the same inputs
            with open(os.path.join(folder, "manifest.json")) as f:
                manifest = json.load(f)
        cache = appearance.FeatureCache()
        before = _numbers(prefix, sequences, rows_of, scored, cache)
        identities = image_folder.read_image_folder(folder)
    except Exception:
        if recorded is None:  # refused before training: nothing is left
            adapt_report.remove_new_run(output_dir, created)
        raise
    start = reestimate_statistics(prefix, identities.filenames,
                                  os.path.join(output_dir, STATISTICS))
    config = dataclasses.replace(config, restore_path=start)
    names = identities.label_names
    seen_together = linking.seen_together_labels(names, manifest)
    identity, links, threshold = linking.link_tracklets(
        tracklet_features(start, identities),
        linking.tracklet_spans(names, manifest), seen_together)
    linked, seen_together = linking.pseudo_identities(
        identities, seen_together, identity)
    logging.info("%d tracklets linked to others across gaps of at most %d "
                 "frames: %d identities for the fine-tuning", len(links),
                 linking.LINK_MAX_GAP, len(linked.label_names))
    dataset = DatasetSpec(
        name="tracklets", num_classes=len(linked.label_names),
        read_train=lambda _: linked, default_dataset_dir=folder,
        image_shape=shape, label_names=linked.label_names,
        seen_together=seen_together)
    run_dir = os.path.join(output_dir, "run")
    latest = tf.train.latest_checkpoint(run_dir)
    if latest is not None and checkpoints.checkpoint_step(latest) >= \
            number_of_steps:
        logging.info("%s has trained its %d steps", run_dir, number_of_steps)
    else:
        status = training.run(dataset, config)
        if status:
            return status
    adapted = checkpoints.resolve_checkpoint(run_dir)
    after = _numbers(adapted, sequences, rows_of, scored, cache)
    held = [p for p in held_parts  # parts with a detection to track
            if np.any(p.detections[:, 6] >= track_min_confidence)]
    held_out = _held_out((prefix, adapted), held, {
        p.name: tracklets.tracked_rows(p, track_min_confidence)
        for p in held}, cache, cut)
    held_out["first_frames"] = {s.name: first for s, (_, _, first) in
                                zip(sequences, split)}
    report = {**inputs, "adapted": adapted, "tracklets": {
        "identities": len(manifest["identities"]),
        "crops": manifest["counts"]["kept"]},
        "number_of_steps": number_of_steps,
        "fine_tuning": {"starts_from": start,
                        "pairs_seen_together": len(
                            manifest["seen_together"]),
                        "linked": {
                            "identities": len(linked.label_names),
                            "threshold": threshold,
                            "links": [[identities.label_names[a],
                                       identities.label_names[b], distance]
                                      for a, b, distance in links]}},
        "before": before, "after": after, "held_out": held_out,
        "verdict": held_out["verdict"]}
    return _keep_and_export(report, keep, prefix, export, output_dir, shape)


def _finished(output_dir, recorded, number_of_steps):
    """Whether ``recorded`` (the report in ``output_dir``, of the same
    inputs) is of a run that trained and was measured, its adapted
    checkpoint still the run's latest."""
    if not recorded or recorded.get("after") is None or \
            not recorded.get("adapted"):
        return False
    latest = tf.train.latest_checkpoint(os.path.join(output_dir, "run"))
    return (latest is not None and os.path.abspath(latest) ==
            os.path.abspath(recorded["adapted"])
            and checkpoints.checkpoint_step(latest) >= number_of_steps)


def _keep_and_export(report, keep, prefix, export, output_dir, shape):
    """The model ``keep`` chooses (``auto``: the held-out check's), its
    export, and the report written with them."""
    kept = ("adapted" if keep == "adapted" or (
        keep == "auto" and held_out_gain(report["held_out"])) else "start")
    report = {**report, "keep": keep, "kept": kept,
              "kept_why": kept_why(keep, report["held_out"]),
              "kept_checkpoint": (report["adapted"] if kept == "adapted"
                                  else prefix),
              "export": None}
    exported, name = EXPORTS[export]
    if exported is not None:
        encoder, _ = checkpoints.load_encoder(report["kept_checkpoint"])
        report["export"] = exported.write(encoder, os.path.join(output_dir,
                                                                name), shape)
    adapt_report.write_report(os.path.join(output_dir, REPORT_NAME), report)
    return report


def main(argv):
    def run():
        config = commands.values(AdaptConfig)
        cuts = commands.values(tracklets.CutConfig)
        tracking.require_tracker()
        report = adapt(
            config.model, mot_sequences.find_sequences(config.sequences),
            config.output_dir, config.number_of_steps, config.batch_size,
            config.export, cuts.track_min_confidence, config.holdout,
            config.keep, **cuts.cuts)
        if isinstance(report, int):  # training stopped by a signal
            return report
        print(adapt_report.format_report(report))
        return 0

    return commands.run(argv, run, COMMAND_SETTINGS)


@dataclasses.dataclass
class AdaptConfig:
    """The flags of the command beside the tracklets' cuts."""
    model: str = setting(
        None, "The checkpoint or training run to adapt (a TF1 checkpoint "
        "too).", arguments=("path",), required=True)
    sequences: str = setting(
        None, "Comma-separated MOTChallenge sequence folders (img1/ and "
        "det/det.txt), or parents of them.", arguments=("sequence_folders",),
        required=True)
    output_dir: str = setting(
        None, "A new or empty folder for the tracklets, the run, the export "
        "and adapt.json (or an earlier run of this command with the same "
        "inputs, to continue it).", required=True)
    number_of_steps: int = setting(DEFAULT_STEPS, "Fine-tuning steps.")
    batch_size: int = setting(DEFAULT_BATCH_SIZE, "Fine-tuning batch size.")
    holdout: float = setting(
        HOLDOUT, "The share of each sequence's last frames held out of the "
        "fine-tuning, to check the adapted model on.")
    keep: str = setting(
        "auto", "The model to export: auto (the one that ranks the held-out "
        "frames' pairs better; the start model where the adapted one is "
        "worse or nothing was checked), adapted or start.", one_of(KEEP))
    export: str = setting(
        "freeze", "How to export the adapted encoder (freeze: Deep SORT's "
        ".pb).", one_of(EXPORTS))


COMMAND_SETTINGS = [AdaptConfig, tracklets.CutConfig]

if __name__ == "__main__":
    commands.define(COMMAND_SETTINGS)
    app.run(main, flags_parser=parse_flags)
