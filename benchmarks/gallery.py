"""Exact against approximate ranking of large galleries, side by side in
one run, and the sharded encoder against single-process ``encode``.

    python benchmarks/gallery.py --sizes=100000,1000000 \
        [--images=./crops --model=./output/market1501/cosine-softmax]

For each ``--sizes`` entry, a gallery of synthetic unit features with
identity structure (``--per_identity`` features of each identity: its
centre plus noise) is written as shards and indexed by ``search build``;
``--queries`` other features of the same identities are ranked by brute
force (faiss ``IndexFlatIP``, the exact inner products, BLAS on every
core) and by the index (``ann.Index``: ``--candidates`` from
``--nprobe`` inverted lists, re-ranked by their exact distances read from
the memory-mapped shards). Printed: recall@1 and @10 of the index against
exact ranking, queries per second of both and their ratio (all queries
in one call, where brute force is one matrix product; and
``--single_queries`` of them one at a time, as a search service gets
them), build time, and the index's bytes against the float32
features'. With ``--images``
and ``--model``: the images encoded by ``encode`` in one process and by
``encode_shards`` on a local Dask cluster of ``--workers`` processes,
images per second of both, the largest difference of their features,
and those features as one more gallery (queries: the first
``--queries`` of them, each excluded from its own ranking).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from cosine_metric_learning import ann


def synthetic_gallery(count, dim, per_identity, spread, seed):
    """``(gallery, queries of the same identities)`` of unit features."""
    rng = np.random.default_rng(seed)
    identities = max(1, count // per_identity)
    centres = rng.normal(size=(identities, dim)).astype(np.float32)

    def draw(n, labels=None):
        labels = rng.integers(0, identities, n) if labels is None else labels
        x = centres[labels] + spread * rng.normal(size=(n, dim)).astype(
            np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    gallery = np.empty((count, dim), np.float32)
    for begin in range(0, count, 1_000_000):  # in blocks: less memory
        gallery[begin:begin + 1_000_000] = draw(min(1_000_000,
                                                    count - begin))
    return gallery, draw


def write_shards(folder, features, shard_size):
    os.makedirs(folder)
    for number, begin in enumerate(range(0, len(features), shard_size)):
        ann.write_shard(
            os.path.join(folder, f"shard-{number:05d}.npy"),
            features[begin:begin + shard_size],
            (f"{i}.jpg" for i in range(begin, min(begin + shard_size,
                                                  len(features)))))


def compare(gallery, queries, folder, args, exclude_self=False):
    """Index ``gallery`` and rank ``queries`` both ways; the numbers."""
    import faiss
    write_shards(os.path.join(folder, "features"), gallery, args.shard_size)
    # synthetic features, or the encoded ones written here again: no model
    report = ann.build(os.path.join(folder, "features"),
                       os.path.join(folder, "index"), kind=args.codes,
                       log=lambda _: None, allow_unknown_model=True)
    k = args.top_k + (1 if exclude_self else 0)
    exact_index = faiss.IndexFlatIP(gallery.shape[1])
    exact_index.add(gallery)
    start = time.perf_counter()
    _, exact = exact_index.search(queries, k)
    exact_seconds = time.perf_counter() - start
    index = ann.Index(os.path.join(folder, "index"))
    start = time.perf_counter()
    _, found = index.search(queries, k, max(args.candidates, k),
                            args.nprobe)
    ann_seconds = time.perf_counter() - start
    # one query at a time, as a search service gets them
    single = queries[:args.single_queries]
    start = time.perf_counter()
    for query in single:
        exact_index.search(query[None], k)
    exact_single = (time.perf_counter() - start) / len(single)
    start = time.perf_counter()
    for query in single:
        index.search(query[None], k, max(args.candidates, k), args.nprobe)
    ann_single = (time.perf_counter() - start) / len(single)
    del exact_index
    if exclude_self:  # a query (a gallery row) is not its own neighbour
        exact, found = ([row[row != i][:args.top_k]
                         for i, row in enumerate(ranked)]
                        for ranked in (exact, found))
        exact, found = np.stack(exact), np.stack(found)
    return {"gallery": len(gallery), "queries": len(queries),
            "recall@1": ann.recall_at(found[:, :1], exact[:, :1]),
            "recall@10": ann.recall_at(found[:, :10], exact[:, :10]),
            "exact_qps": len(queries) / exact_seconds,
            "ann_qps": len(queries) / ann_seconds,
            "speed-up": exact_seconds / ann_seconds,
            "exact_qps_one_at_a_time": 1.0 / exact_single,
            "ann_qps_one_at_a_time": 1.0 / ann_single,
            "speed-up_one_at_a_time": exact_single / ann_single,
            "build_seconds": report["build_seconds"],
            "index_bytes": report["index_bytes"],
            "features_bytes": int(gallery.nbytes),
            "factory": report["factory"],
            "nprobe": args.nprobe or ann.default_nprobe(report["nlist"])}


def encoding(args, folder):
    """Single-process ``encode`` against ``encode_shards`` on the same
    files: their throughput and how far apart their features are."""
    from cosine_metric_learning import encode_shards
    from cosine_metric_learning import features as features_lib
    from cosine_metric_learning import encoder as encoder_lib
    paths = encode_shards.list_files(args.images)
    start = time.perf_counter()
    single = features_lib.encode_files(encoder_lib.load(args.model), paths)
    single_seconds = time.perf_counter() - start
    out = os.path.join(folder, "shards")
    start = time.perf_counter()
    manifest = encode_shards.run(args.model, args.images, out,
                                 shard_size=args.encode_shard_size,
                                 workers=args.workers, log=lambda _: None)
    sharded_seconds = time.perf_counter() - start
    sharded = np.concatenate([np.load(os.path.join(out, n))
                              for n in manifest["finished"]])
    return single, {
        "images": len(paths), "single_images_per_s": len(paths)
        / single_seconds, "sharded_images_per_s": len(paths)
        / sharded_seconds, "workers": args.workers,
        "least_cosine": float(np.min(np.sum(single * sharded, axis=1)))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--per_identity", type=int, default=20)
    parser.add_argument("--spread", type=float, default=0.6,
                        help="the noise's standard deviation per dimension "
                        "against the centres' 1")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--single_queries", type=int, default=200,
                        help="queries also timed one at a time")
    parser.add_argument("--top_k", type=int, default=10)
    parser.add_argument("--candidates", type=int,
                        default=ann.DEFAULTS["candidates"])
    parser.add_argument("--nprobe", type=int,
                        default=ann.DEFAULTS["nprobe"],
                        help="lists searched per query (default: the "
                        "index's, ann.default_nprobe)")
    parser.add_argument("--shard_size", type=int, default=1_000_000)
    parser.add_argument("--codes", default="sq8", choices=ann.CODES)
    parser.add_argument("--images", default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--encode_shard_size", type=int, default=500)
    parser.add_argument("--output_json", default=None)
    args = parser.parse_args(argv)
    from cosine_metric_learning.errors import report_errors
    return report_errors([sys.argv[0]], lambda: run(args), {
        "sizes": "--sizes", "queries": "--queries",
        "single_queries": "--single_queries", "top_k": "--top_k",
        "candidates": "--candidates", "nprobe": "--nprobe",
        "dim": "--dim", "per_identity": "--per_identity",
        "shard_size": "--shard_size", "workers": "--workers",
        "encode_shard_size": "--encode_shard_size"})


def _ratio(value):
    """A speed ratio as the table prints it: two significant digits."""
    return f"{value:.2g}x" if value < 10 else f"{value:.0f}x"


def check_args(args):
    """One line for a value that would fail later (a division by no
    queries, an empty gallery)."""
    from cosine_metric_learning.errors import ArgumentError
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        raise ArgumentError("sizes", args.sizes, "expected comma-separated "
                            "gallery sizes") from None
    for name in ("queries", "single_queries", "top_k", "candidates", "dim",
                 "per_identity", "shard_size", "workers",
                 "encode_shard_size"):
        if getattr(args, name) < 1:
            raise ArgumentError(name, getattr(args, name),
                                "expected at least 1")
    for size in sizes:
        if size < max(args.top_k, 1):
            raise ArgumentError("sizes", args.sizes, f"a gallery of {size}: "
                                f"expected at least --top_k ({args.top_k}) "
                                "features")
    if args.nprobe is not None and args.nprobe < 1:
        raise ArgumentError("nprobe", args.nprobe, "expected at least 1")
    if bool(args.images) != bool(args.model):
        raise ArgumentError("images" if args.images else "model",
                            args.images or args.model,
                            "--images and --model go together")
    return sizes


def run(args):
    sizes = check_args(args)
    ann.require_faiss()
    rows, encoded = [], None
    tmp = tempfile.mkdtemp(prefix="gallery.")
    try:
        for number, size in enumerate(sizes):
            gallery, draw = synthetic_gallery(size, args.dim,
                                              args.per_identity, args.spread,
                                              seed=number)
            rows.append(("synthetic", compare(
                gallery, draw(args.queries), os.path.join(tmp, str(size)),
                args)))
            del gallery
        if args.images and args.model:
            features, encoded = encoding(args, tmp)
            rows.append(("encoded " + args.images, compare(
                features, features[:args.queries],
                os.path.join(tmp, "real"), args, exclude_self=True)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("queries per second, exact (faiss IndexFlatIP) and the index: "
          "all queries in one call, and one query at a time")
    print(f"{'gallery':>26s} {'recall@1':>9s} {'recall@10':>10s} "
          f"{'exact':>7s} {'index':>7s} {'ratio':>6s} {'exact 1':>8s} "
          f"{'index 1':>8s} {'ratio 1':>8s} {'build s':>8s} "
          f"{'index MB':>9s} {'features MB':>12s} {'nprobe':>7s}")
    for kind, row in rows:
        print(f"{kind[-16:]:>16s} {row['gallery']:>9d} "
              f"{row['recall@1']:9.3f} {row['recall@10']:10.3f} "
              f"{row['exact_qps']:7.0f} {row['ann_qps']:7.0f} "
              f"{_ratio(row['speed-up']):>6s} "
              f"{row['exact_qps_one_at_a_time']:8.0f} "
              f"{row['ann_qps_one_at_a_time']:8.0f} "
              f"{_ratio(row['speed-up_one_at_a_time']):>8s} "
              f"{row['build_seconds']:8.1f} "
              f"{row['index_bytes'] / 1e6:9.1f} "
              f"{row['features_bytes'] / 1e6:12.1f} "
              f"{row['nprobe']:>7d}")
    factories = sorted({row["factory"] for _, row in rows})
    print(f"(indexes {', '.join(factories)}: --nprobe="
          f"{args.nprobe or 'default'} --candidates={args.candidates}; "
          f"{args.queries} queries)")
    if encoded:
        print(f"encoding {encoded['images']} images: encode "
              f"{encoded['single_images_per_s']:.1f} images/s in one "
              f"process, encode_shards {encoded['sharded_images_per_s']:.1f}"
              f" images/s with {encoded['workers']} workers "
              f"({encoded['sharded_images_per_s'] / encoded['single_images_per_s']:.2f}"
              f"x); least cosine between their features "
              f"{encoded['least_cosine']:.6f}")
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump({"settings": vars(args), "rows": rows,
                       "encoding": encoded}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
