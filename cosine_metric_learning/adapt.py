"""Adapt a descriptor to your own cameras from unlabeled video, in one
command.

    python -m cosine_metric_learning.adapt \
        --model=./output/market1501/cosine-softmax \
        --sequences=./my_videos --output_dir=./adapted --number_of_steps=2000

1. The sequences' confident motion-only tracklets become identity folders
   (:mod:`datasets.tracklets`): ``OUT/tracklets/``.
2. ``--model`` is fine-tuned on them with a new classifier (its network
   and input size) that starts at each tracklet's mean feature under
   ``--model`` (``--imprint``): ``OUT/run/``.
3. The self-calibrated gate of the model before and after, measured on
   the same tracklets (the share of same-tracklet pairs it cuts at 1 %
   false accepts: lower is better), and where the sequences have
   ``gt/gt.txt``, the IDF1 of Deep SORT at each model's calibrated gate.
4. The adapted encoder exported as ``--export`` asks (Deep SORT's frozen
   graph by default): ``OUT/adapted.pb``; the numbers go to
   ``OUT/adapt.json``.

``--output_dir`` must be new or empty: the steps write into it as they
go (a stopped training continues when the same command is run with
``--output_dir`` holding only what an interrupted run of it left).
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

import json
import os

from absl import app, flags

from cosine_metric_learning import checkpoints, cli, files, mot, settings
from cosine_metric_learning import track
from cosine_metric_learning.datasets import image_folder, tracklets
from cosine_metric_learning.datasets.spec import DatasetSpec
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.errors import parse_flags, report_errors

FLAGS = flags.FLAGS
FLAG_NAMES = {"path": "--model", "model": "--model",
              "sequences": "--sequences", "output_dir": "--output_dir",
              "number_of_steps": "--number_of_steps",
              "batch_size": "--batch_size", "export": "--export"}
EXPORTS = {"freeze": (cli.Mode.FREEZE, "adapted.pb"),
           "onnx": (cli.Mode.ONNX, "adapted.onnx"),
           "openvino": (cli.Mode.OPENVINO, "adapted.xml"),
           "tflite": (cli.Mode.TFLITE, "adapted.tflite"),
           "none": (None, None)}
# what the command writes in --output_dir
OWN = {"tracklets", "run", "adapt.json",
       *(name for _, name in EXPORTS.values() if name)}
REPORT = files.json_kind({"before", "after", "model"}, "the numbers of "
                         "this command (a JSON object with 'before', "
                         "'after' and 'model')")


def _check_output_dir(output_dir):
    """New, empty, or what an interrupted run of this command left."""
    if os.path.isdir(output_dir):
        extra = set(os.listdir(output_dir)) - OWN
        if extra:
            raise UsageError(
                f"refusing to write into {output_dir}: it holds "
                f"{sorted(extra)[0]}, which this command did not write; "
                "choose a new or empty folder")
    else:
        files.check_writable(os.path.dirname(os.path.abspath(output_dir)),
                             output_dir)


def _numbers(path, sequences, rows_of, scored, cache):
    """A model's gate and, with ground truth, its IDF1 at that gate."""
    gate = track.calibrate(path, sequences, rows_of, mot.DEFAULTS, cache)
    numbers = {"self_calibrated_gate": gate}
    if scored and gate is not None:
        numbers["IDF1"] = mot.track_and_score_features(
            scored, rows_of, {s.name: track.model_features(
                path, s, rows_of[s.name], cache) for s in scored},
            {**mot.DEFAULTS, "max_cosine_distance": gate["gate"]})["IDF1"]
    return numbers


def adapt(model, sequence_folders, output_dir, number_of_steps=2000,
          batch_size=64, export="freeze", **cut):
    """The four steps of the module's docstring; returns the report
    written to ``OUT/adapt.json``."""
    if export not in EXPORTS:
        raise ArgumentError("export", export,
                            f"expected one of {', '.join(EXPORTS)}")
    if number_of_steps < 1:
        raise ArgumentError("number_of_steps", number_of_steps,
                            "expected at least 1 step")
    # every input checked before the work
    _check_output_dir(output_dir)
    encoder, prefix = checkpoints.load_encoder(model)
    shape = tuple(encoder.input_shape[1:])
    sequences = [mot.read_sequence(f) for f in sequence_folders]
    mot.check_distinct(sequences, "sequence_folders", sequence_folders)
    scored = [s for s in sequences if s.ground_truth is not None]
    for sequence in scored:
        mot.check_ground_truth(sequence)
    folder = os.path.join(output_dir, "tracklets")
    config = settings.TrainConfig(
        dataset_dir=folder, log_dir=output_dir, run_id="run",
        restore_path=prefix, restore_classifier=False, imprint=True,
        number_of_steps=number_of_steps, batch_size=batch_size)
    config.validate()
    report_path = os.path.join(output_dir, "adapt.json")
    mode, name = EXPORTS[export]
    write, check, _ = cli.EXPORTERS[mode] if mode else (None, None, None)
    if os.path.isdir(output_dir):  # an interrupted run's files, if any
        files.check_output(report_path, REPORT)
        if check is not None:
            check(os.path.join(output_dir, name))
    os.makedirs(output_dir, exist_ok=True)

    if not os.path.isfile(os.path.join(folder, "manifest.json")):
        manifest = tracklets.extract(sequence_folders, folder, **cut)
    else:  # an interrupted run's
        with open(os.path.join(folder, "manifest.json")) as f:
            manifest = json.load(f)
    rows_of = {s.name: mot.detection_rows(s, "det",
                                          mot.DEFAULTS["min_confidence"],
                                          mot.DEFAULTS["nms_max_overlap"])
               for s in sequences}
    cache = {}
    before = _numbers(prefix, sequences, rows_of, scored, cache)

    split = image_folder.read_image_folder(folder)
    dataset = DatasetSpec(
        name="tracklets", num_classes=len(split.label_names),
        read_train=lambda _: split, default_dataset_dir=folder,
        image_shape=shape, label_names=split.label_names)
    status = cli.run_mode(dataset, cli.Mode.TRAIN, config)
    if status:
        return status
    adapted = checkpoints.resolve_checkpoint(os.path.join(output_dir,
                                                          "run"))
    after = _numbers(adapted, sequences, rows_of, scored, cache)
    report = {"model": model, "adapted": adapted, "tracklets": {
        "identities": len(manifest["identities"]),
        "crops": manifest["counts"]["kept"]},
        "number_of_steps": number_of_steps, "before": before,
        "after": after, "export": None}
    if mode is not None:
        encoder, _ = checkpoints.load_encoder(adapted)
        report["export"] = write(encoder, os.path.join(output_dir, name),
                                 shape)
    files.write_atomically(report_path, lambda f: json.dump(
        report, f, indent=1), REPORT)
    return report


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
        mot.require_tracker()
        report = adapt(
            FLAGS.model, mot.find_sequences(FLAGS.sequences),
            FLAGS.output_dir, FLAGS.number_of_steps, FLAGS.batch_size,
            FLAGS.export)
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
                        "tracklets, the run, the export and adapt.json.",
                        required=True)
    flags.DEFINE_integer("number_of_steps", 2000, "Fine-tuning steps.")
    flags.DEFINE_integer("batch_size", 64, "Fine-tuning batch size.")
    flags.DEFINE_enum("export", "freeze", list(EXPORTS), "How to export "
                      "the adapted encoder (freeze: Deep SORT's .pb).")


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=parse_flags)
