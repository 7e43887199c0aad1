"""The evaluator process, --mode=test against a reference loop, export."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.io
import tensorflow as tf
from PIL import Image

from cosine_metric_learning import evaluator, kit_features, protocol, settings
from cosine_metric_learning import training
from cosine_metric_learning.errors import UsageError
from tests.conftest import ENV, ROOT, read_events, small_config
from tests.reference import gate_reference, kit_reference, rerank_reference
from tests.reference import bilinear_resize, restored_encoder
from tests.reference import spread_kernels
from cosine_metric_learning.datasets.spec import MARKET1501 as MARKET
from cosine_metric_learning.datasets.spec import MARS

pytestmark = pytest.mark.slow


def _train(dataset, dataset_dir, log_dir, steps, **kwargs):
    return training.train(dataset, small_config(
        dataset_dir, log_dir, **{"number_of_steps": steps,
                                 "loss_mode": "cosine-softmax", **kwargs}))


@pytest.fixture(scope="module")
def market_checkpoint(market_dir, tmp_path_factory):
    return _train(MARKET, market_dir, tmp_path_factory.mktemp("m"),
                  3).checkpoint


def _evaluator(market_dir, tmp_path, *extra):
    return subprocess.Popen(
        [sys.executable, "train_market1501.py", "--mode=eval",
         f"--dataset_dir={market_dir}", f"--log_dir={tmp_path}",
         "--run_id=run", f"--eval_log_dir={tmp_path / 'eval'}",
         "--eval_interval_secs=0.2", "--batch_size=64", *extra],
        cwd=ROOT, env=ENV, stderr=subprocess.PIPE, text=True)


def _precision_events(eval_dir):
    acc = read_events(eval_dir)
    tags = set(acc.Tags()["tensors"])
    assert {"Precision@1", "Precision@5", "Precision@10", "Precision@20",
            "mAP", "mINP", "gate/max_cosine_distance"} <= tags
    return [(e.step, float(tf.make_ndarray(e.tensor_proto)))
            for e in acc.Tensors("Precision@1")]


def test_evaluator_beside_training_evaluates_each_checkpoint_once(
        market_dir, tmp_path):
    # started before the run directory or any checkpoint exists
    evaluator = _evaluator(market_dir, tmp_path, "--max_num_evaluations=3")
    try:
        _train(MARKET, market_dir, tmp_path, 2, save_interval_secs=1e-6,
               loss_mode="triplet")
        _, stderr = evaluator.communicate(timeout=240)
    finally:
        evaluator.kill()
    assert evaluator.returncode == 0, stderr[-3000:]
    events = _precision_events(str(tmp_path / "eval" / "run"))
    assert sorted(step for step, _ in events) == [0, 1, 2]
    assert all(0.0 <= value <= 1.0 for _, value in events)
    for step in (0, 1, 2):
        assert f"step {step}: Precision@1" in stderr

    # a restarted evaluator finds nothing new and writes no second value
    evaluator = _evaluator(market_dir, tmp_path, "--eval_timeout_secs=1")
    try:
        _, stderr = evaluator.communicate(timeout=240)
    finally:
        evaluator.kill()
    assert evaluator.returncode == 0, stderr[-3000:]
    assert "was evaluated before" in stderr
    assert sorted(s for s, _ in _precision_events(
        str(tmp_path / "eval" / "run"))) == [0, 1, 2]


def test_evaluator_stops_after_the_last_training_step(
        market_dir, market_checkpoint, tmp_path):
    config = settings.EvalConfig(
        dataset_dir=market_dir, log_dir=os.path.dirname(
            os.path.dirname(market_checkpoint)), run_id="run",
        eval_log_dir=str(tmp_path), number_of_steps=3, batch_size=64,
        eval_interval_secs=0.1)
    results = evaluator.evaluate_checkpoints(MARKET, config)
    assert [step for step, _ in results] == [0, 3]

    # beside the scalars: distance histograms and the ranked-retrieval
    # picture of every checkpoint, read back from the event file
    acc = read_events(str(tmp_path / "run"))
    _, ids, _ = evaluator.read_validation_data(MARKET, market_dir)
    counts = np.bincount(np.unique(ids, return_inverse=True)[1])
    num_same = int((counts * (counts - 1) // 2).sum())
    num_pairs = len(ids) * (len(ids) - 1) // 2
    for tag, expected in (("cosine_distance/same_identity", num_same),
                          ("cosine_distance/different_identity",
                           num_pairs - num_same)):
        events = acc.Tensors(tag)
        assert [e.step for e in events] == [0, 3]
        for event in events:
            buckets = tf.make_ndarray(event.tensor_proto)  # left, right, n
            assert buckets[:, 2].sum() == expected
            assert buckets[:, 0].min() >= -1e-6 and buckets[:, 1].max() <= 2
    pictures = acc.Tensors(evaluator.RANKED_RETRIEVAL_TAG)
    assert [e.step for e in pictures] == [0, 3]
    width, height, png = tf.make_ndarray(pictures[-1].tensor_proto)
    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    # up to 8 probes of the single-shot gallery (an identity with two or
    # more images each) and up to 10 of their nearest
    probes = (counts > 1).sum()
    rows, top = min(8, probes), min(10, probes)
    assert image.shape == (rows * 136, (top + 1) * 72 + 4, 3) == (
        int(height), int(width), 3)
    # probes unframed; each of their nearest framed green or red
    for row in range(rows):
        assert tuple(image[row * 136 + 1, 1]) == (255, 255, 255)
        for col in range(1, top + 1):
            frame = tuple(image[row * 136 + 1, col * 72 + 4 + 2])
            assert frame in ((0, 170, 0), (220, 0, 0)), (row, col, frame)


def _encode_reference(checkpoint, filenames, mirror=False):
    """Features of single files (mirrored), through a freshly restored
    encoder, resized by the reference resize (decoded by TensorFlow's
    decoder: libjpeg builds differ in the last bit)."""
    encoder = restored_encoder(checkpoint)
    images = np.stack([bilinear_resize(tf.io.decode_image(
        tf.io.read_file(f), channels=3).numpy(), 128, 64)
        for f in filenames])
    if mirror:
        images = images[:, :, ::-1]
    return encoder(images.astype(np.float32) / 255.0, training=False).numpy()


def _features_by_file(checkpoint, dataset_dir, dataset):
    split, features, _ = protocol.test_features(dataset, checkpoint,
                                                  dataset_dir, 64)
    return dict(zip(split.filenames, features))


def _cosine(a, b):
    return 1.0 - a @ b.T


@pytest.fixture(scope="module")
def spread_checkpoint(tmp_path_factory):
    """An encoder-only checkpoint whose features differ clearly per image.

    A freshly trained net maps all images to nearly one point (distances
    of 1e-6), where rankings hinge on rounding; Glorot-scaled random
    kernels give the protocol tests well separated distances.
    """
    from cosine_metric_learning.nets.deep_sort import network_definition
    encoder = spread_kernels(
        network_definition.create_encoder(), seed=11)
    path = str(tmp_path_factory.mktemp("spread") / "encoder")
    return tf.train.Checkpoint(encoder=encoder).write(path)


def _check_against_reference(summary, split, features, distances, query,
                             gallery, q_ids, g_ids, q_cams, g_cams):
    """Distances from independently pooled features, then the kit's loop."""
    q = np.stack([features[list(i)].mean(0) for i in query]).astype(float)
    g = np.stack([features[list(i)].mean(0) for i in gallery]).astype(float)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    assert distances.std() > 0.01  # well separated, see spread_checkpoint
    np.testing.assert_allclose(distances, 1.0 - q @ g.T, atol=1e-5)
    expected = kit_reference(distances, q_ids, g_ids, q_cams, g_cams,
                             (1, 5, 10, 20))
    for key, value in expected.items():
        assert summary[key] == pytest.approx(value, abs=1e-9), key


def test_market1501_test_mode_equals_a_reference_loop(
        market_dir, spread_checkpoint, tmp_path):
    summary = protocol.run_test(
        MARKET, spread_checkpoint, market_dir,
        batch_size=64, output_json=str(tmp_path / "out.json"),
        rank_image=str(tmp_path / "ranks.png"), rerank_parameters=(20, 6, 0.3))
    split, features, _ = protocol.test_features(MARKET, spread_checkpoint,
                                                  market_dir, 64)
    _, distances = protocol.evaluate_split(split, features)
    # reference: list the folders and parse the names here
    index = {f: i for i, f in enumerate(split.filenames)}

    def listing(folder):
        names = sorted(n for n in os.listdir(os.path.join(market_dir, folder))
                       if n.endswith(".jpg"))
        return ([[index[os.path.join(market_dir, folder, n)]] for n in names],
                np.array([int(n.split("_")[0]) for n in names]),
                np.array([int(n.split("_c")[1][0]) for n in names]))

    gallery, g_ids, g_cams = listing("bounding_box_test")
    query, q_ids, q_cams = listing("query")
    assert -1 in g_ids and 0 in g_ids
    _check_against_reference(summary, split, features, distances, query,
                             gallery, q_ids, g_ids, q_cams, g_cams)

    import json
    with open(tmp_path / "out.json") as f:
        written = json.load(f)
    assert written["mAP"] == pytest.approx(summary["mAP"])
    assert written["mINP"] == pytest.approx(summary["mINP"])
    # the tracker's gate: the equal-error threshold of the query-gallery
    # cosine distances, junk left out, every threshold tried
    keep = g_ids != -1
    same = (q_ids[:, None] == g_ids[None, keep]).ravel()
    pairs = distances[:, keep].ravel()
    threshold, far, frr = gate_reference(pairs[same].tolist(),
                                               pairs[~same].tolist())
    assert written["max_cosine_distance"] == pytest.approx(threshold)
    assert written["gate_false_accept_rate"] == pytest.approx(far)
    assert written["gate_false_reject_rate"] == pytest.approx(frr)
    image = Image.open(tmp_path / "ranks.png")
    assert image.size == (11 * 72 + 4, 8 * 136)
    # re-ranked: the kit's protocol on the reference's re-ranked distances
    reranked = rerank_reference(
        features[[i for i, in query]], features[[i for i, in gallery]],
        "cosine", 20, 6, 0.3)
    expected = kit_reference(reranked, q_ids, g_ids, q_cams, g_cams, (1, 5))
    for key in ("rank-1", "rank-5", "mAP", "mINP"):
        assert written["rerank"][key] == pytest.approx(expected[key],
                                                       abs=1e-9), key
    assert written["rerank"]["k1"] == 20 and written["rerank"]["lambda"] == 0.3
    assert written["rerank"]["mAP"] != pytest.approx(written["mAP"])


def test_test_mode_ranks_with_an_index_as_the_exact_distances(
        market_dir, spread_checkpoint):
    pytest.importorskip("faiss")
    split, features, _ = protocol.test_features(MARKET, spread_checkpoint,
                                                  market_dir, 64)
    exact, distances = protocol.evaluate_split(split, features)
    result, _ = protocol.evaluate_split(split, features, ann="sq8")
    ann = result["ann"]
    # every list probed on a gallery this small, each candidate re-ranked
    # by its exact distance: the exact ranking, as deep as the index goes
    assert ann["recall@1"] == ann["recall@10"] == 1.0
    assert ann["depth"] == min(protocol.ANN_DEPTH, distances.shape[1])
    for key in ("rank-1", "rank-5", "rank-10"):
        assert ann[key] == pytest.approx(exact[key], abs=1e-12), key
    # the index's top entries are the exact ones, the rest ranked after
    if ann["depth"] == distances.shape[1]:
        assert ann["mAP"] == pytest.approx(exact["mAP"], abs=1e-12)
    else:
        assert ann["mAP"] <= exact["mAP"] + 1e-12
    assert "index" in protocol.format_table({
        **exact, "ann": ann, "dataset": "market1501",
        "flip_test": False})


def test_mars_test_mode_pools_tracklets_and_equals_a_reference_loop(
        mars_dir, spread_checkpoint):
    summary = protocol.run_test(MARS, spread_checkpoint, mars_dir, batch_size=64)
    split, features, _ = protocol.test_features(MARS, spread_checkpoint,
                                                  mars_dir, 64)
    _, distances = protocol.evaluate_split(split, features)
    info = os.path.join(mars_dir, "info")
    with open(os.path.join(info, "test_name.txt")) as f:
        names = f.read().split()
    assert [os.path.basename(f) for f in split.filenames] == names
    tracks = scipy.io.loadmat(os.path.join(info, "tracks_test_info.mat"))[
        "track_test_info"].astype(int)
    query = scipy.io.loadmat(os.path.join(info, "query_IDX.mat"))[
        "query_IDX"].ravel().astype(int) - 1
    groups = [range(start - 1, end) for start, end in tracks[:, :2]]
    assert any(len(g) > 1 for g in groups)
    _check_against_reference(
        summary, split, features, distances, [groups[q] for q in query],
        groups, tracks[query, 2], tracks[:, 2], tracks[query, 3],
        tracks[:, 3])


# features of different images and of an image and its mirror differ by
# far more than the tolerance of these comparisons, so a missing flip or
# shuffled rows fail them (spread_checkpoint; a briefly trained net maps
# every image to nearly one point)
TOLERANCE = 1e-4


def test_flip_test_sums_the_features_of_both_orientations(
        market_dir, spread_checkpoint):
    split, plain, _ = protocol.test_features(MARKET, spread_checkpoint,
                                             market_dir, 64)
    _, flipped, _ = protocol.test_features(MARKET, spread_checkpoint,
                                           market_dir, 64, flip_test=True)
    first = split.filenames[:4]
    assert np.abs(plain[:4] - _encode_reference(spread_checkpoint,
                                                first)).max() < TOLERANCE
    mirrored = _encode_reference(spread_checkpoint, first, mirror=True)
    expected = plain[:4] + mirrored
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert np.abs(flipped[:4] - expected).max() < TOLERANCE
    # the mutations this catches: no flip, or the mirror alone
    assert np.abs(flipped[:4] - plain[:4]).max() > 100 * TOLERANCE
    assert np.abs(flipped[:4] - mirrored).max() > 100 * TOLERANCE


def test_export_writes_kit_files_in_kit_order(
        market_dir, mars_dir, spread_checkpoint, tmp_path):
    sdk = tmp_path / "sdk"
    written = kit_features.export_features(MARKET, spread_checkpoint,
                                           market_dir, str(sdk), batch_size=64)
    assert sorted(os.path.basename(p) for p in written) == [
        "feat_query.mat", "feat_test.mat"]
    gallery = sorted(n for n in os.listdir(os.path.join(
        market_dir, "bounding_box_test")) if n.endswith(".jpg"))
    query = sorted(os.listdir(os.path.join(market_dir, "query")))
    test = scipy.io.loadmat(sdk / "feat_test.mat")["features"]
    feat_query = scipy.io.loadmat(sdk / "feat_query.mat")["features"]
    assert test.shape == (len(gallery), 128)
    assert feat_query.shape == (len(query), 128)
    rows = [0, 1, len(gallery) // 2, len(gallery) - 1]
    reference = _encode_reference(spread_checkpoint, [os.path.join(
        market_dir, "bounding_box_test", gallery[r]) for r in rows])
    assert np.abs(test[rows] - reference).max() < TOLERANCE
    # the mutation this catches: rows in another order (here: reversed, or
    # each one off by one)
    assert np.abs(test[rows] - reference[::-1]).max() > 100 * TOLERANCE
    assert np.abs(test[[r + 1 for r in rows[:-1]]]
                  - reference[:-1]).max() > 100 * TOLERANCE
    assert not list(sdk.glob(".*"))  # no temporary file left behind

    written = kit_features.export_features(MARS, spread_checkpoint, mars_dir,
                                           str(tmp_path / "mars"),
                                           batch_size=64)
    features = scipy.io.loadmat(written[0])["features"]
    with open(os.path.join(mars_dir, "info", "test_name.txt")) as f:
        names = f.read().split()
    assert features.shape == (len(names), 128)
    ends = [os.path.join(mars_dir, "bbox_test", n[:4], n)
            for n in (names[0], names[-1])]
    reference = _encode_reference(spread_checkpoint, ends)
    assert np.abs(features[[0, -1]] - reference).max() < TOLERANCE
    assert np.abs(features[[-1, 0]] - reference).max() > 100 * TOLERANCE


def test_missing_or_foreign_checkpoints_are_clear_errors(
        market_dir, tmp_path):
    with pytest.raises(UsageError, match="path=None: expected a model"):
        protocol.run_test(MARKET, None, market_dir)
    with pytest.raises(UsageError, match="no such checkpoint"):
        protocol.run_test(MARKET, str(tmp_path / "nope"), market_dir)
    foreign = tf.train.Checkpoint(something=tf.Variable(1.0)).save(
        str(tmp_path / "foreign"))
    with pytest.raises(UsageError, match="has no encoder"):
        protocol.run_test(MARKET, foreign, market_dir)


def test_an_evaluation_that_fails_is_not_blamed_on_the_checkpoint(
        market_dir, market_checkpoint, tmp_path, caplog):
    """Only reading a checkpoint is retried; an input size that contradicts
    the run's, or validation images that cannot be encoded, stop the
    evaluator with their own message."""
    config = settings.EvalConfig(
        dataset_dir=market_dir, log_dir=os.path.dirname(
            os.path.dirname(market_checkpoint)), run_id="run",
        eval_log_dir=str(tmp_path), batch_size=64, eval_interval_secs=0.05,
        eval_timeout_secs=5)
    with caplog.at_level("WARNING"):
        with pytest.raises(UsageError, match=r"image_shape=\(96, 48, 3\): "
                           "the run .* was trained at 128x64"):
            evaluator.evaluate_checkpoints(MARKET, config, (96, 48, 3))
    assert "Cannot read checkpoint" not in caplog.text


def test_evaluator_skips_an_unreadable_checkpoint_and_goes_on(
        market_dir, market_checkpoint, tmp_path, caplog):
    import shutil
    run_dir = tmp_path / "logs" / "run"
    shutil.copytree(os.path.dirname(market_checkpoint), run_dir)
    for data in run_dir.glob("ckpt-0.data-*"):
        data.unlink()  # deleted while listed in the checkpoint state
    config = settings.EvalConfig(
        dataset_dir=market_dir, log_dir=str(tmp_path / "logs"), run_id="run",
        eval_log_dir=str(tmp_path / "eval"), batch_size=64,
        # the timeout counts from the end of the last evaluation: ckpt-0's
        # retries, 0.05 s apart, come long before it however slow that was
        eval_interval_secs=0.05, eval_timeout_secs=10)
    with caplog.at_level("WARNING"):
        results = evaluator.evaluate_checkpoints(MARKET, config)
    assert [step for step, _ in results] == [3]
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("Cannot read checkpoint" in w and "ckpt-0" in w
               for w in warnings) == 3
    assert any(w.startswith("Skipping") and "ckpt-0" in w for w in warnings)


def test_pytorch_result_export_reproduces_the_test_numbers(
        mars_dir, spread_checkpoint, tmp_path):
    """The one-file layout PyTorch evaluation scripts read: evaluated from
    the file alone, as such a script would, it gives --mode=test's
    numbers (MARS: tracklets pooled)."""
    output = str(tmp_path / "pytorch_result.mat")
    written = kit_features.export_pytorch_result(
        MARS, spread_checkpoint, mars_dir, output, batch_size=64)
    assert written == output
    mat = scipy.io.loadmat(output)
    assert set(kit_features.PYTORCH_RESULT_KEYS) <= set(mat)
    q, g = mat["query_f"].astype(float), mat["gallery_f"].astype(float)
    assert q.shape[1] == g.shape[1] == 128
    assert mat["query_label"].shape == (1, len(q))
    assert mat["gallery_cam"].shape == (1, len(g))
    assert len(mat["query_name"]) == len(q)
    distances = 1 - (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (
        g / np.linalg.norm(g, axis=1, keepdims=True)).T
    expected = kit_reference(distances, mat["query_label"][0],
                             mat["gallery_label"][0], mat["query_cam"][0],
                             mat["gallery_cam"][0], (1, 5))
    summary = protocol.run_test(MARS, spread_checkpoint, mars_dir, batch_size=64)
    for key in ("rank-1", "rank-5", "mAP", "mINP"):
        assert summary[key] == pytest.approx(expected[key], abs=1e-6), key
    # it replaces only its own kind
    other = tmp_path / "other.mat"
    scipy.io.savemat(other, {"features": np.zeros((2, 2))})
    with pytest.raises(UsageError, match="refusing to replace"):
        kit_features.export_pytorch_result(MARS, spread_checkpoint, mars_dir,
                                           str(other))
