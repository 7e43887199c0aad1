"""Sharded encoding on a Dask cluster and approximate-nearest-neighbour
search over the shards (``encode_shards``, ``search``)."""

import importlib.util
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


# the model records of two models (as checkpoints.model_identity gives)
MODEL_A = {"path": "/models/a", "sha256": "a" * 64}
MODEL_B = {"path": "/models/b", "sha256": "b" * 64}


def _write_shard(path, features, names, model=MODEL_A):
    from cosine_metric_learning import ann
    ann.write_shard(path, features, names, model)


@pytest.fixture(scope="module")
def gallery(tmp_path_factory):
    from cosine_metric_learning import ann
    root = tmp_path_factory.mktemp("gallery")
    rng = np.random.default_rng(5)
    features, centres, labels = _identity_features(rng, 20000)
    os.makedirs(root / "features")
    for part in range(2):
        rows = slice(part * 10000, (part + 1) * 10000)
        _write_shard(str(root / "features" / f"shard-{part:05d}.npy"),
                     features[rows], [f"p{labels[i]}_{i}.jpg" for i in
                                      range(20000)][rows])
    report = ann.build(str(root / "features"), str(root / "index"),
                       log=lambda _: None)
    queries = centres[labels[:200]] + 0.6 * rng.normal(size=(200, 32))
    return root, features, queries.astype(np.float32), report


def test_index_ranks_as_the_exact_distances_do(gallery):
    from cosine_metric_learning import ann
    root, features, queries, report = gallery
    assert report["count"] == 20000 and report["feature_dim"] == 32
    # a quarter of the float32 features' bytes, plus the lists' ids
    assert report["index_bytes"] < features.nbytes
    index = ann.Index(str(root / "index"))
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
    assert index.index.nprobe == ann.default_nprobe(report["nlist"])
    index.search(queries[:1], nprobe=7)
    assert index.index.nprobe == 7


def test_pq4_codes_keep_features_that_lie_close_together(tmp_path):
    """A trained model's features lie in a narrow cone (cosine distances
    of about 0.01 here, as on real crops): the pq4 codes of their offsets
    from the lists' centres keep the ranking (codes of the features
    themselves find about a fifth of the true neighbours here)."""
    from cosine_metric_learning import ann
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
    report = ann.build(str(tmp_path / "gallery.npy"),
                       str(tmp_path / "index"), kind="pq4",
                       log=lambda _: None)
    assert report["factory"].endswith(",PQ32x4fsr")
    # half a byte per dimension and 8 bytes of id each (at 32 dimensions
    # the ids weigh more than the codes), lists padded to blocks of 32
    assert report["index_bytes"] < gallery.nbytes / 2
    _, ids = ann.Index(str(tmp_path / "index")).search(queries, top_k=10)
    exact = np.argsort(-(queries.astype(np.float64) @ gallery.T), axis=1)
    found = np.mean([len(set(a) & set(b)) / 10
                     for a, b in zip(ids, exact[:, :10])])
    assert found >= 0.9, found


def test_lists_searched_grow_with_the_index():
    from cosine_metric_learning import ann
    # a floor of 96 (all lists where there are fewer), then 5 % of them
    assert [ann.default_nprobe(n) for n in (10, 96, 200, 1920, 2000,
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
    header, *lines = (tmp_path / "rank.txt").read_text().splitlines()
    assert header.startswith("# ")
    assert len(lines) == 3 and all(len(line.split("\t")) == 5
                                   for line in lines)
    ranking = json.loads((tmp_path / "rank.json").read_text())
    assert [q["query"] for q in ranking["queries"]] == ["a.jpg", "b.jpg",
                                                        "c.jpg"]
    first = ranking["queries"][0]["results"]
    assert [r["name"] for r in first] == lines[0].split("\t")
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
    # --helpfull, as every other command takes it (absl's), prints the
    # subcommand's flags; no subcommand is one line
    for command, other in (("build", "--query_features:"),
                           ("query", "--nlist:")):
        result = run_script("-m", "cosine_metric_learning.search", command,
                            "--helpfull")
        assert "  --index:" in result.stdout
        assert other not in result.stdout
    one_error_line(run_script("-m", "cosine_metric_learning.search",
                              "--index=x"),
                   "expected a subcommand", "'--index=x'")


def _query(index, query, output, *args):
    return run_script("-m", "cosine_metric_learning.search", "query",
                      f"--index={index}", f"--query_features={query}",
                      f"--output={output}", *args)


def test_a_txt_ranking_replaces_only_its_own_and_keeps_spaces(tmp_path):
    """The .txt output refuses a file it did not write (encode's name
    list here) and replaces its own; names with spaces stay whole."""
    from cosine_metric_learning import ann, search
    rng = np.random.default_rng(3)
    features = _identity_features(rng, 100, people=10)[0]
    names = [f"person {i}.jpg" for i in range(100)]
    _write_shard(str(tmp_path / "g.npy"), features, names)
    ann.build(str(tmp_path / "g.npy"), str(tmp_path / "index"),
              log=lambda _: None)
    _write_shard(str(tmp_path / "q.npy"), features[:2], ["q 1", "q 2"])
    theirs = tmp_path / "q.filenames.txt"
    before = theirs.read_text()
    one_error_line(_query(tmp_path / "index", tmp_path / "q.npy", theirs),
                   f"refusing to replace {theirs}")
    assert theirs.read_text() == before
    ranking = tmp_path / "ranking.txt"
    for _ in range(2):  # the second run replaces the first's
        result = _query(tmp_path / "index", tmp_path / "q.npy", ranking,
                        "--top_k=3")
        assert result.returncode == 0, result.stderr[-2000:]
    lines = ranking.read_text().splitlines()
    assert lines[0] == search.RANKING_TXT_HEADER and len(lines) == 3
    # each query's own row first (distance 0), its name whole
    assert [line.split("\t")[0] for line in lines[1:]] == [
        "person 0.jpg", "person 1.jpg"]


def test_shards_changed_since_the_build_are_refused(gallery, tmp_path):
    """Shards encoded again in place (another model's features, the
    same rows), cut short, or without their names: one line, exit 2."""
    root, features, queries, _ = gallery
    copy = tmp_path / "features"
    shutil.copytree(root / "features", copy)
    from cosine_metric_learning import ann
    ann.build(str(copy), str(tmp_path / "index"), log=lambda _: None)
    query = tmp_path / "q.npy"
    _write_shard(str(query), queries[:2], ["a", "b"])
    output = tmp_path / "r.json"
    assert _query(tmp_path / "index", query, output).returncode == 0
    shard = copy / "shard-00000.npy"
    original = np.load(shard)
    rotated = np.roll(original, 1, axis=1)  # the same rows, other features
    np.save(shard, rotated)
    one_error_line(_query(tmp_path / "index", query, output),
                   str(shard), "changed since the index", "rebuild")
    np.save(shard, original[:-5])
    one_error_line(_query(tmp_path / "index", query, output),
                   str(shard), f"holds {len(original) - 5} rows")
    np.save(shard, original)
    os.utime(shard, ns=(0, 0))  # another time, the same bytes: accepted
    assert _query(tmp_path / "index", query, output).returncode == 0
    os.remove(copy / "shard-00001.filenames.txt")
    result = _query(tmp_path / "index", query, output, "--top_k=50",
                    "--candidates=4000")
    one_error_line(result, "cannot read the file names of",
                   "shard-00001.filenames.txt")


def test_inputs_of_unknown_or_mixed_models_are_refused(gallery, tmp_path):
    """An index records the model of every input: a feature file without
    a record is refused unless allowed, two models are refused."""
    from cosine_metric_learning import ann
    root, features, _, _ = gallery
    report = json.loads((root / "index" / "index.json").read_text())
    assert report["model"] == MODEL_A
    unknown, other = str(tmp_path / "unknown.npy"), str(tmp_path / "b.npy")
    for path, model, features_flag, fragments in (
            (unknown, None, unknown,
             ("--features", unknown, "--allow_unknown_model")),
            (other, MODEL_B, f"{root / 'features'},{other}",
             ("different models", "/models/a", "/models/b"))):
        _write_shard(path, features[:100], [str(i) for i in range(100)],
                     model=model)
        result = run_script("-m", "cosine_metric_learning.search", "build",
                            f"--features={features_flag}",
                            f"--index={tmp_path / 'index'}")
        one_error_line(result, *fragments)
        assert not os.path.exists(tmp_path / "index")
    report = ann.build(f"{root / 'features'},{unknown}",
                       str(tmp_path / "index"), log=lambda _: None,
                       allow_unknown_model=True)
    assert report["model"] is None  # part of it is of no known model


def test_index_of_another_models_features_is_refused(gallery):
    from cosine_metric_learning import ann
    from cosine_metric_learning.errors import UsageError
    index = ann.Index(str(gallery[0] / "index"))
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


def test_gallery_benchmark_refuses_no_queries_and_prints_small_ratios(
        tmp_path):
    for flag in ("--queries=0", "--sizes=0", "--sizes=100,x"):
        one_error_line(run_script("benchmarks/gallery.py", flag),
                       flag.split(",")[0])
    result = run_script("benchmarks/gallery.py", "--sizes=300,2000",
                        "--queries=20", "--single_queries=5", "--dim=16",
                        f"--output_json={tmp_path / 'g.json'}")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads((tmp_path / "g.json").read_text())["rows"]
    # the footer names each index the rows were built with
    footer = result.stdout.strip().splitlines()[-1]
    for _, row in rows:
        assert row["factory"] in footer
    assert len({row["factory"] for _, row in rows}) == 2
    # a ratio below 1 is printed as it is, not rounded to 1x or 0x
    spec = importlib.util.spec_from_file_location(
        "gallery_benchmark", os.path.join(ROOT, "benchmarks", "gallery.py"))
    gallery = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gallery)
    assert [gallery._ratio(r) for r in (0.67, 1.0, 3.456, 41.6)] == [
        "0.67x", "1x", "3.5x", "42x"]


def test_a_bad_or_unreachable_scheduler_is_one_line(trained, images,
                                                    tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    from cosine_metric_learning import encode_shards
    from cosine_metric_learning.errors import UsageError
    path, _ = trained
    out = tmp_path / "shards"
    result = run_script("-m", "cosine_metric_learning.encode_shards",
                        f"--model={path}", f"--images={images}",
                        f"--output_dir={out}",
                        "--scheduler=localhost:8786x")
    one_error_line(result, "--scheduler=localhost:8786x", "tcp://host:port")
    assert not out.exists()  # nothing written
    # nobody listens there: refused within the wait, not Dask's 30 s
    monkeypatch.setattr(encode_shards, "CONNECT_SECONDS", 1)
    start = time.time()
    with pytest.raises(UsageError, match="cannot reach the Dask scheduler "
                       "at tcp://127.0.0.1:1 within 1 s"):
        encode_shards.run(path, str(images), str(out),
                          scheduler="tcp://127.0.0.1:1")
    assert time.time() - start < 20
    assert not out.exists()
