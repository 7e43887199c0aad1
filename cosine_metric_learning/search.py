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
import math
import os
import sys
import time

import numpy as np

from cosine_metric_learning import files
from cosine_metric_learning.errors import ArgumentError, UsageError

INDEX_FILE = "index.faiss"
INDEX_JSON = "index.json"
MANIFEST = "manifest.json"  # of a folder of shards
INSTALL_HINT = "pip install '.[search]'"
# inverted lists: about 2 sqrt(N) (faiss's guidelines give 1 to 16)
LISTS_PER_SQRT = 2
# training vectors per list for the coarse quantiser's k-means
TRAIN_PER_LIST = 64
MIN_TRAIN_PER_LIST = 39
DEFAULTS = {"top_k": 10, "candidates": 100, "nprobe": None}
# lists searched per query where --nprobe is not given: a share of the
# index's lists (what keeps recall as the gallery grows: the lists grow
# as sqrt(N)), at least a floor (small indexes)
NPROBE_SHARE = 0.05
NPROBE_FLOOR = 96
# queries ranked together (their candidates' features: a few tens of MB)
QUERY_BLOCK = 512
INDEX_REPORT = files.json_kind({"shards", "feature_dim", "count", "model"},
                               "an index of this command (a JSON object "
                               "with 'shards', 'feature_dim', 'count' and "
                               "'model')")
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


def require_faiss():
    """The faiss module, or one line naming the extra that brings it."""
    try:
        import faiss
    except ImportError:
        raise UsageError("searching needs faiss, which is not installed; "
                         f"install it with {INSTALL_HINT}") from None
    return faiss


# Shards ---------------------------------------------------------------------

def write_shard(npy_path, features, names, model=None):
    """A feature file and its file-name list, as ``encode`` writes them,
    and, given ``model`` (:func:`checkpoints.model_identity`), its model
    record."""
    np.save(npy_path, features)
    with open(files.names_path(npy_path), "w") as f:
        f.write("".join(f"{name}\n" for name in names))
    if model is not None:
        with open(files.model_record_path(npy_path), "w") as f:
            json.dump({"model": model}, f, indent=1)


def read_names(npy_path):
    with open(files.names_path(npy_path)) as f:
        return f.read().splitlines()


def read_model_record(npy_path):
    """The model that encoded a feature file, as ``encode`` records it
    beside the file; None where no record is there."""
    path = files.model_record_path(npy_path)
    if not os.path.isfile(path):
        return None
    if not files.MODEL_RECORD.matches(path):
        raise ArgumentError("features", npy_path, f"its model record {path} "
                            "is not a JSON object with 'model'")
    with open(path) as f:
        return json.load(f)["model"]


def _model_name(model):
    return "an unknown model" if model is None else model["path"]


def find_shards(features, allow_unknown_model=False):
    """``(shard .npy paths in order, model or None)`` of ``--features``: a
    comma-separated list of ``.npy`` feature files and folders of them.
    The model of each entry is what a folder's ``manifest.json`` records,
    or a file's model record (``encode`` writes it beside the file): one
    model for all, or a refusal; an entry whose model is not recorded is
    refused unless ``allow_unknown_model`` (the model is None then)."""
    paths, models = [], {}
    entries = [p for p in features.split(",") if p]
    if not entries:
        raise ArgumentError("features", features, "expected feature files "
                            "or folders of them")
    for entry in entries:
        if os.path.isdir(entry):
            found = sorted(os.path.join(entry, n) for n in os.listdir(entry)
                           if n.endswith(".npy"))
            if not found:
                raise ArgumentError("features", entry, "the folder holds no "
                                    ".npy feature files")
            manifest = os.path.join(entry, MANIFEST)
            if os.path.isfile(manifest):
                with open(manifest) as f:
                    recorded = json.load(f)
                models[entry] = recorded.get("model")
                # only the shards the manifest lists (a shard being written
                # by a running pipeline is not yet one)
                done = set(recorded.get("finished", []))
                found = [p for p in found if os.path.basename(p) in done]
                if not found:
                    raise ArgumentError("features", entry, "no shard of it "
                                        "is finished yet")
            else:  # loose feature files, each with its own record
                models.update((p, read_model_record(p)) for p in found)
            paths += found
        elif os.path.isfile(entry) and entry.endswith(".npy"):
            models[entry] = read_model_record(entry)
            paths.append(entry)
        else:
            raise ArgumentError("features", entry, "expected a .npy feature "
                                "file or a folder of them")
    known = {m["sha256"]: m for m in models.values() if m is not None}
    if len(known) > 1:
        raise UsageError("the features were encoded with different models: "
                         + "; ".join(f"{entry}: {_model_name(m)}"
                                     for entry, m in models.items()))
    unknown = [entry for entry, m in models.items() if m is None]
    if unknown and not allow_unknown_model:
        raise ArgumentError(
            "features", unknown[0], "no record of the model that encoded it "
            f"({MANIFEST} in a folder of shards, or "
            f"{os.path.basename(files.model_record_path('X.npy'))} beside a "
            "file, as encode writes); encode it again, or allow it with "
            "allow_unknown_model (--allow_unknown_model)")
    model = None if unknown or not known else next(iter(known.values()))
    return paths, model


def check_shard(path, dim=None):
    """``(rows, dim)`` of a feature file with its file-name list; one
    clear error where either is missing, they disagree, the features are
    not float vectors, or of a dimension other than ``dim``."""
    try:
        features = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as e:
        raise ArgumentError("features", path, f"not a .npy array ({e})")
    if features.ndim != 2 or features.dtype.kind != "f":
        raise ArgumentError("features", path, "expected a 2-D float array "
                            f"of features, found {features.dtype} of shape "
                            f"{features.shape}")
    if not os.path.isfile(files.names_path(path)):
        raise ArgumentError("features", path, "no file-name list "
                            f"{files.names_path(path)} beside it")
    lines = len(read_names(path))
    if lines != len(features):
        raise ArgumentError("features", path, f"{len(features)} rows but "
                            f"{lines} file names in {files.names_path(path)}")
    if dim is not None and features.shape[1] != dim:
        raise ArgumentError("features", path, f"features of dimension "
                            f"{features.shape[1]}; the other shards' are "
                            f"{dim}")
    return len(features), features.shape[1]


def _unit(features):
    features = np.asarray(features, np.float32)
    return features / np.maximum(
        np.linalg.norm(features, axis=1, keepdims=True), 1e-12)


# Build ----------------------------------------------------------------------

# how the index stores a feature: sq8, a byte per dimension (a quarter of
# float32); pq4, 4 bits per dimension, each a product-quantised code of
# the feature's offset from its list's centre, scanned with SIMD (faiss's
# fast-scan: an eighth of float32, faster to scan). The offset matters: a
# trained model's features lie close together, and codes of the features
# themselves spend their 16 levels on what they share (recall@10 0.47
# against 0.99 on 6,000 encoded crops)
CODES = ("sq8", "pq4")


def check_codes(kind):
    """Refuse a ``kind`` of codes other than :data:`CODES`."""
    if kind not in CODES:
        raise ArgumentError("codes", kind, f"expected one of "
                            f"{', '.join(CODES)}")


def codes(dim, kind="sq8"):
    """faiss's name of the ``kind`` of codes for ``dim`` dimensions."""
    check_codes(kind)
    return f"PQ{dim}x4fsr" if kind == "pq4" else "SQ8"


def number_of_lists(count):
    return int(max(1, min(65536, round(LISTS_PER_SQRT * math.sqrt(count)))))


def default_nprobe(nlist):
    """The lists searched per query in an index of ``nlist`` lists."""
    return min(nlist, max(NPROBE_FLOOR, math.ceil(NPROBE_SHARE * nlist)))


def _earlier_index(index_dir):
    """Refuse an ``--index`` folder holding what this command did not
    write."""
    if os.path.lexists(index_dir) and not os.path.isdir(index_dir):
        raise ArgumentError("index", index_dir, "it is a file; expected a "
                            "new or empty folder, or an earlier index")
    if not os.path.isdir(index_dir):
        files.check_writable(os.path.dirname(os.path.abspath(index_dir)),
                             index_dir)
        return
    names = set(os.listdir(index_dir))
    extra = sorted(names - {INDEX_FILE, INDEX_JSON})
    if extra or (names and INDEX_JSON not in names):
        raise UsageError(f"refusing to write into {index_dir}: it holds "
                         f"{(extra or sorted(names))[0]}, which this command "
                         "did not write; choose a new or empty --index")
    if names:
        files.check_output(os.path.join(index_dir, INDEX_JSON),
                           INDEX_REPORT)


def build(features, index_dir, nlist=None, kind="sq8", seed=0, log=print,
          allow_unknown_model=False):
    """Build the index of the shards ``features`` names into ``index_dir``;
    returns what ``index.json`` records (``allow_unknown_model``: see
    :func:`find_shards`)."""
    faiss = require_faiss()
    check_codes(kind)  # before the work
    _earlier_index(index_dir)
    paths, model = find_shards(features, allow_unknown_model)
    counts, dim = [], None
    for path in paths:
        rows, dim = check_shard(path, dim)
        counts.append(rows)
    count = int(sum(counts))
    if not count:
        raise ArgumentError("features", features, "the feature files hold "
                            "no rows")
    # faiss's k-means wants 39 training vectors per list at least
    nlist = nlist or min(number_of_lists(count),
                         max(1, count // MIN_TRAIN_PER_LIST))
    nlist = min(nlist, count)
    start = time.time()
    factory = f"IVF{nlist},{codes(dim, kind)}"
    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    # the coarse quantiser and the scalar quantiser's ranges from a sample
    rng = np.random.default_rng(seed)
    want = min(count, max(nlist * TRAIN_PER_LIST, 10000))
    offsets = np.cumsum([0] + counts)
    sample = np.sort(rng.choice(count, want, replace=False))
    train = np.empty((want, dim), np.float32)
    for i, path in enumerate(paths):
        inside = (sample >= offsets[i]) & (sample < offsets[i + 1])
        if inside.any():
            train[inside] = np.load(path, mmap_mode="r")[
                sample[inside] - offsets[i]]
    index.train(_unit(train))
    for i, path in enumerate(paths):
        shard = np.load(path, mmap_mode="r")
        for begin in range(0, len(shard), 100_000):
            index.add(_unit(shard[begin:begin + 100_000]))
        log(f"added {path} ({counts[i]} features; {offsets[i + 1]}/{count})")
    report = {"shards": [{"path": os.path.abspath(p), "rows": r,
                          "sha256": files.digest(p), **_stamp(p)}
                         for p, r in zip(paths, counts)],
              "feature_dim": int(dim), "count": count, "model": model,
              "factory": factory, "nlist": nlist,
              "build_seconds": round(time.time() - start, 3)}
    os.makedirs(index_dir, exist_ok=True)
    tmp = os.path.join(index_dir, INDEX_FILE + ".tmp")
    faiss.write_index(index, tmp)
    os.replace(tmp, os.path.join(index_dir, INDEX_FILE))
    files.write_atomically(os.path.join(index_dir, INDEX_JSON),
                           lambda f: json.dump(report, f, indent=1),
                           INDEX_REPORT)
    report["index_bytes"] = os.path.getsize(os.path.join(index_dir,
                                                         INDEX_FILE))
    return report


def _stamp(path):
    """A file's size and modification time: where both are as recorded,
    the recorded digest is taken as the file's without reading it."""
    stat = os.stat(path)
    return {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


# Query ----------------------------------------------------------------------

class Index:
    """An index of :func:`build`, opened memory-mapped, with the shards'
    features (memory-mapped) for the exact distances and their file
    names (read per shard, when a result needs one)."""

    def __init__(self, index_dir):
        faiss = require_faiss()
        path = os.path.join(index_dir, INDEX_JSON)
        if not os.path.isfile(path) or not os.path.isfile(
                os.path.join(index_dir, INDEX_FILE)):
            raise ArgumentError("index", index_dir, "expected a folder "
                                f"holding {INDEX_FILE} and {INDEX_JSON} "
                                "(python -m cosine_metric_learning.search "
                                "build)")
        with open(path) as f:
            self.report = json.load(f)
        self.path = os.path.abspath(index_dir)
        self.dim = self.report["feature_dim"]
        self.model = self.report["model"]
        self.index = faiss.read_index(
            os.path.join(index_dir, INDEX_FILE),
            faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        self._shards = [self._open_shard(index_dir, shard)
                        for shard in self.report["shards"]]
        self._offsets = np.cumsum([0] + [s["rows"]
                                         for s in self.report["shards"]])
        self._names = {}

    @staticmethod
    def _open_shard(index_dir, shard):
        """A shard's features, memory-mapped, once they are the ones the
        index was built from: the rows it recorded, and its digest (read
        only where the size or time differs from the recorded ones)."""
        path = shard["path"]
        if not os.path.isfile(path):
            raise UsageError(f"the index {index_dir} covers {path}, which "
                             "is gone")
        features = np.load(path, mmap_mode="r")
        if len(features) != shard["rows"]:
            raise UsageError(f"{path} holds {len(features)} rows, not the "
                             f"{shard['rows']} the index {index_dir} was "
                             "built from: rebuild the index")
        if any(shard.get(k) != v for k, v in _stamp(path).items()) and \
                files.digest(path) != shard["sha256"]:
            raise UsageError(f"{path} changed since the index {index_dir} "
                             "was built (its digest differs: encoded again, "
                             "perhaps with another model): rebuild the index")
        return features

    def _shard_names(self, s):
        """The file names of shard ``s``, read once; one line where the
        list is gone or holds another count."""
        if s not in self._names:
            path = self.report["shards"][s]["path"]
            try:
                names = read_names(path)
            except OSError as e:
                raise UsageError(f"cannot read the file names of {path} "
                                 f"({files.names_path(path)}: "
                                 f"{e.strerror})") from e
            if len(names) != self.report["shards"][s]["rows"]:
                raise UsageError(f"{files.names_path(path)} lists "
                                 f"{len(names)} names for the "
                                 f"{self.report['shards'][s]['rows']} rows "
                                 f"of {path}: rebuild the index")
            self._names[s] = names
        return self._names[s]

    def _locate(self, ids):
        shard = np.searchsorted(self._offsets, ids, side="right") - 1
        return shard, ids - self._offsets[shard]

    def features(self, ids):
        """The exact unit features of gallery rows ``ids``."""
        ids = np.asarray(ids, np.int64)
        out = np.zeros((len(ids), self.dim), np.float32)
        shard, row = self._locate(ids)
        for s in np.unique(shard):
            mine = shard == s
            out[mine] = self._shards[s][np.sort(row[mine])][
                np.argsort(np.argsort(row[mine]))]
        return _unit(out)

    def names(self, ids):
        shard, row = self._locate(np.asarray(ids, np.int64))
        return [self._shard_names(s)[r] for s, r in zip(shard, row)]

    def check_query(self, queries, model=None):
        """Refuse queries of another dimension, or encoded with another
        model than the index's."""
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ArgumentError("query", f"shape {queries.shape}",
                                f"the index holds features of dimension "
                                f"{self.dim}")
        if model is not None and self.model is not None and \
                model["sha256"] != self.model["sha256"]:
            raise UsageError(f"the index holds features of "
                             f"{self.model['path']}, not of "
                             f"{model['path']}; query with that model, or "
                             "build an index of this one's features")

    def search(self, queries, top_k=DEFAULTS["top_k"],
               candidates=DEFAULTS["candidates"],
               nprobe=DEFAULTS["nprobe"]):
        """``(distances, ids)``, each ``(len(queries), top_k)``: the index's
        ``candidates`` ranked by their exact cosine distance; -1 ids (and
        inf distances) where fewer are found. ``nprobe`` None: the
        index's :func:`default_nprobe`."""
        queries = _unit(queries)
        self.index.nprobe = nprobe or default_nprobe(self.report["nlist"])
        distances = np.full((len(queries), top_k), np.inf, np.float32)
        ids = np.full((len(queries), top_k), -1, np.int64)
        for begin in range(0, len(queries), QUERY_BLOCK):
            block = queries[begin:begin + QUERY_BLOCK]
            _, found = self.index.search(block, max(candidates, top_k))
            # each candidate's exact feature, read once per block
            rows, position = np.unique(found[found >= 0],
                                       return_inverse=True)
            where = np.full(found.shape, -1, np.int64)
            where[found >= 0] = position
            exact = 1.0 - np.einsum("qcd,qd->qc", self.features(rows)[
                np.maximum(where, 0)], block)
            exact[where < 0] = np.inf
            order = np.argsort(exact, axis=1, kind="stable")[:, :top_k]
            distances[begin:begin + len(block)] = np.take_along_axis(
                exact, order, axis=1)
            ids[begin:begin + len(block)] = np.where(
                np.isfinite(distances[begin:begin + len(block)]),
                np.take_along_axis(found, order, axis=1), -1)
        return distances, ids


def recall_at(found, exact):
    """The share of each exact top-k found among ``found`` (row-wise sets),
    averaged over the queries."""
    return float(np.mean([len(set(f) & set(e)) / len(e)
                          for f, e in zip(found, exact)]))


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
    b.add_argument("--codes", default="sq8", choices=CODES, help="sq8: a "
                   "byte per dimension; pq4: 4 bits per dimension, "
                   "faster to scan, coarser")
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
    q.add_argument("--top_k", type=int, default=DEFAULTS["top_k"])
    q.add_argument("--candidates", type=int, default=DEFAULTS["candidates"],
                   help="neighbours asked of the index, then ranked by "
                   "their exact distance")
    q.add_argument("--nprobe", type=int, default=DEFAULTS["nprobe"],
                   help="inverted lists searched per query (default: "
                   f"{100 * NPROBE_SHARE:g} %% of the index's lists, at "
                   f"least {NPROBE_FLOOR})")
    q.add_argument("--output", required=True, help=".json or .txt (the "
                   "kits' ranking layout)")
    return parser


def _positive(name, value):
    if value < 1:
        raise ArgumentError(name, value, "expected at least 1")


def run(args):
    if args.command == "build":
        if args.nlist is not None:
            _positive("nlist", args.nlist)
        report = build(args.features, args.index, args.nlist, args.codes,
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
    index = Index(args.index)
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
        check_shard(args.query_features)
        queries = np.load(args.query_features)
        names = read_names(args.query_features)
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
