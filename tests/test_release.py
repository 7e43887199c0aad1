"""Deep SORT's published model (mars-small128): its TF1 checkpoint and
frozen graph, rebuilt in ``tests/helpers/release_graph.py`` as a TF1 graph
from the facts of its network, load in every mode, give that graph's
features, export, and fine-tune."""

import dataclasses
import glob
import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from cosine_metric_learning import checkpoints, cli, deploy, release
from cosine_metric_learning import model as model_lib
from cosine_metric_learning.datasets.spec import MARS
from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.nets.deep_sort import network_definition
from tests.conftest import one_error_line, run_script
from tests.helpers.release_graph import write_release

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def release_files(market_dir, tmp_path_factory):
    """The V1 checkpoint, the frozen graph, uint8 BGR patches (people of
    the synthetic set, a black and a noise patch) and the TF1 graph's
    features of them."""
    paths = sorted(glob.glob(os.path.join(market_dir, "query", "*.jpg")))
    people = [np.asarray(Image.open(p).convert("RGB").resize((64, 128)))[
        ..., ::-1] for p in paths[:14]]
    rng = np.random.default_rng(0)
    patches = np.stack(people + [np.zeros((128, 64, 3), np.uint8),
                                 rng.integers(0, 256, (128, 64, 3),
                                              dtype=np.uint8)])
    directory = tmp_path_factory.mktemp("release")
    checkpoint, graph, features = write_release(str(directory),
                                                patches=patches)
    return checkpoint, graph, patches, features


def test_the_release_files_are_what_deep_sort_ships(release_files):
    checkpoint, graph, _, features = release_files
    # one file, no .index: TF1's V1 format
    assert os.path.isfile(checkpoint) and not os.path.exists(
        checkpoint + ".index")
    values = release.read_values(checkpoint)
    assert values["ball/scale"].shape == (1501,)
    assert values["fc1/weights"].shape == (16384, 128)
    assert not any(name.endswith("/Adam") for name in values)
    assert release.network_name(values) == "mars_small128"
    assert release.network_name(release.read_values(graph)) == \
        "mars_small128"
    # the features vary with the patch (a test of a constant is no test)
    assert np.std(features, axis=0).max() > 0.05


def test_the_loaded_release_gives_the_tf1_graphs_features(release_files):
    checkpoint, graph, patches, expected = release_files
    encoder = release.load_encoder(checkpoint)
    trainable = sum(int(np.prod(w.shape)) for w in encoder.trainable_weights)
    assert trainable == 2_800_864 + 128  # the paper's encoder + ball/beta
    for path in (checkpoint, graph):
        # through encoder.load (the frozen graph runs as it is) and as the
        # Keras model the exports are made of
        loaded = encoder_lib.load(path, batch_size=8)
        assert loaded.image_shape == (128, 64, 3)
        assert np.abs(loaded(patches) - expected).max() < 1e-4, path
        keras_model, _ = checkpoints.load_encoder(path)
        features = keras_model(
            tf.cast(patches[..., ::-1], tf.float32) / 255.0, training=False)
        assert np.abs(features - expected).max() < 1e-4, path


def test_every_export_of_the_release_gives_its_features(release_files,
                                                        tmp_path):
    checkpoint, graph, patches, expected = release_files
    # the entry point, from the checkpoint
    for mode, name in (("freeze", "r.pb"), ("tflite", "r.tflite")):
        result = run_script("train_mars.py", f"--mode={mode}",
                            f"--restore_path={checkpoint}",
                            f"--output={tmp_path / name}")
        assert result.returncode == 0, (mode, result.stderr[-2000:])
    # the writers of the other modes, from the graph rebuilt in Keras
    encoder, _ = checkpoints.load_encoder(graph)
    for mode, name in (("onnx", "r.onnx"), ("saved_model", "r_saved_model"),
                       ("openvino", "r.xml")):
        write, _, _ = cli.EXPORTERS[cli.Mode(mode)]
        write(encoder, str(tmp_path / name), (128, 64, 3))
    for name in ("r.pb", "r.tflite", "r.onnx", "r_saved_model", "r.xml"):
        loaded = encoder_lib.load(str(tmp_path / name), batch_size=16)
        assert np.abs(loaded(patches) - expected).max() < 1e-4, name


def test_fine_tune_from_the_release(release_files, market_dir, mars_dir,
                                    tmp_path):
    checkpoint, graph, patches, features = release_files
    runs = tmp_path / "runs"
    common = [f"--dataset_dir={market_dir}", f"--log_dir={runs}",
              "--batch_size=16"]
    # Market-1501's identities are not the release's 1,501 MARS classes
    one_error_line(run_script("train_market1501.py", *common,
                              f"--restore_path={checkpoint}", "--run_id=a",
                              "--number_of_steps=2"),
                   "ball/mean_vectors is (128, 1501), the classifier has "
                   "(128, 1502)", "--norestore_classifier")
    result = run_script("train_market1501.py", *common, "--run_id=tuned",
                        f"--restore_path={checkpoint}",
                        "--norestore_classifier", "--number_of_steps=3")
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"Initialised encoder from {checkpoint}" in result.stderr
    assert "step 3/3" in result.stderr
    run = json.loads((runs / "tuned" / "run.json").read_text())
    assert run["network"] == "mars_small128"
    # continuing the run keeps its network without --restore_path
    result = run_script("train_market1501.py", *common, "--run_id=tuned",
                        "--number_of_steps=4")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "step 4/4" in result.stderr
    # test, eval and the exports read the network from run.json
    json_path = tmp_path / "test.json"
    result = run_script("train_market1501.py", "--mode=test",
                        f"--dataset_dir={market_dir}",
                        f"--restore_path={runs / 'tuned'}",
                        f"--output_json={json_path}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(json_path.read_text())["num_queries"] > 0
    result = run_script("train_market1501.py", "--mode=eval",
                        f"--dataset_dir={market_dir}", f"--log_dir={runs}",
                        "--run_id=tuned", f"--eval_log_dir={tmp_path / 'e'}",
                        "--max_num_evaluations=1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"step \d+: Precision@1", result.stderr)
    result = run_script("train_market1501.py", "--mode=onnx",
                        f"--restore_path={runs / 'tuned'}",
                        f"--output={tmp_path / 'tuned.onnx'}")
    assert result.returncode == 0, result.stderr[-2000:]
    tuned = encoder_lib.load(str(runs / "tuned"))
    np.testing.assert_allclose(
        encoder_lib.load(str(tmp_path / "tuned.onnx"))(patches),
        tuned(patches), atol=1e-4)
    # the .pb starts an encoder; it holds no classifier to restore
    model = model_lib.create_model(dataclasses.replace(
        MARS, network="mars_small128"), "cosine-softmax")
    checkpoints.warm_start(model, graph, restore_classifier=False)
    np.testing.assert_allclose(
        model.encoder(tf.cast(patches[..., ::-1], tf.float32) / 255.0,
                      training=False), features, atol=1e-4)
    with pytest.raises(UsageError, match="it has no ball/mean_vectors.*"
                       "--norestore_classifier starts a new one"):
        checkpoints.warm_start(model, graph, restore_classifier=True)
    # on MARS the release's classifier (1,501 classes) continues training
    result = run_script("train_mars.py", f"--dataset_dir={mars_dir}",
                        f"--log_dir={runs}", "--run_id=mars_classifier",
                        f"--restore_path={checkpoint}", "--batch_size=16",
                        "--number_of_steps=2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Initialised encoder and classifier" in result.stderr


def _tf1_checkpoint(path, variables):
    """A V1 checkpoint of the given ``{name: value}``."""
    graph = tf.Graph()
    with graph.as_default():
        for name, value in variables.items():
            tf.compat.v1.Variable(np.asarray(value, np.float32), name=name)
        saver = tf.compat.v1.train.Saver(
            write_version=tf.compat.v1.train.SaverDef.V1)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return saver.save(session, path, write_meta_graph=False)


def test_bad_tf1_models_are_one_line(release_files, market_dir, tmp_path):
    checkpoint, graph, _, _ = release_files
    # the original trainer's run folder (its "checkpoint" state file
    # names the V1 file) loads as the checkpoint in it does
    encoder, prefix = checkpoints.load_encoder(os.path.dirname(checkpoint))
    assert prefix == checkpoint
    assert checkpoints.network_of(os.path.dirname(checkpoint)) == \
        "mars_small128"
    # a truncated V1 file exists: it is said to be unreadable, not missing
    truncated = tmp_path / os.path.basename(checkpoint)
    truncated.write_bytes(open(checkpoint, "rb").read()[:100000])
    with pytest.raises(ArgumentError, match="TensorFlow cannot read it as "
                       "a checkpoint .*: a damaged or truncated file"):
        checkpoints.load_encoder(str(truncated))
    # a TF1 checkpoint of another network: what is missing, what differs
    other = _tf1_checkpoint(str(tmp_path / "other.ckpt"), {
        "conv1_1/weights": np.zeros((5, 5, 3, 16)),
        "ball/moving_mean": np.zeros(128)})
    with pytest.raises(UsageError, match=r"does not match the encoder: it "
                       r"has no conv1_1/conv1_1/bn/beta.* more\); "
                       r"conv1_1/weights is \(5, 5, 3, 16\), the encoder "
                       r"has \(3, 3, 3, 32\)"):
        release.load_encoder(other)
    result = run_script("train_mars.py", "--mode=freeze",
                        f"--restore_path={other}",
                        f"--output={tmp_path / 'o.pb'}")
    one_error_line(result, "does not match the encoder",
                   "conv1_1/conv1_1/bn/beta")
    assert not (tmp_path / "o.pb").exists()
    # a .pb that is not an encoder
    with tf.Graph().as_default() as g:
        tf.constant(np.ones(3, np.float32), name="something")
    (tmp_path / "other.pb").write_bytes(g.as_graph_def().SerializeToString())
    with pytest.raises(ArgumentError, match="holds no encoder of Deep "
                       "SORT's network"):
        release.read_values(str(tmp_path / "other.pb"))
    result = run_script("train_mars.py", "--mode=onnx",
                        f"--restore_path={tmp_path / 'other.pb'}",
                        f"--output={tmp_path / 'o.onnx'}")
    one_error_line(result, "--restore_path=", "holds no encoder")
    # the release at another input size
    result = run_script("train_custom.py", "--mode=freeze",
                        f"--restore_path={checkpoint}", "--image_shape=96,48",
                        f"--output={tmp_path / 'o.pb'}")
    one_error_line(result, "--image_shape=96,48", "takes 128x64")
    result = run_script("train_custom.py",
                        f"--dataset_dir={market_dir}/bounding_box_train",
                        f"--restore_path={graph}", "--image_shape=96,48",
                        f"--log_dir={tmp_path / 'runs'}", "--run_id=r")
    one_error_line(result, "takes 128x64")


def test_the_network_variant_differs_where_the_release_does():
    paper = network_definition.create_encoder()
    variant = network_definition.create_encoder(network="mars_small128")
    assert paper.get_layer("pool1").output.shape[1:3] == (64, 32)
    assert variant.get_layer("pool1").output.shape[1:3] == (63, 31)
    assert variant.get_layer("flatten").output.shape[-1] == 16384
    names = set(release.tf1_names(variant))
    assert names - set(release.tf1_names(paper)) == {
        "ball/beta", "ball/moving_mean", "ball/moving_variance"}
    classifier = network_definition.create_classifier(
        1501, network="mars_small128")
    assert classifier.get_layer("ball").scale.shape == (1501,)
    # a TF2 checkpoint of this project is not taken for a TF1 one
    assert not release.is_tf1(deploy.__file__)
