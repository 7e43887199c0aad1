"""What each loss learns in the same small budget, on unseen identities.

Trains every loss mode for the same number of steps and batch size on a
synthetic Market-1501 set (300 training identities, 100 unseen test
identities; or ``--dataset_dir``), then measures each with the standard
test protocol (``--mode=test``), tracks synthetic crossing scenes of
unseen people with each (IDF1 at the model's self-calibrated gate and at
the sweep's best), and prints the numbers side by side with those of the
untrained network and of motion alone. Cosine-softmax runs with each
recipe (``--recipe``: baseline, original, strong), with each trick alone
and with the five tricks together. ``--look_alike=20`` makes the harder
set: its identities, and the scenes' people, come in pairs that look
alike::

    python benchmarks/learning.py [--steps=600] [--batch_size=32] \
        [--look_alike=20] [--repeats=3] [--runs=LABEL,...] \
        [--real_crops=PETS-crops]

``--real_crops``: identity folders of real people none of the models saw
(the MOT converter's output of a real video's ground truth, e.g. PETS
2009 S2L1 frames 1-400 at ``--frame_stride=3``), on which each model's
mAP (``train_custom.py --mode=test``) is measured too: whether what a
loss learns on synthetic people carries over to real ones.

About 6 minutes per run on two CPU cores at the defaults.
"""

import argparse
import contextlib
import io
import itertools
import json
import os
import tempfile
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import logging

import real_video  # noqa: E402  (this folder's)

from cosine_metric_learning import mot_sequences, protocol, settings, track
from cosine_metric_learning import training
from cosine_metric_learning.datasets import synthetic, synthetic_mot
from cosine_metric_learning.datasets.spec import MARKET1501

# Luo et al.'s tricks and CosFace's margin, at the values measured, with
# the labels of their runs alone (the strong recipe before it was measured)
FIVE_TRICKS = {"warmup_steps": 100, "random_erasing": 0.5,
               "label_smoothing": 0.1, "cosine_margin": 0.1, "bnneck": True}
TRICK_LABELS = {"warmup_steps": "warm-up", "random_erasing": "erasing",
                "label_smoothing": "smoothing", "cosine_margin": "margin",
                "bnneck": "BNNeck"}

# (label, loss mode, training settings beyond the defaults)
RUNS = (
    ("triplet", "triplet", {}),
    ("magnet", "magnet", {}),
    ("cosine-softmax", "cosine-softmax", {}),
    ("cosine-softmax (original)", "cosine-softmax", {"recipe": "original"}),
    *((f"cosine-softmax + {TRICK_LABELS[key]}", "cosine-softmax",
       {key: value}) for key, value in FIVE_TRICKS.items()),
    ("cosine-softmax + imprint", "cosine-softmax", {"imprint": True}),
    ("cosine-softmax + triplet", "cosine-softmax", {"triplet_weight": 1.0}),
    *((f"cosine-softmax + {weight} x triplet", "cosine-softmax",
       {"triplet_weight": float(weight)}) for weight in (4, 8)),
    ("cosine-softmax + triplet + imprint", "cosine-softmax",
     {"triplet_weight": 1.0, "imprint": True}),
    ("cosine-softmax + five tricks", "cosine-softmax", FIVE_TRICKS),
    ("cosine-softmax (strong)", "cosine-softmax", {"recipe": "strong"}),
)


def train_and_test(dataset_dir, log_dir, run_number, label, loss_mode,
                   chosen, args, tracking):
    """Train one run; returns ``(seconds, test summary, first checkpoint)``."""
    values = dict(loss_mode=loss_mode, batch_size=args.batch_size,
                  number_of_steps=args.steps, save_interval_secs=1e9,
                  save_summaries_secs=1e9, log_interval_secs=60, **chosen)
    config = settings.TrainConfig(
        dataset_dir=dataset_dir, log_dir=log_dir, run_id=f"run{run_number}",
        **values)
    start = time.perf_counter()
    training.train(MARKET1501, config)
    seconds = time.perf_counter() - start
    run_dir = os.path.join(log_dir, config.run_id)
    return seconds, _test(dataset_dir, run_dir, tracking,
                          args.real_crops), os.path.join(run_dir, "ckpt-0")


def _test(dataset_dir, restore_path, tracking, real_crops=None):
    """The test protocol's numbers of a model and, with ``tracking``, the
    IDF1s it gives; with ``real_crops``, its mAP on them."""
    with contextlib.redirect_stdout(io.StringIO()):  # the table: ours below
        numbers = protocol.run_test(MARKET1501, restore_path, dataset_dir)
    if tracking:
        numbers.update(tracking(restore_path))
    if real_crops:
        numbers[REAL] = real_video.reid_map(restore_path, real_crops)
    return numbers


def tracking_of(sequences, folder):
    """A function of a model (or ``track.MOTION``) giving the IDF1 of
    tracking ``sequences`` (scored together) with it at its
    self-calibrated gate (``auto``, the gate the project recommends) and
    at the best gate of the sweep; each in a new folder under ``folder``."""
    count = itertools.count(1)
    os.makedirs(folder, exist_ok=True)

    def idf1(model):
        summary = track.evaluate(
            [model], sequences, "det", os.path.join(folder, str(next(count))),
            sweep=True, parameters={"max_cosine_distance": track.AUTO})
        entry = summary["models"][model]
        return {"IDF1 auto": entry["runs"][0]["metrics"]["COMBINED"]["IDF1"],
                "IDF1 best": entry["best"]["metrics"]["COMBINED"]["IDF1"]}

    return idf1


METRICS = ("rank-1", "mAP", "mINP")
TRACKING = ("IDF1 auto", "IDF1 best")
REAL = "mAP real"


def _spread(values):
    """``mean`` or ``mean +- sd`` (percent) of a run's repeats."""
    values = 100 * np.asarray(values)
    if len(values) == 1:
        return f"{values[0]:5.1f}"
    return f"{values.mean():5.1f} +- {values.std(ddof=1):4.1f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each configuration (training is not "
                        "seeded: the spread is the runs')")
    parser.add_argument("--dataset_dir", help="a Market-1501 layout "
                        "(default: a synthetic one, 300 + 100 identities)")
    parser.add_argument("--look_alike", type=float, default=0.0,
                        help="the synthetic set's identities in pairs whose "
                        "colours differ by about this much (0-255): a "
                        "harder set; 0 draws them independently")
    parser.add_argument("--scenes", default=synthetic_mot.HELD_OUT_SCENES,
                        help="pairs:frames:seed of each synthetic crossing "
                        "scene of unseen people (look-alike pairs with "
                        "--look_alike) tracked with each model; none: no "
                        "tracking")
    parser.add_argument("--runs", default=",".join(r[0] for r in RUNS),
                        help="comma-separated labels of the runs to make")
    parser.add_argument("--real_crops", help="identity folders of real "
                        "people (the MOT converter's output): each model's "
                        "mAP on them too")
    parser.add_argument("--output_json", help="write every run's numbers")
    args = parser.parse_args(argv)
    if args.real_crops and not os.path.isdir(args.real_crops):
        parser.error(f"--real_crops={args.real_crops}: not a folder")
    logging.set_verbosity(logging.INFO)  # the runs' progress lines
    if args.look_alike and args.dataset_dir:
        parser.error("--look_alike makes the synthetic set: not with "
                     "--dataset_dir")
    if args.scenes != "none":
        try:
            synthetic_mot.parse_scenes(args.scenes)
        except ValueError as e:
            parser.error(f"--scenes: {e}")
    chosen = args.runs.split(",")
    unknown = set(chosen) - {r[0] for r in RUNS}
    if unknown:
        parser.error(f"--runs: unknown {sorted(unknown)}; expected labels "
                     f"from {[r[0] for r in RUNS]}")
    results = {}  # label -> [(seconds, summary)] per repeat
    with tempfile.TemporaryDirectory() as tmp:
        dataset_dir = args.dataset_dir or synthetic.write_market1501(
            os.path.join(tmp, "Market-1501-synthetic"),
            look_alike=args.look_alike)
        tracking, metrics, motion = None, METRICS, None
        if args.scenes != "none":
            tracking = tracking_of(
                [mot_sequences.read_sequence(s)
                 for s in synthetic_mot.write_mot_scenes(
                    os.path.join(tmp, "scenes"), args.scenes,
                    args.look_alike)], os.path.join(tmp, "tracking"))
            metrics, motion = METRICS + TRACKING, tracking(track.MOTION)
        if args.real_crops:
            metrics += (REAL,)
        untrained = None
        for repeat in range(args.repeats):
            for number, (label, loss_mode, values) in enumerate(RUNS):
                if label not in chosen:
                    continue
                print(f"training {label} ({repeat + 1} of {args.repeats}): "
                      f"{args.steps} steps of batch {args.batch_size}",
                      flush=True)
                seconds, summary, first = train_and_test(
                    dataset_dir, os.path.join(tmp, "runs"),
                    f"{number}_{repeat}", label, loss_mode, values, args,
                    tracking)
                if untrained is None:  # the initial weights, before a step
                    untrained = _test(dataset_dir, first, tracking,
                                      args.real_crops)
                results.setdefault(label, []).append((seconds, summary))
    harder = (f", look-alike pairs {args.look_alike:g}"
              if args.look_alike else "")
    print(f"\nMarket-1501 layout{harder}, {args.steps} steps of batch "
          f"{args.batch_size}, test split (unseen identities), "
          f"{os.cpu_count()} CPU cores, {args.repeats} run(s) each")
    if tracking:
        print(f"IDF1: crossing scenes {args.scenes} of unseen people, scored "
              "together, at the model's self-calibrated gate (auto) and at "
              "the sweep's best")
    width = 13 if args.repeats > 1 else 9
    print(f"{'run':32s} {'train s':>8s} " + " ".join(
        f"{m:>{width}s}" for m in metrics))
    if motion:
        print(f"{'motion (one feature a box)':32s} {'':8s} " + " ".join(
            f"{_spread([motion[m]]) if m in motion else '':>{width}s}"
            for m in metrics))
    print(f"{'untrained':32s} {'':8s} " + " ".join(
        f"{_spread([untrained[m]]):>{width}s}" for m in metrics))
    for label, runs in results.items():
        seconds = np.mean([s for s, _ in runs])
        print(f"{label:32s} {seconds:8.0f} " + " ".join(
            f"{_spread([summary[m] for _, summary in runs]):>{width}s}"
            for m in metrics))
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump({"settings": vars(args), "motion_only": motion,
                       "untrained": {m: untrained[m] for m in metrics},
                       "runs": {label: [{"seconds": seconds,
                                         **{m: summary[m] for m in metrics}}
                                        for seconds, summary in runs]
                                for label, runs in results.items()}},
                      f, indent=1)


if __name__ == "__main__":
    main()
