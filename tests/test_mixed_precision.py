"""Mixed precision: bf16/fp16 compute, float32 weights, features and losses."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from cosine_metric_learning import checkpoints, settings, training
from cosine_metric_learning import model as model_lib
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.nets.deep_sort import network_definition
from cosine_metric_learning.datasets.spec import MARKET1501 as MARKET
from tests.conftest import small_config
from tests.reference import spread_kernels


def test_bf16_model_keeps_float32_weights_features_and_logits():
    before = keras.config.dtype_policy().name
    model = model_lib.create_model(MARKET, "cosine-softmax", "bf16")
    assert keras.config.dtype_policy().name == before  # restored
    conv = model.encoder.get_layer("conv2_1_1")
    assert conv.compute_dtype == "bfloat16"
    assert conv.kernel.dtype == "float32"
    images = tf.random.uniform((2, 128, 64, 3), seed=3)
    features, activations = model.activation_model(images, training=True)
    assert features.dtype == tf.float32
    assert activations["conv4_3_add"].dtype == tf.bfloat16
    assert model.classifier(features).dtype == tf.float32


def test_bf16_features_agree_with_float32_on_the_same_weights():
    f32 = network_definition.create_encoder()
    with model_lib.dtype_policy("mixed_bfloat16"):
        bf16 = network_definition.create_encoder()
    spread_kernels(f32, seed=5)
    bf16.set_weights(f32.get_weights())
    images = tf.random.uniform((8, 128, 64, 3), seed=6)
    a = f32(images, training=False).numpy()
    b = bf16(images, training=False).numpy()
    cosine = np.sum(a * b, axis=1)
    assert cosine.min() > 0.98, cosine


@pytest.mark.slow
@pytest.mark.parametrize("mixed_precision", ["bf16", "fp16"])
def test_mixed_precision_training_writes_float32_checkpoints(
        market_dir, tmp_path, mixed_precision):
    # float16 has no fast CPU kernels: one step of batch 16 takes a minute
    # here, so one step of batch 4
    steps, batch = (1, 4) if mixed_precision == "fp16" else (3, 16)
    config = small_config(market_dir, tmp_path, number_of_steps=steps,
                          batch_size=batch, images_per_id=2,
                          loss_mode="cosine-softmax",
                          mixed_precision=mixed_precision)
    result = training.train(MARKET, config)
    assert result.step == steps
    # a float32 encoder restores it: the weights stayed float32
    encoder = network_definition.create_encoder()
    checkpoints.restore(result.checkpoint, encoder=encoder)
    features = encoder(tf.random.uniform((2, 128, 64, 3)), training=False)
    assert features.dtype == tf.float32
    assert np.all(np.isfinite(features.numpy()))
    if mixed_precision == "fp16":
        optimizer = model_lib.create_optimizer(1e-3, "fp16")
        assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def test_unknown_mixed_precision_is_refused(market_dir, tmp_path):
    config = settings.TrainConfig(dataset_dir=market_dir,
                                   log_dir=str(tmp_path), run_id="run",
                                   mixed_precision="int8")
    with pytest.raises(UsageError, match="--mixed_precision=int8"):
        config.validate()
