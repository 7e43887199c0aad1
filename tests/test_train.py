"""End-to-end training on synthetic data: checkpoints, summaries, resuming."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from cosine_metric_learning import checkpoints, losses, training
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.datasets import market1501, mars
from cosine_metric_learning.datasets.spec import DatasetSpec
from tests.conftest import small_config
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
    acc = event_accumulator.EventAccumulator(
        run_dir, size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
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
