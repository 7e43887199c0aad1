"""Dataset readers on the synthetic sets, the identity split, the layouts."""

import os

import numpy as np
import pytest
import scipy.io
from PIL import Image

from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.datasets import market1501, mars, util


# Market-1501 ------------------------------------------------------------------

@pytest.mark.parametrize("name, expected", [
    ("0002_c1s1_000451_03.jpg", (2, 0)),
    ("1501_c6s4_001877_01.jpg", (1501, 5)),
    ("-1_c3s2_000100_02.jpg", (-1, 2)),
    ("0000_c5s3_015240_04.jpg", (0, 4)),
    ("0034_c2s1_002601_01.jpg.jpg", (34, 1)),
    ("Thumbs.db", None),
    ("0002_c1s1_000451_03.png", None),
    ("readme.txt", None),
])
def test_market1501_file_names(name, expected):
    assert market1501.parse_filename(name) == expected


def test_market1501_train_split(market_dir):
    split = market1501.read_train_split_to_str(market_dir)
    filenames, ids, cameras = list(split.filenames), split.ids, split.cameras
    listed = [n for n in os.listdir(os.path.join(market_dir,
                                                 "bounding_box_train"))]
    assert "Thumbs.db" in listed
    assert len(filenames) == len(listed) - 1  # all but Thumbs.db
    assert any(f.endswith(".jpg.jpg") for f in filenames)
    assert filenames == sorted(filenames)
    assert len(np.unique(ids)) == 40 and ids.min() > 0
    assert cameras.min() >= 0 and cameras.max() <= 5
    for f, pid, cam in zip(filenames, ids, cameras):
        name = os.path.basename(f)
        assert int(name[:4]) == pid and int(name[6]) == cam + 1


def test_market1501_test_split_and_gt_query(market_dir):
    (gallery, g_ids, g_cams), (query, q_ids, q_cams) = \
        market1501.read_test_split_to_str(market_dir)
    assert -1 in g_ids and 0 in g_ids  # junk and distractors
    assert set(q_ids) <= set(g_ids) and len(query) >= 10
    # gt_query follows the kit: good = same id, other camera; junk = same id
    # and camera, or id -1; both 1-based into the sorted gallery
    for name, pid, cam in zip(query, q_ids, q_cams):
        stem = os.path.join(market_dir, "gt_query",
                            os.path.basename(name)[:-4])
        good = scipy.io.loadmat(stem + "_good.mat")["good_index"].ravel() - 1
        junk = scipy.io.loadmat(stem + "_junk.mat")["junk_index"].ravel() - 1
        assert len(good) > 0
        assert all(g_ids[good] == pid) and all(g_cams[good] != cam)
        assert all((g_ids[junk] == -1) | ((g_ids[junk] == pid)
                                          & (g_cams[junk] == cam)))


def test_market1501_missing_and_empty_folders(tmp_path):
    with pytest.raises(UsageError, match="not a directory"):
        market1501.read_train_split_to_str(str(tmp_path / "nowhere"))
    with pytest.raises(UsageError, match="bounding_box_train"):
        market1501.read_train_split_to_str(str(tmp_path))
    (tmp_path / "bounding_box_train").mkdir()
    (tmp_path / "bounding_box_train" / "Thumbs.db").write_bytes(b"x")
    with pytest.raises(UsageError, match="no Market-1501 images in"):
        market1501.read_train_split_to_str(str(tmp_path))


# MARS -----------------------------------------------------------------------

@pytest.mark.parametrize("name, expected", [
    ("0001C1T0001F001.jpg", (1, 0, 1)),
    ("1500C6T0123F045.jpg", (1500, 5, 123)),
    ("00-1C2T0003F010.jpg", (-1, 1, 3)),
    ("0000C3T0005F001.jpg", (0, 2, 5)),
    ("Thumbs.db", None),
    ("0001X1T0001F001.jpg", None),
])
def test_mars_file_names(name, expected):
    assert mars.parse_filename(name) == expected


def test_mars_splits_follow_the_info_lists(mars_dir):
    for split, reader in (("train", mars.read_train_split_to_str),
                          ("test", mars.read_test_split_to_str)):
        read = reader(mars_dir)
        filenames, ids, cameras = read.filenames, read.ids, read.cameras
        tracklets = [mars.parse_filename(os.path.basename(p))[2]
                     for p in filenames]
        with open(os.path.join(mars_dir, "info", f"{split}_name.txt")) as f:
            names = f.read().split()
        assert [os.path.basename(p) for p in filenames] == names
        assert all(os.path.isfile(p) for p in filenames)
        assert all(os.path.basename(os.path.dirname(p)) == n[:4]
                   for p, n in zip(filenames, names))
    assert -1 in ids and 0 in ids
    info = scipy.io.loadmat(os.path.join(mars_dir, "info",
                                         "tracks_test_info.mat"))
    tracks = info["track_test_info"].astype(int)
    for start, end, pid, cam in tracks:
        assert all(ids[start - 1:end] == pid)
        assert all(cameras[start - 1:end] == cam - 1)
        assert len(set(tracklets[start - 1:end])) == 1
    query = scipy.io.loadmat(os.path.join(
        mars_dir, "info", "query_IDX.mat"))["query_IDX"].ravel().astype(int)
    assert len(query) == 6 and all(tracks[query - 1, 2] > 0)
    image = Image.open(filenames[0])
    assert image.size == (128, 256)  # 256x128 on disk


def test_mars_missing_info(tmp_path):
    (tmp_path / "bbox_train").mkdir()
    with pytest.raises(UsageError, match=r"info/train_name\.txt"):
        mars.read_train_split_to_str(str(tmp_path))


# The validation split ---------------------------------------------------------

def test_validation_split_is_the_originals_random_state_choice():
    ids = np.array([5, 3, 3, 9, 12, 12, 12, 40, 41, 42, 43, 44, 45, 46, 47,
                    48, 49, 50, 51, 52, 53, 54, 55])
    unique = np.unique(ids)
    assert len(unique) == 20
    expected = np.random.RandomState(1234).choice(unique, int(0.1 * 20),
                                                  replace=False)
    np.testing.assert_array_equal(util.validation_ids(ids), expected)
    train, valid = util.split_validation(ids)
    assert not np.any(train & valid) and np.all(train | valid)
    assert set(ids[valid]) == set(expected.tolist())
    assert set(ids[train]).isdisjoint(expected.tolist())


def test_look_alike_pairs_are_built_alike_within_each_split():
    """``look_alike`` pairs the identities of each split in order: the
    second of a pair has the first's build, pattern and bag, and colours
    off by about the spread; without it the same ids are drawn apart."""
    from cosine_metric_learning.datasets import synthetic_people
    splits = (np.arange(1, 7), np.arange(10, 15))  # one left unpaired
    alike = synthetic_people.people(np.random.default_rng(0), splits, 5.0, 1)
    apart = synthetic_people.people(np.random.default_rng(0), splits, 0.0, 1)
    assert alike.keys() == apart.keys()
    shifts = []
    for ids in splits:
        for first, second in zip(ids[0::2], ids[1::2]):
            for key in ("pattern", "bag", "width", "legs"):
                assert alike[second][key] == alike[first][key]
            for key in synthetic_people.COLOUR_KEYS:
                shifts.append(alike[second][key] - alike[first][key])
                np.testing.assert_array_equal(alike[first][key],
                                              apart[first][key])
        if len(ids) % 2:  # the one left unpaired is as drawn
            np.testing.assert_array_equal(alike[ids[-1]]["shirt"],
                                          apart[ids[-1]]["shirt"])
    shifts = np.abs(np.concatenate(shifts))
    assert 2 < shifts.mean() < 8  # about 0.8 of the spread, clipped
    spread_apart = np.mean([np.abs(apart[b]["shirt"] - apart[a]["shirt"])
                            for a, b in ((1, 2), (3, 4), (5, 6))])
    assert spread_apart > 20  # independent draws: about 85 apart


@pytest.mark.parametrize("text", ["5:120", "5:120:31,x:1:2", "0:120:1",
                                  "5:0:1", "5:120:31,"])
def test_scene_lists_name_the_scene_that_is_not_pairs_frames_seed(text):
    from cosine_metric_learning.datasets import synthetic_mot
    assert synthetic_mot.parse_scenes("5:120:31,8:60:2") == [(5, 120, 31),
                                                         (8, 60, 2)]
    with pytest.raises(ValueError, match="expected pairs:frames:seed"):
        synthetic_mot.parse_scenes(text)


def test_every_pair_is_past_the_pillar_from_crossing_frames(tmp_path):
    """The last pair's people are partly hidden until the frame before
    ``crossing_frames`` and whole from it on (the ground truth's
    visibility)."""
    from cosine_metric_learning.datasets import synthetic_mot
    pairs = 3
    last = synthetic_mot.crossing_frames(pairs)
    assert last > 12 * (pairs - 1)
    folder = synthetic_mot.write_mot_sequence(str(tmp_path), num_pairs=pairs,
                                          num_frames=last + 5, seed=1)
    gt = np.loadtxt(os.path.join(folder, "gt", "gt.txt"), delimiter=",")
    for track in (2 * pairs - 1, 2 * pairs):  # the last pair
        rows = gt[gt[:, 1] == track]
        assert rows[:, 8].min() < 0.5  # behind the pillar at some frame
        assert rows[rows[:, 8] < 1, 0].max() == last - 1
        assert (rows[rows[:, 0] >= last, 8] == 1).all()


def test_mot_layout_of_more_pairs_is_long_enough_for_them_to_cross(
        tmp_path):
    """``--pairs`` without ``--frames``: the sequence runs until every pair
    has crossed (or 160 frames), two ground-truth tracks a pair."""
    from cosine_metric_learning.datasets import synthetic, synthetic_mot
    synthetic.main(["--layout=mot", f"--output_dir={tmp_path}",
                    "--pairs=8", "--seed=4", "--name=EIGHT"])
    folder = tmp_path / "EIGHT"
    length = max(160, synthetic_mot.crossing_frames(8))
    assert length > 160  # the default would cut the last pairs' crossing
    assert f"seqLength={length}" in (folder / "seqinfo.ini").read_text()
    assert len(os.listdir(folder / "img1")) == length
    gt = np.loadtxt(folder / "gt" / "gt.txt", delimiter=",")
    assert sorted(set(gt[:, 1].astype(int))) == list(range(1, 17))


@pytest.mark.parametrize("args, fragment", [
    (["--layout=mot", "--pairs=0"], "--pairs=0: expected at least 1"),
    (["--layout=mot", "--frames=0"], "--frames=0: expected at least 1"),
    (["--layout=market1501", "--pairs=3"],
     "--pairs and --frames with --layout=market1501"),
])
def test_mot_layout_flag_errors_exit_2_with_one_line(tmp_path, capsys, args,
                                                     fragment):
    from cosine_metric_learning.datasets import synthetic
    with pytest.raises(SystemExit) as exit_info:
        synthetic.main(args + [f"--output_dir={tmp_path / 'out'}"])
    assert exit_info.value.code == 2
    assert fragment in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_scene_too_short_for_every_crossing_is_written_with_a_warning(
        tmp_path, caplog):
    from cosine_metric_learning.datasets import synthetic_mot
    needed = synthetic_mot.crossing_frames(1)
    with caplog.at_level("WARNING"):
        written = synthetic_mot.write_mot_scenes(
            str(tmp_path), f"1:{needed - 1}:2,1:{needed}:3")
    assert len(written) == 2
    warnings = [r.getMessage() for r in caplog.records
                if r.levelname == "WARNING"]
    assert warnings == [f"SCENE-01: {needed - 1} frames are too few for 1 "
                        f"pairs: the last never get past the pillar (every "
                        f"pair has from frame {needed})"]


def test_the_registry_holds_the_original_datasets_once():
    from cosine_metric_learning.datasets import spec
    assert {"market1501", "mars", "veri"} <= set(spec.DATASETS)
    assert spec.get_dataset("mars") is spec.MARS
    with pytest.raises(ValueError, match="registered already"):
        spec.register(spec.MARKET1501)
    with pytest.raises(UsageError, match="unknown dataset 'duke'.*market1501"):
        spec.get_dataset("duke")


def test_sparse_ids_are_relabelled_and_the_originals_keep_theirs(
        market_dir, tmp_path):
    """A dataset whose ids are spread (as DukeMTMC's: 702 training
    identities up to 7,140) trains a classifier of a row per identity and
    records the numbering; the original's datasets keep their ids as the
    rows, as Deep SORT's published model has them."""
    import dataclasses
    import json

    import tensorflow as tf

    from cosine_metric_learning import training
    from cosine_metric_learning.datasets import spec
    from tests.conftest import small_config
    split = market1501.read_train_split_to_str(market_dir)
    raw = np.unique(split.ids)
    assert raw.max() > len(raw)  # spread: relabelling changes the rows
    assert spec.relabelled(spec.MARKET1501, market_dir) is spec.MARKET1501
    sparse = dataclasses.replace(spec.MARKET1501, name="sparse",
                                 relabel=True)
    numbered = spec.relabelled(sparse, market_dir)
    assert numbered.num_classes == len(raw)
    assert numbered.label_names == [str(i) for i in raw]
    relabelled = numbered.read_train(market_dir)
    np.testing.assert_array_equal(raw[relabelled.ids], split.ids)
    np.testing.assert_array_equal(relabelled.filenames, split.filenames)
    # one step through training.run: the classifier has len(raw) rows
    config = small_config(market_dir, tmp_path, "sparse",
                          loss_mode="cosine-softmax", number_of_steps=1)
    assert training.run(sparse, config) == 0
    labels = json.loads((tmp_path / "sparse" / "labels.json").read_text())
    assert labels["labels"] == {str(k): str(i) for k, i in enumerate(raw)}
    # the cosine-softmax head's class means: 128 x classes
    shapes = tf.train.load_checkpoint(
        str(tmp_path / "sparse")).get_variable_to_shape_map().values()
    heads = {shape[1] for shape in shapes
             if len(shape) == 2 and shape[0] == 128}
    assert heads == {len(raw)}
