"""Tracklets of unlabeled video as identities, and the gate calibrated
without ground truth."""

import json
import os
import shutil

import numpy as np
import pytest

from cosine_metric_learning import mot, track
from cosine_metric_learning.datasets import image_folder, synthetic
from cosine_metric_learning.datasets import tracklets
from cosine_metric_learning.errors import UsageError
from tests.conftest import one_error_line, run_script


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


def test_the_gate_from_known_distributions():
    same = np.array([0.01, 0.02, 0.05, 0.2])
    different = np.array([0.04, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1,
                          1.2])
    gate = tracklets.self_calibrated_gate(same, different, false_accept=0.1,
                                          false_reject=None)
    # one of ten different pairs is at or below 0.04; two of four same
    # pairs lie above it
    assert gate == {"gate": 0.04, "false_accept": 0.1, "false_reject": 0.5,
                    "bound": "false accepts", "same_pairs": 4,
                    "different_pairs": 10}
    # cutting no more than a quarter of the same pairs raises it to 0.05,
    # which also accepts 0.04
    gate = tracklets.self_calibrated_gate(same, different, false_accept=0.1,
                                          false_reject=0.25)
    assert gate == {"gate": 0.05, "false_accept": 0.1, "false_reject": 0.25,
                    "bound": "false rejects", "same_pairs": 4,
                    "different_pairs": 10}
    # a bound the false accepts already keep leaves the gate
    assert tracklets.self_calibrated_gate(
        same, different, false_accept=0.2, false_reject=0.25)["gate"] == 0.3
    assert tracklets.self_calibrated_gate(same, []) is None
    conventions = dict(tracklets.gate_conventions(0.04))
    assert conventions["Deep SORT"] == "--max_cosine_distance=0.04"
    assert "appearance_thresh=0.02" in conventions.values()
    assert "appearance_thresh: 0.96" in conventions.values()


def test_pairs_are_a_pieces_boxes_apart_and_a_frames_boxes():
    rows = np.asarray([_row(f, 0) for f in (1, 5, 12)]
                      + [_row(f, 100) for f in (1, 12)], float)
    angles = np.array([0.0, 0.1, 0.2, 1.0, 1.5])
    features = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    same, different = tracklets.pair_distances(
        features, rows, [[0, 1, 2], [3, 4]], frame_gap=10)
    # same: (1, 12) of the first piece, (1, 12) of the second; different:
    # frame 1 (rows 0, 3) and frame 12 (rows 2, 4)
    np.testing.assert_allclose(sorted(same), sorted(
        [1 - np.cos(0.2), 1 - np.cos(0.5)]))
    np.testing.assert_allclose(sorted(different), sorted(
        [1 - np.cos(1.0), 1 - np.cos(1.3)]))


def test_refined_sweep_between_the_best_gates_neighbours():
    def run(gate, idf1):
        return {"parameters": {**mot.DEFAULTS, "max_cosine_distance": gate},
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
    return synthetic.write_mot_sequence(
        str(tmp_path_factory.mktemp("scene")), num_pairs=2, num_frames=80,
        seed=9, name="SCENE-01")


def _person_of(sequence, row):
    gt = sequence.ground_truth[sequence.ground_truth[:, 0] == row[0]]
    distance = np.abs(gt[:, 2:4] - row[2:4]).sum(axis=1)
    return int(gt[np.argmin(distance), 1])


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
    sequence = mot.read_sequence(scene)
    rows = mot.detection_rows(sequence, "det", 0.3, 1.0)
    pieces = tracklets.motion_pieces(sequence, rows)[0]
    assert len(pieces) == len(manifest["identities"])
    for piece in pieces:
        assert len({_person_of(sequence, rows[i]) for i in piece}) == 1
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
    assert gate["false_reject"] <= tracklets.GATE_FALSE_REJECT
    assert gate["bound"] in ("false accepts", "false rejects")
    if gate["bound"] == "false accepts":
        assert gate["false_accept"] <= 2 * tracklets.GATE_FALSE_ACCEPT
    else:
        assert gate["false_accept"] >= tracklets.GATE_FALSE_ACCEPT


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
        with pytest.raises(UsageError, match=message):
            tracklets.extract([str(folder)], str(tmp_path / "out"))
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


def test_track_with_the_self_calibrated_gate(scene, trained, tmp_path):
    summary = track.evaluate([trained[0]], [mot.read_sequence(scene)],
                             "det", str(tmp_path / "out"), sweep=False,
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
        track.format_gates(entry, track.parse_gate("Auto"))
    with pytest.raises(UsageError, match="max_cosine_distance='often'"):
        track.parse_gate("often")


def test_adapt_from_unlabeled_video_in_one_command(scene, trained, tmp_path):
    from cosine_metric_learning import adapt, encoder as encoder_lib
    out = tmp_path / "adapted"
    report = adapt.adapt(trained[0], [scene], str(out), number_of_steps=3,
                         batch_size=16)
    assert report == json.loads((out / "adapt.json").read_text())
    assert report["tracklets"]["identities"] == len(os.listdir(
        out / "tracklets")) - 1  # and the manifest
    assert os.path.basename(report["adapted"]).startswith("ckpt-")
    # its classifier started at the tracklets' mean features
    recorded = json.loads((out / "run" / "run.json").read_text())
    assert recorded["recipe_settings"]["imprint"] is True
    for when in ("before", "after"):  # the scene has ground truth
        assert 0 < report[when]["IDF1"] <= 1
        _check_bounds(report[when]["self_calibrated_gate"])
    # the adapted encoder, exported as Deep SORT loads it, differs from
    # the one it started from
    adapted = encoder_lib.load(report["export"])
    started = encoder_lib.load(trained[0])
    patches = np.random.default_rng(0).integers(0, 256, (4, 128, 64, 3),
                                                dtype=np.uint8)
    features = adapted(patches)
    np.testing.assert_allclose(np.linalg.norm(features, axis=1), 1,
                               atol=1e-5)
    assert np.abs(features - started(patches)).max() > 1e-3
    print(adapt.format_report(report))
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
