"""Independent reference implementations the tests compare against."""

import numpy as np


def spread_kernels(model, seed):
    """Give every conv and dense layer Glorot-uniform kernels, in place.

    With the original's initialisation (stddev 1e-3) a fresh network maps
    all images to nearly one point; tests and benchmarks use this to get
    features that differ clearly per image. Training does not.
    """
    import keras
    init = keras.initializers.GlorotUniform(seed=seed)
    for layer in model.layers:
        if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            layer.kernel.assign(init(layer.kernel.shape))
    return model


def bilinear_resize(image, height, width):
    """uint8 ``(h, w, C)`` resized as OpenCV's ``INTER_LINEAR`` and
    TensorFlow's bilinear resize do: half-pixel centres, edge pixels
    repeated, no antialiasing, rounded back to uint8."""
    image = np.asarray(image, np.float64)

    def axis(size_out, size_in):
        source = np.clip((np.arange(size_out) + 0.5) * size_in / size_out
                         - 0.5, 0, size_in - 1)
        low = np.floor(source).astype(int)
        return low, np.minimum(low + 1, size_in - 1), source - low

    y0, y1, wy = axis(height, image.shape[0])
    x0, x1, wx = axis(width, image.shape[1])
    wy, wx = wy[:, None, None], wx[None, :, None]
    top = image[y0][:, x0] * (1 - wx) + image[y0][:, x1] * wx
    bottom = image[y1][:, x0] * (1 - wx) + image[y1][:, x1] * wx
    return np.round(np.clip(top * (1 - wy) + bottom * wy, 0, 255)).astype(
        np.uint8)


def restored_encoder(checkpoint):
    """The encoder of a checkpoint, restored with ``tf.train.Checkpoint``
    directly rather than through the library's checkpoints module."""
    import tensorflow as tf
    from cosine_metric_learning.nets.deep_sort import network_definition
    encoder = network_definition.create_encoder()
    tf.train.Checkpoint(encoder=encoder).restore(checkpoint).expect_partial()
    return encoder


def kit_reference(distances, q_ids, g_ids, q_cams, g_cams, ranks,
                  q_frames=None, g_frames=None, min_frame_gap=None):
    """A straightforward per-query loop after the Market-1501 kit; with
    frames, an entry of the query's id and camera is junk only when fewer
    than ``min_frame_gap`` frames from the query."""
    def is_junk(q, g):
        if g_ids[g] == -1:
            return True
        if g_ids[g] != q_ids[q] or g_cams[g] != q_cams[q]:
            return False
        return min_frame_gap is None or abs(
            int(g_frames[g]) - int(q_frames[q])) < min_frame_gap

    cmcs, aps, plain, inps = [], [], [], []
    for q in range(len(q_ids)):
        order = np.argsort(distances[q], kind="stable")
        good = [g for g in order if g_ids[g] == q_ids[q]
                and not is_junk(q, g)]
        if not good:
            continue
        ngood, hits, j, ap, ap_plain = len(good), 0, 0, 0.0, 0.0
        old_recall, old_precision = 0.0, 1.0
        cmc = np.zeros(len(order))
        found = False
        for g in order:
            if is_junk(q, g):
                continue
            is_good = g in good
            if is_good and not found:
                cmc[j:] = 1
                found = True
            hits += is_good
            recall, precision = hits / ngood, hits / (j + 1)
            ap += (recall - old_recall) * (old_precision + precision) / 2
            if is_good:
                ap_plain += precision / ngood
                last_hit = j + 1  # 1-based position of the latest good
            old_recall, old_precision = recall, precision
            j += 1
        cmcs.append(cmc)
        aps.append(ap)
        plain.append(ap_plain)
        inps.append(ngood / last_hit)
    cmc = np.mean(cmcs, axis=0)
    out = {f"rank-{k}": cmc[k - 1] for k in ranks}
    out.update(mAP=np.mean(aps), mAP_noninterpolated=np.mean(plain),
               mINP=np.mean(inps),
               num_queries=len(aps))
    return out


def keras_features(encoder, patches_bgr):
    """The Keras encoder's features of uint8 BGR patches: channels reversed
    and scaled here, not by the library's preprocessing."""
    rgb = patches_bgr[..., ::-1].astype(np.float32) / 255.0
    return encoder(rgb, training=False).numpy()


def gate_reference(positives, negatives):
    """The equal-error gate with every candidate threshold tried:
    ``(threshold, false-accept rate, false-reject rate)`` where the two
    rates are closest."""
    best = None
    for t in sorted(set(positives)):
        far = sum(d <= t for d in negatives) / len(negatives)
        frr = sum(d > t for d in positives) / len(positives)
        if best is None or abs(far - frr) < abs(best[1] - best[2]):
            best = (t, far, frr)
    return best


def rerank_reference(query, gallery, metric, k1, k2, lambda_value):
    """k-reciprocal re-ranking as the paper states it, with dense matrices
    and Python sets; nearest lists put the lower index first on ties."""
    x = np.concatenate([query, gallery]).astype(np.float64)
    if metric == "cosine":
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        d = 1.0 - x @ x.T
    else:
        d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    n, nq = len(x), len(query)
    order = [sorted(range(n), key=lambda j: (d[i, j], j)) for i in range(n)]
    d = d / d.max(axis=1, keepdims=True)

    def reciprocal(i, k):
        return {j for j in order[i][:k + 1] if i in order[j][:k + 1]}

    v = np.zeros((n, n))
    for i in range(n):
        r = reciprocal(i, k1)
        expansion = set(r)
        for c in r:
            rc = reciprocal(c, int(round(k1 / 2)))
            if len(rc & r) > 2 / 3 * len(rc):
                expansion |= rc
        for j in expansion:
            v[i, j] = np.exp(-d[i, j])
        v[i] /= v[i].sum()
    if k2 > 1:
        v = np.array([v[order[i][:k2]].mean(axis=0) for i in range(n)])
    jaccard = np.zeros((nq, n - nq))
    for i in range(nq):
        for j in range(n - nq):
            a, b = v[i], v[nq + j]
            jaccard[i, j] = 1 - np.minimum(a, b).sum() / np.maximum(a, b).sum()
    return (1 - lambda_value) * jaccard + lambda_value * d[:nq, nq:]


def rank1_interval(distances, moves, q_ids, g_ids, q_cams, g_cams):
    """The queries whose first match is certainly right, and those that
    may go either way, when each query-gallery distance may move by up to
    ``moves`` (same shape) in either direction, under the Market-1501
    kit's junk rule: ``(certain, uncertain, number of queries)``.

    A query is certain when even its worst-moved good match comes before
    its best-moved wrong one (and the other way round for a certain
    miss); equal bounds count as uncertain."""
    certain = uncertain = counted = 0
    for q in range(len(q_ids)):
        junk = (g_ids == -1) | ((g_ids == q_ids[q]) & (g_cams == q_cams[q]))
        good = (g_ids == q_ids[q]) & ~junk
        bad = ~good & ~junk
        if not good.any():
            continue
        counted += 1
        if not bad.any():
            certain += 1
            continue
        d, m = distances[q], moves[q]
        if (d + m)[good].min() < (d - m)[bad].min():
            certain += 1
        elif not (d + m)[bad].min() < (d - m)[good].min():
            uncertain += 1
    return certain, uncertain, counted
