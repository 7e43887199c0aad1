"""Bad and unusual input as a new user gives it: real files, real processes.

Nothing a command did not write is replaced or deleted; wrong values are
refused with one line (exit status 2) instead of giving wrong results.
"""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import scipy.io
import tensorflow as tf
from PIL import Image

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import checkpoints, cli, deploy, encode, features
from cosine_metric_learning import commands, evaluator, export
from cosine_metric_learning import files, protocol, settings, training
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.datasets import synthetic
from tests.conftest import (one_error_line, read_events, run_script,
                            small_config)
from cosine_metric_learning.datasets.spec import MARKET1501 as MARKET

pytestmark = pytest.mark.slow


def _config(dataset_dir, log_dir, **kwargs):
    return small_config(dataset_dir, log_dir, **{"number_of_steps": 1,
                                                 **kwargs})


@pytest.fixture(scope="module")
def run(market_dir, tmp_path_factory):
    """A real triplet run of one step: ckpt-0 and ckpt-1 in log_dir/run."""
    log_dir = tmp_path_factory.mktemp("logs")
    result = training.train(MARKET, _config(market_dir, log_dir))
    assert result.step == 1
    return str(log_dir), os.path.join(str(log_dir), "run")


def _copy_run(run, tmp_path):
    log_dir = tmp_path / "logs"
    shutil.copytree(run[0], log_dir)
    return str(log_dir), str(log_dir / "run")


# Data loss --------------------------------------------------------------------

def test_saved_model_never_replaces_a_folder_it_did_not_write(run, tmp_path):
    _, run_dir = run
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    (work / "data").mkdir()
    # the current folder, and a folder of the user's files
    result = run_script("train_market1501.py", "--mode=saved_model",
                        f"--restore_path={run_dir}", "--output=.", cwd=work)
    one_error_line(result, "refusing to replace", "is not a SavedModel")
    assert (work / "notes.txt").read_text() == "mine"
    assert (work / "data").is_dir()
    result = run_script("train_market1501.py", "--mode=saved_model",
                        f"--restore_path={run_dir}", f"--output={work}")
    one_error_line(result, f"refusing to replace {work}")
    assert sorted(os.listdir(work)) == ["data", "notes.txt"]

    # its own earlier output is replaced
    encoder, _ = checkpoints.load_encoder(run_dir, (128, 64, 3))
    target = str(tmp_path / "sm")
    export.write_saved_model(encoder, target, (128, 64, 3))
    first = os.path.getmtime(os.path.join(target, "saved_model.pb"))
    export.write_saved_model(encoder, target, (128, 64, 3))
    assert tf.saved_model.contains_saved_model(target)
    assert os.path.getmtime(os.path.join(target, "saved_model.pb")) >= first
    # ... but not once the user has put a file of theirs into it
    (tmp_path / "sm" / "README").write_text("mine")
    with pytest.raises(UsageError, match="refusing to replace"):
        export.write_saved_model(encoder, target, (128, 64, 3))
    assert (tmp_path / "sm" / "README").read_text() == "mine"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


def test_saved_model_into_a_path_that_cannot_be_created(run):
    # /proc takes no new folders, even from root
    result = run_script("train_market1501.py", "--mode=saved_model",
                        f"--restore_path={run[1]}", "--output=/proc/sm")
    one_error_line(result, "cannot write /proc/sm")


def test_exporters_replace_only_their_own_kind(run, tmp_path):
    encoder, _ = checkpoints.load_encoder(run[1], (128, 64, 3))
    shape = (128, 64, 3)
    other = tmp_path / "other.pb"
    other.write_bytes(b"\x08\x01 some other protobuf or binary")
    with pytest.raises(UsageError, match="not a frozen encoder graph"):
        export.freeze(encoder, str(other), shape)
    assert other.read_bytes().startswith(b"\x08\x01 some")
    own = str(tmp_path / "own.pb")
    export.freeze(encoder, own, shape)
    size = os.path.getsize(own)
    export.freeze(encoder, own, shape)  # an earlier frozen encoder
    assert os.path.getsize(own) == size

    prefix = tmp_path / "enc.ckpt"
    (tmp_path / "enc.ckpt.index").write_text("my notes, not an index")
    with pytest.raises(UsageError, match="not the index of a TensorFlow"):
        export.write_encoder_checkpoint(encoder, str(prefix))
    os.remove(tmp_path / "enc.ckpt.index")
    export.write_encoder_checkpoint(encoder, str(prefix))
    export.write_encoder_checkpoint(encoder, str(prefix))  # its own
    assert encoder_lib.load(str(prefix)).feature_dim == 128
    with pytest.raises(UsageError, match="prefix='.*': a folder; expected "
                       "a checkpoint prefix"):
        export.write_encoder_checkpoint(encoder, str(tmp_path))


def test_test_mode_outputs_are_checked_before_the_work(run, market_dir,
                                                       tmp_path):
    package = tmp_path / "package.json"
    package.write_text('{"name": "mine", "version": "1.0"}')
    result = run_script("train_market1501.py", "--mode=test",
                        f"--dataset_dir={market_dir}",
                        f"--restore_path={run[1]}",
                        f"--output_json={package}")
    one_error_line(result, f"refusing to replace {package}")
    assert "Encoding" not in result.stderr  # refused before the work
    assert json.loads(package.read_text())["name"] == "mine"

    photo = tmp_path / "photo.png"
    Image.new("RGB", (8, 8), "blue").save(photo)
    result = run_script("train_market1501.py", "--mode=test",
                        f"--dataset_dir={market_dir}",
                        f"--restore_path={run[1]}",
                        f"--output_json={photo / 'x.json'}")
    one_error_line(result, f"{photo} is a file, not a folder")
    assert "Encoding" not in result.stderr
    result = run_script("train_market1501.py", "--mode=test",
                        f"--dataset_dir={market_dir}",
                        f"--restore_path={run[1]}", "--rerank",
                        "--rerank_lambda=1.5")
    one_error_line(result, "--rerank", "lambda=1.5", "lambda in [0, 1]")
    assert "Encoding" not in result.stderr

    # its own outputs are replaced; a photo of the user's is not one
    out_json, ranks = tmp_path / "test.json", tmp_path / "ranks.png"
    for _ in range(2):
        protocol.run_test(MARKET, run[1], market_dir,
                          output_json=str(out_json), rank_image=str(ranks))
    assert "mAP" in json.loads(out_json.read_text())
    assert files.PNG.matches(str(ranks))
    with pytest.raises(UsageError, match=f"refusing to replace {photo}"):
        protocol.run_test(MARKET, run[1], market_dir,
                          rank_image=str(photo))
    assert Image.open(photo).getpixel((0, 0)) == (0, 0, 255)


def test_kit_export_and_encode_cli_keep_other_files(run, market_dir,
                                                    tmp_path):
    kit = tmp_path / "kit"
    kit.mkdir()
    scipy.io.savemat(kit / "feat_test.mat", {"my_results": np.eye(3)})
    result = run_script("train_market1501.py", "--mode=export",
                        f"--dataset_dir={market_dir}",
                        f"--restore_path={run[1]}", f"--sdk_dir={kit}")
    one_error_line(result, "refusing to replace", "feat_test.mat")
    assert "my_results" in scipy.io.loadmat(kit / "feat_test.mat")

    crops = os.path.join(market_dir, "query")
    mine = tmp_path / "mine.npy"
    np.save(mine, np.arange(3))
    (tmp_path / "mine.filenames.txt").write_text("a list of mine\n")
    result = run_script("-m", "cosine_metric_learning.encode",
                        f"--model={run[1]}", f"--images={crops}",
                        f"--output={mine}")
    one_error_line(result, "refusing to replace", str(mine))
    assert "encoded" not in result.stderr  # refused before the work
    assert (tmp_path / "mine.filenames.txt").read_text() == "a list of mine\n"
    assert np.array_equal(np.load(mine), np.arange(3))
    # its own earlier output is replaced, even with another number of rows
    out = str(tmp_path / "f.npy")
    for rows in (3, 5):
        encode.write_features(out, np.ones((rows, 4), np.float32),
                              [f"{i}.jpg" for i in range(rows)])
    names = (tmp_path / "f.filenames.txt").read_text().splitlines()
    assert len(names) == len(np.load(out)) == 5


def test_a_users_array_or_partial_mat_is_never_replaced(run, market_dir,
                                                         tmp_path):
    """A .npy of the user's with no file-name list beside it, a .mat with
    only some of an output's keys: refused, left as they were."""
    own = tmp_path / "own"
    own.mkdir()
    crops = os.path.join(market_dir, "query")
    mydata = own / "mydata.npy"
    np.save(mydata, np.arange(7.0))
    result = run_script("-m", "cosine_metric_learning.encode",
                        f"--model={run[1]}", f"--images={crops}",
                        f"--output={mydata}")
    one_error_line(result, f"refusing to replace {mydata}")
    assert np.array_equal(np.load(mydata), np.arange(7.0))
    assert sorted(os.listdir(own)) == ["mydata.npy"]  # no names file
    # a file-name list alone is not an output of the command either
    (own / "lonely.filenames.txt").write_text("x.jpg\n")
    with pytest.raises(UsageError, match="lonely.filenames.txt"):
        encode.check_output(str(own / "lonely.npy"))

    features_only = own / "mine.mat"
    scipy.io.savemat(features_only, {"features": np.eye(2)})
    result = run_script("-m", "cosine_metric_learning.encode",
                        f"--model={run[1]}", f"--images={crops}",
                        f"--output={features_only}")
    one_error_line(result, f"refusing to replace {features_only}")
    for keys in (["query_f"], ["gallery_f", "gallery_label"]):
        partial = own / f"res_{len(keys)}.mat"
        scipy.io.savemat(partial, {k: np.eye(2) for k in keys})
        result = run_script("train_market1501.py", "--mode=export",
                            "--format=pytorch_result",
                            f"--dataset_dir={market_dir}",
                            f"--restore_path={run[1]}", f"--output={partial}")
        one_error_line(result, f"refusing to replace {partial}")
        assert _variables(partial) == set(keys)
    assert _variables(features_only) == {"features"}


def _variables(mat_path):
    return {name for name, _, _ in scipy.io.whosmat(mat_path)}


def test_the_npy_and_its_names_are_replaced_together_or_not_at_all(tmp_path):
    out = str(tmp_path / "f.npy")
    encode.write_features(out, np.ones((3, 4), np.float32),
                          ["a.jpg", "b.jpg", "c.jpg"])

    def fail(f):
        raise OSError(28, "No space left on device")

    npy_kind, names_kind, _ = (kind for _, kind in encode._outputs(out))
    with pytest.raises(UsageError, match="No space left on device"):
        files.write_together([
            (out, lambda f: np.save(f, np.zeros((5, 4))), npy_kind, True),
            (str(tmp_path / "f.filenames.txt"), fail, names_kind, False)])
    # the earlier pair as it was, no temporary file left
    assert np.load(out).shape == (3, 4)
    assert sorted(os.listdir(tmp_path)) == ["f.filenames.txt", "f.model.json",
                                            "f.npy"]


def test_a_saved_model_without_its_variables_is_one_line(run, market_dir,
                                                         tmp_path):
    encoder, _ = checkpoints.load_encoder(run[1], (128, 64, 3))
    folder = str(tmp_path / "sm")
    export.write_saved_model(encoder, folder, (128, 64, 3))
    shutil.rmtree(os.path.join(folder, "variables"))
    with pytest.raises(UsageError, match="has no variables/ folder"):
        encoder_lib.load(folder)
    for result in (
            run_script("-m", "cosine_metric_learning.encode",
                       f"--model={folder}", f"--images={market_dir}/query",
                       f"--output={tmp_path / 'f.npy'}"),
            run_script("train_market1501.py", "--mode=test",
                       f"--dataset_dir={market_dir}",
                       f"--restore_path={folder}")):
        one_error_line(result, f"={folder}: the SavedModel has no "
                        "variables/ folder")


def test_files_recognise_only_their_own_kind(tmp_path):
    mat = files.mat_kind({"features"}, "features")
    scipy.io.savemat(tmp_path / "a.mat", {"features": np.ones((2, 2))})
    scipy.io.savemat(tmp_path / "b.mat", {"features": np.ones(2), "x": 1})
    (tmp_path / "c.mat").write_text("text")
    assert mat.matches(str(tmp_path / "a.mat"))
    assert not mat.matches(str(tmp_path / "b.mat"))
    assert not mat.matches(str(tmp_path / "c.mat"))
    own = tmp_path / "own.png"
    files.write_atomically(str(own), lambda f: Image.new("RGB", (2, 2)).save(
        f, format="PNG", pnginfo=_marked()), files.PNG, binary=True)
    Image.new("RGB", (2, 2)).save(tmp_path / "photo.png")
    assert files.PNG.matches(str(own))
    assert not files.PNG.matches(str(tmp_path / "photo.png"))
    assert not files.PNG.matches(str(tmp_path))  # a folder is not a file


def _marked():
    from PIL import PngImagePlugin
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", files.PNG_SOFTWARE)
    return info


# Silent wrong results -------------------------------------------------------

@pytest.fixture(scope="module")
def box_encoder(run):
    return encoder_lib.create_box_encoder(encoder_lib.load(run[1]))


def test_encoder_refuses_float_patches(run):
    encoder = encoder_lib.load(run[1])
    patches = np.random.default_rng(0).random((2, 128, 64, 3))
    with pytest.raises(UsageError, match=r"dtype float64: expected uint8 BGR "
                       r"values 0\.\.255"):
        encoder(patches)
    with pytest.raises(UsageError, match="dtype int64"):
        encoder(patches.astype(np.int64))
    assert encoder((patches * 255).astype(np.uint8)).shape == (2, 128)


@pytest.mark.parametrize("boxes, message", [
    (np.array([[10, 10, 20, 40, 0.9]] * 4), r"shape \(4, 5\): expected "
     r"\(N, 4\).*boxes\[:, :4\]"),
    (np.array([10, 10, 20, 40]), r"shape \(4,\): expected \(N, 4\)"),
    (np.array([[10, 10, 20, 40], [5, np.nan, 20, 40]]),
     r"box 1 \(5\.0, nan, 20\.0, 40\.0\) has a coordinate that is not "
     r"finite"),
    (np.array([[10, 10, np.inf, 40]]), r"box 0 .*not finite"),
])
def test_box_encoder_refuses_bad_boxes(box_encoder, boxes, message):
    frame = np.zeros((200, 200, 3), np.uint8)
    with pytest.raises(UsageError, match=message):
        box_encoder(frame, boxes)


@pytest.mark.parametrize("frame, message", [
    (np.zeros((100, 100, 3), np.float32), r"dtype float32: expected uint8"),
    (np.zeros((100, 100), np.uint8), r"shape \(100, 100\).*grayscale"),
    (np.zeros((100, 100, 1), np.uint8), r"grayscale"),
    (np.zeros((100, 100, 4), np.uint8), r"BGRA"),
])
def test_box_encoder_refuses_bad_frames(box_encoder, frame, message):
    with pytest.raises(UsageError, match=message):
        box_encoder(frame, [[10, 10, 20, 40]])


def test_boxes_without_pixels_say_why(box_encoder, caplog):
    frame = np.full((100, 100, 3), 90, np.uint8)
    boxes = [[10, 10, 20, 0],      # zero height
             [10, 10, 1, 1],       # 1x1: half a pixel wide at 1:2
             [500, 500, 20, 40],   # outside
             [10, 10, 20, 40]]     # fine
    with caplog.at_level("WARNING"):
        out = box_encoder(frame, boxes)
    assert out.shape == (4, 128) and np.all(np.isfinite(out))
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("Box 0") and "has no area (width 20, height 0)"
               in m for m in messages), messages
    assert any(m.startswith("Box 1") and "covers less than a pixel" in m
               for m in messages), messages
    assert any(m.startswith("Box 2") and "outside the 100x100 image" in m
               for m in messages), messages
    assert not any(m.startswith("Box 3") for m in messages)


def test_evaluator_skips_a_corrupt_validation_image_and_names_it(
        run, market_dir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(market_dir, data)
    validation = evaluator.read_validation_data(MARKET, str(data))
    bad = validation[0][3]
    with open(bad, "wb") as f:
        f.write(b"not a jpeg")
    log_dir, _ = _copy_run(run, tmp_path)
    result = run_script("train_market1501.py", "--mode=eval",
                        f"--dataset_dir={data}", f"--log_dir={log_dir}",
                        "--run_id=run", "--loss_mode=triplet",
                        f"--eval_log_dir={tmp_path / 'eval'}",
                        "--eval_interval_secs=0", "--max_num_evaluations=2")
    assert result.returncode == 0, result.stderr[-3000:]
    skipped = [l for l in result.stderr.splitlines()
               if "Skipping unreadable validation image" in l]
    assert len(skipped) == 1 and bad in skipped[0]
    assert "Cannot read checkpoint" not in result.stderr
    acc = read_events(str(tmp_path / "eval" / "run"))
    assert sorted(e.step for e in acc.Tensors("Precision@1")) == [0, 1]


def test_evaluator_warns_once_about_a_run_that_is_not_there(market_dir,
                                                            tmp_path):
    result = run_script("train_market1501.py", "--mode=eval",
                        f"--dataset_dir={market_dir}",
                        f"--log_dir={tmp_path}", "--run_id=typo",
                        f"--eval_log_dir={tmp_path / 'eval'}",
                        "--eval_interval_secs=0.2", "--eval_timeout_secs=2")
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [l for l in result.stderr.splitlines()
                if "No checkpoint in" in l]
    assert len(warnings) == 1
    assert str(tmp_path / "typo") in warnings[0]
    assert "does not exist" in warnings[0]


def test_resume_with_another_loss_is_refused(run, market_dir, tmp_path):
    log_dir, run_dir = _copy_run(run, tmp_path)
    recorded = json.loads(open(os.path.join(run_dir, "run.json")).read())
    config = recorded.pop("config")
    assert recorded == {"dataset": "market1501", "loss_mode": "triplet",
                        "image_shape": [128, 64, 3], "network": "deep_sort",
                        "recipe": "baseline",
                        "recipe_settings": settings.RECIPE_DEFAULTS}
    # and every setting the run started with
    assert config["loss_mode"] == "triplet" and config["run_id"] == \
        os.path.basename(run_dir)
    assert set(config) == {f.name for f in dataclasses.fields(
        settings.TrainConfig)}
    with pytest.raises(UsageError, match=r"cannot continue .* with "
                       r"--loss_mode=magnet: it was trained with "
                       r"--loss_mode=triplet"):
        training.train(MARKET, _config(market_dir, log_dir,
                                        loss_mode="magnet",
                                        number_of_steps=2))


def test_resume_past_the_last_step_says_so(run, market_dir, tmp_path,
                                           caplog):
    log_dir, run_dir = _copy_run(run, tmp_path)
    before = sorted(os.listdir(run_dir))
    with caplog.at_level("WARNING"):
        result = training.train(MARKET, _config(market_dir, log_dir,
                                                 number_of_steps=1))
    assert result.step == 1
    assert any("already at --number_of_steps=1: nothing to train" in
               r.getMessage() for r in caplog.records)
    assert [n for n in sorted(os.listdir(run_dir))
            if "tfevents" not in n] == [n for n in before
                                        if "tfevents" not in n]


# Damaged checkpoints ----------------------------------------------------------

def _truncate(path):
    with open(path, "rb") as f:
        content = f.read()
    with open(path, "wb") as f:
        f.write(content[:len(content) // 2])


def test_damaged_latest_checkpoint_continues_from_the_one_before(
        run, market_dir, tmp_path, caplog):
    log_dir, run_dir = _copy_run(run, tmp_path)
    data = os.path.join(run_dir, "ckpt-1.data-00000-of-00001")
    _truncate(data)
    with caplog.at_level("WARNING"):
        result = training.train(MARKET, _config(market_dir, log_dir,
                                                 number_of_steps=2))
    assert result.step == 2
    warning = [r.getMessage() for r in caplog.records
               if "is damaged" in r.getMessage()]
    assert len(warning) == 1 and data in warning[0]
    assert "continuing from the newest complete checkpoint" in warning[0]
    assert os.path.join(run_dir, "ckpt-0") in warning[0]
    assert tf.train.latest_checkpoint(run_dir).endswith("ckpt-2")


def test_damaged_restore_path_is_one_line_naming_the_file(run, tmp_path):
    _, run_dir = _copy_run(run, tmp_path)
    prefix = os.path.join(run_dir, "ckpt-1")
    _truncate(prefix + ".data-00000-of-00001")
    result = run_script("train_market1501.py", "--mode=freeze",
                        f"--restore_path={prefix}",
                        f"--output={tmp_path / 'm.pb'}")
    one_error_line(result, "is damaged",
                    prefix + ".data-00000-of-00001",
                    "Read less bytes than requested")
    with open(prefix + ".index", "wb") as f:
        f.write(b"garbage" * 20)
    result = run_script("train_market1501.py", "--mode=freeze",
                        f"--restore_path={prefix}",
                        f"--output={tmp_path / 'm.pb'}")
    one_error_line(result, "is damaged", prefix + ".index")
    assert not os.path.exists(tmp_path / "m.pb")


def test_another_input_size_than_the_runs_is_one_quiet_line(run, tmp_path):
    # the run records its size: a flag that contradicts it names both
    result = run_script("train_custom.py", "--mode=freeze",
                        "--image_shape=96,48", f"--restore_path={run[1]}",
                        f"--output={tmp_path / 'm.pb'}")
    one_error_line(result, "--image_shape=96,48: the run", "trained at "
                    "128x64 (its run.json)")
    # a checkpoint without its run.json: the shapes tell
    _, run_dir = _copy_run(run, tmp_path)
    os.remove(os.path.join(run_dir, "run.json"))
    result = run_script("train_custom.py", "--mode=freeze",
                        "--image_shape=96,48", f"--restore_path={run_dir}",
                        f"--output={tmp_path / 'm.pb'}")
    line = one_error_line(result, "does not match the encoder",
                           "--image_shape")
    assert "Value in checkpoint could not be found" not in result.stderr
    assert result.stderr.rstrip().splitlines()[-1] == line


# Tracebacks and exit status ----------------------------------------------------

def test_mars_test_with_a_missing_image_names_it(run, mars_dir, tmp_path):
    data = tmp_path / "mars"
    shutil.copytree(mars_dir, data)
    person = sorted(os.listdir(data / "bbox_test"))[1]
    missing = data / "bbox_test" / person / sorted(
        os.listdir(data / "bbox_test" / person))[0]
    os.remove(missing)
    result = run_script("train_mars.py", "--mode=test",
                        f"--dataset_dir={data}", f"--restore_path={run[1]}")
    one_error_line(result, f"'{missing}'", "MARS evaluation kit layout",
                    "bbox_test/")


@pytest.mark.parametrize("args, fragment", [
    (["--bogus=1"], "Unknown command line flag 'bogus'"),
    (["--loss_mode=softmax"], "--loss_mode=softmax"),
    (["--mode=evaluate"], "--mode=evaluate"),
    (["positional"], "unexpected arguments: positional"),
    (["--strategy=mirrored", "--devices=gpu7"],
     "--devices=gpu7: 'gpu7' is not a device name"),
])
def test_flag_errors_exit_2_with_one_line(market_dir, tmp_path, args,
                                          fragment):
    result = run_script("train_market1501.py", f"--dataset_dir={market_dir}",
                        f"--log_dir={tmp_path}", *args)
    one_error_line(result, fragment)


def test_encode_cli_flag_errors_exit_2(tmp_path):
    result = run_script("-m", "cosine_metric_learning.encode",
                        "--model=x.pb")
    one_error_line(result, "--images", "--output")


@pytest.mark.parametrize("imprint", ["--noimprint", "--imprint"])
def test_custom_data_all_unreadable_fails_without_a_checkpoint(tmp_path,
                                                                imprint):
    root = tmp_path / "people"
    synthetic.write_identity_folders(str(root), num_ids=12, seed=1)
    for path in root.glob("*/*.jpg"):
        path.write_text("not an image")
    result = run_script("train_custom.py", f"--dataset_dir={root}",
                        f"--log_dir={tmp_path / 'logs'}", "--run_id=run",
                        "--batch_size=16", "--number_of_steps=2",
                        "--max_unreadable_fraction=0.05", imprint)
    line = one_error_line(result, "training images are unreadable",
                           status=1)
    count = int(line.split()[1])
    skipped = [l for l in result.stderr.splitlines()
               if "Skipping unreadable image" in l]
    assert count == len(skipped)
    assert not [n for n in os.listdir(tmp_path / "logs" / "run")
                if n.startswith("ckpt")]


def test_the_library_names_its_arguments_and_the_command_its_flags(
        market_dir, tmp_path):
    missing = "/missing/model.onnx"
    with pytest.raises(UsageError) as error:
        encoder_lib.load(missing)
    assert str(error.value) == f"path='{missing}': no such file"
    with pytest.raises(UsageError, match=r"^backend='tensorrt': expected"):
        encoder_lib.load(missing, backend="tensorrt")
    result = run_script("-m", "cosine_metric_learning.encode",
                        f"--model={missing}", f"--images={tmp_path}",
                        f"--output={tmp_path / 'f.npy'}")
    # no image there: checked first, and named by its flag
    one_error_line(result, f"--images={tmp_path}: no image files found")
    with pytest.raises(UsageError, match=r"^pattern='.*': no image files"):
        features.list_images(str(tmp_path))
    with pytest.raises(UsageError, match=r"^output='f.txt': expected a "
                       r"\.npy or \.mat"):
        encode.check_output("f.txt")
    with pytest.raises(UsageError, match=r"^output='m.onnx.bin': expected "
                       "a file name ending in .onnx"):
        deploy.check_onnx_output("m.onnx.bin")
    Image.new("RGB", (64, 128)).save(tmp_path / "a.png")
    result = run_script("-m", "cosine_metric_learning.encode",
                        f"--model={missing}", f"--images={tmp_path}",
                        f"--output={tmp_path / 'f.npy'}")
    assert one_error_line(result) == f"error: --model={missing}: no such file"
    result = run_script("train_market1501.py", "--mode=test",
                        f"--dataset_dir={market_dir}",
                        f"--restore_path={missing}")
    assert one_error_line(result) == \
        f"error: --restore_path={missing}: no such file"
    # the entry points' names for the library's arguments (the command
    # prints ArgumentError.for_flags, above): a value of several flags
    # is left to the problem, which names each
    with pytest.raises(UsageError) as error:
        protocol.run_test(MARKET, missing, market_dir,
                          rerank_parameters=(0, 6, 0.3))
    assert error.value.for_flags(commands.flag_names(cli.CONFIGS.values())).startswith(
        "--rerank: k1=0, k2=6, lambda=0.3: expected k1 >= 1")
    assert str(error.value).startswith("rerank_parameters=(0, 6, 0.3): k1=0")


def test_what_a_path_is_instead_of_a_checkpoint(market_dir, tmp_path):
    """An exported model, a SavedModel or a huge input size where a
    checkpoint or a patch size is expected: said as what it is."""
    exported = tmp_path / "market1501.onnx"
    exported.write_bytes(b"an onnx file")
    with pytest.raises(UsageError, match=r"^path='.*market1501.onnx': an "
                       "exported model, not a checkpoint; pass the training "
                       "run or checkpoint it was exported from"):
        checkpoints.resolve_checkpoint(str(exported))
    result = run_script("train_market1501.py", "--mode=tflite",
                        f"--restore_path={exported}",
                        f"--output={tmp_path / 'm.tflite'}")
    one_error_line(result, f"--restore_path={exported}: an exported model")
    with pytest.raises(UsageError, match=r"--image_shape=100000,100000: "
                       r"expected at most 262144 pixels"):
        settings.parse_image_shape("100000,100000")
    assert settings.parse_image_shape("512,512") == (512, 512, 3)
    # the box encoder example: a bad model is its one line too
    result = run_script("examples/box_encoder.py", "--model=nope.pb",
                        f"--dataset_dir={market_dir}")
    assert one_error_line(result) == "error: --model=nope.pb: no such file"
