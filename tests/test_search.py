"""Sharded encoding on a Dask cluster and approximate-nearest-neighbour
search over the shards (``encode_shards``, ``search``)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import ENV, ROOT, one_error_line, run_script

faiss = pytest.importorskip("faiss")


def _identity_features(rng, count, dim=32, people=400, spread=0.6):
    """Unit features of ``people`` identities, each a centre plus noise."""
    centres = rng.normal(size=(people, dim))
    labels = rng.integers(0, people, count)
    features = centres[labels] + spread * rng.normal(size=(count, dim))
    return (features / np.linalg.norm(features, axis=1, keepdims=True)
            ).astype(np.float32), centres, labels


def _write_shard(path, features, names):
    from cosine_metric_learning import search
    search.write_shard(path, features, names)


@pytest.fixture(scope="module")
def gallery(tmp_path_factory):
    from cosine_metric_learning import search
    root = tmp_path_factory.mktemp("gallery")
    rng = np.random.default_rng(5)
    features, centres, labels = _identity_features(rng, 20000)
    os.makedirs(root / "features")
    for part in range(2):
        rows = slice(part * 10000, (part + 1) * 10000)
        _write_shard(str(root / "features" / f"shard-{part:05d}.npy"),
                     features[rows], [f"p{labels[i]}_{i}.jpg" for i in
                                      range(20000)][rows])
    report = search.build(str(root / "features"), str(root / "index"),
                          log=lambda _: None)
    queries = centres[labels[:200]] + 0.6 * rng.normal(size=(200, 32))
    return root, features, queries.astype(np.float32), report


def test_index_ranks_as_the_exact_distances_do(gallery):
    from cosine_metric_learning import search
    root, features, queries, report = gallery
    assert report["count"] == 20000 and report["feature_dim"] == 32
    # a quarter of the float32 features' bytes, plus the lists' ids
    assert report["index_bytes"] < features.nbytes
    index = search.Index(str(root / "index"))
    distances, ids = index.search(queries, top_k=10)
    # the reference: brute force in float64, computed here
    unit = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    exact = 1.0 - unit.astype(np.float64) @ features.T.astype(np.float64)
    exact_ids = np.argsort(exact, axis=1)[:, :10]
    found = np.mean([len(set(a) & set(b)) / 10
                     for a, b in zip(ids, exact_ids)])
    assert found >= 0.95, found
    # the distances returned are the exact ones of the ids returned, sorted
    np.testing.assert_allclose(
        distances, np.take_along_axis(exact, ids, axis=1), atol=1e-5)
    assert np.all(np.diff(distances, axis=1) >= 0)
    # and the names are the shards' lines of those rows
    assert all(name.endswith(f"_{i}.jpg") for name, i in zip(
        index.names(ids[0]), ids[0]))
    # the lists searched by default: the index's share of its lists
    assert index.index.nprobe == search.default_nprobe(report["nlist"])
    index.search(queries[:1], nprobe=7)
    assert index.index.nprobe == 7


def test_pq4_codes_keep_features_that_lie_close_together(tmp_path):
    """A trained model's features lie in a narrow cone (cosine distances
    of about 0.01 here, as on real crops): the pq4 codes of their offsets
    from the lists' centres keep the ranking (codes of the features
    themselves find about a fifth of the true neighbours here)."""
    from cosine_metric_learning import search
    rng = np.random.default_rng(7)
    dim, count = 32, 12000
    mean = rng.normal(size=dim)
    centres = mean / np.linalg.norm(mean) + 0.1 * rng.normal(
        size=(300, dim)) / np.sqrt(dim)
    features = centres[rng.integers(0, 300, count)] + 0.06 * rng.normal(
        size=(count, dim)) / np.sqrt(dim)
    features = (features / np.linalg.norm(features, axis=1, keepdims=True)
                ).astype(np.float32)
    queries, gallery = features[:200], features[200:]
    assert 1.0 - np.mean(gallery[:100] @ gallery[100:200].T) < 0.02
    _write_shard(str(tmp_path / "gallery.npy"), gallery,
                 [f"{i}.jpg" for i in range(len(gallery))])
    report = search.build(str(tmp_path / "gallery.npy"),
                          str(tmp_path / "index"), kind="pq4",
                          log=lambda _: None)
    assert report["factory"].endswith(",PQ32x4fsr")
    # half a byte per dimension and 8 bytes of id each (at 32 dimensions
    # the ids weigh more than the codes), lists padded to blocks of 32
    assert report["index_bytes"] < gallery.nbytes / 2
    _, ids = search.Index(str(tmp_path / "index")).search(queries, top_k=10)
    exact = np.argsort(-(queries.astype(np.float64) @ gallery.T), axis=1)
    found = np.mean([len(set(a) & set(b)) / 10
                     for a, b in zip(ids, exact[:, :10])])
    assert found >= 0.9, found


def test_lists_searched_grow_with_the_index():
    from cosine_metric_learning import search
    # a floor of 96 (all lists where there are fewer), then 5 % of them
    assert [search.default_nprobe(n) for n in (10, 96, 200, 1920, 2000,
                                               6325, 65536)] == \
        [10, 96, 96, 96, 100, 317, 3277]


def test_query_command_writes_the_kits_layout_and_json(gallery, tmp_path):
    root, features, queries, _ = gallery
    query = str(tmp_path / "q.npy")
    _write_shard(query, queries[:3], ["a.jpg", "b.jpg", "c.jpg"])
    for output in ("rank.txt", "rank.json"):
        result = run_script(
            "-m", "cosine_metric_learning.search", "query",
            f"--index={root / 'index'}", f"--query_features={query}",
            "--top_k=5", f"--output={tmp_path / output}")
        assert result.returncode == 0, result.stderr[-2000:]
    lines = (tmp_path / "rank.txt").read_text().splitlines()
    assert len(lines) == 3 and all(len(line.split()) == 5 for line in lines)
    ranking = json.loads((tmp_path / "rank.json").read_text())
    assert [q["query"] for q in ranking["queries"]] == ["a.jpg", "b.jpg",
                                                       "c.jpg"]
    first = ranking["queries"][0]["results"]
    assert [r["name"] for r in first] == lines[0].split()
    # each distance is the exact cosine distance of the named row
    row = int(first[0]["name"].rsplit("_", 1)[1].split(".")[0])
    unit = queries[0] / np.linalg.norm(queries[0])
    assert first[0]["distance"] == pytest.approx(
        1.0 - float(unit @ features[row]), abs=1e-5)


def test_bad_input_is_one_line(gallery, tmp_path):
    root, _, queries, _ = gallery
    query = str(tmp_path / "q.npy")
    _write_shard(query, np.ones((2, 16), np.float32), ["a", "b"])
    result = run_script("-m", "cosine_metric_learning.search", "query",
                        f"--index={root / 'index'}",
                        f"--query_features={query}",
                        f"--output={tmp_path / 'r.json'}")
    one_error_line(result, "--query_features", "dimension 32")
    os.makedirs(tmp_path / "empty")
    result = run_script("-m", "cosine_metric_learning.search", "build",
                        f"--features={tmp_path / 'empty'}",
                        f"--index={tmp_path / 'index'}")
    one_error_line(result, "--features", "no .npy feature files")
    assert not os.path.exists(tmp_path / "index")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    result = run_script("-m", "cosine_metric_learning.search", "build",
                        f"--features={root / 'features'}",
                        f"--index={tmp_path / 'mine'}")
    one_error_line(result, "refusing to write into", "notes.txt")
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]


def test_index_of_another_models_features_is_refused(gallery):
    from cosine_metric_learning import search
    from cosine_metric_learning.errors import UsageError
    index = search.Index(str(gallery[0] / "index"))
    index.model = {"path": "/models/a", "sha256": "1" * 64}
    with pytest.raises(UsageError, match="holds features of /models/a, not "
                       "of /models/b"):
        index.check_query(np.zeros((1, 32), np.float32),
                          {"path": "/models/b", "sha256": "2" * 64})


@pytest.fixture(scope="module")
def images(market_dir, tmp_path_factory):
    """Real JPEGs in two subfolders, and one corrupt file among them."""
    root = tmp_path_factory.mktemp("images")
    names = sorted(n for n in os.listdir(os.path.join(
        market_dir, "bounding_box_test")) if n.endswith(".jpg"))[:50]
    for i, name in enumerate(names):
        folder = root / ("a" if i % 2 else "b")
        folder.mkdir(exist_ok=True)
        shutil.copy(os.path.join(market_dir, "bounding_box_test", name),
                    folder / name)
    (root / "b" / "zz_corrupt.jpg").write_bytes(b"not a jpeg")
    return root


def test_shards_stop_go_on_and_equal_encode(trained, images, tmp_path):
    """Ctrl-C in the middle, a rerun killed outright, a rerun that skips
    the shards finished before both, the corrupt file listed, and features
    equal to single-process encode's."""
    pytest.importorskip("distributed")
    from cosine_metric_learning import encode_shards
    from cosine_metric_learning import features as features_lib
    from cosine_metric_learning import encoder as encoder_lib
    from cosine_metric_learning.errors import UsageError
    path, _ = trained
    out = tmp_path / "shards"
    command = [sys.executable, "-m", "cosine_metric_learning.encode_shards",
               f"--model={path}", f"--images={images}",
               f"--output_dir={out}", "--shard_size=2", "--workers=1",
               "--batch_size=2"]
    process = subprocess.Popen(command, cwd=ROOT, env=ENV,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    manifest = out / "manifest.json"
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        if manifest.exists() and json.loads(manifest.read_text())[
                "finished"]:
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    first = json.loads(manifest.read_text())["finished"]
    assert first, stderr[-2000:]
    if process.returncode != 0:  # stopped before the end: one line, 130
        assert process.returncode == 130, stderr[-2000:]
        assert "Traceback" not in stderr, stderr[-2000:]
    stamps = {n: os.stat(out / n).st_mtime_ns for n in first}
    # a rerun killed outright (SIGKILL, its workers with it) once it has
    # finished a shard more: what it finished stays finished
    process = subprocess.Popen(command, cwd=ROOT, env=ENV,
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None and len(
            json.loads(manifest.read_text())["finished"]) <= len(first):
        time.sleep(0.1)
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # it had finished them all
        pass
    process.wait(timeout=60)
    second = json.loads(manifest.read_text())["finished"]
    assert set(first) < set(second) or len(first) == 26
    stamps.update({n: os.stat(out / n).st_mtime_ns for n in second})
    result = subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{len(second)} finished earlier" in result.stdout
    final = json.loads(manifest.read_text())
    # 51 files in shards of 2; the corrupt one listed with its error
    assert len(final["finished"]) == 26 and final["rows"] == 50
    assert list(final["skipped"]) == [str(images / "b" / "zz_corrupt.jpg")]
    # the shards finished before the stops were not written again
    assert {n: os.stat(out / n).st_mtime_ns for n in second} == stamps
    shards = [str(out / n) for n in sorted(final["finished"])]
    features = np.concatenate([np.load(s) for s in shards])
    names = sum((open(s[:-4] + ".filenames.txt").read().splitlines()
                 for s in shards), [])
    assert names == sorted(str(p) for p in images.glob("*/*.jpg")
                           if p.name != "zz_corrupt.jpg")
    # single-process encode of the same files, in this process
    expected = features_lib.encode_files(encoder_lib.load(path), names)
    cosine = np.sum(features * expected, axis=1) / (
        np.linalg.norm(features, axis=1) * np.linalg.norm(expected, axis=1))
    assert cosine.min() >= 0.9999, cosine.min()
    # other inputs do not continue it, and are refused before any work
    with pytest.raises(UsageError, match="--shard_size differs"):
        encode_shards.run(path, str(images), str(out), shard_size=8)
    assert json.loads(manifest.read_text()) == final
