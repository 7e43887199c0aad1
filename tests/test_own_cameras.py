"""Training on one's own cameras: tracking annotations to identity crops
(``python -m cosine_metric_learning.datasets.mot``) and ``--mode=test``
on a folder of held-out people."""

import json
import os
import re

import numpy as np
import pytest
from PIL import Image

from cosine_metric_learning import kit_features, mot_sequences, protocol
from cosine_metric_learning.datasets import image_folder, synthetic_mot
from cosine_metric_learning.datasets import mot as mot_crops
from cosine_metric_learning.datasets.spec import DatasetSpec
from cosine_metric_learning.errors import UsageError
from tests.conftest import one_error_line, run_script
from tests.reference import kit_reference

WIDTH, HEIGHT = 200, 120
NAN = float("nan")
# frame, id, left, top, width, height, considered, class, visibility; each
# box on a filter's edge, the reason that drops it (None: kept at
# --frame_stride=1) beside it
ROWS = [
    ((1, 1, 10, 10, 20, 40, 1, 1, 1.0), None),
    ((2, 1, 10, 10, 20, 40, 1, 1, 1.0), None),
    ((3, 1, 10, 10, 20, 40, 1, 1, 1.0), None),
    ((5, 1, 10, 10, 20, 40, 1, 1, 1.0), None),
    ((1, 2, 60, 10, 20, 40, 1, 1, 0.25), None),
    ((2, 2, 60, 10, 20, 40, 1, 1, 0.2499), "visibility"),
    ((3, 2, 60, 10, 20, 40, 1, 1, 0.25), None),
    ((1, 3, 100, 10, 20, 32, 1, 1, 1.0), None),
    ((2, 3, 100, 10, 20, 31, 1, 1, 1.0), "height"),
    ((3, 3, 100, 100, 20, 50, 1, 1, 1.0), "height"),  # 20 inside
    ((4, 3, 100, 88, 20, 50, 1, 1, 1.0), None),  # 32 inside
    ((1, 4, 140, 10, 20, 40, 1, 2, 1.0), "class"),
    ((2, 4, 140, 10, 20, 40, 1, 2, 1.0), "class"),
    ((1, 5, 140, 60, 20, 40, 0, 1, 1.0), "not_considered"),
    ((2, 5, 140, 60, 20, 40, 0, 1, 1.0), "not_considered"),
    ((1, 6, 10, 60, 0, 40, 1, 1, 1.0), "empty"),
    ((2, 6, 10, 60, 20, -5, 1, 1, 1.0), "empty"),
    ((3, 6, NAN, 60, 20, 40, 1, 1, 1.0), "not_a_number"),
    ((4, 6, WIDTH, 60, 20, 40, 1, 1, 1.0), "outside"),
    ((5, 6, -30, 60, 30, 40, 1, 1, 1.0), "outside"),
    ((6, 6, WIDTH - 1, 60, 10, 40, 1, 1, 1.0), None),  # 1 pixel inside
    ((7, 6, -29, 60, 30, 40, 1, 1, 1.0), None),
    ((1, 7, 60, 60, 20, 40, 1, 1, 1.0), "single"),
    ((8, 7, 60, 60, 20, 40, 1, 1, 1.0), "frame_missing"),  # file removed
    ((9, 7, 60, 60, 20, 40, 1, 1, 1.0), "frame_missing"),  # past the end
    ((1, 8, 170, 60, 20, 40, 1, 1, 1.0), "single"),
]


def _frame(n):
    """A smooth picture (JPEG keeps it) that differs from frame to frame."""
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    return np.stack([x + 10 * n, y * 2, 255 - x], -1).clip(0, 255).astype(
        np.uint8)


def _write_sequence(folder, rows, num_frames=8, seqinfo=True,
                    name="HAND-01"):
    os.makedirs(os.path.join(folder, "img1"))
    os.makedirs(os.path.join(folder, "gt"))
    for n in range(1, num_frames + 1):
        frame_name = f"{n:06d}.jpg" if seqinfo else f"frame_{n:04d}.png"
        Image.fromarray(_frame(n)).save(os.path.join(folder, "img1",
                                                     frame_name),
                                        quality=95)
    with open(os.path.join(folder, "gt", "gt.txt"), "w") as f:
        f.writelines(",".join(str(v) for v in row) + "\n" for row in rows)
    if seqinfo:
        with open(os.path.join(folder, "seqinfo.ini"), "w") as f:
            f.write(f"[Sequence]\nname={name}\nimDir=img1\nframeRate=30\n"
                    f"seqLength={num_frames}\nimWidth={WIDTH}\n"
                    f"imHeight={HEIGHT}\nimExt=.jpg\n")
    return folder


@pytest.fixture
def hand_made(tmp_path):
    folder = _write_sequence(str(tmp_path / "HAND-01"),
                             [row for row, _ in ROWS])
    os.remove(os.path.join(folder, "img1", "000008.jpg"))
    return folder


def _expected_counts(reasons):
    counts = dict.fromkeys(mot_crops.REASONS, 0)
    for reason in reasons:
        if reason is not None:
            counts[reason] += 1
    return counts


def test_the_converter_keeps_exactly_what_its_filters_keep(hand_made,
                                                           tmp_path):
    # the converter reads gt/gt.txt and img1/ only: a det.txt that lists
    # frames missing from img1/, and cannot be parsed, is never opened
    os.makedirs(os.path.join(hand_made, "det"))
    with open(os.path.join(hand_made, "det", "det.txt"), "w") as f:
        f.write("8,-1,60,60,20,40,0.9,-1,-1,-1\nnot a detection\n")
    output = tmp_path / "people"
    result = run_script("-m", "cosine_metric_learning.datasets.mot",
                        f"--sequences={hand_made}", f"--output_dir={output}")
    assert result.returncode == 0, result.stderr[-2000:]
    # frames 8 (removed) and 9 (past the end): one warning, counted
    warnings = [line for line in result.stderr.splitlines()
                if "missing from img1/" in line]
    assert len(warnings) == 1 and warnings[0].endswith(
        "HAND-01: 2 frames of gt/gt.txt are missing from img1/ (e.g. frame "
        "8): their 2 boxes are skipped"), result.stderr[-2000:]
    kept = {(f"HAND-01_{row[1]}", f"{row[0]:06d}.jpg")
            for row, reason in ROWS if reason is None}
    assert f"HAND-01: {len(kept)} of {len(ROWS)} boxes kept, 4 identities " \
        "(2 frames of gt.txt missing from img1/)" in result.stdout
    written = {(identity, name) for identity in os.listdir(output)
               if os.path.isdir(output / identity)
               for name in os.listdir(output / identity)}
    assert written == kept
    manifest = json.loads((output / "manifest.json").read_text())
    expected = _expected_counts(reason for _, reason in ROWS)
    assert manifest["counts"] == {"kept": len(kept), **expected}
    assert manifest["identities"] == {"HAND-01_1": 4, "HAND-01_2": 2,
                                      "HAND-01_3": 2, "HAND-01_6": 2}
    assert manifest["filters"] == {"classes": [1], "min_visibility": 0.25,
                                   "min_height": 32, "frame_stride": 1}
    # the report counts each reason
    assert f"kept {len(kept)} of {len(ROWS)} boxes as 4 identities" in \
        result.stdout
    for reason, text in mot_crops.REASONS.items():
        assert re.search(rf"^\s*{expected[reason]} dropped: {re.escape(text)}$",
                         result.stdout, re.M), (reason, result.stdout)

    # a crop is the frame's box, clipped to the frame
    crop = np.asarray(Image.open(output / "HAND-01_1" / "000001.jpg"))
    assert crop.shape == (40, 20, 3)
    assert np.abs(crop.astype(int) - _frame(1)[10:50, 10:30]).mean() < 3
    clipped = Image.open(output / "HAND-01_3" / "000004.jpg")
    assert clipped.size == (20, HEIGHT - 88)
    assert Image.open(output / "HAND-01_6" / "000006.jpg").size == (1, 40)

    # the folder trains as identity folders, a track an identity
    split = image_folder.read_image_folder(str(output))
    assert split.label_names == sorted(manifest["identities"])
    assert len(split.filenames) == len(kept)

    # an earlier output of the converter is replaced as a whole
    result = run_script("-m", "cosine_metric_learning.datasets.mot",
                        f"--sequences={hand_made}", f"--output_dir={output}",
                        "--frame_stride=2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(os.listdir(output / "HAND-01_1")) == [
        "000001.jpg", "000003.jpg", "000005.jpg"]
    assert not (output / "HAND-01_6").exists()  # one crop left: skipped

    # a file the converter did not write, inside an identity folder (a
    # note, a hand-added crop, a folder), keeps the output from being
    # replaced; the refusal comes before any work
    before = {p: p.read_bytes() for p in output.rglob("*") if p.is_file()}
    for extra in ("notes.txt", "000002.jpg", "more"):
        path = output / "HAND-01_1" / extra
        path.mkdir() if extra == "more" else path.write_bytes(b"mine")
        one_error_line(run_script(
            "-m", "cosine_metric_learning.datasets.mot",
            f"--sequences={hand_made}", f"--output_dir={output}"),
            "refusing to replace", str(output))
        assert {p: p.read_bytes() for p in output.rglob("*")
                if p.is_file() and p != path} == before
        path.rmdir() if extra == "more" else path.unlink()


def test_the_frame_stride_counts_frames_since_the_last_kept_box():
    rows = np.asarray([row for row, _ in ROWS], np.float64)
    exists = lambda frame: frame <= 7  # noqa: E731 (frame 8 is missing)
    crops, counts = mot_crops.select_boxes(rows, (HEIGHT, WIDTH, 3), exists,
                                           frame_stride=2)
    kept = {(track, frame) for track, frame, _ in crops}
    assert kept == {(1, 1), (1, 3), (1, 5), (2, 1), (2, 3), (3, 1), (3, 4)}
    reasons = [reason for _, reason in ROWS]
    expected = _expected_counts(reasons)
    # frame 2 of track 1 and frame 7 of track 6 fall within the stride;
    # track 6 is left with one crop
    expected.update(stride=2, single=expected["single"] + 1)
    assert counts == expected
    # --classes=all keeps track 4's class-2 boxes; a lower visibility
    # keeps track 2's frame 2
    crops, counts = mot_crops.select_boxes(rows, (HEIGHT, WIDTH, 3), exists,
                                           classes=None, min_visibility=0.2)
    kept = {(track, frame) for track, frame, _ in crops}
    assert {(4, 1), (4, 2), (2, 2)} <= kept
    assert counts["class"] == counts["visibility"] == 0


def test_bad_annotations_and_outputs_are_one_line(hand_made, tmp_path):
    convert = ("-m", "cosine_metric_learning.datasets.mot",
               f"--sequences={hand_made}")
    # a folder that holds other files is never written into
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    one_error_line(run_script(*convert, f"--output_dir={mine}"),
                   "refusing to replace", str(mine))
    assert os.listdir(mine) == ["notes.txt"]
    # the command names its flags
    one_error_line(run_script(*convert, f"--output_dir={tmp_path / 'new'}",
                              "--min_height=-1"),
                   "--min_height=-1: expected 0 or more pixels")

    # bad annotations and filters (in this process: the command turns
    # these errors into one line, as above)
    short = tmp_path / "short" / "SHORT-01"
    _write_sequence(str(short), [(1, 1, 10, 10, 20, 40)], name="SHORT-01")
    text = tmp_path / "text" / "TEXT-01"
    _write_sequence(str(text), [(1, 1, "left", 10, 20, 40, 1, 1, 1)],
                    name="TEXT-01")
    out = str(tmp_path / "out")
    for sequence, filters, message in (
            (short, {}, "gt.txt' has 6 columns; expected 9"),
            (text, {}, "cannot read ground-truth file"),
            # a Python caller is told its arguments' names
            (hand_made, {"min_visibility": 1.5}, "min_visibility=1.5:"),
            (hand_made, {"frame_stride": 0}, "frame_stride=0:"),
            (hand_made, {"min_height": -1}, "min_height=-1: expected 0"),
            (hand_made, {"classes": ()}, "classes=(): expected"),
            (hand_made, {"min_height": 500}, "no track has two crops")):
        with pytest.raises(UsageError, match=re.escape(message)):
            mot_crops.convert([str(sequence)], out, **filters)
    with pytest.raises(UsageError, match="--classes=people"):
        mot_sequences.parse_classes("people")
    assert mot_sequences.parse_classes("all") is None
    assert mot_sequences.parse_classes("1,7") == (1, 7)
    assert not (tmp_path / "out").exists()


def test_a_sequence_as_annotation_tools_export_it(tmp_path):
    """MOT 1.1 without seqinfo.ini: frame n is the n-th image of img1/."""
    folder = _write_sequence(str(tmp_path / "cvat_task"),
                             [row for row, reason in ROWS[:4]], num_frames=5,
                             seqinfo=False)
    manifest = mot_crops.convert([folder], str(tmp_path / "out"))
    assert manifest["identities"] == {"cvat_task_1": 4}
    crop = np.asarray(Image.open(tmp_path / "out" / "cvat_task_1" /
                                 "000005.jpg"))
    assert np.abs(crop.astype(int) - _frame(5)[10:50, 10:30]).mean() < 3


def _own_test_folder(root, rng):
    """Identity folders with cameras and frames in the names: two cameras
    for some people, one for others, frames close together and apart."""
    layout = {}
    for person in range(6):
        cameras = (1, 2) if person % 2 else (1,)
        for camera in cameras:
            frames = sorted(rng.choice(200, size=rng.integers(3, 7),
                                       replace=False))
            for frame in frames:
                layout.setdefault(f"person_{person}", []).append(
                    f"c{camera}_{frame:06d}.jpg")
    for person, names in layout.items():
        os.makedirs(os.path.join(root, person))
        for name in names:
            Image.new("RGB", (8, 16)).save(os.path.join(root, person, name))
    return root


def test_own_data_protocol_against_an_independent_computation(tmp_path):
    rng = np.random.default_rng(5)
    root = _own_test_folder(str(tmp_path / "held_out"), rng)
    results = {}
    for gap in (0, 30, 10_000):
        split = image_folder.read_test_protocol(root, "identity_folders",
                                                r"^c(\d+)_", gap)
        names = [os.path.relpath(f, root) for f in split.filenames]
        frames = np.asarray([int(n[-10:-4]) for n in names])
        cameras = np.asarray([int(n.split("/c")[1][0]) - 1 for n in names])
        ids = np.unique([n.split("/")[0] for n in names],
                        return_inverse=True)[1]
        # one query per identity and camera: its middle frame
        queries = [g[0] for g in split.query_groups]
        expected_queries = []
        for identity in np.unique(ids):
            for camera in np.unique(cameras[ids == identity]):
                members = np.flatnonzero((ids == identity)
                                         & (cameras == camera))
                members = members[np.argsort(frames[members])]
                expected_queries.append(members[len(members) // 2])
        assert sorted(queries) == sorted(expected_queries)
        gallery = [g[0] for g in split.gallery_groups]
        assert sorted(queries + gallery) == list(range(len(names)))

        features = rng.normal(size=(len(names), 16))
        result, distances = protocol.evaluate_split(split, features)
        expected = kit_reference(
            distances, ids[queries], ids[gallery],
            cameras[queries], cameras[gallery], (1, 5),
            frames[queries], frames[gallery], gap)
        for key in ("rank-1", "rank-5", "mAP", "mAP_noninterpolated",
                    "mINP", "num_queries"):
            assert result[key] == pytest.approx(expected[key]), (gap, key)
        results[gap] = (expected["num_queries"], expected["mAP"])
    # nearby frames are left out: the numbers change, and without
    # same-camera matches only people seen by two cameras are queries
    assert results[0] != results[30]
    assert results[0][0] == 9 and results[10_000][0] == 6
    # with one camera everywhere the split is by time alone; a gap no query
    # can meet is one line
    with pytest.raises(UsageError, match="lower --min_frame_gap"):
        image_folder.read_test_protocol(root, "identity_folders", None,
                                        10_000)


def test_frame_numbers_come_from_the_names(tmp_path):
    assert image_folder.frame_number("a/HAND-01_3/000123.jpg",
                                     "identity_folders") == 123
    assert image_folder.frame_number("c2_000045.jpg.jpg",
                                     "identity_folders") == 45
    assert image_folder.frame_number("0002_c1s1_000451_03.jpg",
                                     "market") == 451
    root = tmp_path / "people"
    for person in ("a", "b"):
        (root / person).mkdir(parents=True)
        for name in ("front.jpg", "back.jpg"):
            Image.new("RGB", (8, 16)).save(root / person / name)
    with pytest.raises(UsageError, match="no frame number in the name of"):
        image_folder.read_test_protocol(str(root))
    split = image_folder.read_test_protocol(str(root), min_frame_gap=0)
    assert len(split.query_groups) == 2


def test_train_on_converted_sequences_and_test_on_held_out_people(tmp_path):
    """Tracks of synthetic sequences train the descriptor; on the tracks
    of held-out people the trained model ranks better than the untrained
    network.

    The margin follows from the spread: three runs of exactly this gave
    mAP 0.50-0.54 untrained and 0.74-0.76 trained on these 32 queries
    (gains 0.21-0.24); at 150 steps and 16 queries the gain ranged from
    0.07 to 0.27, too close to any margin worth asserting."""
    for seed in range(6):
        synthetic_mot.write_mot_sequence(str(tmp_path / "train_seqs"),
                                     seed=100 + seed, name=f"TRAIN-{seed}")
    for seed in range(4):
        synthetic_mot.write_mot_sequence(str(tmp_path / "test_seqs"),
                                     seed=200 + seed, name=f"TEST-{seed}")
    for part in ("train", "test"):
        mot_crops.convert(
            mot_sequences.find_sequences(str(tmp_path / f"{part}_seqs")),
            str(tmp_path / part), frame_stride=4)
    run = ("train_custom.py", f"--log_dir={tmp_path / 'runs'}",
           "--run_id=own")
    result = run_script(*run, f"--dataset_dir={tmp_path / 'train'}",
                        "--image_shape=64,32", "--batch_size=32",
                        "--number_of_steps=300", timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    # --mode=test of train_custom.py, in this process (its command line
    # is checked in test_custom.py)
    custom = DatasetSpec("custom", 0, None, ".",
                         read_test=image_folder.read_test_protocol)
    scores = {}
    for checkpoint in ("ckpt-0", "ckpt-300"):
        summary = protocol.run_test(
            custom, str(tmp_path / "runs" / "own" / checkpoint),
            str(tmp_path / "test"), batch_size=64)
        assert summary["num_queries"] == 32
        scores[checkpoint] = summary["mAP"]
    assert scores["ckpt-300"] > scores["ckpt-0"] + 0.1, scores
    # the held-out folder has no kit of its own
    with pytest.raises(UsageError, match="custom data has no official "
                       "evaluation kit"):
        kit_features.export_features(custom, str(tmp_path / "runs" / "own"),
                                     str(tmp_path / "test"), str(tmp_path))
