"""Encode many image files in shards on a Dask cluster: locally on this
machine's cores, or unchanged on a cluster's scheduler.

    python -m cosine_metric_learning.encode_shards \
        --model=./output/market1501/cosine-softmax --images=./gallery \
        --output_dir=./gallery_features --shard_size=10000 [--workers=2 |
        --scheduler=tcp://scheduler:8786]

``--images`` is a folder (its ``.jpg``, ``.jpeg`` and ``.png`` files, in
every subfolder) or a ``.txt`` list of image files, one per line (relative
to the list's folder). The sorted files are cut into shards of
``--shard_size``; each shard is a task that a worker runs with the model
it loaded once: ``OUT/shard-NNNNN.npy`` (float32 unit features, as
``encode`` computes them) with ``shard-NNNNN.filenames.txt`` beside it,
the layout ``encode`` writes and ``search build`` reads. A file that
cannot be read is left out of its shard and listed in ``manifest.json``
with its error; the others go on.

``OUT/manifest.json`` is written first and records the model (its path and
a digest), the file list (its digest), the shard size and each finished
shard. A rerun with the same inputs skips the finished shards (a stopped
or killed run goes on where it was); with other inputs it is refused,
naming what differs. Progress is a line per finished shard. Without
``--scheduler`` a local cluster of ``--workers`` processes runs the tasks;
with it, the workers of that scheduler do, and must see the model, the
images and ``--output_dir`` at the same paths (a shared file system).
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

import dataclasses
import hashlib
import json
import logging as pylogging
import os
import time
from typing import Optional

import numpy as np
from absl import app, logging

from cosine_metric_learning import checkpoints, commands, files
from cosine_metric_learning import preprocessing
from cosine_metric_learning.commands import setting
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.errors import first_line
from cosine_metric_learning.errors import parse_flags

INSTALL_HINT = "pip install '.[distributed]'"
SHARD = "shard-{:05d}"
# how often the driver looks for finished shards
POLL_SECONDS = 0.2
MANIFEST = files.json_kind({"model", "files_sha256", "shard_size",
                            "finished"}, "a manifest of this command (a "
                           "JSON object with 'model', 'files_sha256', "
                           "'shard_size' and 'finished')")


def require_dask():
    try:
        import distributed
    except ImportError:
        raise UsageError("sharded encoding needs Dask's distributed "
                         "scheduler, which is not installed; install it "
                         f"with {INSTALL_HINT}") from None
    return distributed


def list_files(images):
    """The sorted image files of a folder tree or of a ``.txt`` list."""
    if os.path.isdir(images):
        paths = [os.path.join(root, name)
                 for root, _, names in os.walk(images) for name in names
                 if name.lower().endswith(files.IMAGE_EXTENSIONS)]
        if not paths:
            raise ArgumentError("images", images, "the folder holds no "
                                "image files (expected "
                                f"{'/'.join(files.IMAGE_EXTENSIONS)}"
                                " files in it or its subfolders)")
        return sorted(paths)
    if os.path.isfile(images) and images.endswith(".txt"):
        base = os.path.dirname(os.path.abspath(images))
        with open(images) as f:
            paths = [os.path.join(base, line.strip()) for line in f
                     if line.strip()]
        if not paths:
            raise ArgumentError("images", images, "the list names no files")
        return paths
    raise ArgumentError("images", images, "expected a folder of images or "
                        "a .txt list of image files")


def _files_digest(paths):
    sha = hashlib.sha256()
    for path in paths:
        sha.update(os.path.abspath(path).encode() + b"\n")
    return sha.hexdigest()


def plan(paths, shard_size):
    """``[(shard name, its files)]``."""
    return [(SHARD.format(i // shard_size), paths[i:i + shard_size])
            for i in range(0, len(paths), shard_size)]


# The task, run by a worker --------------------------------------------------

_LOADED = {}  # the worker process's model, loaded by its first task


def _encoder(model, batch_size):
    key = (model, batch_size)
    if key not in _LOADED:
        from cosine_metric_learning import encoder as encoder_lib
        _LOADED.clear()
        _LOADED[key] = encoder_lib.load(model, batch_size)
    return _LOADED[key]


def encode_shard(model, batch_size, paths, npy_path):
    """Encode one shard's files into ``npy_path`` (and its file-name list);
    returns ``{"rows", "skipped": {file: error}, "seconds"}``."""
    import tensorflow as tf
    tf.get_logger().setLevel(pylogging.ERROR)  # the last batch's retrace
    start = time.time()
    encoder = _encoder(model, batch_size)
    features, kept, skipped = [], [], {}
    for begin in range(0, len(paths), batch_size):
        batch = list(paths[begin:begin + batch_size])
        try:
            patches = preprocessing.read_patches(batch, encoder.image_shape)
        except (tf.errors.OpError, ValueError):
            bad = preprocessing.unreadable_files(batch, encoder.image_shape)
            skipped.update((batch[i], first_line(e)) for i, e in bad.items())
            batch = [p for i, p in enumerate(batch) if i not in bad]
            patches = preprocessing.read_patches(batch, encoder.image_shape)
        if len(batch):
            features.append(encoder(patches))
            kept += batch
    values = (np.concatenate(features).astype(np.float32) if features else
              np.zeros((0, encoder.feature_dim), np.float32))
    names = files.names_path(npy_path)
    # the names first, the features last: the shard counts as finished
    # only once the driver records it, so a half-written one is redone
    for path, write in ((names, lambda f: f.write(
            "".join(p + "\n" for p in kept).encode())),
            (npy_path, lambda f: np.save(f, values))):
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    return {"rows": len(kept), "skipped": skipped,
            "seconds": time.time() - start}


# The driver ---------------------------------------------------------------

def _check_same(output_dir, recorded, current):
    for key, what in (("model", "the model"),
                      ("files_sha256", "the file list"),
                      ("shard_size", "--shard_size")):
        if recorded[key] != current[key]:
            was = recorded[key]
            was = was["path"] if isinstance(was, dict) else was
            raise UsageError(f"refusing to continue the run in {output_dir}: "
                             f"{what} differs from the one it began with "
                             f"({was}); give a new --output_dir for a new "
                             "run")


def _start(output_dir, inputs):
    """The manifest of the run in ``output_dir`` (new, or the same inputs'
    earlier run)."""
    path = os.path.join(output_dir, "manifest.json")
    if os.path.lexists(output_dir) and not os.path.isdir(output_dir):
        raise ArgumentError("output_dir", output_dir, "it is a file; "
                            "expected a new or empty folder, or an earlier "
                            "run of this command")
    if os.path.isdir(output_dir) and os.listdir(output_dir):
        if not os.path.isfile(path):
            raise UsageError(f"refusing to write into {output_dir}: it holds "
                             f"{sorted(os.listdir(output_dir))[0]} but no "
                             "manifest.json of this command; choose a new "
                             "or empty --output_dir")
        files.check_output(path, MANIFEST)
        with open(path) as f:
            recorded = json.load(f)
        _check_same(output_dir, recorded, inputs)
        return recorded
    if not os.path.isdir(output_dir):
        files.check_writable(os.path.dirname(os.path.abspath(output_dir)),
                             output_dir)
    os.makedirs(output_dir, exist_ok=True)
    manifest = {**inputs, "finished": [], "skipped": {}, "rows": 0}
    _write(path, manifest)
    return manifest


def _write(path, manifest):
    files.write_atomically(path, lambda f: json.dump(manifest, f, indent=1),
                           MANIFEST)


# seconds to reach a --scheduler before giving up (Dask's default: 30)
CONNECT_SECONDS = 10


def check_scheduler(scheduler):
    """Refuse a scheduler address Dask cannot parse (``tcp://host:port``,
    or ``host:port``)."""
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port
    try:
        protocol, location = parse_address(scheduler)
        if protocol in ("tcp", "tls"):
            _, port = parse_host_port(location)
            if not 0 < port < 65536:
                raise ValueError(f"port {port}")
    except (ValueError, TypeError) as e:
        raise ArgumentError("scheduler", scheduler, "expected a Dask "
                            "scheduler's address, tcp://host:port "
                            f"({e})") from None


def connect(distributed, scheduler):
    """A client of the scheduler at ``scheduler``, or one line saying it
    cannot be reached within :data:`CONNECT_SECONDS`."""
    try:
        return distributed.Client(scheduler, timeout=CONNECT_SECONDS)
    except (OSError, TimeoutError) as e:
        raise UsageError(f"cannot reach the Dask scheduler at {scheduler} "
                         f"within {CONNECT_SECONDS} s ({type(e).__name__}); "
                         "is it running, and is the address right?") from None


def run(model, images, output_dir, shard_size=10000, workers=2,
        scheduler=None, batch_size=64, log=logging.info):
    """Encode ``images`` into shards in ``output_dir`` (the module's
    docstring); returns the manifest."""
    if shard_size < 1:
        raise ArgumentError("shard_size", shard_size, "expected at least 1")
    if workers < 1:
        raise ArgumentError("workers", workers, "expected at least 1")
    if batch_size < 1:
        raise ArgumentError("batch_size", batch_size, "expected at least 1")
    distributed = require_dask()
    for name in ("distributed", "tornado", "bokeh"):  # a line per shard
        pylogging.getLogger(name).setLevel(pylogging.ERROR)
    if scheduler:
        check_scheduler(scheduler)
    paths = list_files(images)
    inputs = {"model": checkpoints.model_identity(model), "images": images,
              "files": len(paths), "files_sha256": _files_digest(paths),
              "shard_size": shard_size}
    # reached before anything is written
    client = connect(distributed, scheduler) if scheduler else None
    try:
        manifest = _start(output_dir, inputs)
    except BaseException:
        if client is not None:
            client.close()
        raise
    manifest_path = os.path.join(output_dir, "manifest.json")
    shards = plan(paths, shard_size)
    manifest["shards"] = len(shards)
    pending = [(name, part) for name, part in shards
               if name + ".npy" not in manifest["finished"]]
    log(f"{len(paths)} files in {len(shards)} shards of {shard_size}; "
        f"{len(shards) - len(pending)} finished earlier, {len(pending)} "
        "to encode")
    if not pending:
        if client is not None:
            client.close()
        return manifest
    if not scheduler:
        cluster = distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True,
            dashboard_address=None, silence_logs=pylogging.ERROR)
        client = distributed.Client(cluster)
    start, done_files = time.time(), 0
    try:
        futures = {client.submit(
            encode_shard, model, batch_size, part,
            os.path.join(output_dir, name + ".npy"), key=f"encode-{name}-"
            f"{inputs['files_sha256'][:12]}", pure=False): (name, part)
            for name, part in pending}
        pending = dict(futures)
        while pending:  # polled: Ctrl-C lands in the sleep, every time
            finished = [future for future in pending if future.done()]
            if not finished:
                time.sleep(POLL_SECONDS)
                continue
            for future in finished:
                name, part = pending.pop(future)
                result = future.result()
                manifest["finished"] = sorted(manifest["finished"]
                                              + [name + ".npy"])
                manifest["skipped"].update(result["skipped"])
                manifest["rows"] += result["rows"]
                _write(manifest_path, manifest)
                done_files += len(part)
                log(f"{name}: {result['rows']} features"
                    + (f", {len(result['skipped'])} unreadable files "
                       "skipped" if result["skipped"] else "")
                    + f"; {len(manifest['finished'])}/{len(shards)} "
                    f"shards, {done_files / max(time.time() - start, 1e-9):.1f}"
                    " images/s")
    finally:
        client.close()
        if not scheduler:
            cluster.close()
    return manifest


def main(argv):
    def go():
        config = commands.values(ShardsConfig)
        manifest = run(config.model, config.images, config.output_dir,
                       config.shard_size, config.workers, config.scheduler,
                       config.batch_size, log=print)
        print(f"{manifest['rows']} features in "
              f"{len(manifest['finished'])} shards in {config.output_dir}"
              + (f"; {len(manifest['skipped'])} unreadable files skipped "
                 "(listed in manifest.json)" if manifest["skipped"] else ""))
        return 0

    return commands.run(argv, go, [ShardsConfig])


@dataclasses.dataclass
class ShardsConfig:
    """The flags of the command."""
    model: str = setting(None, "The model to encode with (anything encode "
                         "takes).", arguments=("path",), required=True)
    images: str = setting(None, "A folder of images (with its subfolders) "
                          "or a .txt list of files.", required=True)
    output_dir: str = setting(None, "A new or empty folder, or an earlier "
                              "run of this command to continue.",
                              required=True)
    shard_size: int = setting(10000, "Files per shard (a task).")
    workers: int = setting(2, "Worker processes of the local cluster "
                           "(without --scheduler).")
    scheduler: Optional[str] = setting(
        None, "A Dask scheduler's address (tcp://host:8786): run on its "
        "workers.")
    batch_size: int = setting(64, "Images per encoder call.")


if __name__ == "__main__":
    commands.define([ShardsConfig])
    app.run(main, flags_parser=parse_flags)
