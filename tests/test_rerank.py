"""k-reciprocal re-ranking against a dense reference and a hand-made case."""

import numpy as np
import pytest
import tensorflow as tf

from cosine_metric_learning import metrics, rerank
from tests.conftest import run_script
from tests.reference import rerank_reference


def _clusters(seed, num_ids=6, per_id=8, dim=8):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(num_ids, dim))
    ids = np.repeat(np.arange(num_ids), per_id)
    return centres[ids] + 0.7 * rng.normal(size=(len(ids), dim)), ids


def test_rerank_equals_a_dense_reference():
    features, _ = _clusters(3)
    query, gallery = features[::4], np.delete(features, np.s_[::4], axis=0)
    for k1, k2, lambda_value in ((5, 3, 0.3), (20, 6, 0.3), (4, 1, 0.0),
                                 (47, 6, 0.3)):
        expected = rerank_reference(query, gallery, "cosine", k1, k2,
                                    lambda_value)
        # in blocks as large as the memory allows, and of one row each
        for max_block_elements in (rerank.MAX_BLOCK_ELEMENTS, 1):
            result = rerank.k_reciprocal(
                query, gallery, k1, k2, lambda_value, block_size=5,
                max_block_elements=max_block_elements)
            np.testing.assert_allclose(result, expected, rtol=0, atol=1e-9)


def _on_circle(degrees):
    radians = np.radians(degrees)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)


def test_rerank_puts_the_mutual_neighbours_first():
    # unit features at these angles: the distractor x is nearest to the
    # query, but its own nearest are its own cluster; the true matches
    # a1..a3 have the query among theirs
    query = _on_circle([0.0])
    gallery = _on_circle([-30.0,                    # x, identity 2
                          38.0, 40.0, 42.0,         # a1..a3, identity 1
                          -48.0, -50.0, -52.0])     # x's cluster
    g_ids = np.array([2, 1, 1, 1, 2, 2, 2])
    cams = np.ones(len(g_ids), int)

    def rank1(distances):
        return metrics.evaluate_ranking(distances, [1], g_ids, [0],
                                        cams)["rank-1"]

    plain = metrics.distance_matrix(query, gallery, tf.float64)
    assert np.argmin(plain[0]) == 0 and rank1(plain) == 0.0
    reranked = rerank.k_reciprocal(query, gallery, k1=3, k2=1,
                                   lambda_value=0.3)
    assert np.argmin(reranked[0]) in (1, 2, 3) and rank1(reranked) == 1.0
    # the query and x share no k-reciprocal neighbour: Jaccard distance 1
    assert reranked[0, 0] == pytest.approx(0.7 + 0.3 * plain[0, 0]
                                           / plain[0].max())
    np.testing.assert_allclose(reranked, rerank_reference(
        query, gallery, "cosine", 3, 1, 0.3), atol=1e-9)


def test_rerank_refuses_bad_parameters():
    features, _ = _clusters(0)
    for k1, k2, lambda_value in ((0, 6, 0.3), (20, 0, 0.3), (20, 6, 1.5)):
        with pytest.raises(ValueError, match="expected k1 >= 1"):
            rerank.k_reciprocal(features[:3], features[3:], k1, k2,
                                lambda_value)
    # k1 must leave a point out of the 48 (k1=400 and 100000 held arrays of
    # 17 GB and 159 GB)
    for k1 in (48, 400, 100000):
        with pytest.raises(ValueError, match=f"k1={k1}: expected less than "
                           "the 48 query and gallery entries"):
            rerank.k_reciprocal(features[:3], features[3:], k1)


def test_rerank_memory_does_not_grow_with_k1():
    """The largest k1 allowed on 600 points, in a process of its own: its
    peak memory stays within 250 MB of the process's baseline
    (the Q x G matrices here are tiny)."""
    result = run_script("-c", """
import resource
import numpy as np
from cosine_metric_learning import rerank
features = np.random.default_rng(0).normal(size=(600, 16))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rerank.k_reciprocal(features[:100], features[100:], k1=599,
                    max_block_elements=1 << 20)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) / 1024)""")
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(result.stdout.split()[-1]) < 250, result.stdout
