"""k-reciprocal re-ranking (Zhong et al., CVPR 2017) for the test protocol.

Query and gallery entries are pooled into one set of N = Q + G points with
the loss mode's distance, each point's distances divided by the largest
one of its row. For every point i:

1. ``R(i, k)``: its k-reciprocal neighbours, the points j among i's k + 1
   nearest (itself included) that have i among their own k + 1 nearest;
2. the expansion: ``R(i, k1)`` plus ``R(c, k1/2)`` of each c in it that
   shares more than two thirds of its points with ``R(i, k1)``;
3. ``V[i]``: a weight ``exp(-d(i, j))`` on each point j of the expansion,
   normalised to sum 1; local query expansion then replaces ``V[i]`` by
   the mean of the rows of i's ``k2`` nearest points;
4. the Jaccard distance ``1 - sum(min(V[i], V[j])) / sum(max(V[i], V[j]))``.

The re-ranked distance is ``(1 - lambda) * jaccard + lambda * d``. Ties of
the nearest-neighbour lists go to the lower index, as in the ranking.

Nothing of size N x N is held: distances are computed in blocks of rows,
``V`` is sparse (about a hundred entries a row) and the Jaccard distances
are accumulated for the Q x G pairs that share an entry. Memory is a few
Q x G matrices of float64 (about 0.5 GB each for Market-1501's 3,368 x
19,732).
"""

import time

import numpy as np
import scipy.sparse
import tensorflow as tf
from absl import logging

from cosine_metric_learning import metrics

K1, K2, LAMBDA = 20, 6, 0.3  # the paper's defaults
PROGRESS_SECS = 10.0


def check(k1, k2, lambda_value):
    """What is wrong with the parameters, or None."""
    if k1 < 1 or k2 < 1 or not 0.0 <= lambda_value <= 1.0:
        return (f"k1={k1}, k2={k2}, lambda={lambda_value}: expected k1 >= 1, "
                "k2 >= 1 and lambda in [0, 1]")
    return None


class _Progress:
    """One log line per stage and at most one every PROGRESS_SECS within."""

    def __init__(self, total_points):
        self._start = self._last = time.perf_counter()
        self._total = total_points

    def __call__(self, stage, done, total, force=False):
        now = time.perf_counter()
        if force or now - self._last >= PROGRESS_SECS:
            self._last = now
            logging.info("re-ranking %d images: %s %d/%d (%.0f s)",
                         self._total, stage, done, total, now - self._start)


def _pair_distances(points, rows, columns, metric):
    """``d(points[rows], points[columns])`` for index pairs, in chunks."""
    out = np.empty(len(rows))
    for start in range(0, len(rows), 65536):
        part = slice(start, start + 65536)
        a, b = points[rows[part]], points[columns[part]]
        if metric == "cosine":  # points are normalised already
            out[part] = 1.0 - np.einsum("ij,ij->i", a, b)
        else:
            out[part] = np.einsum("ij,ij->i", a - b, a - b)
    return out


def _neighbours(points, num_query, metric, k, block_size, progress):
    """Each point's ``k`` nearest (itself included, ties to the lower
    index), the largest distance of its row, and the query-gallery
    distances (kept from the same blocks)."""
    num_points = len(points)
    nearest = np.empty((num_points, k), np.int64)
    row_max = np.empty(num_points)
    query_gallery = np.empty((num_query, num_points - num_query))
    for start in range(0, num_points, block_size):
        rows = slice(start, start + block_size)
        distances = metrics.distance_matrix(points[rows], points, metric,
                                            tf.float64)
        if start < num_query:
            query_gallery[start:start + block_size] = distances[
                :num_query - start, num_query:]
        row_max[rows] = np.maximum(distances.max(axis=1), 1e-12)
        # top_k puts the lower index first among equal values
        nearest[rows] = tf.math.top_k(-distances, k=k).indices.numpy()
        progress("nearest neighbours", min(start + block_size, num_points),
                 num_points)
    return nearest, row_max, query_gallery


def _reciprocal(nearest, k):
    """``R(i, k)`` of every point as a mask over ``nearest[:, :k + 1]``."""
    forward = nearest[:, :k + 1]
    backward = nearest[forward][:, :, :k + 1]
    return (backward == np.arange(len(nearest))[:, None, None]).any(axis=2)


def _expansion_pairs(nearest, k1):
    """``(i, j)`` for every point j of every point i's expansion (step 2),
    sorted and without repeats."""
    num_points = len(nearest)
    half = int(round(k1 / 2))
    full = np.where(_reciprocal(nearest, k1), nearest[:, :k1 + 1], -1)
    small = np.where(_reciprocal(nearest, half), nearest[:, :half + 1], -1)
    small_size = (small >= 0).sum(axis=1)
    owners, candidates = np.nonzero(full >= 0)
    candidates = full[owners, candidates]
    # |R(c, k1/2) & R(i, k1)| for every candidate c of every point i
    shared = np.zeros(len(owners), np.int64)
    for start in range(0, len(owners), 262144):
        part = slice(start, start + 262144)
        c_sets, i_sets = small[candidates[part]], full[owners[part]]
        shared[part] = ((c_sets[:, :, None] == i_sets[:, None, :])
                        & (c_sets[:, :, None] >= 0)).any(axis=2).sum(axis=1)
    taken = shared > 2.0 / 3.0 * small_size[candidates]
    rows = [owners, np.repeat(owners[taken], small.shape[1])]
    columns = [candidates, small[candidates[taken]].ravel()]
    rows, columns = np.concatenate(rows), np.concatenate(columns)
    keep = columns >= 0
    keys = np.unique(rows[keep] * num_points + columns[keep])
    return keys // num_points, keys % num_points


def _weights(points, metric, nearest, row_max, k1, k2):
    """The sparse rows ``V`` (step 3), with local query expansion."""
    num_points = len(points)
    rows, columns = _expansion_pairs(nearest, k1)
    weights = np.exp(-_pair_distances(points, rows, columns, metric)
                     / row_max[rows])
    weights /= np.bincount(rows, weights, num_points)[rows]
    v = scipy.sparse.csr_matrix((weights, (rows, columns)),
                                shape=(num_points, num_points))
    if k2 > 1:
        mean = scipy.sparse.csr_matrix(
            (np.full(num_points * k2, 1.0 / k2),
             (np.repeat(np.arange(num_points), k2),
              nearest[:, :k2].ravel())), shape=(num_points, num_points))
        v = mean @ v
    return v.tocsr()


def _shared_weight(v_query, v_gallery_by_column, num_gallery, progress,
                   chunk_size=64):
    """``sum_k min(V[i, k], V[j, k])`` for every query i and gallery j."""
    num_query = v_query.shape[0]
    shared = np.zeros((num_query, num_gallery))
    indptr = v_gallery_by_column.indptr
    for start in range(0, num_query, chunk_size):
        block = v_query[start:start + chunk_size].tocoo()
        # every (query, column) entry meets every gallery entry of the column
        lengths = indptr[block.col + 1] - indptr[block.col]
        query = np.repeat(block.row, lengths)
        query_value = np.repeat(block.data, lengths)
        offsets = np.arange(lengths.sum()) - np.repeat(
            np.cumsum(lengths) - lengths, lengths)
        entry = np.repeat(indptr[block.col], lengths) + offsets
        gallery = v_gallery_by_column.indices[entry]
        value = np.minimum(query_value, v_gallery_by_column.data[entry])
        rows = min(chunk_size, num_query - start)
        shared[start:start + rows] = np.bincount(
            query * num_gallery + gallery, value,
            rows * num_gallery).reshape(rows, num_gallery)
        progress("Jaccard distances", start + rows, num_query)
    return shared


def k_reciprocal(query, gallery, metric, k1=K1, k2=K2, lambda_value=LAMBDA,
                 block_size=1024):
    """Re-ranked ``(Q, G)`` distances between ``query`` and ``gallery``
    features (see the module's docstring)."""
    problem = check(k1, k2, lambda_value)
    if problem:
        raise ValueError(problem)
    points = np.concatenate([np.asarray(query, np.float64),
                             np.asarray(gallery, np.float64)])
    if metric == "cosine":
        points /= np.maximum(np.linalg.norm(points, axis=1, keepdims=True),
                             1e-12)
    num_query, num_points = len(query), len(points)
    # a set smaller than the lists takes every point
    k = min(max(k1 + 1, k2), num_points)
    k2 = min(k2, k)
    progress = _Progress(num_points)
    nearest, row_max, distances = _neighbours(points, num_query, metric, k,
                                              block_size, progress)
    progress("neighbour weights", 0, num_points, force=True)
    v = _weights(points, metric, nearest, row_max, k1, k2)
    shared = _shared_weight(v[:num_query], v[num_query:].tocsc(),
                            num_points - num_query, progress)
    progress("done", num_query, num_query, force=True)
    # (1 - lambda) * jaccard + lambda * d, in place: three Q x G matrices
    np.divide(shared, 2.0 - shared, out=shared)  # 1 - jaccard
    shared *= 1.0 - lambda_value
    distances /= row_max[:num_query, None]
    distances *= lambda_value
    distances += 1.0 - lambda_value
    distances -= shared
    return distances
