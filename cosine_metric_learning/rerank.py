"""k-reciprocal re-ranking (Zhong et al., CVPR 2017) for the test protocol.

Query and gallery entries are pooled into one set of N = Q + G points with
the cosine distance, each point's distances divided by the largest one of
its row. For every point i:

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
are accumulated for the Q x G pairs that share an entry; every other
working array is cut into blocks of at most ``MAX_BLOCK_ELEMENTS``, whatever
k1. Memory is a few Q x G matrices of float64 (about 0.5 GB each for
Market-1501's 3,368 x 19,732). k1 must be below N.
"""

import time

import numpy as np
import scipy.sparse
import tensorflow as tf
from absl import logging

from cosine_metric_learning import metrics

K1, K2, LAMBDA = 20, 6, 0.3  # the paper's defaults
PROGRESS_SECS = 10.0
# the largest working array (elements) of a block, besides the Q x G
# matrices: 2^23 elements, 64 MB of float64 (a block holds a few such)
MAX_BLOCK_ELEMENTS = 1 << 23


def check(k1, k2, lambda_value, num_points=None):
    """What is wrong with the parameters, or None; with ``num_points``
    (queries and gallery entries together), k1 must leave a point out."""
    if k1 < 1 or k2 < 1 or not 0.0 <= lambda_value <= 1.0:
        return (f"k1={k1}, k2={k2}, lambda={lambda_value}: expected k1 >= 1, "
                "k2 >= 1 and lambda in [0, 1]")
    if num_points is not None and k1 >= num_points:
        return (f"k1={k1}: expected less than the {num_points} query and "
                "gallery entries re-ranked together (the paper's k1 is "
                f"{K1})")
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


def _pair_distances(points, rows, columns):
    """``d(points[rows], points[columns])`` for index pairs, in chunks (the
    points are normalised)."""
    out = np.empty(len(rows))
    for start in range(0, len(rows), 65536):
        part = slice(start, start + 65536)
        out[part] = 1.0 - np.einsum("ij,ij->i", points[rows[part]],
                                    points[columns[part]])
    return out


def _neighbours(points, num_query, k, block_size, progress):
    """Each point's ``k`` nearest (itself included, ties to the lower
    index), the largest distance of its row, and the query-gallery
    distances (kept from the same blocks)."""
    num_points = len(points)
    nearest = np.empty((num_points, k), np.int64)
    row_max = np.empty(num_points)
    query_gallery = np.empty((num_query, num_points - num_query))
    for start in range(0, num_points, block_size):
        rows = slice(start, start + block_size)
        distances = metrics.distance_matrix(points[rows], points, tf.float64)
        if start < num_query:
            query_gallery[start:start + block_size] = distances[
                :num_query - start, num_query:]
        row_max[rows] = np.maximum(distances.max(axis=1), 1e-12)
        # top_k puts the lower index first among equal values
        nearest[rows] = tf.math.top_k(-distances, k=k).indices.numpy()
        progress("nearest neighbours", min(start + block_size, num_points),
                 num_points)
    return nearest, row_max, query_gallery


def _row_blocks(num_rows, elements_per_row, max_elements):
    """Slices of rows whose arrays hold at most ``max_elements`` (at least
    one row a block)."""
    size = max(1, int(max_elements // max(elements_per_row, 1)))
    return [slice(start, min(start + size, num_rows))
            for start in range(0, num_rows, size)]


def _reciprocal(nearest, k, max_elements):
    """``R(i, k)`` of every point as a mask over ``nearest[:, :k + 1]``."""
    mask = np.empty((len(nearest), k + 1), bool)
    for rows in _row_blocks(len(nearest), (k + 1) ** 2, max_elements):
        forward = nearest[rows, :k + 1]
        backward = nearest[forward][:, :, :k + 1]
        mask[rows] = (backward == np.arange(len(nearest))[rows, None,
                                                          None]).any(axis=2)
    return mask


def _expansion_pairs(nearest, k1, max_elements):
    """``(i, j)`` for every point j of every point i's expansion (step 2),
    sorted and without repeats; the points i are taken in blocks whose
    arrays hold at most about ``max_elements``."""
    num_points = len(nearest)
    half = int(round(k1 / 2))
    # -1 marks a slot that is not a reciprocal neighbour
    full = np.where(_reciprocal(nearest, k1, max_elements),
                    nearest[:, :k1 + 1], -1)
    small = np.where(_reciprocal(nearest, half, max_elements),
                     nearest[:, :half + 1], -1)
    small_size = (small >= 0).sum(axis=1)
    # a point's candidates' sets, and its own set as a mask over the points
    per_row = max((k1 + 1) * (half + 1), num_points + 1)
    row_keys, column_keys = [], []
    for block in _row_blocks(num_points, per_row, max_elements):
        sets = full[block]
        member = np.zeros((len(sets), num_points + 1), bool)
        member[np.arange(len(sets))[:, None], sets] = True
        member[:, -1] = False  # the -1 slots
        owners, slots = np.nonzero(sets >= 0)
        candidates = sets[owners, slots]
        # |R(c, k1/2) & R(i, k1)| for every candidate c of every point i
        shared = member[owners[:, None], small[candidates]].sum(axis=1)
        taken = shared > 2.0 / 3.0 * small_size[candidates]
        rows = np.concatenate([owners, np.repeat(owners[taken],
                                                 small.shape[1])])
        columns = np.concatenate([candidates,
                                  small[candidates[taken]].ravel()])
        keep = columns >= 0
        keys = np.unique((rows[keep] + block.start) * num_points
                         + columns[keep])
        row_keys.append(keys // num_points)
        column_keys.append(keys % num_points)
    return np.concatenate(row_keys), np.concatenate(column_keys)


def _weights(points, nearest, row_max, k1, k2, max_elements):
    """The sparse rows ``V`` (step 3), with local query expansion."""
    num_points = len(points)
    rows, columns = _expansion_pairs(nearest, k1, max_elements)
    weights = np.exp(-_pair_distances(points, rows, columns)
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
                   max_elements):
    """``sum_k min(V[i, k], V[j, k])`` for every query i and gallery j, in
    blocks of queries whose (query entry, gallery entry) pairs number at
    most about ``max_elements``."""
    num_query = v_query.shape[0]
    shared = np.zeros((num_query, num_gallery))
    indptr = v_gallery_by_column.indptr
    # each query's pairs: its entries times the gallery entries of their
    # columns
    pairs = v_query.astype(bool).astype(np.int64) @ np.diff(indptr)
    pairs = np.maximum(pairs, 1) + num_gallery  # and its row of the output
    start = 0
    while start < num_query:
        budget = np.cumsum(pairs[start:])
        stop = start + max(1, int(np.searchsorted(budget, max_elements,
                                                  side="right")))
        block = v_query[start:stop].tocoo()
        # every (query, column) entry meets every gallery entry of the column
        lengths = indptr[block.col + 1] - indptr[block.col]
        query = np.repeat(block.row, lengths)
        query_value = np.repeat(block.data, lengths)
        offsets = np.arange(lengths.sum()) - np.repeat(
            np.cumsum(lengths) - lengths, lengths)
        entry = np.repeat(indptr[block.col], lengths) + offsets
        gallery = v_gallery_by_column.indices[entry]
        value = np.minimum(query_value, v_gallery_by_column.data[entry])
        rows = stop - start
        shared[start:stop] = np.bincount(
            query * num_gallery + gallery, value,
            rows * num_gallery).reshape(rows, num_gallery)
        progress("Jaccard distances", stop, num_query)
        start = stop
    return shared


def k_reciprocal(query, gallery, k1=K1, k2=K2, lambda_value=LAMBDA,
                 block_size=1024, max_block_elements=MAX_BLOCK_ELEMENTS):
    """Re-ranked ``(Q, G)`` distances between ``query`` and ``gallery``
    features (see the module's docstring); ValueError for parameters
    :func:`check` refuses."""
    problem = check(k1, k2, lambda_value, len(query) + len(gallery))
    if problem:
        raise ValueError(problem)
    points = np.concatenate([np.asarray(query, np.float64),
                             np.asarray(gallery, np.float64)])
    points /= np.maximum(np.linalg.norm(points, axis=1, keepdims=True),
                         1e-12)
    num_query, num_points = len(query), len(points)
    # a set smaller than the lists takes every point
    k = min(max(k1 + 1, k2), num_points)
    k2 = min(k2, k)
    progress = _Progress(num_points)
    nearest, row_max, distances = _neighbours(points, num_query, k,
                                              block_size, progress)
    progress("neighbour weights", 0, num_points, force=True)
    v = _weights(points, nearest, row_max, k1, k2,
                 max_block_elements)
    shared = _shared_weight(v[:num_query], v[num_query:].tocsc(),
                            num_points - num_query, progress,
                            max_block_elements)
    progress("done", num_query, num_query, force=True)
    # (1 - lambda) * jaccard + lambda * d, in place: three Q x G matrices
    np.divide(shared, 2.0 - shared, out=shared)  # 1 - jaccard
    shared *= 1.0 - lambda_value
    distances /= row_max[:num_query, None]
    distances *= lambda_value
    distances += 1.0 - lambda_value
    distances -= shared
    return distances
