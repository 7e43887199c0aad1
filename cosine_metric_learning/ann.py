"""An approximate-nearest-neighbour index (faiss) over feature shards:
the library of :mod:`cosine_metric_learning.search` (its command line),
of ``--mode=test --ann`` and of ``benchmarks/gallery.py``.

:func:`build` indexes shards (``.npy`` features with their file names,
as ``encode`` and ``encode_shards`` write them) into a folder holding
``index.faiss`` and ``index.json`` (the shards in order, their rows,
digests and the one model that encoded them); :class:`Index` opens it
memory-mapped, checks the shards are the ones it was built from, and
ranks queries by their exact cosine distance among the index's
candidates.
"""

import json
import math
import os
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
            files.dump_model_record(f, model)


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
