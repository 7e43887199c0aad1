"""End-to-end training on synthetic data: checkpoints, summaries, resuming."""

import json
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from cosine_metric_learning import checkpoints, losses, settings, summaries
from cosine_metric_learning import training
from cosine_metric_learning import model as model_lib
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.datasets import market1501, mars
from cosine_metric_learning.datasets.spec import DatasetSpec
from cosine_metric_learning.nets.deep_sort import network_definition
from tests.conftest import read_events, run_script, small_config
from tests.reference import restored_encoder

pytestmark = pytest.mark.slow

MARKET = DatasetSpec(
    name="market1501", num_classes=market1501.MAX_LABEL + 1,
    read_train=market1501.read_train_split_to_str,
    default_dataset_dir="unused")


def _config(dataset_dir, log_dir, run_id="run", **kwargs):
    return small_config(dataset_dir, log_dir, run_id, **{
        "number_of_steps": 3, "loss_mode": "cosine-softmax", **kwargs})


def _scalars(run_dir):
    acc = read_events(run_dir)
    return acc, {tag: [(e.step, float(tf.make_ndarray(e.tensor_proto)))
                       for e in acc.Tensors(tag)]
                 for tag in acc.Tags()["tensors"]
                 if tag.startswith(("losses/", "accuracy", "scale", "triplet/",
                                    "learning_rate", "queue/", "performance/"))}


def _read(checkpoint, name):
    """Value of a variable of the checkpoint through the object graph."""
    return tf.train.load_checkpoint(checkpoint).get_tensor(name)


@pytest.mark.parametrize("loss_mode", ["cosine-softmax", "triplet", "magnet"])
def test_each_loss_mode_trains_and_writes_checkpoint_and_summaries(
        market_dir, tmp_path, loss_mode, caplog):
    config = _config(market_dir, tmp_path, run_id=loss_mode,
                     loss_mode=loss_mode, initial_logit_scale=5.0)
    with caplog.at_level("INFO", logger="absl"):
        result = training.train(MARKET, config)
    progress = [r.getMessage() for r in caplog.records
                if r.getMessage().startswith("step ")]
    assert progress and all(re.search(r"queue \d+%  input wait \d+%$", line)
                            for line in progress), progress
    assert result.step == 3 and result.signal is None
    assert result.checkpoint == os.path.join(config.run_dir, "ckpt-3")
    objects = checkpoints.checkpoint_objects(result.checkpoint)
    assert {"encoder", "optimizer", "step"} <= objects
    assert ("classifier" in objects) == (loss_mode == "cosine-softmax")

    acc, scalars = _scalars(config.run_dir)
    expected = {"losses/total_loss", "losses/triplet_loss",
                "losses/magnet_loss", "losses/weight_loss", "learning_rate",
                "queue/fill_fraction", "performance/images_per_second",
                "queue/starved_fraction", "queue/input_wait_fraction",
                "queue/enqueue_images_per_second",
                "triplet/fraction_active_triplets",
                "triplet/mean_feature_norm", "triplet/mean_distance",
                "triplet/mean_positive_distance",
                "triplet/mean_negative_distance"}
    assert expected <= set(scalars)
    cosine_tags = {"losses/cosine_softmax_loss", "accuracy", "scale"}
    if loss_mode == "cosine-softmax":
        assert cosine_tags <= set(scalars)
        # --initial_logit_scale: softplus(scale) after one Adam step
        assert scalars["scale"][0][1] == pytest.approx(5.0, abs=2e-3)
    else:
        assert cosine_tags.isdisjoint(scalars)
    # summaries at the first and the last step; total = chosen + weight
    assert [s for s, _ in scalars["losses/total_loss"]] == [1, 3]
    chosen = dict(scalars["losses/" + losses.get(loss_mode).summary_name])
    weight = dict(scalars["losses/weight_loss"])
    for step, total in scalars["losses/total_loss"]:
        assert np.isfinite(total)
        assert total == pytest.approx(chosen[step] + weight[step], rel=1e-5)
    assert scalars["learning_rate"][0][1] == pytest.approx(1e-3)
    tags = acc.Tags()["tensors"]
    assert "input_batch" in tags and "conv1_1_filters" in tags
    assert "activations/conv4_3_add" in tags
    if loss_mode == "triplet":
        _check_images_and_histograms(acc, config.batch_size)


def _check_images_and_histograms(acc, batch_size):
    """The event file's input images, filters and activation histograms:
    each histogram counts a sample of at most HISTOGRAM_VALUES values of
    its layer at the summary's step (all of a smaller layer's)."""
    for tag, count in (("input_batch", summaries.SUMMARY_IMAGES),
                       ("conv1_1_filters", 32)):
        # an image summary is [width, height, PNG, PNG, ...]
        images = tf.make_ndarray(acc.Tensors(tag)[-1].tensor_proto)
        assert len(images) == 2 + count, (tag, len(images))
    sizes = {"conv1_1_elu": 128 * 64 * 32, "fc1_elu": 128}
    for name in network_definition.ACTIVATION_LAYERS:
        events = acc.Tensors(f"activations/{name}")
        assert [e.step for e in events] == [1, 3]
        buckets = tf.make_ndarray(events[-1].tensor_proto)  # [left, right, n]
        expected = min(summaries.HISTOGRAM_VALUES,
                       batch_size * sizes.get(name, 10 ** 9))
        assert buckets[:, 2].sum() == pytest.approx(expected), name
        assert buckets[0, 0] < buckets[-1, 1]


def test_only_a_summary_step_returns_images_and_activations(market_dir):
    """An ordinary step returns its scalars only; the summary step a few
    images and a sample of each activation, drawn from all of its values."""
    model = model_lib.create_model(MARKET, "cosine-softmax")
    optimizer = model_lib.create_optimizer(1e-3)
    step = tf.Variable(0, dtype=tf.int64)
    images = tf.random.uniform((16, 128, 64, 3), seed=1)
    labels = tf.constant(np.repeat(np.arange(4), 4), tf.int64)
    plain = tf.function(model_lib.make_train_step(
        model, optimizer, "cosine-softmax", step))(images, labels)
    assert set(plain) == {"scalars"}
    result = tf.function(model_lib.make_train_step(
        model, optimizer, "cosine-softmax", step, summaries=True))(images,
                                                                    labels)
    assert result["images"].shape == (summaries.SUMMARY_IMAGES, 128, 64, 3)
    for name, values in result["activations"].items():
        size = 16 * int(np.prod(model.encoder.get_layer(name).output.shape[1:]))
        assert values.shape == (min(size, summaries.HISTOGRAM_VALUES),), name
    assert int(step.numpy()) == 2


def test_the_warm_up_rises_linearly_from_a_tenth():
    schedule = model_lib.WarmUp(1e-3, 10)
    values = [float(schedule(step)) for step in (0, 5, 10, 11, 1000)]
    np.testing.assert_allclose(values, [1e-4, 5.5e-4, 1e-3, 1e-3, 1e-3],
                               rtol=1e-6)
    optimizer = model_lib.create_optimizer(1e-3, warmup_steps=10)
    assert float(optimizer.learning_rate) == pytest.approx(1e-4)


def test_recipes_set_what_is_not_given():
    base = dict(dataset_dir="d", log_dir="l")
    baseline = settings.TrainConfig(**base)
    assert baseline.recipe == "baseline"
    assert baseline.recipe_settings == settings.RECIPE_DEFAULTS
    assert baseline.tricks == model_lib.Tricks()
    original = settings.TrainConfig(recipe="original", **base)
    assert original.recipe_settings["initial_logit_scale"] == \
        pytest.approx(network_definition.ORIGINAL_LOGIT_SCALE)
    assert original.tricks == model_lib.Tricks()
    strong = settings.TrainConfig(recipe="strong", triplet_weight=0.5,
                                  **base)
    expected = {**settings.RECIPE_DEFAULTS, **settings.RECIPES["strong"],
                "triplet_weight": 0.5}  # the flag given wins
    assert strong.recipe_settings == expected
    assert settings.RECIPES["strong"]["triplet_weight"] > 0
    assert strong.tricks.triplet_weight == 0.5
    for bad, message in ((dict(recipe="fancy"), "--recipe=fancy: expected "
                          "one of original, baseline, strong"),
                         (dict(random_erasing=1.5), "--random_erasing=1.5"),
                         (dict(cosine_margin=-0.1), "--cosine_margin=-0.1"),
                         (dict(warmup_steps=-1), "--warmup_steps=-1"),
                         (dict(triplet_weight=-1.0),
                          "--triplet_weight=-1.0: expected a number >= 0")):
        with pytest.raises(UsageError, match=re.escape(message)):
            settings.TrainConfig(**bad, **base).validate()


def test_a_step_with_every_trick(market_dir):
    """Erasing, margin and smoothing in one step: finite, and the margin
    and smoothing raise the loss on the same weights and batch."""
    tf.random.set_seed(0)
    images = tf.random.uniform((16, 128, 64, 3), seed=1)
    labels = tf.constant(np.repeat(np.arange(4), 4), tf.int64)
    losses_of = {}
    every = model_lib.Tricks(random_erasing=0.5, label_smoothing=0.1,
                             cosine_margin=0.2)
    for name, tricks in (("none", model_lib.Tricks()), ("all", every)):
        keras.utils.set_random_seed(0)
        model = model_lib.create_model(MARKET, "cosine-softmax")
        optimizer = model_lib.create_optimizer(1e-3, warmup_steps=5)
        step = tf.Variable(0, dtype=tf.int64)
        result = tf.function(model_lib.make_train_step(
            model, optimizer, "cosine-softmax", step, tricks=tricks))(
                images, labels)
        losses_of[name] = float(
            result["scalars"]["losses/cosine_softmax_loss"])
    assert np.isfinite(list(losses_of.values())).all()
    assert losses_of["all"] > losses_of["none"]


@pytest.mark.parametrize("loss_mode", ["cosine-softmax", "triplet"])
def test_the_triplet_weight_adds_the_weighted_triplet_loss(loss_mode):
    """The total is the trained loss, the weight loss and 0.5 x the
    triplet loss of the same features; the triplet loss itself is not
    added to itself."""
    images = tf.random.uniform((16, 128, 64, 3), seed=1)
    labels = tf.constant(np.repeat(np.arange(4), 4), tf.int64)
    keras.utils.set_random_seed(0)
    model = model_lib.create_model(MARKET, loss_mode)
    step = tf.Variable(0, dtype=tf.int64)
    scalars = tf.function(model_lib.make_train_step(
        model, model_lib.create_optimizer(1e-3), loss_mode, step,
        tricks=model_lib.Tricks(triplet_weight=0.5)))(
            images, labels)["scalars"]
    value = {k: float(v) for k, v in scalars.items()}
    trained = value["losses/" + losses.get(loss_mode).summary_name]
    added = 0.5 * value["losses/triplet_loss"] if loss_mode != "triplet" \
        else 0.0
    assert value["losses/triplet_loss"] > 0.1
    assert value["losses/total_loss"] == pytest.approx(
        trained + value["losses/weight_loss"] + added, rel=1e-5)


@pytest.mark.parametrize("loss_mode,weight,shown", [
    ("cosine-softmax", 0.5, True), ("cosine-softmax", 0.0, False),
    ("triplet", 0.5, False)])
def test_the_progress_line_shows_the_added_triplet_term(
        absl_log, loss_mode, weight, shown):
    config = settings.TrainConfig(dataset_dir="unused", loss_mode=loss_mode,
                                  number_of_steps=10, triplet_weight=weight)
    scalars = {"losses/cosine_softmax_loss": 2.0,
               "losses/triplet_loss": 0.25, "losses/total_loss": 2.5,
               "losses/weight_loss": 0.375, "accuracy": 0.5}
    summaries.log_progress(config, 3, scalars, 1.0, 1.0, 0.0)
    line = absl_log.records[-1].getMessage()
    assert line.startswith("step 3/10  loss 2.5000 (")
    assert ("0.5 x triplet 0.2500" in line) is shown, line


def test_imprinting_sets_each_class_to_its_normalised_mean_feature():
    classifier = network_definition.create_classifier(4)
    before = classifier.get_layer("ball").mean_vectors.numpy().copy()
    features = np.array([[3.0, 0, 0], [1, 0, 0], [0, 2, 0], [0, 0, 1],
                         [0, 0, 1]])
    features = np.pad(features, ((0, 0), (0, 125)))  # 128-d
    labels = np.array([0, 0, 2, 1, 1])
    assert model_lib.imprint(classifier, features, labels) == 3
    after = classifier.get_layer("ball").mean_vectors.numpy()
    expected = {0: [1, 0, 0], 1: [0, 0, 1], 2: [0, 1, 0]}
    for label, direction in expected.items():
        np.testing.assert_allclose(after[:3, label], direction, atol=1e-7)
        np.testing.assert_allclose(after[3:, label], 0.0, atol=1e-7)
    np.testing.assert_array_equal(after[:, 3], before[:, 3])  # no images
    # each class's own mean now has the largest logit
    logits = classifier(features[[0, 3, 2]].astype(np.float32)).numpy()
    np.testing.assert_array_equal(logits.argmax(axis=1), [0, 1, 2])


def test_an_imprinted_run_starts_at_its_identities_mean_features(
        market_dir, tmp_path):
    source = training.train(MARKET, _config(market_dir, tmp_path, "source",
                                             number_of_steps=1))
    # a learning rate of 1e-12 leaves the step's weights where they began
    tuned = training.train(MARKET, _config(
        market_dir, tmp_path, "imprinted", number_of_steps=1,
        learning_rate=1e-12, imprint=True, restore_classifier=False,
        restore_path=os.path.dirname(source.checkpoint)))
    encoder = restored_encoder(source.checkpoint)
    filenames, ids = training.read_training_data(
        MARKET, _config(market_dir, tmp_path))
    classifier = network_definition.create_classifier(MARKET.num_classes)
    tf.train.Checkpoint(classifier=classifier).restore(
        tuned.checkpoint).expect_partial()
    vectors = classifier.get_layer("ball").mean_vectors.numpy()
    vectors = vectors / np.linalg.norm(vectors, axis=0)
    checked = 0
    for label in np.unique(ids):
        mine = filenames[ids == label]
        if len(mine) > model_lib.IMPRINT_IMAGES:
            continue  # a random subset of them was imprinted
        images = np.stack([tf.io.decode_jpeg(tf.io.read_file(f)).numpy()
                           for f in mine])
        assert images.shape[1:] == (128, 64, 3)  # no resize to repeat
        mean = encoder(images.astype(np.float32) / 255.0,
                       training=False).numpy().mean(axis=0)
        np.testing.assert_allclose(vectors[:, label],
                                   mean / np.linalg.norm(mean), atol=1e-4)
        checked += 1
    assert checked > 10


def test_the_strong_recipe_with_a_bnneck_trains_and_the_run_records_it(
        market_dir, tmp_path):
    config = _config(market_dir, tmp_path, run_id="strong", recipe="strong",
                     bnneck=True, warmup_steps=2, number_of_steps=2)
    result = training.train(MARKET, config)
    assert result.step == 2
    recorded = json.loads((tmp_path / "strong" / "run.json").read_text())
    assert recorded["recipe"] == "strong"
    assert recorded["recipe_settings"] == {
        **settings.RECIPE_DEFAULTS, **settings.RECIPES["strong"],
        "bnneck": True, "warmup_steps": 2}
    assert recorded["network"] == "deep_sort_bnneck"
    encoder, _ = checkpoints.load_encoder(config.run_dir)
    assert "ball_bn" in [layer.name for layer in encoder.layers]
    features = encoder(tf.random.uniform((4, 128, 64, 3)), training=False)
    assert features.shape == (4, 128)
    np.testing.assert_allclose(np.linalg.norm(features, axis=1), 1.0,
                               rtol=1e-5)
    # the run continues as it began; it cannot drop or gain the BNNeck
    with pytest.raises(UsageError, match="--bnneck: the network is deep_sort"):
        training.train(MARKET, _config(market_dir, tmp_path, run_id="run2",
                                       bnneck=True, restore_path=str(
                                           tmp_path / "plain")))


def test_a_histogram_sample_follows_the_values_it_is_drawn_from():
    values = tf.reshape(tf.range(1 << 20, dtype=tf.float32), (16, 256, 256))
    sample = summaries.sample_values(values).numpy()
    assert sample.shape == (summaries.HISTOGRAM_VALUES,)
    assert np.isin(sample, values.numpy()).all()
    # uniform over all values: the sample's deciles are the values' (a
    # sample of the first images or a stride would not be)
    deciles = np.percentile(sample, np.arange(10, 100, 10)) / (1 << 20)
    np.testing.assert_allclose(deciles, np.arange(0.1, 1.0, 0.1), atol=0.01)
    small = tf.ones((3, 5))
    assert summaries.sample_values(small).shape == (15,)


def test_summaries_of_a_large_activation_take_little_memory(tmp_path):
    """The histograms of a 33.5 M-value activation (conv1_1_elu at batch
    128), in a process of its own: the summary path's peak memory stays
    within a few hundred MB of the process's baseline (TensorFlow's
    histogram of all values took 8.4 GB), and the event file holds them."""
    result = run_script("-c", f"""
import resource
import numpy as np
import tensorflow as tf
from cosine_metric_learning import summaries
activation = tf.random.normal((128, 128, 64, 32))
kernel = tf.random.normal((3, 3, 3, 32))
images = tf.random.uniform((8, 128, 64, 3))
writer = tf.summary.create_file_writer({str(tmp_path)!r})
summaries.write_summaries(writer, 0, {{"scalars": {{}}, "images": images,
    "activations": {{"small": summaries.sample_values(tf.ones(10))}}}}, {{}},
    kernel)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = {{"scalars": {{"losses/total_loss": 1.0}}, "images": images,
          "activations": {{name: summaries.sample_values(activation)
                          for name in ("a", "b", "c")}}}}
summaries.write_summaries(writer, 1, result, {{}}, kernel)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) / 1024)""")
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(result.stdout.split()[-1]) < 300, result.stdout
    acc = read_events(str(tmp_path))
    for name in ("a", "b", "c"):
        (event,) = acc.Tensors(f"activations/{name}")
        buckets = tf.make_ndarray(event.tensor_proto)
        assert buckets[:, 2].sum() == summaries.HISTOGRAM_VALUES
        # drawn from a standard normal: about its range
        assert buckets[0, 0] < -3 and buckets[-1, 1] > 3
    assert {"input_batch", "conv1_1_filters"} <= set(acc.Tags()["tensors"])


def test_rerun_continues_from_the_latest_checkpoint(market_dir, tmp_path):
    first = training.train(MARKET, _config(market_dir, tmp_path,
                                            number_of_steps=2,
                                            loss_mode="triplet"))
    assert first.step == 2
    second = training.train(MARKET, _config(market_dir, tmp_path,
                                             number_of_steps=4,
                                             loss_mode="triplet"))
    assert second.step == 4
    run_dir = os.path.join(tmp_path, "run")
    assert tf.train.get_checkpoint_state(run_dir).all_model_checkpoint_paths \
        == [os.path.join(run_dir, f"ckpt-{n}") for n in (0, 2, 4)]
    # the optimizer state came along: 4 Adam updates, not 2
    iterations = _read(second.checkpoint,
                       "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")
    assert int(iterations) == 4
    assert int(_read(second.checkpoint, "step/.ATTRIBUTES/VARIABLE_VALUE")) == 4
    # a run that already reached its steps trains no more
    third = training.train(MARKET, _config(market_dir, tmp_path,
                                            number_of_steps=4,
                                            loss_mode="triplet"))
    assert third.step == 4 and third.checkpoint == second.checkpoint


def test_continuing_a_run_with_another_loss_is_refused(market_dir, tmp_path):
    training.train(MARKET, _config(market_dir, tmp_path, number_of_steps=1,
                                    loss_mode="magnet"))
    with pytest.raises(UsageError, match="with --loss_mode=cosine-softmax: "
                       "it was trained with --loss_mode=magnet"):
        training.train(MARKET, _config(market_dir, tmp_path,
                                        number_of_steps=2,
                                        loss_mode="cosine-softmax"))
    # a run from before run.json: the checkpoint's contents still tell
    os.remove(tmp_path / "run" / "run.json")
    with pytest.raises(UsageError, match="holds a checkpoint of another "
                                         "network or loss.*classifier"):
        training.train(MARKET, _config(market_dir, tmp_path,
                                        number_of_steps=2,
                                        loss_mode="cosine-softmax"))


def test_checkpoints_every_interval_are_all_kept(market_dir, tmp_path):
    config = _config(market_dir, tmp_path, number_of_steps=3,
                     save_interval_secs=1e-6, loss_mode="magnet")
    training.train(MARKET, config)
    state = tf.train.get_checkpoint_state(config.run_dir)
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] \
        == ["ckpt-0", "ckpt-1", "ckpt-2", "ckpt-3"]


def _conv1_1_kernel(checkpoint):
    return restored_encoder(checkpoint).get_layer("conv1_1").kernel.numpy()


def test_warm_start_with_and_without_the_classifier(market_dir, tmp_path):
    source = training.train(MARKET, _config(market_dir, tmp_path, "source",
                                             number_of_steps=1,
                                             loss_mode="triplet"))
    # a triplet checkpoint has no classifier to restore
    with pytest.raises(UsageError, match="has no classifier"):
        training.train(MARKET, _config(market_dir, tmp_path, "a",
                                        restore_path=source.checkpoint))
    # fine-tuning leaves the classifier out; a tiny learning rate keeps the
    # restored encoder where it was
    tuned = training.train(MARKET, _config(
        market_dir, tmp_path, "b", number_of_steps=1, learning_rate=1e-12,
        restore_path=os.path.dirname(source.checkpoint),
        restore_classifier=False))
    np.testing.assert_allclose(_conv1_1_kernel(tuned.checkpoint),
                               _conv1_1_kernel(source.checkpoint), atol=1e-9)
    with pytest.raises(UsageError, match="no such checkpoint"):
        training.train(MARKET, _config(market_dir, tmp_path, "c",
                                        restore_path=str(tmp_path / "nope")))


def test_mars_trains_on_resized_images(mars_dir, tmp_path):
    dataset = DatasetSpec(
        name="mars", num_classes=mars.MAX_LABEL + 1,
        read_train=mars.read_train_split_to_str, default_dataset_dir="unused")
    result = training.train(dataset, _config(mars_dir, tmp_path,
                                              batch_size=8, images_per_id=2,
                                              number_of_steps=2))
    assert result.step == 2


def test_bad_settings_are_rejected_before_training(market_dir, tmp_path):
    cases = [
        (dict(batch_size=0), r"--batch_size=0: expected an integer >= 1"),
        (dict(batch_size=30), "--batch_size=30 is not divisible by "
                              "--images_per_id=4"),
        (dict(number_of_steps=-5), "--number_of_steps=-5"),
        (dict(queue_capacity=8), "--queue_capacity=8: expected at least "
                                 "--batch_size=16"),
        (dict(loss_mode="arcface"), "--loss_mode=arcface: expected one of"),
        (dict(initial_logit_scale=0.0),
         r"--initial_logit_scale=0.0: expected a number > 0"),
        (dict(batch_size=256, queue_capacity=512), "too few identities: 36"),
    ]
    for kwargs, message in cases:
        with pytest.raises(UsageError, match=message):
            training.train(MARKET, _config(market_dir, tmp_path, **kwargs))
