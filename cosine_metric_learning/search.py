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

import dataclasses
import json
import sys
from typing import Optional

import numpy as np

from cosine_metric_learning import ann, files
from cosine_metric_learning.commands import Validated, one_of, setting
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

def _optional_count(value):
    return None if value is None or value >= 1 else "expected at least 1"


@dataclasses.dataclass
class BuildConfig(Validated):
    """``search build``: index feature shards."""
    features: str = setting(
        None, "Comma-separated .npy feature files (with their "
        ".filenames.txt) or folders of them.", arguments=("pattern",),
        required=True)
    index: str = setting(None, "A new or empty folder (or an earlier index, "
                         "replaced).", required=True)
    nlist: Optional[int] = setting(
        None, "Inverted lists (default: about 2 sqrt(N)).", _optional_count)
    codes: str = setting(
        "sq8", "sq8: a byte per dimension; pq4: 4 bits per dimension, "
        "faster to scan, coarser.", one_of(ann.CODES))
    allow_unknown_model: bool = setting(
        False, "Index feature files with no record of the model that "
        "encoded them (their queries go unchecked).")


@dataclasses.dataclass
class QueryConfig(Validated):
    """``search query``: rank the index's gallery for query images or
    features."""
    index: str = setting(None, "The index folder (search build's).",
                         required=True)
    images: Optional[str] = setting(
        None, "A folder or glob of query images (with --model; or "
        "--query_features).", arguments=("pattern",))
    query_features: Optional[str] = setting(
        None, "A .npy of query features (with its .filenames.txt, as encode "
        "writes it; or --images).", arguments=("query",))
    model: Optional[str] = setting(
        None, "The model that encoded the gallery (for --images).",
        arguments=("path",))
    top_k: int = setting(ann.DEFAULTS["top_k"], "Gallery entries kept per "
                         "query.", _optional_count)
    candidates: Optional[int] = setting(
        ann.DEFAULTS["candidates"], "Neighbours asked of the index, then "
        "ranked by their exact distance.", _optional_count)
    nprobe: Optional[int] = setting(
        ann.DEFAULTS["nprobe"], "Inverted lists searched per query "
        f"(default: {100 * ann.NPROBE_SHARE:g} % of the index's lists, at "
        f"least {ann.NPROBE_FLOOR}).", _optional_count)
    output: str = setting(
        None, ".json, or .txt (a line per query of gallery file names, "
        "tab-separated).", required=True)


SUBCOMMANDS = {"build": BuildConfig, "query": QueryConfig}


def build(config):
    report = ann.build(config.features, config.index, config.nlist,
                       config.codes,
                       allow_unknown_model=config.allow_unknown_model)
    print(f"indexed {report['count']} features of dimension "
          f"{report['feature_dim']} from {len(report['shards'])} "
          f"shard(s) in {report['build_seconds']:.1f} s: "
          f"{report['factory']}, {report['index_bytes'] / 1e6:.1f} MB "
          f"(the float32 features: "
          f"{4 * report['count'] * report['feature_dim'] / 1e6:.1f} MB)")
    print(f"wrote {config.index}")
    return 0


def query(config):
    if (config.images is None) == (config.query_features is None):
        raise ArgumentError("images", config.images, "give query images "
                            "(--images, with --model) or --query_features, "
                            "one of them")
    check_ranking_output(config.output)
    index = ann.Index(config.index)
    if config.images is not None:
        if config.model is None:
            raise ArgumentError("model", None, "--images needs the --model "
                                "that encoded the gallery")
        from cosine_metric_learning import encoder as encoder_lib
        from cosine_metric_learning import features as features_lib
        from cosine_metric_learning import checkpoints
        identity = checkpoints.model_identity(config.model)
        if index.model is not None:  # before the encoding
            index.check_query(np.zeros((0, index.dim), np.float32), identity)
        else:
            print(f"warning: the index {config.index} records no model "
                  "(built with --allow_unknown_model): the queries are not "
                  "checked against the gallery's model", file=sys.stderr)
        names = features_lib.list_images(config.images)
        encoder = encoder_lib.load(config.model)
        queries = features_lib.encode_files(encoder, names)
        index.check_query(queries, identity)
    else:
        ann.check_shard(config.query_features)
        queries = np.load(config.query_features)
        names = ann.read_names(config.query_features)
        index.check_query(queries)
    distances, ids = index.search(queries, config.top_k, config.candidates,
                                  config.nprobe)
    written = write_ranking(config.output, index, names, distances, ids)
    print(f"wrote {written} ({len(names)} queries, top {config.top_k})")
    return 0


def subcommand(argv):
    """The subcommand the command line names (its first argument), and
    the command line without it; one line and exit status 2 without
    one."""
    if len(argv) < 2 or argv[1] not in SUBCOMMANDS:
        given = f"'{argv[1]}'" if len(argv) > 1 else "nothing"
        print(f"error: expected a subcommand, build or query, before the "
              f"flags, got {given}: python -m cosine_metric_learning.search "
              "build|query --helpfull lists each one's flags",
              file=sys.stderr)
        sys.exit(2)
    return argv[1], argv[:1] + argv[2:]


if __name__ == "__main__":
    from absl import app

    from cosine_metric_learning import commands
    from cosine_metric_learning.errors import parse_flags

    name, args = subcommand(sys.argv)
    config_class = SUBCOMMANDS[name]
    commands.define([config_class])
    runner = {"build": build, "query": query}[name]
    app.run(lambda argv: commands.run(
        argv, lambda: runner(commands.values(config_class)), [config_class]),
        argv=args, flags_parser=parse_flags)
