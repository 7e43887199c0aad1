"""Adapt a descriptor to your own cameras from unlabeled video, in one
command.

    python -m cosine_metric_learning.adapt \
        --model=./output/market1501/cosine-softmax \
        --sequences=./my_videos --output_dir=./adapted --number_of_steps=2000

1. The sequences' confident motion-only tracklets become identity folders
   (:mod:`datasets.tracklets`, whose thresholds ``--track_min_confidence``,
   ``--min_confidence``, ``--max_overlap``, ``--min_length``,
   ``--frame_stride`` and ``--min_height`` it takes): ``OUT/tracklets/``.
2. ``--model`` is fine-tuned on them with a new classifier (its network
   and input size) that starts at each tracklet's mean feature under
   ``--model`` (``--imprint``): ``OUT/run/``.
3. The self-calibrated gate of the model before and after, measured on
   the same tracklets: the cosine distance that lets {false_accept} of the
   same-frame (different people) pairs through, raised where that would
   cut more than {false_reject} of the same-tracklet pairs; the report
   gives both shares at the gate (fewer false accepts at the same cut is
   better). Where the sequences have ``gt/gt.txt``, the IDF1 of Deep SORT
   at each model's calibrated gate.
4. The adapted encoder exported as ``--export`` asks (Deep SORT's frozen
   graph by default): ``OUT/adapted.pb``; the numbers go to
   ``OUT/adapt.json``, with the model, the sequences and the settings.

``--output_dir`` must be new or empty, or hold a run of this command:
``adapt.json`` is written first and records the model (its checkpoint
and a digest of it), the sequences (their ``det.txt``'s digests) and
every setting that shapes the run. A rerun with the same inputs continues
that run (a stopped training goes on; a finished one is measured and
exported again); with any other input it is refused, naming what
differs. Each sequence's detection scores and what the thresholds keep
of them are logged before the work; a run refused before its training
began leaves nothing behind.
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

import hashlib
import json
import os
import shutil

import tensorflow as tf
from absl import app, flags, logging

from cosine_metric_learning import checkpoints, cli, files, mot_sequences
from cosine_metric_learning import settings, tracking
from cosine_metric_learning import track
from cosine_metric_learning.datasets import image_folder, tracklets
from cosine_metric_learning.datasets.spec import DatasetSpec
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.errors import parse_flags, report_errors

__doc__ = __doc__.format(  # the gate's rates as the code sets them
    false_accept=f"{100 * tracklets.GATE_FALSE_ACCEPT:g} %",
    false_reject=f"{100 * tracklets.GATE_FALSE_REJECT:g} %")

FLAGS = flags.FLAGS
FLAG_NAMES = {**tracklets.FLAG_NAMES, "model": "--model",
              "number_of_steps": "--number_of_steps",
              "batch_size": "--batch_size", "export": "--export"}
EXPORTS = {"freeze": (cli.Mode.FREEZE, "adapted.pb"),
           "onnx": (cli.Mode.ONNX, "adapted.onnx"),
           "openvino": (cli.Mode.OPENVINO, "adapted.xml"),
           "tflite": (cli.Mode.TFLITE, "adapted.tflite"),
           "none": (None, None)}
REPORT_NAME = "adapt.json"
# what the command writes in --output_dir
OWN = {"tracklets", "run", REPORT_NAME,
       *(name for _, name in EXPORTS.values() if name)}
# the settings that shape a run: a rerun continues it only with the same
SETTINGS = ("number_of_steps", "batch_size", "track_min_confidence",
            *tracklets.DEFAULTS)
REPORT = files.json_kind({"model", "checkpoint", "sequences", "settings",
                          "before", "after"},
                         "a report of this command (a JSON object with "
                         "'model', 'checkpoint', 'sequences', 'settings', "
                         "'before' and 'after')")


def _digest(path):
    """The SHA-256 of a file's bytes, or None where it does not exist."""
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _inputs(model, prefix, sequences, settings):
    """What a run is made of, as ``adapt.json`` records it: the model (the
    checkpoint it resolved to, and a digest of its index), the sequences
    (their folders and ``det.txt`` digests) and the settings."""
    prefix = os.path.abspath(prefix)
    return {"model": model, "checkpoint": {
        "path": prefix, "index_sha256": _digest(prefix + ".index")},
        "sequences": [{"name": s.name, "path": os.path.realpath(s.path),
                       "detections_sha256": _digest(os.path.join(
                           s.path, "det", "det.txt"))} for s in sequences],
        "settings": settings}


def _earlier_run(output_dir):
    """The inputs ``adapt.json`` records of the run in ``output_dir``; None
    for a new or empty folder; UsageError for anything else (a file, a
    folder holding what this command did not write)."""
    if os.path.lexists(output_dir) and not os.path.isdir(output_dir):
        raise ArgumentError("output_dir", output_dir, "it is a file; "
                            "expected a new or empty folder, or an "
                            "earlier output of this command")
    if not os.path.isdir(output_dir):
        files.check_writable(os.path.dirname(os.path.abspath(output_dir)),
                             output_dir)
        return None
    names = sorted(os.listdir(output_dir))
    if not names:
        return None
    extra = [n for n in names if n not in OWN]
    if extra or REPORT_NAME not in names:
        what = (f"{extra[0]}, which this command did not write" if extra
                else f"{names[0]} but no {REPORT_NAME}, so it is not a run "
                "of this command")
        raise UsageError(f"refusing to write into {output_dir}: it holds "
                         f"{what}; choose a new or empty --output_dir")
    path = os.path.join(output_dir, REPORT_NAME)
    files.check_output(path, REPORT)
    with open(path) as f:
        return json.load(f)


def _check_same(output_dir, recorded, current):
    """UsageError naming the first input of ``current`` that differs from
    the run ``recorded`` in ``output_dir``: that run is not continued."""
    def refuse(what):
        raise UsageError(f"refusing to continue the run in {output_dir}: "
                         f"{what}; give a new --output_dir for a new run")

    was, now = recorded["checkpoint"], current["checkpoint"]
    if was["path"] != now["path"]:
        refuse(f"it adapts {was['path']}, not --model={current['model']}"
               + (f" ({now['path']})" if now["path"] != current["model"]
                  else ""))
    if was["index_sha256"] != now["index_sha256"]:
        refuse(f"the checkpoint {now['path']} has changed since it "
               "began")
    was = [(s["name"], s["path"]) for s in recorded["sequences"]]
    now = [(s["name"], s["path"]) for s in current["sequences"]]
    if was != now:
        refuse("it adapts on " + ", ".join(p for _, p in was)
               + ", not on " + ", ".join(p for _, p in now))
    for old, new in zip(recorded["sequences"], current["sequences"]):
        if old["detections_sha256"] != new["detections_sha256"]:
            refuse(f"the detections of {new['name']} (det/det.txt) have "
                   "changed since it began")
    for name in SETTINGS:
        old, new = recorded["settings"].get(name), current["settings"][name]
        if old != new:
            refuse(f"it ran with --{name}={old}, not --{name}={new}")


def _numbers(path, sequences, rows_of, scored, cache):
    """A model's gate and, with ground truth, its IDF1 at that gate."""
    gate = track.calibrate(path, sequences, rows_of, tracking.DEFAULTS, cache)
    numbers = {"self_calibrated_gate": gate}
    if scored and gate is not None:
        numbers["IDF1"] = tracking.track_and_score_features(
            scored, rows_of, {s.name: track.model_features(
                path, s, rows_of[s.name], cache) for s in scored},
            {**tracking.DEFAULTS, "max_cosine_distance": gate["gate"]})["IDF1"]
    return numbers


def adapt(model, sequence_folders, output_dir, number_of_steps=2000,
          batch_size=64, export="freeze",
          track_min_confidence=tracklets.TRACK_MIN_CONFIDENCE, **cut):
    """The four steps of the module's docstring (``cut``: the keywords of
    :func:`tracklets.cut_tracklets`); returns the report written to
    ``OUT/adapt.json``, or the exit status of a training stopped by a
    signal."""
    if export not in EXPORTS:
        raise ArgumentError("export", export,
                            f"expected one of {', '.join(EXPORTS)}")
    if number_of_steps < 1:
        raise ArgumentError("number_of_steps", number_of_steps,
                            "expected at least 1 step")
    cut = {**tracklets.DEFAULTS, **cut}
    tracklets.check_cut(**cut)
    tracklets.check_track_min_confidence(track_min_confidence)
    # every input checked before the work, the output folder first
    recorded = _earlier_run(output_dir)
    encoder, prefix = checkpoints.load_encoder(model)
    shape = tuple(encoder.input_shape[1:])
    sequences = tracklets.read_checked(sequence_folders,
                                       track_min_confidence, cut)
    scored = [s for s in sequences if s.ground_truth is not None]
    for sequence in scored:
        mot_sequences.check_ground_truth(sequence)
    rows_of = {s.name: tracklets.tracked_rows(s, track_min_confidence)
               for s in sequences}
    inputs = _inputs(model, prefix, sequences, {
        "number_of_steps": number_of_steps, "batch_size": batch_size,
        "track_min_confidence": track_min_confidence, **cut,
        "export": export})
    if recorded is not None:
        _check_same(output_dir, recorded, inputs)
    folder = os.path.join(output_dir, "tracklets")
    config = settings.TrainConfig(
        dataset_dir=folder, log_dir=output_dir, run_id="run",
        restore_path=prefix, restore_classifier=False, imprint=True,
        number_of_steps=number_of_steps, batch_size=batch_size)
    config.validate()
    report_path = os.path.join(output_dir, REPORT_NAME)
    mode, name = EXPORTS[export]
    write, check, _ = cli.EXPORTERS[mode] if mode else (None, None, None)
    if check is not None and recorded is not None:  # an earlier export
        check(os.path.join(output_dir, name))

    created = not os.path.isdir(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    if recorded is None:  # what a rerun compares itself with
        _write_report(report_path, {**inputs, "before": None,
                                    "after": None})
    try:
        if not os.path.isfile(os.path.join(folder, "manifest.json")):
            manifest = tracklets.extract_sequences(
                sequences, folder, "none", track_min_confidence, **cut)
        else:  # an earlier run's, of the same inputs
            with open(os.path.join(folder, "manifest.json")) as f:
                manifest = json.load(f)
        cache = {}
        before = _numbers(prefix, sequences, rows_of, scored, cache)
        split = image_folder.read_image_folder(folder)
    except Exception:
        if recorded is None:  # refused before training: nothing is left
            _remove_new_run(output_dir, created)
        raise
    dataset = DatasetSpec(
        name="tracklets", num_classes=len(split.label_names),
        read_train=lambda _: split, default_dataset_dir=folder,
        image_shape=shape, label_names=split.label_names)
    run_dir = os.path.join(output_dir, "run")
    latest = tf.train.latest_checkpoint(run_dir)
    if latest is not None and checkpoints.checkpoint_step(latest) >= \
            number_of_steps:
        logging.info("%s has trained its %d steps", run_dir, number_of_steps)
    else:
        status = cli.run_mode(dataset, cli.Mode.TRAIN, config)
        if status:
            return status
    adapted = checkpoints.resolve_checkpoint(run_dir)
    after = _numbers(adapted, sequences, rows_of, scored, cache)
    report = {**inputs, "adapted": adapted, "tracklets": {
        "identities": len(manifest["identities"]),
        "crops": manifest["counts"]["kept"]},
        "number_of_steps": number_of_steps, "before": before,
        "after": after, "export": None}
    if mode is not None:
        encoder, _ = checkpoints.load_encoder(adapted)
        report["export"] = write(encoder, os.path.join(output_dir, name),
                                 shape)
    _write_report(report_path, report)
    return report


def _write_report(path, report):
    files.write_atomically(path, lambda f: json.dump(report, f, indent=1),
                           REPORT)


def _remove_new_run(output_dir, created):
    """Remove what a new run wrote in ``output_dir`` (and the folder, if
    it made it)."""
    for name in (REPORT_NAME, "tracklets"):
        path = os.path.join(output_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.isfile(path):
            os.remove(path)
    if created and not os.listdir(output_dir):
        os.rmdir(output_dir)


def format_report(report):
    lines = [f"{report['tracklets']['identities']} tracklets "
             f"({report['tracklets']['crops']} crops), "
             f"{report['number_of_steps']} steps from {report['model']}",
             f"{'':8s} {'gate':>7s} {'false accepts':>14s} "
             f"{'false rejects':>14s} {'IDF1':>6s}"]
    for when in ("before", "after"):
        numbers = report[when]
        gate = numbers["self_calibrated_gate"]
        idf1 = numbers.get("IDF1")
        lines.append(
            f"{when:8s} {gate['gate']:7.4f} "
            f"{100 * gate['false_accept']:13.1f}% "
            f"{100 * gate['false_reject']:13.1f}% "
            + (f"{100 * idf1:6.1f}" if idf1 is not None else f"{'-':>6s}"))
    gate = report["after"]["self_calibrated_gate"]["gate"]
    lines.append("the adapted model's gate: " + "; ".join(
        f"{tracker}: {setting}"
        for tracker, setting in tracklets.gate_conventions(gate)))
    if report["export"]:
        lines.append(f"wrote {report['export']}")
    return "\n".join(lines)


def main(argv):
    def run():
        tracking.require_tracker()
        report = adapt(
            FLAGS.model, mot_sequences.find_sequences(FLAGS.sequences),
            FLAGS.output_dir, FLAGS.number_of_steps, FLAGS.batch_size,
            FLAGS.export, FLAGS.track_min_confidence,
            **{name: getattr(FLAGS, name) for name in tracklets.DEFAULTS})
        if isinstance(report, int):  # training stopped by a signal
            return report
        print(format_report(report))
        return 0

    return report_errors(argv, run, FLAG_NAMES)


def define_flags():
    flags.DEFINE_string("model", None, "The checkpoint or training run to "
                        "adapt (a TF1 checkpoint too).", required=True)
    flags.DEFINE_string("sequences", None, "Comma-separated MOTChallenge "
                        "sequence folders (img1/ and det/det.txt), or "
                        "parents of them.", required=True)
    flags.DEFINE_string("output_dir", None, "A new or empty folder for the "
                        "tracklets, the run, the export and adapt.json (or "
                        "an earlier run of this command with the same "
                        "inputs, to continue it).", required=True)
    flags.DEFINE_integer("number_of_steps", 2000, "Fine-tuning steps.")
    flags.DEFINE_integer("batch_size", 64, "Fine-tuning batch size.")
    flags.DEFINE_enum("export", "freeze", list(EXPORTS), "How to export "
                      "the adapted encoder (freeze: Deep SORT's .pb).")
    tracklets.define_cut_flags()
    flags.adopt_module_key_flags(tracklets)  # listed by --help


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=parse_flags)
