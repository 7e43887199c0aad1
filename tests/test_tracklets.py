"""Tracklets of unlabeled video as identities, and the gate calibrated
without ground truth."""

import glob
import json
import os
import re
import shutil

import numpy as np
import pytest

from cosine_metric_learning import gates as gate_lib
from cosine_metric_learning import commands, metrics, mot_sequences, track
from cosine_metric_learning import track_report, tracking
from cosine_metric_learning.datasets import image_folder, synthetic_mot
from cosine_metric_learning.datasets import linking, tracklets
from cosine_metric_learning.errors import ArgumentError, UsageError
from tests.conftest import one_error_line, run_script
from tests.helpers import gates


def _row(frame, left, confidence=0.9, top=10, width=20, height=40):
    return [frame, -1, left, top, width, height, confidence]


def test_the_cutter_cuts_at_crossings_losses_and_doubt():
    rows, matches = [], []

    def add(frame, track_id, left, confidence=0.9):
        matches.append((frame, track_id, len(rows)))
        rows.append(_row(frame, left, confidence))

    for frame in range(1, 21):  # track 1 walks right; track 2 crosses it
        add(frame, 1, 10 + 2 * frame)
        add(frame, 2, 200 - 8 * frame if frame < 25 else 0)
    # the boxes overlap from frame 18 (track 1 at 46-66, track 2 at
    # 56-76): the tracklets are cut there
    for frame in list(range(1, 7)) + list(range(9, 16)):  # lost 7-8
        add(frame, 3, 300, confidence=0.2 if frame == 12 else 0.9)
    rows.append(_row(5, 500))  # a detection no confirmed track took
    rows = np.asarray(rows, float)
    covered = tracklets.coverage(rows)
    overlapping = {int(rows[i, 0]) for i in np.flatnonzero(covered > 0.1)}
    assert overlapping == {18, 19, 20}
    pieces, crops, counts = tracklets.cut_tracklets(
        rows, matches, (200, 640, 3), min_confidence=0.5, max_overlap=0.1,
        min_length=4, frame_stride=2, min_height=0)
    frames = [sorted(int(rows[i, 0]) for i in piece) for piece in pieces]
    # track 1 and 2: frames 1-17; track 3: 1-6, then 9-11 (too short:
    # 3 frames) and 13-15 (too short), cut by the loss and the doubt
    assert frames == [list(range(1, 18)), list(range(1, 18)),
                      list(range(1, 7))]
    assert counts == {"untracked": 1, "confidence": 1, "overlap": 6,
                      "outside": 0, "height": 0, "short": 6,
                      "stride": 8 + 8 + 3}
    assert sum(counts.values()) + len(crops) == len(rows)
    # every second frame of a piece, numbered by piece, clipped boxes
    assert [(p, f) for p, f, _ in crops if p == 3] == [(3, 1), (3, 3),
                                                       (3, 5)]
    assert crops[0][2] == (12, 10, 32, 50)


def test_crops_are_cut_as_the_box_encoder_cuts_them():
    """Widened about the box's centre to the patch's 1:2, clipped to the
    frame; the numbers worked out by hand."""
    import types
    sequence = types.SimpleNamespace(image_shape=(480, 640, 3))
    rows = np.zeros((3, 7))
    rows[:, 0] = [1, 2, 2]
    rows[0, 2:6] = [100, 50, 30, 80]  # widened to 40: x from 95
    rows[1, 2:6] = [0, 10, 20, 60]  # widened to 30: x from -5, clipped
    rows[2, 2:6] = [600, 400, 60, 120]  # already 1:2, clipped at 639, 479
    pieces = [[0, 1], [2]]
    crops = [(1, 1, (100, 50, 130, 130)), (1, 2, (0, 10, 20, 70)),
             (2, 2, (600, 400, 639, 479))]
    assert tracklets.encoder_crops(sequence, rows, pieces, crops,
                                   (128, 64, 3)) == [
        (1, 1, (95, 50, 135, 130)), (1, 2, (0, 10, 25, 70)),
        (2, 2, (600, 400, 639, 479))]


def test_the_gate_from_known_distributions():
    same = np.array([0.01, 0.02, 0.05, 0.2])
    different = np.array([0.04, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1,
                          1.2])
    gate = gate_lib.self_calibrated_gate(same, different, false_accept=0.1,
                                         false_reject=None)
    # one of ten different pairs is at or below 0.04; two of four same
    # pairs lie above it
    assert gate == {"gate": 0.04, "false_accept": 0.1, "false_reject": 0.5,
                    "bound": "false accepts", "same_pairs": 4,
                    "different_pairs": 10}
    # cutting no more than a quarter of the same pairs raises it to 0.05,
    # which also accepts 0.04
    gate = gate_lib.self_calibrated_gate(same, different, false_accept=0.1,
                                         false_reject=0.25)
    assert gate == {"gate": 0.05, "false_accept": 0.1, "false_reject": 0.25,
                    "bound": "false rejects", "same_pairs": 4,
                    "different_pairs": 10}
    # a bound the false accepts already keep leaves the gate
    assert gate_lib.self_calibrated_gate(
        same, different, false_accept=0.2, false_reject=0.25)["gate"] == 0.3
    assert gate_lib.self_calibrated_gate(same, []) is None
    # each tracker's statement of a gate of 0.04, as its code reads it
    # (tests/consumers/check_gates.py runs them through the trackers)
    assert dict(gate_lib.gate_settings(0.04)) == {
        "Deep SORT": "--max_cosine_distance=0.04",
        "BoxMOT BoT-SORT 25": "appearance_thresh=0.04",
        "BoxMOT StrongSORT 25": "max_cos_dist=0.04",
        "Ultralytics BoT-SORT 8.4": "appearance_thresh: 0.98"}
    noted = dict(gate_lib.gate_settings(0.04, notes=True))
    assert noted["BoxMOT BoT-SORT 25"].startswith("appearance_thresh=0.04 (")
    assert "unconfirmed" in noted["BoxMOT BoT-SORT 25"]


@pytest.mark.parametrize("gate", [0.1, 0.3])
def test_deep_sort_setting_accepts_inside_the_gate_and_rejects_outside(gate):
    """The printed Deep SORT setting, in Deep SORT's tracker: a
    confirmed track missed for a frame (so its IoU stage cannot take it
    up) keeps its detection at a cosine distance just inside the gate
    and loses the one just outside."""
    name, value = gates.printed_setting("Deep SORT", gate)
    parameters = {**tracking.DEFAULTS, name: value}
    for distance, accepted in zip(gates.inside_and_outside(gate),
                                  (True, False)):
        seen, later = gates.pair_at(distance)
        # frames 1-3 confirm the track (n_init=3); frame 4 misses it
        rows = np.asarray([[frame, -1, 100, 100, 50, 100, 1]
                           for frame in (1, 2, 3, 5)], float)
        matches = []
        tracking.track(rows, np.stack([seen] * 3 + [later]), 5, parameters,
                       matches=matches)
        assert ((5, 1, 3) in matches) == accepted, distance
        assert (3, 1, 2) in matches


def test_pairs_are_a_pieces_boxes_apart_and_a_frames_boxes():
    rows = np.asarray([_row(f, 0) for f in (1, 5, 12)]
                      + [_row(f, 100) for f in (1, 12)], float)
    angles = np.array([0.0, 0.1, 0.2, 1.0, 1.5])
    features = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    same, different = gate_lib.pair_distances(
        features, rows, [[0, 1, 2], [3, 4]], frame_gap=10)
    # same: (1, 12) of the first piece, (1, 12) of the second; different:
    # frame 1 (rows 0, 3) and frame 12 (rows 2, 4)
    np.testing.assert_allclose(sorted(same), sorted(
        [1 - np.cos(0.2), 1 - np.cos(0.5)]))
    np.testing.assert_allclose(sorted(different), sorted(
        [1 - np.cos(1.0), 1 - np.cos(1.3)]))


def test_refined_sweep_between_the_best_gates_neighbours():
    def run(gate, idf1):
        return {"parameters": {**tracking.DEFAULTS,
                               "max_cosine_distance": gate},
                "metrics": {"COMBINED": {"IDF1": idf1}}}
    runs = [run(0.02, 0.7), run(0.05, 0.6), run(0.01, 0.5), run(0.2, 0.4)]
    settings = track.refined_settings(runs, {"gate": 0.031})
    # the best, 0.02, lies between 0.01 and 0.05: five gates between
    # them, and the calibrated one
    assert [s["max_cosine_distance"] for s in settings] == [
        0.0167, 0.0233, 0.03, 0.0367, 0.0433, 0.031]
    assert {s["nn_budget"] for s in settings} == {100}


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """Two pairs of unseen people who cross behind a pillar."""
    return synthetic_mot.write_mot_sequence(
        str(tmp_path_factory.mktemp("scene")), num_pairs=2, num_frames=80,
        seed=9, name="SCENE-01")


def _person_of(sequence, row):
    gt = sequence.ground_truth[sequence.ground_truth[:, 0] == row[0]]
    distance = np.abs(gt[:, 2:4] - row[2:4]).sum(axis=1)
    return int(gt[np.argmin(distance), 1])


def test_pieces_seen_together_are_those_sharing_a_frame():
    # piece 1 frames 1-3, piece 2 frames 3-4 (shares frame 3), piece 3
    # frames 5-6 (after both), piece 4 frames 6 and 8 (shares 6 with 3)
    frames = [1, 2, 3, 3, 4, 5, 6, 6, 8]
    rows = np.asarray([_row(f, 0) for f in frames], float)
    pieces = [[0, 1, 2], [3, 4], [5, 6], [7, 8]]
    assert tracklets.seen_together(rows, pieces) == [(1, 2), (3, 4)]
    assert tracklets.seen_together(rows, pieces[:1]) == []


def test_tracklets_of_a_crossing_scene_are_one_person_each(scene, trained,
                                                           tmp_path):
    out = tmp_path / "people"
    result = run_script("-m", "cosine_metric_learning.datasets.tracklets",
                        f"--sequences={scene}", f"--output_dir={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["gate"] is None and manifest["model"] == "none"
    assert f"as {len(manifest['identities'])} tracklets in {out}" in \
        result.stdout
    # the folders train as identities
    split = image_folder.read_image_folder(str(out))
    assert split.label_names == sorted(manifest["identities"])
    assert len(split.filenames) == manifest["counts"]["kept"] > 0
    # each piece holds one person (the ground truth, never read by the
    # command, says whose box each detection is)
    sequence = mot_sequences.read_sequence(scene)
    rows = tracking.detection_rows(sequence, "det", 0.3, 1.0)
    pieces = tracklets.motion_pieces(sequence, rows)[0]
    assert len(pieces) == len(manifest["identities"])
    person = []
    for piece in pieces:
        people = {_person_of(sequence, rows[i]) for i in piece}
        assert len(people) == 1
        person.extend(people)
    # the pieces seen together are different people, and are listed
    together = manifest["seen_together"]
    assert len(together) > 0

    def person_of(name):  # <sequence>_<piece number from 1>
        return person[int(name.rsplit("_", 1)[1]) - 1]

    for a, b in together:
        assert a in manifest["identities"] and b in manifest["identities"]
        assert person_of(a) != person_of(b)
    # with a model: tracked at its gate, which the manifest reports
    manifest = tracklets.extract([scene], str(tmp_path / "model"),
                                 model=trained[0])
    gate = manifest["gate"]
    assert 0 < gate["gate"] < 2
    _check_bounds(gate)
    assert gate["same_pairs"] > 0 and gate["different_pairs"] > 0


def _check_bounds(gate):
    """A calibrated gate cuts at most its share of same pairs and, unless
    that share set it, accepts about its share of different pairs."""
    assert gate["false_reject"] <= gate_lib.GATE_FALSE_REJECT
    assert gate["bound"] in ("false accepts", "false rejects")
    if gate["bound"] == "false accepts":
        assert gate["false_accept"] <= 2 * gate_lib.GATE_FALSE_ACCEPT
    else:
        assert gate["false_accept"] >= gate_lib.GATE_FALSE_ACCEPT


def test_bad_input_to_the_tracklets_is_one_line(scene, tmp_path):
    def copy(name):
        folder = tmp_path / name / "SCENE-01"
        shutil.copytree(scene, folder)
        return folder

    no_det = copy("no_det")
    shutil.rmtree(no_det / "det")
    empty = copy("empty")
    (empty / "det" / "det.txt").write_text("")
    outside = copy("outside")
    rows = np.loadtxt(outside / "det" / "det.txt", delimiter=",")
    rows[:, 2] += 5000
    np.savetxt(outside / "det" / "det.txt", rows, delimiter=",", fmt="%.3f")
    for folder, message in ((no_det, "no '"), (empty, "is empty"),
                            (outside, "every box of")):
        with pytest.raises(UsageError, match=message) as error:
            tracklets.extract([str(folder)], str(tmp_path / "out"))
        # the ground truth is never read: never asked for
        assert "gt.txt" not in str(error.value)
    with pytest.raises(UsageError, match="max_overlap=1.5"):
        tracklets.extract([scene], str(tmp_path / "out"), max_overlap=1.5)
    assert not (tmp_path / "out").exists()
    result = run_script("-m", "cosine_metric_learning.datasets.tracklets",
                        f"--sequences={scene}", "--model=nope.onnx",
                        f"--output_dir={tmp_path / 'out'}")
    one_error_line(result, "--model=nope.onnx: no such file")
    # a folder of the user's is never written into
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="refusing to replace"):
        tracklets.extract([scene], str(tmp_path / "mine"))


def test_the_score_scale_and_what_each_threshold_keeps():
    rows = np.asarray([_row(1, 0, c) for c in (20.0, 35.5, 90.0, 150.0)])
    sequence = mot_sequences.Sequence("ACF-01", "ACF-01", 1, (100, 100, 3),
                                      [], rows, None)
    line = tracking.describe_scores(
        sequence, [("--track_min_confidence", 0.3), ("--min_confidence", 90),
                   ("--cut", 151)])
    assert line == (
        "ACF-01: 4 detections scored 20 to 150; --track_min_confidence=0.3 "
        "keeps 4 (every one: it cuts nothing on this scale), "
        "--min_confidence=90 keeps 2, --cut=151 keeps 0 (none: every score "
        "is below it)")


def _scaled(scene, folder, factor):
    """A copy of the scene with its detection scores times ``factor``."""
    copy = folder / os.path.basename(scene)
    shutil.copytree(scene, copy)
    rows = np.loadtxt(copy / "det" / "det.txt", delimiter=",")
    rows[:, 6] *= factor
    np.savetxt(copy / "det" / "det.txt", rows, delimiter=",", fmt="%.6g")
    return copy


def test_every_threshold_on_detections_is_a_flag_the_message_names(
        scene, tmp_path, absl_log):
    # scores from 0.007 to 0.1: the tracker's cut (0.3) keeps none
    low = _scaled(scene, tmp_path / "low", 0.1)
    result = run_script("-m", "cosine_metric_learning.datasets.tracklets",
                        f"--sequences={low}", "--min_confidence=0.01",
                        f"--output_dir={tmp_path / 'out'}")
    one_error_line(result, "--track_min_confidence=0.3: sequence SCENE-01 "
                   "has no detection left")
    # the flag lowers it; scores on another scale (ACF's: 7 to 100) are
    # said, with what each threshold keeps, before the work
    high = _scaled(scene, tmp_path / "high", 100)
    manifest = tracklets.extract([str(high)], str(tmp_path / "out"),
                                 track_min_confidence=30, min_confidence=0.5)
    sequence = mot_sequences.read_sequence(str(high))
    assert tracking.describe_scores(sequence, [
        ("--track_min_confidence", 30), ("--min_confidence", 0.5)]) in \
        absl_log.text
    assert "--min_confidence=0.5 keeps 293 (every one: it cuts nothing " \
        "on this scale)" in absl_log.text
    assert manifest["filters"]["track_min_confidence"] == 30
    assert manifest["counts"]["confidence"] == 0  # 0.5 cut nothing


def test_track_with_the_self_calibrated_gate(scene, trained, tmp_path):
    summary = track.evaluate([trained[0]],
                             [mot_sequences.read_sequence(scene)], "det",
                             str(tmp_path / "out"), sweep=False,
                             parameters={"max_cosine_distance": "auto"})
    entry = summary["models"][trained[0]]
    calibrated = entry["self_calibrated_gate"]
    assert entry["runs"][0]["parameters"]["max_cosine_distance"] == round(
        calibrated["gate"], 4)
    assert calibrated["conventions"]["Deep SORT"] == \
        f"--max_cosine_distance={calibrated['gate']:.4g}"
    assert os.path.isfile(os.path.join(entry["runs"][0]["results"],
                                       "SCENE-01.txt"))
    assert "; used, as --max_cosine_distance=auto asks" in \
        track_report.format_gates(entry, track.parse_gate("Auto"))
    with pytest.raises(UsageError, match="max_cosine_distance='often'"):
        track.parse_gate("often")


def test_adapt_from_unlabeled_video_in_one_command(scene, trained, tmp_path,
                                                   monkeypatch):
    from cosine_metric_learning import adapt, adapt_report
    from cosine_metric_learning import encoder as encoder_lib
    out = tmp_path / "adapted"
    report = adapt.adapt(trained[0], [scene], str(out), number_of_steps=3,
                         batch_size=16)
    assert report == json.loads((out / "adapt.json").read_text())
    assert report["tracklets"]["identities"] == len(os.listdir(
        out / "tracklets")) - 1  # and the manifest
    assert os.path.basename(report["adapted"]).startswith("ckpt-")
    # the crops are the patches the box encoder cuts: 1:2 as the model's
    # 128x64 input, where the frame did not clip them
    from PIL import Image
    sizes = [Image.open(f).size for f in glob.glob(
        str(out / "tracklets" / "*" / "*.jpg"))]
    assert len(sizes) == report["tracklets"]["crops"] > 0
    assert json.loads((out / "tracklets" / "manifest.json").read_text())[
        "patch_shape"] == [128, 64, 3]
    assert np.median([w / h for w, h in sizes]) == pytest.approx(0.5,
                                                                 abs=0.02)
    # the triplet loss, and only the last fully-connected layer onwards
    # trained: the convolutions are the start model's, to the bit, their
    # batch-norm statistics those of the tracklets' crops
    recorded = json.loads((out / "run" / "run.json").read_text())
    assert recorded["loss_mode"] == "triplet"
    assert report["method"]["train_from"] == "fc1"
    # negatives only between the tracklets seen together
    assert report["fine_tuning"]["pairs_seen_together"] == len(json.loads(
        (out / "tracklets" / "manifest.json").read_text())["seen_together"])
    assert report["fine_tuning"]["pairs_seen_together"] > 0
    # tracklets linked across short gaps: each link joins two identities
    # of the fine-tuning, which the run's labels name
    manifest = json.loads((out / "tracklets" / "manifest.json").read_text())
    linked = report["fine_tuning"]["linked"]
    assert linked["identities"] == report["tracklets"]["identities"] - len(
        linked["links"])
    for a, b, distance in linked["links"]:
        (sequence, _, end), (other, start, _) = (manifest["spans"][a],
                                                 manifest["spans"][b])
        assert sequence == other and \
            1 <= start - end <= report["method"]["link_max_gap"]
        assert distance < linked["threshold"]
    labels = json.loads((out / "run" / "labels.json").read_text())["labels"]
    assert sorted(n for name in labels.values() for n in name.split("+")) \
        == sorted(manifest["identities"])
    assert len(labels) == linked["identities"]
    from cosine_metric_learning import checkpoints
    tuned, _ = checkpoints.load_encoder(report["adapted"])
    statistics, _ = checkpoints.load_encoder(report["fine_tuning"][
        "starts_from"])
    assert report["fine_tuning"]["starts_from"] == str(
        out / "statistics" / "ckpt-1")
    start = trained[1]
    moved = []
    for layer in start.layers:
        for old, new, reestimated in zip(
                layer.weights, tuned.get_layer(layer.name).weights,
                statistics.get_layer(layer.name).weights):
            if "moving_" in old.path:
                moved.append(not np.allclose(old.numpy(), reestimated.numpy()))
                if layer.name != "fc1_bn":  # frozen since
                    np.testing.assert_array_equal(new.numpy(),
                                                  reestimated.numpy())
                continue
            same = np.array_equal(old.numpy(), new.numpy())
            assert same == (layer.name not in ("fc1", "fc1_bn")), \
                (layer.name, old.name)
            np.testing.assert_array_equal(old.numpy(), reestimated.numpy())
    assert len(moved) == 28 and all(moved)  # 14 layers' means, variances
    # the check on the held-out frames (the last fifth, never trained on)
    held = report["held_out"]
    assert held["first_frames"] == {"SCENE-01": 65}
    assert held["verdict"] in ("better", "worse", "no clear difference",
                               "unchecked")
    assert report["kept"] == ("adapted" if held["verdict"] == "better" or (
        held["verdict"] == "no clear difference" and held["difference"] > 0)
        else "start")
    assert report["kept_checkpoint"] == (
        report["adapted"] if report["kept"] == "adapted"
        else os.path.abspath(trained[0]))
    for when in ("before", "after"):  # the scene has ground truth
        assert 0 < report[when]["IDF1"] <= 1
        _check_bounds(report[when]["self_calibrated_gate"])
    # the kept encoder, exported as Deep SORT loads it; --keep chooses
    exported = encoder_lib.load(report["export"])
    patches = np.random.default_rng(0).integers(0, 256, (4, 128, 64, 3),
                                                dtype=np.uint8)
    features = exported(patches)
    np.testing.assert_allclose(np.linalg.norm(features, axis=1), 1,
                               atol=1e-5)
    np.testing.assert_allclose(features, encoder_lib.load(
        report["kept_checkpoint"])(patches), atol=1e-4)
    # the other model on asking, from the finished run (not trained again)
    keep, source = (("start", trained[0]) if report["kept"] == "adapted"
                    else ("adapted", report["adapted"]))

    def measured_again(*_, **__):
        raise AssertionError("a finished run was measured again")

    with monkeypatch.context() as patched:  # its measurements are kept
        patched.setattr(adapt, "_numbers", measured_again)
        patched.setattr(adapt, "_held_out", measured_again)
        chosen = adapt.adapt(trained[0], [scene], str(out),
                             number_of_steps=3, batch_size=16, keep=keep)
    assert chosen["held_out"] == report["held_out"]
    assert chosen["kept"] == keep and chosen["kept_why"] == f"--keep={keep}"
    assert report["kept_why"] == adapt.kept_why("auto", held)
    np.testing.assert_allclose(encoder_lib.load(chosen["export"])(patches),
                               encoder_lib.load(source)(patches), atol=1e-4)
    assert np.abs(encoder_lib.load(report["adapted"])(patches)
                  - encoder_lib.load(trained[0])(patches)).max() > 1e-4
    print(adapt_report.format_report(report))
    # what the run is made of, for a rerun to compare
    assert report["model"] == trained[0]
    assert report["checkpoint"]["path"] == os.path.abspath(trained[0])
    assert [(s["name"], s["path"]) for s in report["sequences"]] == [
        ("SCENE-01", os.path.realpath(scene))]
    assert report["settings"] == {
        "number_of_steps": 3, "batch_size": 16, "track_min_confidence": 0.3,
        "holdout": adapt.HOLDOUT, **tracklets.DEFAULTS, "export": "freeze"}
    # the same inputs: the finished run is measured again, not trained
    checkpoints = sorted(os.listdir(out / "run"))
    again = adapt.adapt(trained[0], [scene], str(out), number_of_steps=3,
                        batch_size=16)
    assert again["adapted"] == report["adapted"]
    assert sorted(os.listdir(out / "run")) == checkpoints
    # anything that shapes the run otherwise: refused, nothing changes
    recorded = (out / "adapt.json").read_bytes()
    with pytest.raises(UsageError, match="it ran with --number_of_steps=3, "
                       "not --number_of_steps=4; give a new --output_dir"):
        adapt.adapt(trained[0], [scene], str(out), number_of_steps=4,
                    batch_size=16)
    with pytest.raises(UsageError, match="--min_length=8, not "
                       "--min_length=4"):
        adapt.adapt(trained[0], [scene], str(out), number_of_steps=3,
                    batch_size=16, min_length=4)
    # an earlier release's run, which fine-tuned otherwise: refused
    earlier = json.loads((out / "adapt.json").read_text())
    earlier["method"] = {**earlier["method"], "negatives": "every other"}
    (out / "adapt.json").write_text(json.dumps(earlier))
    with pytest.raises(UsageError, match="an earlier release made it.*"
                       "negatives: every other then"):
        adapt.adapt(trained[0], [scene], str(out), number_of_steps=3,
                    batch_size=16)
    (out / "adapt.json").write_bytes(recorded)
    other_model = tmp_path / "other" / "ckpt-7"
    other_model.parent.mkdir()
    for part in glob.glob(trained[0] + ".*"):
        shutil.copy(part, str(other_model) + part[len(trained[0]):])
    other_scene = tmp_path / "copy" / "SCENE-01"
    shutil.copytree(scene, other_scene)
    result = run_script("-m", "cosine_metric_learning.adapt",
                        f"--model={other_model}", f"--sequences={scene}",
                        f"--output_dir={out}", "--number_of_steps=3",
                        "--batch_size=16")
    one_error_line(result, f"refusing to continue the run in {out}: it "
                   f"adapts {os.path.abspath(trained[0])}, not "
                   f"--model={other_model}")
    with pytest.raises(UsageError, match="it adapts on .*, not on "
                       f".*{os.path.join('copy', 'SCENE-01')}"):
        adapt.adapt(trained[0], [str(other_scene)], str(out),
                    number_of_steps=3, batch_size=16)
    assert (out / "adapt.json").read_bytes() == recorded
    assert sorted(os.listdir(out / "run")) == checkpoints
    # a folder with the user's files in it, a bad export: one line each
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="holds notes.txt"):
        adapt.adapt(trained[0], [scene], str(tmp_path / "mine"))
    with pytest.raises(UsageError, match="export='zip'"):
        adapt.adapt(trained[0], [scene], str(tmp_path / "new"), export="zip")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"
    # checked before the work: an adapt.json of someone else's, a model
    # that does not load; nothing is made
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "adapt.json").write_text('{"mine": 1}')
    with pytest.raises(UsageError, match="refusing to replace"):
        adapt.adapt(trained[0], [scene], str(tmp_path / "theirs"))
    assert os.listdir(tmp_path / "theirs") == ["adapt.json"]
    with pytest.raises(UsageError, match="no such checkpoint"):
        adapt.adapt(str(tmp_path / "nope"), [scene], str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()


def test_adapt_refuses_before_the_work_and_leaves_nothing_behind(
        scene, trained, tmp_path):
    from cosine_metric_learning import adapt
    # a file where the folder should be
    (tmp_path / "a_file").write_text("mine")
    with pytest.raises(ArgumentError) as error:
        adapt.adapt(trained[0], [scene], str(tmp_path / "a_file"))
    assert error.value.for_flags(commands.flag_names(adapt.COMMAND_SETTINGS)) == (
        f"--output_dir={tmp_path / 'a_file'}: it is a file; expected a new "
        "or empty folder, or an earlier output of this command")
    assert (tmp_path / "a_file").read_text() == "mine"
    # the user's own training run in the folder: refused before tracking
    users = tmp_path / "users"
    (users / "run").mkdir(parents=True)
    for part in glob.glob(trained[0] + ".*"):
        shutil.copy(part, users / "run")
    before = sorted(os.listdir(users / "run"))
    with pytest.raises(UsageError, match="it holds run but no adapt.json"):
        adapt.adapt(trained[0], [scene], str(users))
    assert os.listdir(users) == ["run"]
    assert sorted(os.listdir(users / "run")) == before
    # the project's own frozen graph: it encodes, but cannot be trained
    from cosine_metric_learning import checkpoints, export
    encoder, _ = checkpoints.load_encoder(trained[0])
    frozen = str(tmp_path / "frozen.pb")
    export.freeze(encoder, frozen, encoder.input_shape[1:])
    with pytest.raises(ArgumentError, match="training needs the checkpoint "
                       "or run it was frozen from"):
        adapt.adapt(frozen, [scene], str(tmp_path / "from_pb"))
    assert not (tmp_path / "from_pb").exists()
    # the thresholds a refusal names are flags of the command, and a
    # refused run leaves no folder: a 5-frame sequence has no tracklet,
    # scores below the tracker's cut leave no detection
    short = synthetic_mot.write_mot_sequence(str(tmp_path / "short"),
                                         num_pairs=2, num_frames=5, seed=9,
                                         name="SHORT-01")
    low = _scaled(scene, tmp_path / "low", 0.1)
    help_text = run_script("-m", "cosine_metric_learning.adapt",
                           "--helpshort").stdout
    out = tmp_path / "out_low"
    result = run_script("-m", "cosine_metric_learning.adapt",
                        f"--model={trained[0]}", f"--sequences={low}",
                        f"--output_dir={out}")
    lines = [one_error_line(result, "--track_min_confidence=0.3: sequence "
                            "SCENE-01 has no detection left")]
    assert not out.exists()
    out = tmp_path / "out_short"
    with pytest.raises(UsageError, match="no tracklet is left after the "
                       "cuts") as error:
        adapt.adapt(trained[0], [short], str(out))
    lines.append(str(error.value))
    for line, out in zip(lines, (tmp_path / "out_low", out)):
        named = re.findall(r"--(\w+)", line)
        assert named, line
        for flag in named:
            assert f"--{flag}:" in help_text, flag
        assert not out.exists()
    # the help says how the gate is set, as the code sets it
    assert (f"lets {100 * gate_lib.GATE_FALSE_ACCEPT:g} % of the same-frame"
            in " ".join(help_text.split()))
    assert (f"cut more than {100 * gate_lib.GATE_FALSE_REJECT:g} % of the "
            "same-tracklet pairs" in " ".join(help_text.split()))


def test_held_out_ranking_and_verdict_against_hand_counts():
    from cosine_metric_learning import adapt
    # every (same, different) pair counted by hand: 0.1 < 0.2, 0.1 < 0.4,
    # 0.3 > 0.2, 0.3 < 0.4; a tie counts half
    assert metrics.ranking_score([0.1, 0.3], [0.2, 0.4]) == 0.75
    assert metrics.ranking_score([0.2], [0.2, 0.3]) == 0.75
    rng = np.random.default_rng(0)
    same, different = rng.uniform(size=7), rng.uniform(size=5)
    ws, wd = rng.integers(0, 4, 7).astype(float), rng.integers(1, 4, 5)
    brute = sum(a * b * ((s < d) + 0.5 * (s == d))
                for s, a in zip(same, ws) for d, b in zip(different, wd))
    assert metrics.ranking_score(same, different, ws, wd.astype(float)) == \
        pytest.approx(brute / (ws.sum() * wd.sum()))
    # 8 tracklets: 3 same-tracklet pairs each, different pairs between
    # neighbours; "after" moves every same pair beyond every different
    # pair, or the reverse
    pieces = 8
    same_piece = np.repeat(np.arange(pieces), 3)
    different_pieces = np.array([(i, (i + 1) % pieces)
                                 for i in range(pieces)] * 2)
    before = (rng.uniform(0.0, 1.0, len(same_piece)),
              rng.uniform(0.0, 1.0, len(different_pieces)))
    worse = (before[0] + 1.0, before[1])
    better = (before[0] * 0.1, before[1] + 1.0)
    for after, verdict in ((worse, "worse"), (better, "better"),
                           (before, "no clear difference")):
        check = metrics.held_out_check(before, after, same_piece,
                                       different_pieces, pieces)
        assert check["verdict"] == verdict, check
        assert check["difference"] == pytest.approx(
            metrics.ranking_score(*after) - metrics.ranking_score(*before))
        low, high = check["interval"]
        assert low <= check["difference"] <= high
        # --keep=auto takes the adapted model where it is better
        assert adapt.held_out_gain(check) == (verdict == "better")
    # a slight lean either way, within the interval: the better of the two
    for shift, gain in ((-0.02, True), (0.02, False)):
        leaning = (before[0] + shift, before[1])
        check = metrics.held_out_check(before, leaning, same_piece,
                                       different_pieces, pieces)
        assert check["verdict"] == "no clear difference", check
        assert (check["difference"] > 0) == gain
        assert adapt.held_out_gain(check) == gain
    # too few tracklets to say
    few = metrics.held_out_check(before, worse, same_piece % 2,
                                 different_pieces % 2, 2)
    assert few["verdict"] == "unchecked" and "2 tracklets" in few["why"]
    assert not adapt.held_out_gain(few)
    # nothing held out (an end of the video without detections)
    empty = (np.zeros(0), np.zeros(0))
    assert metrics.ranking_score([0.1], []) is None
    nothing = metrics.held_out_check(empty, empty, np.zeros(0, int),
                                     np.zeros((0, 2), int), 0)
    assert nothing["verdict"] == "unchecked" and "0 tracklets" in \
        nothing["why"]


def _unit(*angles):  # 2-D unit features at these angles (degrees)
    radians = np.radians(angles)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)


def test_tracklets_are_linked_across_short_gaps_to_their_nearest():
    # one sequence: tracklets 0 and 1 seen together (frames 1-10); 2 and
    # 3 start after them, 4 long after; 5 in another sequence
    spans = [("A", 1, 10), ("A", 5, 10), ("A", 13, 20), ("A", 12, 30),
             ("A", 80, 90), ("B", 11, 20)]
    seen_together = np.zeros((6, 6), bool)
    seen_together[0, 1] = seen_together[1, 0] = True
    seen_together[2, 3] = seen_together[3, 2] = True
    # 2 is near 0 (5 degrees) and 1 (8), 3 near 1 (3), 4 and 5 at 0's
    features = _unit(0, 90, 5, 93, 0, 0)
    identity, links, threshold = linking.link_tracklets(
        features, spans, seen_together, max_gap=30, false_accept=0.5)
    # the threshold: the median of the two seen-together distances
    expected = np.median([1 - np.cos(np.radians(90)),
                          1 - np.cos(np.radians(88))])
    assert threshold == pytest.approx(expected)
    # 0-2 and 1-3 link; 4 starts too late, 5 is another sequence
    assert [(a, b) for a, b, _ in links] == [(0, 2), (1, 3)]
    assert links[0][2] == pytest.approx(1 - np.cos(np.radians(5)))
    assert identity.tolist() == [0, 1, 0, 1, 2, 3]
    # a tighter gap and nothing links; with no pair seen together neither
    assert linking.link_tracklets(features, spans, seen_together,
                                  max_gap=1)[1] == []
    identity, links, threshold = linking.link_tracklets(
        features, spans, np.zeros((6, 6), bool), max_gap=30)
    assert (identity.tolist(), links, threshold) == (list(range(6)), [], None)


def test_links_are_mutual_chain_forward_and_stay_under_the_threshold():
    # 0 then 1 then 2, one after the other; 3 seen with each; 4 after 0
    # but 1 is nearer to 0, so 4 stays alone
    spans = [("A", 1, 10), ("A", 12, 20), ("A", 22, 30), ("A", 1, 30),
             ("A", 14, 18)]
    seen_together = np.zeros((5, 5), bool)
    for a in range(3):
        seen_together[a, 3] = seen_together[3, a] = True
    seen_together[4, 3] = seen_together[3, 4] = True
    features = _unit(0, 2, 4, 90, 10)
    identity, links, _ = linking.link_tracklets(
        features, spans, seen_together, max_gap=30, false_accept=0.05)
    assert [(a, b) for a, b, _ in links] == [(0, 1), (1, 2)]
    assert identity.tolist() == [0, 0, 0, 1, 2]
    # 1 as far from 0 as the people seen together: below no threshold
    features = _unit(0, 90, 92, 180, 10)
    identity, links, threshold = linking.link_tracklets(
        features, spans, seen_together, max_gap=30, false_accept=0.05)
    assert all(distance < threshold for _, _, distance in links)
    assert (0, 1) not in [(a, b) for a, b, _ in links]


def test_pseudo_identities_join_labels_and_their_negatives():
    from cosine_metric_learning.datasets.util import TrainSplit
    split = TrainSplit(filenames=np.array(list("abcdef")),
                       ids=np.array([0, 0, 1, 2, 2, 3]),
                       cameras=np.full(6, -1),
                       label_names=["t1", "t2", "t3", "t4"])
    seen_together = np.zeros((4, 4), bool)
    seen_together[1, 2] = seen_together[2, 1] = True  # t2 seen with t3
    linked, together = linking.pseudo_identities(
        split, seen_together, np.array([0, 1, 0, 2]))  # t1 and t3 one person
    assert linked.ids.tolist() == [0, 0, 1, 0, 0, 2]
    assert linked.label_names == ["t1+t3", "t2", "t4"]
    assert linked.filenames.tolist() == list("abcdef")
    # t2 was seen with t3, so with t1+t3; t4 with no one
    assert together.tolist() == [[False, True, False], [True, False, False],
                                 [False, False, False]]
