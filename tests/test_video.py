"""A video file and its detections as a sequence: written by
``datasets.video``, its frames decoded where they are needed, and read by
every command that takes sequences."""

import configparser
import glob
import json
import os
import shutil

import numpy as np
import pytest

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import mot_sequences, track, tracking
from cosine_metric_learning.datasets import mot as mot_crops
from cosine_metric_learning.datasets import synthetic_mot, tracklets, video
from cosine_metric_learning.errors import UsageError
from tests.conftest import ROOT, one_error_line, run_script

cv2 = pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """A short synthetic sequence and the same frames as an MJPG video
    (a codec OpenCV writes everywhere)."""
    folder = synthetic_mot.write_mot_sequence(
        str(tmp_path_factory.mktemp("scene")), num_pairs=2, num_frames=40,
        seed=5, name="VID-01")
    path = os.path.join(os.path.dirname(folder), "scene.avi")
    frames = sorted(glob.glob(os.path.join(folder, "img1", "*.jpg")))
    height, width = cv2.imread(frames[0]).shape[:2]
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 10.0,
                             (width, height))
    for frame in frames:
        writer.write(cv2.imread(frame))
    writer.release()
    return folder, path


def _decoded(path):
    """Every frame of a video, decoded apart from the project's code."""
    capture = cv2.VideoCapture(path)
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            return frames
        frames.append(frame)


def test_a_video_is_a_sequence_every_command_reads(scene, trained,
                                                   tmp_path):
    folder, path = scene
    out = tmp_path / "videos" / "VID-01"
    out.parent.mkdir()
    result = run_script("-m", "cosine_metric_learning.datasets.video",
                        f"--video={path}",
                        f"--detections={folder}/det/det.txt",
                        f"--gt={folder}/gt/gt.txt", "--frame_rate=7",
                        f"--output_dir={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    info = configparser.ConfigParser()
    info.read(out / "seqinfo.ini")
    assert dict(info["Sequence"]) == {
        "name": "VID-01", "framerate": "7", "seqlength": "40",
        "imwidth": "640", "imheight": "360",
        "writtenby": video.WRITER, "gtwritten": "yes", "video": path,
        "videostart": "1"}
    assert not (out / "img1").exists()  # the frames stay in the video
    sequence = mot_sequences.read_sequence(str(out))
    jpegs = mot_sequences.read_sequence(folder)
    np.testing.assert_array_equal(sequence.detections, jpegs.detections)
    np.testing.assert_array_equal(sequence.ground_truth, jpegs.ground_truth)
    # frame k is the video's k-th, as OpenCV decodes it
    expected = _decoded(path)
    assert len(expected) == 40
    for number, frame in sequence.frames([40, 3, 1, 17, 3]):
        np.testing.assert_array_equal(frame, expected[number - 1])
    # the tracker sees the same detections: motion alone scores the same
    scored = [track.evaluate(["none"], [s], "det", str(tmp_path / name),
                             sweep=False)["models"]["none"]["runs"][0][
                                 "metrics"]
              for s, name in ((sequence, "video"), (jpegs, "jpegs"))]
    assert scored[0] == scored[1]
    # each box encoded from its own frame of the video
    rows = tracking.detection_rows(sequence, "det", 0.3, 1.0)
    model = encoder_lib.load(trained[0])
    features = tracking.encode_rows(model, sequence, rows)
    for frame in (1, 21):
        index = np.flatnonzero(rows[:, 0] == frame)
        np.testing.assert_allclose(features[index], model(
            encoder_lib.box_patches(expected[frame - 1], rows[index, 2:6],
                                    model.image_shape)), atol=1e-5)
    # the converter and the tracklets cut the same boxes as from JPEGs
    converted = [mot_crops.convert([s], str(tmp_path / f"people_{n}"),
                                   frame_stride=5)
                 for s, n in ((str(out), "video"), (folder, "jpegs"))]
    assert converted[0]["identities"] == converted[1]["identities"]
    assert converted[0]["counts"]["kept"] > 0
    cut = [tracklets.extract([s], str(tmp_path / f"tracklets_{n}"))
           for s, n in ((str(out), "video"), (folder, "jpegs"))]
    assert cut[0]["identities"] == cut[1]["identities"]


def test_a_range_of_the_video_and_its_frames_as_jpegs(scene, tmp_path):
    folder, path = scene
    expected = _decoded(path)
    info = video.write_sequence(path, f"{folder}/det/det.txt",
                                str(tmp_path / "PART-01"),
                                gt=f"{folder}/gt/gt.txt", first_frame=11,
                                last_frame=30)
    assert info["seqLength"] == "20" and info["frameRate"] == "10"
    sequence = mot_sequences.read_sequence(str(tmp_path / "PART-01"))
    assert sequence.num_frames == 20
    # the rows of video frames 11-30, renumbered from 1
    rows = np.loadtxt(f"{folder}/det/det.txt", delimiter=",")
    kept = rows[(rows[:, 0] >= 11) & (rows[:, 0] <= 30)]
    np.testing.assert_array_equal(sequence.detections[:, 0],
                                  kept[:, 0] - 10)
    np.testing.assert_array_equal(sequence.detections[:, 1:7], kept[:, 1:7])
    for number, frame in sequence.frames([1, 20]):
        np.testing.assert_array_equal(frame, expected[number + 9])
    # the frames as image files, for tools that want img1/
    video.write_sequence(path, f"{folder}/det/det.txt",
                         str(tmp_path / "JPEG-01"), frames="jpg",
                         first_frame=11, last_frame=30)
    written = mot_sequences.read_sequence(str(tmp_path / "JPEG-01"))
    assert written.video is None and written.num_frames == 20
    assert len(os.listdir(tmp_path / "JPEG-01" / "img1")) == 20
    # an earlier output is replaced; a folder of the user's is not
    video.write_sequence(path, f"{folder}/det/det.txt",
                         str(tmp_path / "PART-01"))
    assert mot_sequences.read_sequence(str(tmp_path / "PART-01")) \
        .num_frames == 40
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="refusing to replace"):
        video.write_sequence(path, f"{folder}/det/det.txt",
                             str(tmp_path / "mine"))
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]


def test_bad_videos_and_files_are_one_line_and_nothing_is_written(
        scene, tmp_path):
    folder, path = scene
    det = np.loadtxt(f"{folder}/det/det.txt", delimiter=",")

    def det_file(name, rows):
        np.savetxt(tmp_path / name, rows, delimiter=",", fmt="%.6g")
        return str(tmp_path / name)

    late = det.copy()
    late[3, 0] = 41
    outside = det.copy()
    outside[5, 2] = 700
    flat = det.copy()
    flat[2, 5] = 0
    (tmp_path / "notes.avi").write_text("not a video")
    out = tmp_path / "out"
    for video_path, detections, message in (
            (str(tmp_path / "notes.avi"), f"{folder}/det/det.txt",
             "cannot open the video"),
            (path, det_file("late.txt", late), "row 4 is of frame 41, past "
             "the video's last frame (40)"),
            (path, det_file("outside.txt", outside), "row 6's box (700,"),
            (path, det_file("flat.txt", flat), "has no area"),
            (path, str(tmp_path / "none.txt"), "no such file")):
        with pytest.raises(UsageError, match=message.replace("(", r"\(")
                           .replace(")", r"\)")):
            video.write_sequence(video_path, detections, str(out))
        assert not out.exists()
    result = run_script("-m", "cosine_metric_learning.datasets.video",
                        f"--video={path}",
                        f"--detections={det_file('late.txt', late)}",
                        f"--output_dir={out}", "--last_frame=50")
    one_error_line(result, "--last_frame=50: expected frames 1 to 40 of "
                   "the video")
    assert not out.exists()
    # a video file that opens but holds no frame
    import cv2
    empty = str(tmp_path / "empty.avi")
    cv2.VideoWriter(empty, cv2.VideoWriter_fourcc(*"MJPG"), 7.0,
                    (64, 64)).release()
    result = run_script("-m", "cosine_metric_learning.datasets.video",
                        f"--video={empty}",
                        f"--detections={folder}/det/det.txt",
                        f"--output_dir={out}")
    one_error_line(result, f"cannot decode the video '{empty}'",
                   "decodes no frame")
    assert not out.exists()
    # a sequence whose video is gone: one line naming it
    video.write_sequence(path, f"{folder}/det/det.txt", str(out))
    info = (out / "seqinfo.ini").read_text()
    (out / "seqinfo.ini").write_text(info.replace(path, path + ".gone"))
    with pytest.raises(UsageError, match="names the video .*gone', which "
                       "is not a file"):
        mot_sequences.read_sequence(str(out))


def _metrics(sequence, out):
    return track.evaluate(["none"], [sequence], "det", out, sweep=False)[
        "models"]["none"]["runs"][0]["metrics"]["COMBINED"]


def test_ground_truth_of_part_of_the_video_scores_those_frames(
        scene, tmp_path):
    """Annotations of frames 1-20 of a 40-frame video: recorded, and the
    tracking scored on those frames as the sequence cut at frame 20 is
    (the tracker is online: its boxes up to frame 20 are the same)."""
    folder, path = scene
    gt = np.loadtxt(f"{folder}/gt/gt.txt", delimiter=",")
    partial = tmp_path / "gt-1-20.txt"
    np.savetxt(partial, gt[gt[:, 0] <= 20], delimiter=",", fmt="%.6g")
    out = tmp_path / "made" / "here" / "WHOLE-01"  # parents created
    result = run_script("-m", "cosine_metric_learning.datasets.video",
                        f"--video={path}",
                        f"--detections={folder}/det/det.txt",
                        f"--gt={partial}", f"--output_dir={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "annotates frames 1-20 of the sequence's 40: only those are " \
        "scored" in result.stdout
    whole = mot_sequences.read_sequence(str(out))
    assert whole.num_frames == 40 and whole.scored_frames == 20
    video.write_sequence(path, f"{folder}/det/det.txt",
                         str(tmp_path / "CUT-01"), gt=str(partial),
                         last_frame=20, log=lambda _: None)
    cut = mot_sequences.read_sequence(str(tmp_path / "CUT-01"))
    assert cut.gt_last_frame is None and cut.scored_frames == 20
    scored = _metrics(whole, str(tmp_path / "whole"))
    assert scored == _metrics(cut, str(tmp_path / "cut"))
    # without the record, the frames after 20 count as frames without
    # people (the tracker's boxes there are false positives), with a
    # warning naming the last annotated frame
    info = (out / "seqinfo.ini").read_text()
    (out / "seqinfo.ini").write_text(info.replace("gtLastFrame=20\n", ""))
    unrecorded = mot_sequences.read_sequence(str(out))
    assert unrecorded.scored_frames == 40
    assert _metrics(unrecorded, str(tmp_path / "unrecorded"))["MOTA"] < \
        scored["MOTA"]
    result = run_script("-m", "cosine_metric_learning.track", "--model=none",
                        f"--sequences={out}",
                        f"--output_dir={tmp_path / 'warned'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ends at frame 20 of 40" in result.stderr
    # a ground truth with no row in the range: no gt/gt.txt, said
    lines = []
    video.write_sequence(path, f"{folder}/det/det.txt",
                         str(tmp_path / "LATE-01"), gt=str(partial),
                         first_frame=25, log=lines.append)
    assert not (tmp_path / "LATE-01" / "gt").exists()
    assert "no row in video frames 25-40" in lines[0]


def test_a_rerun_keeps_what_the_user_added_to_the_output(scene, tmp_path):
    folder, path = scene
    out = tmp_path / "SEQ-01"
    video.write_sequence(path, f"{folder}/det/det.txt", str(out))
    for added in ("gt/gt.txt", "notes.txt", "results/SEQ-01.txt",
                  "det/mine.txt"):
        (out / added).parent.mkdir(exist_ok=True)
        (out / added).write_text("the user's")
        with pytest.raises(UsageError, match="refusing to replace"):
            video.write_sequence(path, f"{folder}/det/det.txt", str(out))
        assert (out / added).read_text() == "the user's"
        (out / added).unlink()
        if not os.listdir((out / added).parent):  # gt/, results/
            (out / added).parent.rmdir()
    # what it wrote itself, its ground truth included, it replaces
    video.write_sequence(path, f"{folder}/det/det.txt", str(out),
                         gt=f"{folder}/gt/gt.txt", log=lambda _: None)
    video.write_sequence(path, f"{folder}/det/det.txt", str(out))
    assert not (out / "gt").exists()


def test_ground_truth_with_an_identity_twice_in_a_frame(scene, tmp_path):
    """A det.txt passed as --gt, or a gt.txt with a box twice: one line
    before any work, in the converter and in track."""
    folder, path = scene
    result = run_script("-m", "cosine_metric_learning.datasets.video",
                        f"--video={path}",
                        f"--detections={folder}/det/det.txt",
                        f"--gt={folder}/det/det.txt",
                        f"--output_dir={tmp_path / 'out'}")
    one_error_line(result, "--gt=", ": row ", "identity -1 has two boxes "
                   "in frame", "a detection file, not ground truth?")
    assert not (tmp_path / "out").exists()
    out = tmp_path / "SEQ-01"
    video.write_sequence(path, f"{folder}/det/det.txt", str(out),
                         gt=f"{folder}/gt/gt.txt", log=lambda _: None)
    rows = (out / "gt" / "gt.txt").read_text().splitlines()
    (out / "gt" / "gt.txt").write_text("\n".join(rows + rows[-1:]) + "\n")
    result = run_script("-m", "cosine_metric_learning.track", "--model=none",
                        f"--sequences={out}",
                        f"--output_dir={tmp_path / 'tracking'}")
    one_error_line(result, f"row {len(rows) + 1}: identity")
    assert not (tmp_path / "tracking").exists()


def test_truncated_videos_late_starts_and_names_with_separators(
        scene, tmp_path):
    folder, path = scene
    data = open(path, "rb").read()
    cut = tmp_path / "cut.avi"
    cut.write_bytes(data[:len(data) * 6 // 10])
    out = tmp_path / "out"
    with pytest.raises(UsageError, match="the video file is truncated "
                       r"\(its header promises 40 frames"):
        video.write_sequence(str(cut), f"{folder}/det/det.txt", str(out))
    result = run_script("-m", "cosine_metric_learning.datasets.video",
                        f"--video={path}",
                        f"--detections={folder}/det/det.txt",
                        f"--output_dir={out}", "--first_frame=41")
    one_error_line(result, "--first_frame=41: the video has 40 frames")
    result = run_script("-m", "cosine_metric_learning.datasets.video",
                        "--video=/nowhere.avi",
                        f"--detections={folder}/det/det.txt",
                        f"--output_dir={out}", "--name=cam/01")
    one_error_line(result, "--name=cam/01", "path separators")
    assert not out.exists()


def test_real_video_benchmark_scores_annotated_frames_and_cleans_up(
        scene, tmp_path):
    """The benchmark on a video whose ground truth covers frames 1-20 of
    40, without --split: progress lines, the annotated frames scored, and
    no work folder left behind."""
    folder, path = scene
    gt = np.loadtxt(f"{folder}/gt/gt.txt", delimiter=",")
    partial = tmp_path / "gt-1-20.txt"
    np.savetxt(partial, gt[gt[:, 0] <= 20], delimiter=",", fmt="%.6g")
    work = tmp_path / "tmp"
    work.mkdir()
    result = run_script("benchmarks/real_video.py", f"--video={path}",
                        f"--detections={folder}/det/det.txt",
                        f"--gt={partial}", "--frame_rate=7",
                        f"--output_json={tmp_path / 'table.json'}",
                        env={"TMPDIR": str(work)}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "scored together (20 frames annotated)" in result.stdout
    assert "tracking with 3 rows" in result.stderr
    assert os.listdir(work) == []
    table = json.loads((tmp_path / "table.json").read_text())["table"]
    # motion alone, scored on frames 1-20 as datasets.video --last_frame=20
    video.write_sequence(path, f"{folder}/det/det.txt",
                         str(tmp_path / "CUT-01"), gt=str(partial),
                         frame_rate=7, last_frame=20, log=lambda _: None)
    cut = _metrics(mot_sequences.read_sequence(str(tmp_path / "CUT-01")),
                   str(tmp_path / "cut"))
    assert table["random features (IoU stage only)"]["at 0.2"]["IDF1"] == \
        cut["IDF1"]
    assert "motion (one feature for every box)" in table


def test_ssd_output_to_boxes_by_hand():
    from cosine_metric_learning import detector
    found = np.array([
        [0, 1, 0.9, 0.1, 0.2, 0.3, 0.6],    # kept: 10..30 x 20..60 px
        [0, 1, 0.2, 0.1, 0.2, 0.3, 0.6],    # below the confidence
        [0, 1, 0.8, -0.1, 0.5, 0.05, 1.2],  # clipped to the frame
        [0, 1, 0.7, 0.5, 0.5, 0.5, 0.7],    # no width
        [-1, 0, 0.99, 0.1, 0.1, 0.2, 0.2],  # the list's end
        [0, 1, 0.99, 0.1, 0.1, 0.2, 0.2]])  # after it: not a detection
    rows = detector.boxes_of(found, width=100, height=100,
                             min_confidence=0.3)
    np.testing.assert_allclose(rows, [[10, 20, 20, 40, 0.9],
                                      [0, 50, 5, 50, 0.8]], atol=1e-6)


def test_a_detector_finds_the_boxes_of_a_video(scene, tmp_path):
    """``--detector``: the Open Model Zoo pedestrian detector's boxes of
    each frame, as OpenVINO gives them called directly, in det.txt;
    an IR of another layout, a missing .bin or both --detections and
    --detector: one line, nothing written."""
    from cosine_metric_learning import detector as detector_lib
    models = os.environ.get("OMZ_MODELS", os.path.join(
        os.path.dirname(ROOT), "shared", "models", "omz"))
    path = os.path.join(models, "pedestrian-detection-adas-0002", "FP16",
                        "pedestrian-detection-adas-0002.xml")
    if not os.path.isfile(path):
        pytest.skip("the Open Model Zoo models are not on this machine")
    ov = pytest.importorskip("openvino")
    folder, video_path = scene
    out = tmp_path / "DET-01"
    lines = []
    info = video.write_sequence(video_path, None, str(out), detector=path,
                                detector_min_confidence=0.05,
                                last_frame=5, log=lines.append)
    assert info["detector"] == path and "detected frame 5/5" in lines[-1]
    written = np.loadtxt(out / "det" / "det.txt", delimiter=",", ndmin=2)
    # the same frames through OpenVINO here
    compiled = ov.Core().compile_model(path, "CPU")
    expected = []
    for number, frame in enumerate(_decoded(video_path)[:5], 1):
        image = cv2.resize(frame, (672, 384)).transpose(2, 0, 1)[None]
        found = compiled(image.astype(np.float32))[0].reshape(-1, 7)
        expected += [[number, -1, *box] for box in detector_lib.boxes_of(
            found, frame.shape[1], frame.shape[0], 0.05)]
    assert len(expected) > 0
    np.testing.assert_allclose(written, np.asarray(expected), atol=1e-3)
    # bad detectors: one line, nothing written
    reid = os.path.join(models, "person-reidentification-retail-0288",
                        "FP32", "person-reidentification-retail-0288.xml")
    bad = tmp_path / "bad"
    result = run_script("-m", "cosine_metric_learning.datasets.video",
                        f"--video={video_path}", f"--detector={reid}",
                        f"--output_dir={bad}")
    one_error_line(result, "--detector=", "Open Model Zoo's layout")
    lonely = tmp_path / "lonely.xml"
    lonely.write_bytes(open(path, "rb").read())  # no .bin beside it
    result = run_script("-m", "cosine_metric_learning.datasets.video",
                        f"--video={video_path}", f"--detector={lonely}",
                        f"--output_dir={bad}")
    one_error_line(result, "--detector=", "OpenVINO cannot load it")
    result = run_script("-m", "cosine_metric_learning.datasets.video",
                        f"--video={video_path}", f"--detector={path}",
                        f"--detections={folder}/det/det.txt",
                        f"--output_dir={bad}")
    one_error_line(result, "--detections=", "one of them")
    assert not bad.exists()


def test_the_converter_starts_without_tensorflow():
    """``datasets.video --help`` and its refusals come at once: the
    converter's imports, its detector's included, leave TensorFlow out
    (it loads in seconds)."""
    result = run_script("-c", "import sys; import "
                        "cosine_metric_learning.datasets.video; "
                        "import cosine_metric_learning.detector; "
                        "print('tensorflow' in sys.modules)",
                        env={"TESTS_FORK": "0"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"


def test_a_ground_truth_ending_a_frame_early_gets_no_warning(
        scene, tmp_path, caplog):
    """A fully annotated sequence whose last frame has nobody in it is
    not a partial annotation: no warning; one whose last tenth and more
    is bare gets one."""
    folder, _ = scene
    gt = np.loadtxt(f"{folder}/gt/gt.txt", delimiter=",")
    for last, warned in ((39, False), (30, True)):
        copy = tmp_path / f"GT-{last}"
        shutil.copytree(folder, copy)
        np.savetxt(copy / "gt" / "gt.txt", gt[gt[:, 0] <= last],
                   delimiter=",", fmt="%.6g")
        caplog.clear()
        with caplog.at_level("WARNING"):
            mot_sequences.read_sequence(str(copy))
        assert (f"ends at frame {last} of 40" in caplog.text) == warned
