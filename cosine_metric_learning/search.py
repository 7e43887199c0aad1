"""Search a large gallery of features: an approximate-nearest-neighbour
index (faiss) over feature shards, and queries against it.

    python -m cosine_metric_learning.search build \
        --features=./gallery_features --index=./gallery_index
    python -m cosine_metric_learning.search query --index=./gallery_index \
        --images=./query_crops --model=./output/market1501/cosine-softmax \
        --top_k=10 --output=ranking.json

``--features`` is a comma-separated list of feature files as ``encode``
writes them (a ``.npy`` of unit features with its ``.filenames.txt``
beside it) or folders of them (the shards of
:mod:`cosine_metric_learning.encode_shards`, whose ``manifest.json``
names the model). ``build`` writes ``--index`` (a new or empty folder, or
an earlier index of this command): ``index.faiss``, an inverted-file
index over inner products, about 2 sqrt(N) lists (``--nlist``), of
8-bit scalar codes (faiss ``IVF<n>,SQ8``: a quarter of the float32
features' size) or, with ``--codes=pq4``, of 4-bit product codes of
each feature's offset from its list's centre, scanned with SIMD
(``IVF<n>,PQ<d>x4fsr``: an eighth, faster); and ``index.json``, the
shards it covers in order, their digests and the model.

``query`` opens the index with faiss's memory-map flag (which parts stay
on disk depends on the index type) and, for each query (image files encoded with
``--model``, or a ``--query_features`` file), asks it for
``--candidates`` neighbours in ``--nprobe`` lists (by default 5 % of its
lists, at least 96: about the same share of the gallery whatever its
size), then ranks those by
their exact cosine distance, read from the shards (memory-mapped too),
and keeps ``--top_k``. ``--output`` is ``.json`` (each query's ranked
file names and distances) or ``.txt``: a header line, then a line per
query of the gallery file names, best first, tab-separated. An index
built from another model's features is refused, as is a query of another
dimension, and shards changed since the index was built. Every input of
``build`` must record its model (a folder's ``manifest.json``, or the
``.model.json`` that ``encode`` writes beside its ``.npy``), one model for
all; ``--allow_unknown_model`` takes files without a record.
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

import json
import sys

import numpy as np

from cosine_metric_learning import ann, files
from cosine_metric_learning.errors import ArgumentError

RANKING_JSON = files.json_kind({"index", "queries"}, "a ranking written by "
                               "this command (a JSON object with 'index' "
                               "and 'queries')")
# the first line of a .txt ranking: what marks it as this command's
RANKING_TXT_HEADER = ("# cosine_metric_learning.search ranking: a line per "
                      "query, its gallery file names best first, "
                      "tab-separated")


def _is_ranking_txt(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readline().rstrip("\n") == RANKING_TXT_HEADER


RANKING_TXT = files.Kind("a ranking written by this command (a .txt whose "
                         f"first line is '{RANKING_TXT_HEADER}')",
                         _is_ranking_txt)


def write_ranking(output, index, query_names, distances, ids):
    """The ranking as JSON (names and distances) or text: a header line
    (:data:`RANKING_TXT_HEADER`), then a line per query of its gallery
    file names, tab-separated (names may hold spaces)."""
    if output.endswith(".json"):
        queries = [{"query": name, "results": [
            {"name": n, "distance": float(d)}
            for n, d in zip(index.names(i[i >= 0]), dist[i >= 0])]}
            for name, dist, i in zip(query_names, distances, ids)]
        return files.write_atomically(output, lambda f: json.dump(
            {"index": index.path, "queries": queries}, f, indent=1),
            RANKING_JSON)
    return files.write_atomically(output, lambda f: f.write(
        RANKING_TXT_HEADER + "\n" + "".join(
            "\t".join(index.names(i[i >= 0])) + "\n" for i in ids)),
        RANKING_TXT)


def check_ranking_output(output):
    if not output.endswith((".json", ".txt")):
        raise ArgumentError("output", output, "expected a .json or .txt "
                            "file name")
    files.check_output(output, RANKING_JSON if output.endswith(".json")
                       else RANKING_TXT)


# Command line ---------------------------------------------------------------

def _parser():
    import argparse
    parser = argparse.ArgumentParser(
        prog="python -m cosine_metric_learning.search",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--helpfull", action="help", help="show this help "
                        "(as the other commands take it) and exit")
    commands = parser.add_subparsers(dest="command", required=True)
    b = commands.add_parser("build", help="index feature shards")
    b.add_argument("--helpfull", action="help", help="show this help "
                   "(as the other commands take it) and exit")
    b.add_argument("--features", required=True, help="comma-separated .npy "
                   "feature files (with their .filenames.txt) or folders "
                   "of them")
    b.add_argument("--index", required=True, help="a new or empty folder "
                   "(or an earlier index, replaced)")
    b.add_argument("--nlist", type=int, default=None, help="inverted lists "
                   "(default: about 2 sqrt(N))")
    b.add_argument("--codes", default="sq8", choices=ann.CODES,
                   help="sq8: a byte per dimension; pq4: 4 bits per "
                   "dimension, faster to scan, coarser")
    b.add_argument("--allow_unknown_model", action="store_true",
                   help="index feature files with no record of the model "
                   "that encoded them (their queries go unchecked)")
    q = commands.add_parser("query", help="rank the index's gallery for "
                            "query images or features")
    q.add_argument("--helpfull", action="help", help="show this help "
                   "(as the other commands take it) and exit")
    q.add_argument("--index", required=True)
    what = q.add_mutually_exclusive_group(required=True)
    what.add_argument("--images", help="a folder or glob of query images "
                      "(with --model)")
    what.add_argument("--query_features", help="a .npy of query features "
                      "(with its .filenames.txt, as encode writes it)")
    q.add_argument("--model", help="the model that encoded the gallery "
                   "(for --images)")
    q.add_argument("--top_k", type=int, default=ann.DEFAULTS["top_k"])
    q.add_argument("--candidates", type=int,
                   default=ann.DEFAULTS["candidates"], help="neighbours "
                   "asked of the index, then ranked by their exact distance")
    q.add_argument("--nprobe", type=int, default=ann.DEFAULTS["nprobe"],
                   help="inverted lists searched per query (default: "
                   f"{100 * ann.NPROBE_SHARE:g} %% of the index's lists, at "
                   f"least {ann.NPROBE_FLOOR})")
    q.add_argument("--output", required=True, help=".json, or .txt (a "
                   "line per query of gallery file names, tab-separated)")
    return parser


def _positive(name, value):
    if value < 1:
        raise ArgumentError(name, value, "expected at least 1")


def run(args):
    if args.command == "build":
        if args.nlist is not None:
            _positive("nlist", args.nlist)
        report = ann.build(args.features, args.index, args.nlist, args.codes,
                           allow_unknown_model=args.allow_unknown_model)
        print(f"indexed {report['count']} features of dimension "
              f"{report['feature_dim']} from {len(report['shards'])} "
              f"shard(s) in {report['build_seconds']:.1f} s: "
              f"{report['factory']}, {report['index_bytes'] / 1e6:.1f} MB "
              f"(the float32 features: "
              f"{4 * report['count'] * report['feature_dim'] / 1e6:.1f} MB)")
        print(f"wrote {args.index}")
        return 0
    for name in ("top_k", "candidates", "nprobe"):
        if getattr(args, name) is not None:
            _positive(name, getattr(args, name))
    check_ranking_output(args.output)
    index = ann.Index(args.index)
    if args.images is not None:
        if args.model is None:
            raise ArgumentError("model", None, "--images needs the --model "
                                "that encoded the gallery")
        from cosine_metric_learning import encoder as encoder_lib
        from cosine_metric_learning import features as features_lib
        from cosine_metric_learning import checkpoints
        identity = checkpoints.model_identity(args.model)
        if index.model is not None:  # before the encoding
            index.check_query(np.zeros((0, index.dim), np.float32), identity)
        else:
            print(f"warning: the index {args.index} records no model (built "
                  "with --allow_unknown_model): the queries are not checked "
                  "against the gallery's model", file=sys.stderr)
        names = features_lib.list_images(args.images)
        encoder = encoder_lib.load(args.model)
        queries = features_lib.encode_files(encoder, names)
        index.check_query(queries, identity)
    else:
        ann.check_shard(args.query_features)
        queries = np.load(args.query_features)
        names = ann.read_names(args.query_features)
        index.check_query(queries)
    distances, ids = index.search(queries, args.top_k, args.candidates,
                                  args.nprobe)
    print(f"wrote {write_ranking(args.output, index, names, distances, ids)}"
          f" ({len(names)} queries, top {args.top_k})")
    return 0


def main(argv=None):
    from cosine_metric_learning.errors import report_errors
    args = _parser().parse_args(argv)
    flag_names = {"features": "--features", "index": "--index",
                  "query": "--query_features", "model": "--model",
                  "output": "--output", "top_k": "--top_k",
                  "candidates": "--candidates", "nprobe": "--nprobe",
                  "nlist": "--nlist", "codes": "--codes",
                  "allow_unknown_model": "--allow_unknown_model",
                  "pattern": "--images",
                  "path": "--model"}
    return report_errors([sys.argv[0]], lambda: run(args), flag_names)


if __name__ == "__main__":
    sys.exit(main())
