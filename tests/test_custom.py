"""Your own data: the image-folder reader, other image shapes, train_custom."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import settings
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.datasets import image_folder, synthetic
from cosine_metric_learning.nets.deep_sort import network_definition
from tests.conftest import one_error_line, run_script


@pytest.fixture(scope="module")
def own_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("own") / "people")
    return synthetic.write_identity_folders(path, num_ids=30, seed=4)


def test_identity_folders_with_cameras_from_the_file_name(own_dir):
    split = image_folder.read_image_folder(own_dir,
                                           camera_regex=r"^c(\d+)_")
    files, ids, cams, names = (split.filenames, split.ids, split.cameras,
                               split.label_names)
    assert names == sorted(os.listdir(own_dir)) and len(names) == 30
    assert sorted(set(ids.tolist())) == list(range(30))
    for f, i, c in zip(files, ids, cams):
        assert os.path.basename(os.path.dirname(f)) == names[i]
        # cameras are numbered in the sorted order of the names found
        assert 0 <= c < 6
    seen = sorted({os.path.basename(f).split("_")[0] for f in files})
    for f, c in zip(files, cams):
        assert seen[c] == os.path.basename(f).split("_")[0]
    # without a regex the camera is unknown
    unknown = image_folder.read_image_folder(own_dir).cameras
    assert set(unknown.tolist()) == {-1}


def test_market_style_flat_folder_is_remapped(market_dir):
    folder = os.path.join(market_dir, "bounding_box_train")
    split = image_folder.read_image_folder(folder)
    files, ids, names = split.filenames, split.ids, split.label_names
    assert [int(n) for n in names] == sorted(int(n) for n in names)
    assert ids.max() == len(names) - 1
    for f, i in zip(files, ids):
        assert os.path.basename(f)[:4] == names[i]


def test_bad_folders_and_settings(tmp_path, own_dir):
    single = tmp_path / "single"
    shutil.copytree(own_dir, single)
    lonely = single / "person_003"
    for extra in sorted(os.listdir(lonely))[1:]:
        os.remove(lonely / extra)
    with pytest.raises(UsageError, match=r"person_003 has a single image"):
        image_folder.read_image_folder(str(single))
    with pytest.raises(UsageError, match="expected one group"):
        image_folder.read_image_folder(own_dir, camera_regex=r"c\d")
    with pytest.raises(UsageError, match="layout='zip'"):
        image_folder.read_image_folder(own_dir, layout="zip")
    with pytest.raises(UsageError, match="at least 8"):
        settings.parse_image_shape("4,64")
    with pytest.raises(UsageError, match="expected HEIGHT,WIDTH"):
        settings.parse_image_shape("128x64")
    assert settings.parse_image_shape("96,48") == (96, 48, 3)


def test_network_keeps_its_structure_for_other_shapes():
    encoder = network_definition.create_encoder((96, 48, 3))
    # three halvings: 96x48 -> 12x6; fc1 follows the feature map size
    assert encoder.get_layer("conv4_3_add").output.shape[1:] == (12, 6, 128)
    assert encoder.get_layer("fc1").kernel.shape == (12 * 6 * 128, 128)
    assert len(encoder.layers) == len(network_definition.create_encoder(
    ).layers)


@pytest.mark.slow
def test_train_custom_end_to_end_with_another_image_shape(own_dir, tmp_path):
    common = [f"--dataset_dir={own_dir}", "--image_shape=96,48",
              r"--camera_regex=^c(\d+)_", f"--log_dir={tmp_path}",
              "--run_id=mine"]
    result = run_script("train_custom.py", *common, "--batch_size=16",
                        "--number_of_steps=2")
    assert result.returncode == 0, result.stderr[-2000:]
    with open(tmp_path / "mine" / "labels.json") as f:
        labels = json.load(f)["labels"]
    assert labels == {str(i): n for i, n in enumerate(sorted(os.listdir(
        own_dir)))}
    checkpoint = tf.train.latest_checkpoint(tmp_path / "mine")
    assert checkpoint.endswith("ckpt-2")

    # the run knows its shape and loss: later commands need not repeat them
    later = [f"--dataset_dir={own_dir}", r"--camera_regex=^c(\d+)_",
             f"--log_dir={tmp_path}", "--run_id=mine"]
    result = run_script("train_custom.py", *later, "--mode=freeze",
                        f"--output={tmp_path / 'mine.pb'}")
    assert result.returncode == 0, result.stderr[-2000:]
    frozen = encoder_lib.load(str(tmp_path / "mine.pb"))
    assert frozen.image_shape == (96, 48, 3)
    from_checkpoint = encoder_lib.load(str(tmp_path / "mine"))
    assert from_checkpoint.image_shape == (96, 48, 3)
    assert from_checkpoint.source == checkpoint
    image = np.asarray(Image.open(os.path.join(
        own_dir, "person_000", sorted(os.listdir(os.path.join(
            own_dir, "person_000")))[0])).resize((48, 96)))[..., ::-1]
    np.testing.assert_allclose(frozen(image[None]),
                               from_checkpoint(image[None]), atol=1e-5)

    result = run_script("train_custom.py", *later, "--mode=eval",
                        f"--eval_log_dir={tmp_path / 'eval'}",
                        "--max_num_evaluations=1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "step 0: Precision@1" in result.stderr

    # training continues at the run's shape, without repeating it
    result = run_script("train_custom.py", *later, "--batch_size=16",
                        "--number_of_steps=3")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "(step 2)" in result.stderr
    # data whose identities are numbered otherwise cannot continue it
    other = tmp_path / "other_people"
    shutil.copytree(own_dir, other)
    shutil.copytree(other / "person_000", other / "a_newcomer")
    result = run_script("train_custom.py", *later, f"--dataset_dir={other}",
                        "--batch_size=16", "--number_of_steps=4")
    one_error_line(result, "numbered otherwise than its labels.json",
                   "label 0 differs")

    one_error_line(run_script("train_custom.py", *common, "--image_shape=4,4"),
                   "--image_shape=4,4")
