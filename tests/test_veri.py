"""VeRi-776, the original's third dataset: the reader, the test protocol
checked against an independent cross-camera computation, and every mode
of ``train_veri.py`` on the synthetic VeRi layout."""

import json
import os
import shutil

import numpy as np
import pytest
import scipy.io

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import protocol
from cosine_metric_learning.datasets import synthetic, util, veri
from cosine_metric_learning.datasets.spec import VERI
from cosine_metric_learning.errors import UsageError
from tests.conftest import ROOT, one_error_line, run_script
from tests.reference import kit_reference


@pytest.fixture(scope="module")
def veri_dir(tmp_path_factory):
    return synthetic.write_veri(str(tmp_path_factory.mktemp("data") / "VeRi"),
                                num_train_ids=30, num_test_ids=10, seed=4)


def test_the_reader_parses_veri_names_and_skips_strays(veri_dir):
    assert veri.parse_filename("0002_c014_00030600_0.jpg") == (2, 13)
    assert veri.parse_filename("0002_c014_00030600_0.jpg.jpg") == (2, 13)
    for stray in ("Thumbs.db", "0002_c14_00030600_0.jpg", "readme.txt",
                  "0002_c014_00030600_0.png"):
        assert veri.parse_filename(stray) is None
    split = veri.read_train_split_to_str(veri_dir)
    listed = [n for n in os.listdir(os.path.join(veri_dir, "image_train"))
              if veri.parse_filename(n)]
    assert len(split.filenames) == len(listed) and len(listed) < len(
        os.listdir(os.path.join(veri_dir, "image_train")))
    assert any(f.endswith(".jpg.jpg") for f in split.filenames)
    assert split.ids.max() <= veri.MAX_LABEL and split.cameras.min() >= 0
    # name_train.txt lists the same files, sorted
    with open(os.path.join(veri_dir, "name_train.txt")) as f:
        names = [line.strip() for line in f if veri.parse_filename(
            line.strip())]
    assert names == [os.path.basename(f) for f in split.filenames]
    # the original's split: 10 % of the vehicles, seed 1234
    train, validation = util.split_validation(split.ids)
    assert len(np.unique(split.ids[validation])) == int(
        0.1 * len(np.unique(split.ids)))
    test = veri.read_test_protocol(veri_dir)
    assert len(test.query_groups) == 10
    assert set(test.query_ids) <= set(test.gallery_ids)
    assert VERI.num_classes == 770 and VERI.image_shape == (128, 64, 3)


def test_bad_veri_folders(veri_dir, tmp_path):
    broken = tmp_path / "VeRi"
    shutil.copytree(veri_dir, broken)
    # a query vehicle absent from the gallery: its query is left out
    split = veri.read_test_protocol(str(broken))
    absent = split.query_ids[0]
    for name in os.listdir(broken / "image_test"):
        if name.startswith(f"{absent:04d}_"):
            os.remove(broken / "image_test" / name)
    split = veri.read_test_protocol(str(broken))
    features = np.random.default_rng(0).normal(size=(len(split.filenames),
                                                     8))
    result, _ = protocol.evaluate_split(split, features)
    assert result["num_queries"] == len(split.query_groups) - 1
    # a vehicle id the classifier has no row for
    shutil.copy(split.filenames[0],
                broken / "image_train" / "0775_c001_00000009_0.jpg")
    with pytest.raises(UsageError, match="vehicle id 775 .* above 769"):
        veri.read_train_split_to_str(str(broken))
    shutil.rmtree(broken / "image_query")
    one_error_line(run_script("train_veri.py", "--mode=test",
                              f"--dataset_dir={broken}",
                              f"--restore_path={broken}"),
                   "image_query", "not a directory")


def test_every_mode_on_veri(veri_dir, trained, tmp_path):
    """Train at a square input, evaluate, test, export both formats and
    every model format, with the original's output names."""
    runs = tmp_path / "runs"
    common = [f"--dataset_dir={veri_dir}", f"--log_dir={runs}",
              "--run_id=cars"]
    result = run_script("train_veri.py", *common, "--image_shape=64,64",
                        "--batch_size=16", "--number_of_steps=3")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Training veri" in result.stderr
    run = json.loads((runs / "cars" / "run.json").read_text())
    assert run["image_shape"][:2] == [64, 64] and run["dataset"] == "veri"
    result = run_script("train_veri.py", *common, "--mode=eval",
                        f"--eval_log_dir={tmp_path / 'eval'}",
                        "--max_num_evaluations=1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Precision@1" in result.stderr

    # test mode equals an independent cross-camera computation on the
    # features the pytorch_result export writes (of a network whose
    # features are well apart: three steps leave near-ties that float32
    # rounding reorders)
    numbers = tmp_path / "test.json"
    spread = [f"--dataset_dir={veri_dir}", f"--restore_path={trained[0]}"]
    result = run_script("train_veri.py", *spread, "--mode=test",
                        f"--output_json={numbers}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "veri test, 10 queries" in result.stdout
    result = run_script("train_veri.py", *spread, "--mode=export",
                        "--format=pytorch_result",
                        f"--output={tmp_path / 'veri.mat'}")
    assert result.returncode == 0, result.stderr[-2000:]
    mat = scipy.io.loadmat(str(tmp_path / "veri.mat"))
    query, gallery = mat["query_f"], mat["gallery_f"]
    query = query / np.linalg.norm(query, axis=1, keepdims=True)
    gallery = gallery / np.linalg.norm(gallery, axis=1, keepdims=True)
    expected = kit_reference(
        1.0 - query.astype(np.float64) @ gallery.astype(np.float64).T,
        mat["query_label"].ravel(), mat["gallery_label"].ravel(),
        mat["query_cam"].ravel(), mat["gallery_cam"].ravel(), (1, 5))
    measured = json.loads(numbers.read_text())
    for key in ("rank-1", "rank-5", "mAP", "mAP_noninterpolated", "mINP",
                "num_queries"):
        assert measured[key] == pytest.approx(expected[key], abs=1e-5), key

    # the kit format: feat_test.mat and feat_query.mat in --dataset_dir
    kit_dir = tmp_path / "kit"
    shutil.copytree(veri_dir, kit_dir)
    result = run_script("train_veri.py", "--mode=export",
                        f"--dataset_dir={kit_dir}",
                        f"--restore_path={runs / 'cars'}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert scipy.io.loadmat(str(kit_dir / "feat_query.mat"))[
        "features"].shape == (10, 128)

    # the model exports at the square input, with the original's default
    # names: the command runs one mode (as above); the others run in one
    # process, as the command runs each
    result = run_script("train_veri.py", "--mode=freeze",
                        f"--restore_path={runs / 'cars'}", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    outputs = {"finalize": "veri.ckpt.index",
               "saved_model": "veri_saved_model", "onnx": "veri.onnx",
               "openvino": "veri.xml", "tflite": "veri.tflite"}
    result = run_script("-m", "tests.helpers.export_modes", "VERI",
                        str(runs / "cars"), *outputs, cwd=str(tmp_path),
                        env={"PYTHONPATH": ROOT})
    assert result.returncode == 0, result.stderr[-2000:]
    for mode, output in {**outputs, "freeze": "veri.pb"}.items():
        assert (tmp_path / output).exists(), mode
    # each carries the square input (the checkpoint, without a run.json,
    # is read at it)
    for output in ("veri.ckpt", "veri_saved_model", "veri.onnx", "veri.xml",
                   "veri.tflite", "veri.pb"):
        assert encoder_lib.load(str(tmp_path / output), image_shape=(
            64, 64, 3)).image_shape == (64, 64, 3), output
