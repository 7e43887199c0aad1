"""Exported encoders load the ways Deep SORT and users load them."""

import json
import os
import re

import numpy as np
import pytest
import scipy.io
import tensorflow as tf
from PIL import Image

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import export, preprocessing
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.nets.deep_sort import network_definition
from tests.conftest import one_error_line, run_script
from tests.reference import bilinear_resize, keras_features

pytestmark = pytest.mark.slow


def _patches(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, 128, 64, 3),
                                                dtype=np.uint8)


@pytest.fixture(scope="module")
def frozen(trained, tmp_path_factory):
    _, encoder = trained
    path = str(tmp_path_factory.mktemp("frozen") / "mars.pb")
    export.freeze(encoder, path, (128, 64, 3))
    return path


def _graph_def(path):
    graph_def = tf.compat.v1.GraphDef()
    with open(path, "rb") as f:
        graph_def.ParseFromString(f.read())
    return graph_def


def test_frozen_graph_in_graph_mode_as_older_deep_sort(trained, frozen):
    _, encoder = trained
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(_graph_def(frozen), name="net")
    images = graph.get_tensor_by_name("net/images:0")
    features = graph.get_tensor_by_name("net/features:0")
    assert images.dtype == tf.uint8 and images.shape.as_list() == [
        None, 128, 64, 3]
    assert features.dtype == tf.float32 and features.shape.as_list() == [
        None, 128]
    patches = _patches(40)
    with tf.compat.v1.Session(graph=graph) as session:
        # Deep SORT feeds batches of 32; the features must not depend on it
        out = np.concatenate([session.run(features, {images: patches[i:i + 32]})
                              for i in range(0, 40, 32)])
        single = session.run(features, {images: patches[5:6]})
    expected = keras_features(encoder, patches)
    assert np.abs(out - expected).max() < 1e-4
    assert np.abs(single[0] - expected[5]).max() < 1e-5
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_frozen_graph_in_eager_mode_as_deep_sort_2025(trained, frozen):
    patches = _patches(32, seed=1)
    np.save(frozen + ".npy", patches)
    result = run_script("-m", "tests.helpers.deep_sort_eager", frozen,
                        frozen + ".npy", frozen + ".out.npy")
    assert result.returncode == 0, result.stderr[-3000:]
    out = np.load(frozen + ".out.npy")
    assert np.abs(out - keras_features(trained[1], patches)).max() < 1e-4


def test_frozen_graph_holds_inference_only(frozen):
    ops = {node.op for node in _graph_def(frozen).node}
    assert not ops & {"VarHandleOp", "ReadVariableOp", "VariableV2",
                      "AssignVariableOp", "FusedBatchNormV3"}
    assert not any("Queue" in op or "Apply" in op or "Dropout" in op
                   or "Random" in op for op in ops)
    placeholders = [node.name for node in _graph_def(frozen).node
                    if node.op == "Placeholder"]
    assert placeholders == ["images"]
    # batch norm's statistics are folded: no rsqrt left but the final L2 norm
    assert sum(node.op == "Rsqrt" for node in _graph_def(frozen).node) <= 1


def test_saved_model_serving_signature(trained, tmp_path):
    _, encoder = trained
    directory = str(tmp_path / "saved_model")
    export.write_saved_model(encoder, directory, (128, 64, 3))
    loaded = tf.saved_model.load(directory)
    serve = loaded.signatures["serving_default"]
    spec = serve.structured_input_signature[1]["images_bgr"]
    assert spec.dtype == tf.uint8 and spec.shape.as_list() == [None, 128, 64,
                                                               3]
    patches = _patches(3, seed=2)
    out = serve(images_bgr=tf.constant(patches))["features"].numpy()
    assert np.abs(out - keras_features(encoder, patches)).max() < 1e-4


def test_all_formats_load_and_agree(trained, frozen, tmp_path):
    checkpoint, encoder = trained
    saved_model = str(tmp_path / "sm")
    export.write_saved_model(encoder, saved_model, (128, 64, 3))
    prefix = export.write_encoder_checkpoint(encoder,
                                             str(tmp_path / "mars.ckpt"))
    # finalize: encoder variables only
    assert {name.split("/")[0] for name, _ in tf.train.list_variables(prefix)
            } == {"_CHECKPOINTABLE_OBJECT_GRAPH", "encoder"}
    patches = _patches(5, seed=4)
    expected = keras_features(encoder, patches)
    for model in (frozen, saved_model, prefix, checkpoint,
                  os.path.dirname(checkpoint)):
        loaded = encoder_lib.load(model)
        assert loaded.image_shape == (128, 64, 3) and loaded.feature_dim == 128
        assert np.abs(loaded(patches) - expected).max() < 1e-4, model


def test_box_encoder_crops_like_deep_sort(trained, frozen):
    _, encoder = trained
    box_encoder = encoder_lib.create_box_encoder(frozen, batch_size=4)
    rng = np.random.default_rng(5)
    frame = rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)
    boxes = np.array([[100, 50, 40, 120],    # aspect 1:3 -> widened to 60
                      [-30, -20, 50, 100],   # partly outside: clipped
                      [300, 200, 60, 100]], np.float64)
    out = box_encoder(frame, boxes)
    assert out.shape == (3, 128)

    # box 1 by hand: width 0.5 * 120 = 60 about the centre 120 -> x 90..150
    patch = bilinear_resize(frame[50:170, 90:150], 128, 64)
    # box 2: width 50, x -30 -> centre -5 -> x -30..20 clipped to 0..20,
    # y -20..80 clipped to 0..80
    patch2 = bilinear_resize(frame[0:80, 0:20], 128, 64)
    # box 3: narrowed to 50 about the centre 330 -> x 305..355, y 200..300,
    # clipped to the last pixel: 305..319, 200..239
    patch3 = bilinear_resize(frame[200:239, 305:319], 128, 64)
    expected = keras_features(encoder, np.stack([patch, patch2, patch3]))
    assert np.abs(out - expected).max() < 1e-4


def test_box_outside_the_frame_warns_and_gives_a_finite_row(
        trained, frozen, caplog):
    box_encoder = encoder_lib.create_box_encoder(frozen)
    frame = np.zeros((100, 100, 3), np.uint8)
    with caplog.at_level("WARNING"):
        out = box_encoder(frame, [[500, 500, 20, 40], [10, 10, 20, 40]])
    assert out.shape == (2, 128) and np.all(np.isfinite(out))
    assert any("outside the 100x100 image" in r.getMessage()
               for r in caplog.records)
    assert box_encoder(frame, np.zeros((0, 4))).shape == (0, 128)


def test_encode_cli_writes_features_and_file_names(frozen, tmp_path):
    crops = tmp_path / "crops"
    crops.mkdir()
    rng = np.random.default_rng(6)
    for i in range(5):
        size = (64, 128) if i % 2 else (50, 90)  # resized to the input
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3),
                                     dtype=np.uint8)).save(crops / f"{i}.jpg")
    (crops / "notes.txt").write_text("not an image")
    for output in ("features.npy", "features.mat"):
        result = run_script("-m", "cosine_metric_learning.encode",
                            f"--model={frozen}", f"--images={crops}",
                            f"--output={tmp_path / output}", "--batch_size=2")
        assert result.returncode == 0, result.stderr[-3000:]
        assert "encoded 5/5 images" in result.stderr
    features = np.load(tmp_path / "features.npy")
    names = (tmp_path / "features.filenames.txt").read_text().split()
    assert features.shape == (5, 128)
    assert names == [str(crops / f"{i}.jpg") for i in range(5)]
    mat = scipy.io.loadmat(tmp_path / "features.mat")
    np.testing.assert_allclose(mat["features"], features, atol=1e-6)
    # the same as the library on the same file, read as training reads it
    loaded = encoder_lib.load(frozen)
    image = preprocessing.read_image(tf.constant(str(crops / "1.jpg")),
                                     (128, 64, 3)).numpy()[..., ::-1]
    assert np.abs(loaded(image[None])[0] - features[1]).max() < 1e-5


def test_modes_write_files_and_refuse_bad_input(market_dir, trained,
                                                tmp_path):
    checkpoint, _ = trained
    for mode, output in (("freeze", "m.pb"), ("finalize", "m.ckpt"),
                         ("saved_model", "m_sm")):
        result = run_script("train_market1501.py", f"--mode={mode}",
                            f"--restore_path={checkpoint}",
                            f"--output={tmp_path / output}")
        assert result.returncode == 0, result.stderr[-2000:]
        assert f"wrote {tmp_path / output}" in result.stdout
    # the finalized checkpoint serves the other modes as --restore_path
    result = run_script("train_market1501.py", "--mode=test",
                        f"--dataset_dir={market_dir}",
                        f"--restore_path={tmp_path / 'm.ckpt'}", "--rerank")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rank-1" in result.stdout
    # re-ranked numbers beside the plain ones, and its progress
    assert "re-ranked: k-reciprocal, k1=20, k2=6, lambda=0.3" in result.stdout
    rank1 = next(l for l in result.stdout.splitlines()
                 if l.startswith("rank-1 "))
    assert len(rank1.split()) == 3, rank1
    assert re.search(r"re-ranking \d+ images: done", result.stderr)

    bad = [(["--restore_path=/nowhere/ckpt-1"], "no such checkpoint"),
           ([f"--output={tmp_path / 'a_file' / 'm.pb'}"],
            "a_file is a file, not a folder")]
    (tmp_path / "a_file").write_text("mine")
    for args, message in bad:
        args = args if args[0].startswith("--restore") else \
            [f"--restore_path={checkpoint}"] + args
        one_error_line(run_script("train_mars.py", "--mode=freeze", *args),
                       message)
    assert not list(tmp_path.glob(".*"))  # no temporary leftovers


def test_checkpoint_of_another_network_is_refused(tmp_path):
    # an "encoder" that is some other network
    other = tf.train.Checkpoint(encoder=network_definition.create_classifier(
        5)).save(str(tmp_path / "x"))
    with pytest.raises(UsageError, match="does not match the encoder"):
        encoder_lib.load(other)


def test_a_format_is_one_registry_record_and_its_writer(trained, tmp_path):
    """A format registered before the modes load (tests/helpers/
    dummy_format.py): its export mode writes it under its default name,
    the checkpoints take it for an exported model, the backends for its
    format, adapt offers it and the help lists it."""
    result = run_script("-m", "tests.helpers.dummy_format", trained[0],
                        str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    derived = json.loads(result.stdout.strip().splitlines()[-1])
    assert derived["status"] == 0
    assert derived["written"] == ["market1501.features.npy"]
    assert derived["features"] == [2, 128]
    assert derived["format_of_path"] == "dummy"
    assert derived["runs_on"] == ["tensorflow"]
    assert "an exported model, not a checkpoint" in \
        derived["refused_as_checkpoint"]
    assert derived["adapt_exports"] and derived["in_help"]
