"""CMC, mAP and the galleries on hand-made rankings worked out by hand."""

import numpy as np
import pytest
import tensorflow as tf

from cosine_metric_learning import metrics, protocol
from cosine_metric_learning.datasets import util as dataset_util
from tests.reference import gate_reference, kit_reference


def _ranking_distances(num_queries, orders, num_gallery):
    """Distances that rank gallery entries in the given order per query."""
    distances = np.full((num_queries, num_gallery), 100.0)
    for q, order in enumerate(orders):
        distances[q, order] = np.arange(len(order), dtype=np.float64)
    return distances


# Gallery (id, camera) shared by the hand-made queries below.
GALLERY_IDS = np.array([1, 5, 1, 7, 1, -1, 8, 2, 9, 2])
GALLERY_CAMS = np.array([0, 1, 1, 2, 2, 1, 0, 0, 1, 3])


def test_junk_before_first_match_and_several_good_matches():
    # query id 1, camera 0. Ranked: 0 (id 1 cam 0: junk), 5 (id -1: junk),
    # 1 (distractor id 5), 2 (good), 3 (id 7), 4 (good), then the rest.
    distances = _ranking_distances(1, [[0, 5, 1, 2, 3, 4, 6, 7, 8, 9]], 10)
    result = metrics.evaluate_ranking(distances, [1], GALLERY_IDS, [0],
                                      GALLERY_CAMS)
    # junk removed: [id5, good, id7, good, ...] -> first good at rank 2
    assert result["rank-1"] == 0.0 and result["rank-5"] == 1.0
    # kit AP: hit 1 at position 2: precision 1/2, previous 0/1;
    #         hit 2 at position 4: precision 2/4, previous 1/3
    expected = 0.5 * (0 + 1 / 2) / 2 + 0.5 * (1 / 3 + 2 / 4) / 2
    assert result["mAP"] == pytest.approx(expected)
    assert result["mAP_noninterpolated"] == pytest.approx((1 / 2 + 2 / 4) / 2)
    # mINP: 2 good matches, the last at position 4
    assert result["mINP"] == pytest.approx(2 / 4)
    assert result["num_queries"] == 1


def test_first_match_on_top_and_distractor_only_top_ranks():
    # query A: id 2 cam 0, its good match (entry 9) ranked first.
    # query B: id 9 cam 0, three distractors then its good match (entry 8).
    orders = [[9, 0, 1, 2, 3, 4, 5, 6, 7, 8], [1, 3, 6, 8, 0, 2, 4, 5, 7, 9]]
    distances = _ranking_distances(2, orders, 10)
    result = metrics.evaluate_ranking(distances, [2, 9], GALLERY_IDS, [0, 0],
                                      GALLERY_CAMS)
    # A: entry 7 is id 2 but camera 0 -> junk, never a match
    ap_a = 1.0 * (1.0 + 1.0) / 2  # previous precision starts at 1
    ap_b = 1.0 * (0 / 3 + 1 / 4) / 2
    assert result["mAP"] == pytest.approx((ap_a + ap_b) / 2)
    assert result["mAP_noninterpolated"] == pytest.approx((1 + 1 / 4) / 2)
    assert result["mINP"] == pytest.approx((1 / 1 + 1 / 4) / 2)
    assert result["rank-1"] == 0.5 and result["rank-5"] == 1.0
    np.testing.assert_allclose(result["cmc"][:5], [0.5, 0.5, 0.5, 1.0, 1.0])


def test_queries_without_good_match_are_left_out():
    # id 8 is only seen by camera 0, the query's camera
    distances = _ranking_distances(2, [list(range(10))] * 2, 10)
    result = metrics.evaluate_ranking(distances, [8, 1], GALLERY_IDS, [0, 0],
                                      GALLERY_CAMS)
    assert result["num_queries"] == 1
    with pytest.raises(ValueError, match="no query has a good match"):
        metrics.evaluate_ranking(distances[:1], [8], GALLERY_IDS, [0],
                                 GALLERY_CAMS)


def test_vectorised_protocol_equals_a_per_query_loop_on_random_data():
    rng = np.random.default_rng(5)
    q_ids = rng.integers(0, 12, 40)
    q_cams = rng.integers(0, 4, 40)
    g_ids = np.concatenate([rng.integers(0, 12, 150), [-1] * 10])
    g_cams = rng.integers(0, 4, 160)
    distances = rng.random((40, 160))
    distances[:, 50] = distances[:, 51]  # ties keep gallery order
    result = metrics.evaluate_ranking(distances, q_ids, g_ids, q_cams, g_cams,
                                      chunk_size=7)
    expected = kit_reference(distances, q_ids, g_ids, q_cams, g_cams,
                             metrics.RANKS)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value), key


def test_ranking_with_many_exact_ties_equals_a_per_query_loop():
    # five distance levels: hits tie with hits, distractors and junk, and
    # every tie keeps gallery order
    rng = np.random.default_rng(11)
    q_ids, q_cams = rng.integers(0, 6, 30), rng.integers(0, 3, 30)
    g_ids = np.concatenate([rng.integers(0, 6, 90), [-1] * 10])
    g_cams = rng.integers(0, 3, 100)
    distances = np.round(rng.random((30, 100)) * 4) / 4
    result = metrics.evaluate_ranking(distances, q_ids, g_ids, q_cams, g_cams,
                                      chunk_size=4)
    expected = kit_reference(distances, q_ids, g_ids, q_cams, g_cams,
                             metrics.RANKS)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-12), key
    # and ties among a query's good matches only
    distances = rng.random((30, 100))
    distances[(q_ids[:, None] == g_ids[None, :]) & (
        q_cams[:, None] != g_cams[None, :])] = 0.5
    result = metrics.evaluate_ranking(distances, q_ids, g_ids, q_cams, g_cams)
    expected = kit_reference(distances, q_ids, g_ids, q_cams, g_cams,
                             metrics.RANKS)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-12), key


def test_distance_matrix_against_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(4, 6)), rng.normal(size=(5, 6))
    cos = 1 - (a @ b.T) / np.outer(np.linalg.norm(a, axis=1),
                                   np.linalg.norm(b, axis=1))
    np.testing.assert_allclose(metrics.distance_matrix(a, b), cos, atol=1e-5)
    # on unit-length features squared Euclidean distance is twice the
    # cosine distance: either ranks them alike
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    sq = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(2 * metrics.distance_matrix(a, b, tf.float64),
                               sq, atol=1e-12)


def _reference_gallery(ids, cams, seed):
    """The single-shot draw, written out from its description."""
    rng = np.random.RandomState(seed)
    probes, galleries = [], []
    for identity in sorted(set(ids.tolist())):
        mine = [i for i in range(len(ids)) if ids[i] == identity]
        seen = sorted(set(cams[mine].tolist()))
        if len(seen) > 1:
            c1, c2 = rng.choice(seen, 2, replace=False)
            probes.append(rng.choice([i for i in mine if cams[i] == c1]))
            galleries.append(rng.choice([i for i in mine if cams[i] == c2]))
        elif len(mine) > 1:
            p, g = rng.choice(mine, 2, replace=False)
            probes.append(p)
            galleries.append(g)
    return probes, galleries


def test_single_shot_galleries_reproduce_random_state_choices():
    ids = np.array([3, 3, 3, 8, 8, 11, 4, 4, 4, 4, 9])
    cams = np.array([0, 1, 1, 2, 2, 0, 0, 3, 5, 5, 1])
    for seed in (4321, 4322, 4330):
        probes, galleries = metrics.single_shot_gallery(ids, cams, seed)
        ref_p, ref_g = _reference_gallery(ids, cams, seed)
        assert probes.tolist() == ref_p and galleries.tolist() == ref_g
        # 11 and 9 have one image: skipped; 8 has one camera: two images
        assert sorted(ids[probes].tolist()) == [3, 4, 8]
        for p, g in zip(probes, galleries):
            assert p != g and ids[p] == ids[g]
            if ids[p] != 8:
                assert cams[p] != cams[g]


def test_validation_cmc_on_hand_made_features():
    # identities 0..3, two cameras each; features of one identity coincide,
    # except identity 3, whose images sit far apart (its gallery image is
    # nearest to identity 2's)
    ids = np.repeat(np.arange(4), 2)
    cams = np.tile([0, 1], 4)
    features = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0],
                         [0, 0, 1], [0, 0, 1], [-1, 0.2, 0], [0, 0.1, 1]],
                        np.float32)
    result = metrics.validation_cmc(features, ids, cams, 3)
    # the probe of identity 3 is image 6 or 7 at random; either way its
    # match is not the nearest gallery entry: rank-1 = 3/4
    assert result["Precision@1"] == pytest.approx(0.75)
    assert result["Precision@20"] == pytest.approx(1.0)
    assert 0.75 < result["mAP"] < 1.0


def _near_tie(seed):
    """float32 features of a query, a distractor and a good match whose
    cosine distances to the query tie in float32 (as the library computes
    them) but differ in float64, the good match nearer; None if this seed
    gives none."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=16).astype(np.float32)
    q /= np.linalg.norm(q)
    g = (q + 3e-4 * rng.normal(size=(2, 16))).astype(np.float32)
    f32 = metrics.distance_matrix(q[None], g)[0]
    g64 = g.astype(float) / np.linalg.norm(g.astype(float), axis=1,
                                           keepdims=True)
    f64 = 1 - g64 @ (q.astype(float) / np.linalg.norm(q.astype(float)))
    if f32[0] == f32[1] and f64[1] < f64[0]:
        return np.stack([q, g[0], g[1]])
    return None


def test_the_test_protocol_ranks_near_ties_in_double_precision():
    features = next(f for f in map(_near_tie, range(3000)) if f is not None)
    split = dataset_util.TestSplit(
        filenames=np.array(["query", "distractor", "good"]),
        query_groups=[np.array([0])], query_ids=np.array([1]),
        query_cameras=np.array([0]),
        gallery_groups=[np.array([1]), np.array([2])],
        gallery_ids=np.array([2, 1]), gallery_cameras=np.array([1, 1]),
        exports={})
    # in float32 the distances tie and the distractor, listed first, wins
    float32 = metrics.distance_matrix(features[:1], features[1:])
    assert metrics.evaluate_ranking(float32, [1], [2, 1], [0], [1, 1])[
        "rank-1"] == 0.0
    result, distances = protocol.evaluate_split(split, features)
    assert distances.dtype == np.float64
    assert distances[0, 1] < distances[0, 0]
    assert result["rank-1"] == 1.0 and result["mINP"] == 1.0


def test_the_gate_is_the_equal_error_threshold():
    positives = [0.1, 0.2, 0.3, 0.4]
    negatives = [0.25, 0.5, 0.6, 0.7]
    distances = np.array(positives + negatives)
    same = np.array([True] * 4 + [False] * 4)
    gate = metrics.equal_error_gate(distances, same)
    # at 0.3: 0.4 is cut (1/4), 0.25 passes (1/4)
    assert gate == {"threshold": 0.3, "false_accept_rate": 0.25,
                    "false_reject_rate": 0.25}
    rng = np.random.default_rng(2)
    pos = np.round(rng.normal(0.2, 0.1, 300), 3)  # with ties
    neg = rng.normal(0.5, 0.15, 2000)
    gate = metrics.equal_error_gate(
        np.concatenate([pos, neg]).reshape(46, 50),
        np.arange(2300).reshape(46, 50) < 300)
    t, far, frr = gate_reference(pos.tolist(), neg.tolist())
    assert gate["threshold"] == t
    assert gate["false_accept_rate"] == pytest.approx(far)
    assert gate["false_reject_rate"] == pytest.approx(frr)


def test_pair_cosine_distances_by_hand():
    features = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    # 1 - a.b: 1 - 0.6, 1 - 0.8, 1 - 0, and a row with itself
    np.testing.assert_allclose(
        metrics.pair_cosine_distances(features, [(0, 1), (1, 2), (0, 2),
                                                 (1, 1)]),
        [0.4, 0.2, 1.0, 0.0], atol=1e-12)
    assert metrics.pair_cosine_distances(features, []).shape == (0,)
