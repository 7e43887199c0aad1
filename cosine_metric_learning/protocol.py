"""The standard test protocol (``--mode=test``): the numbers papers
report, computed with the datasets' official protocols without MATLAB.

The test split is encoded once (MARS tracklets are averaged), ranked by
cosine distance and scored with CMC and mAP (``metrics.py``);
``--output_json`` and ``--rank_image`` write the numbers and a picture.
"""

import json
import os
import tempfile

import numpy as np
import tensorflow as tf
from absl import logging
from PIL import PngImagePlugin

from cosine_metric_learning import files
from cosine_metric_learning import metrics, pictures, rerank
from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import features as features_lib
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.errors import first_line

# the numbers reported after re-ranking, under "rerank"
RERANK_KEYS = tuple(f"rank-{k}" for k in metrics.RANKS) + (
    "mAP", "mAP_noninterpolated", "mINP")
# --ann: the gallery entries an index ranks for each query
ANN_DEPTH = 100

# an existing --output_json is replaced only if it is one of these
RESULTS_JSON = files.json_kind(
    {"dataset", "mAP"}, "test numbers written by --mode=test (a JSON object "
    "with 'dataset' and 'mAP')")


def test_features(dataset, restore_path, dataset_dir, batch_size,
                  flip_test=False, split=None, backend="auto",
                  image_shape=None):
    """Encode the test split (read unless given); returns ``(split, image
    features, model path)``. ``restore_path`` is anything
    :func:`encoder.load` takes, run on ``backend``; the images are read at
    its input size (``image_shape``, if given, must agree with it)."""
    if split is None:
        split = dataset.read_test(dataset_dir)
    model = encoder_lib.load(restore_path, batch_size, image_shape, backend)
    encode = features_lib.make_patch_encode_fn(model, batch_size, flip_test)
    logging.info("Encoding %d test images with %s", len(split.filenames),
                 model.source)
    values, bad = features_lib.encode_or_blame(encode, split.filenames,
                                               model.image_shape)
    if bad:
        index, error = next(iter(bad.items()))
        raise UsageError(
            f"cannot read test image '{split.filenames[index]}' "
            f"({first_line(error)}){_and_more(len(bad))}; the standard "
            "protocol needs every image of the test split")
    return split, values, model.source


def _and_more(count):
    return f" and {count - 1} more" if count > 1 else ""


def evaluate_split(split, features, rerank_parameters=None, ann=None):
    """Standard-protocol metrics and the distance matrix of a test split,
    with the tracker's gate (:func:`tracker_gate`), given ``(k1, k2,
    lambda)`` the numbers after k-reciprocal re-ranking under ``rerank``,
    and given ``ann`` (the codes of :func:`ann.build`) the numbers of
    an index's ranking under ``ann`` (:func:`ann_ranking`)."""
    # in double precision, as the kits compute
    features = np.asarray(features, np.float64)
    query = features_lib.pool_groups(features, split.query_groups)
    gallery = features_lib.pool_groups(features, split.gallery_groups)
    distances = metrics.distance_matrix(query, gallery, tf.float64)
    labels = split.ranking_labels()
    result = metrics.evaluate_ranking(distances, **labels)
    result.update(tracker_gate(distances, split.query_ids,
                               split.gallery_ids))
    if rerank_parameters is not None:
        k1, k2, lambda_value = rerank_parameters
        reranked = metrics.evaluate_ranking(rerank.k_reciprocal(
            query, gallery, k1, k2, lambda_value), **labels)
        result["rerank"] = {key: reranked[key] for key in RERANK_KEYS}
        result["rerank"].update(k1=k1, k2=k2, **{"lambda": lambda_value})
    if ann is not None:
        result["ann"] = ann_ranking(query, gallery, distances, labels, ann)
    return result, distances


def ann_ranking(query, gallery, distances, labels, codes):
    """The protocol's numbers when an index of the gallery ranks it: its
    top :data:`ANN_DEPTH` for each query (exact distances; the rest
    ranked after them), and the share of exact ranking's top 1 and 10
    that its top 1 and 10 hold."""
    from cosine_metric_learning import ann
    depth = min(ANN_DEPTH, len(gallery))
    with tempfile.TemporaryDirectory() as tmp:
        shards = os.path.join(tmp, "features")
        os.makedirs(shards)
        ann.write_shard(os.path.join(shards, "gallery.npy"),
                        np.asarray(gallery, np.float32),
                        range(len(gallery)))
        report = ann.build(shards, os.path.join(tmp, "index"),
                           kind=codes, log=lambda _: None,
                           allow_unknown_model=True)  # this run's own
        found, ids = ann.Index(os.path.join(tmp, "index")).search(
            np.asarray(query, np.float32), top_k=depth,
            candidates=max(ann.DEFAULTS["candidates"], depth))
    ranked = np.full(distances.shape, np.inf)
    rows = np.repeat(np.arange(len(query)), depth).reshape(ids.shape)
    hit = ids >= 0
    ranked[rows[hit], ids[hit]] = distances[rows[hit], ids[hit]]
    numbers = metrics.evaluate_ranking(ranked, **labels)
    exact = np.argsort(distances, axis=1, kind="stable")
    result = {key: numbers[key] for key in RERANK_KEYS}
    for k in (1, 10):
        result[f"recall@{k}"] = ann.recall_at(ids[:, :k], exact[:, :k])
    result.update(codes=codes, factory=report["factory"], depth=depth)
    return result


def tracker_gate(cosine, query_ids, gallery_ids):
    """The ``--max_cosine_distance`` to give Deep SORT for this model: the
    equal-error threshold of the query-gallery cosine distances between
    one identity (any camera: a tracker matches within a camera too) and
    different identities; junk (-1) entries are left out."""
    keep = np.asarray(gallery_ids) != -1
    same = np.asarray(query_ids)[:, None] == np.asarray(gallery_ids)[None,
                                                                     keep]
    gate = metrics.equal_error_gate(cosine[:, keep], same)
    return {"max_cosine_distance": gate["threshold"],
            "gate_false_accept_rate": gate["false_accept_rate"],
            "gate_false_reject_rate": gate["false_reject_rate"]}


def run_test(dataset, restore_path, dataset_dir, batch_size=128,
             flip_test=False, output_json=None, rank_image=None,
             backend="auto", rerank_parameters=None, image_shape=None,
             ann=None):
    """``--mode=test``: print and return rank-k CMC and mAP of a checkpoint
    or an exported model; with ``rerank_parameters`` ``(k1, k2, lambda)``
    also after k-reciprocal re-ranking; with ``ann`` (codes) also as an
    approximate-nearest-neighbour index ranks the gallery."""
    if ann is not None:  # before the work
        from cosine_metric_learning import ann
        ann.require_faiss()
        ann.check_codes(ann)
    if rerank_parameters is not None:
        problem = rerank.check(*rerank_parameters)
        if problem:
            raise ArgumentError("rerank_parameters", rerank_parameters,
                                problem)
    if output_json:
        files.check_output(output_json, RESULTS_JSON)
    if rank_image:
        files.check_output(rank_image, files.PNG)
    split = dataset.read_test(dataset_dir)
    if rerank_parameters is not None:
        # before the encoding: k1 against the number of entries
        problem = rerank.check(*rerank_parameters, len(split.query_groups)
                               + len(split.gallery_groups))
        if problem:
            raise ArgumentError("rerank_parameters", rerank_parameters,
                                problem)
    split, features, path = test_features(dataset, restore_path, dataset_dir,
                                          batch_size, flip_test,
                                          split=split, backend=backend,
                                          image_shape=image_shape)
    result, distances = evaluate_split(split, features, rerank_parameters,
                                       ann)
    summary = {k: v for k, v in result.items() if k != "cmc"}
    summary.update(dataset=dataset.name, checkpoint=path,
                   flip_test=flip_test)
    print(format_table(summary))
    if output_json:
        files.write_atomically(output_json, lambda f: json.dump(
            summary, f, indent=2), RESULTS_JSON)
        print(f"wrote {output_json}")
    if rank_image:
        draw_rank_image(rank_image, split, distances)
        print(f"wrote {rank_image}")
    return summary


def format_table(summary):
    """The test numbers as a small text table (re-ranked ones beside)."""
    rerank_numbers = summary.get("rerank")
    rows = [(k, k) for k in summary if k.startswith("rank-")]
    rows += [("mAP", "mAP"), ("mAP (non-interpolated)", "mAP_noninterpolated"),
             ("mINP", "mINP")]
    lines = [f"{summary['dataset']} test, {summary['num_queries']} queries, "
             "cosine distance"
             f"{', flip test' if summary['flip_test'] else ''}"]
    header = f"{'metric':24s} {'value':>7s}"
    if rerank_numbers:
        header += f" {'re-ranked':>10s}"
        lines[0] += (f"; re-ranked: k-reciprocal, k1={rerank_numbers['k1']}, "
                     f"k2={rerank_numbers['k2']}, "
                     f"lambda={rerank_numbers['lambda']}")
    ann = summary.get("ann")
    if ann:
        header += f" {'index':>8s}"
        lines[0] += (f"; index: {ann['factory']}, its top {ann['depth']} "
                     "ranked, recall of exact ranking's top 1 "
                     f"{ann['recall@1']:.3f}, top 10 {ann['recall@10']:.3f}")
    lines += [header, "-" * len(header)]
    for name, key in rows:
        line = f"{name:24s} {100 * summary[key]:6.2f}%"
        if rerank_numbers:
            line += f" {100 * rerank_numbers[key]:9.2f}%"
        if ann:
            line += f" {100 * ann[key]:7.2f}%"
        lines.append(line)
    lines += [
        "", f"Deep SORT gate: --max_cosine_distance="
        f"{summary['max_cosine_distance']:.4g} (equal error: "
        f"{100 * summary['gate_false_accept_rate']:.1f}% of different-"
        f"identity pairs pass it, "
        f"{100 * summary['gate_false_reject_rate']:.1f}% of same-identity "
        "pairs are cut)"]
    return "\n".join(lines)


def draw_rank_image(path, split, distances, num_queries=8, top=10, seed=0):
    """A PNG of fixed queries and their ``top`` nearest gallery entries
    (junk removed), matches framed green and non-matches red."""
    rows = []
    queries = pictures.fixed_sample(len(split.query_groups), num_queries,
                                    seed)
    for q, junk in zip(queries, metrics.junk_mask(
            **split.ranking_labels(queries))):
        rows.append((split.filenames[split.query_groups[q][0]], [
            (split.filenames[split.gallery_groups[g][0]],
             split.gallery_ids[g] == split.query_ids[q])
            for g in pictures.nearest(distances[q], junk, top)]))
    canvas = pictures.ranked_retrieval(rows)
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", files.PNG_SOFTWARE)
    files.write_atomically(path, lambda f: canvas.save(
        f, format="PNG", pnginfo=info), files.PNG, binary=True)
