"""The encoder and the cosine-softmax head match the original's definition."""

import keras
import numpy as np
import tensorflow as tf

from cosine_metric_learning.nets.deep_sort import network_definition


def _encoder():
    return network_definition.create_encoder()


def test_trainable_parameter_count_matches_the_original():
    encoder = _encoder()
    count = sum(int(np.prod(w.shape)) for w in encoder.trainable_weights)
    assert count == 2_800_864


def test_batch_norm_has_offset_but_no_scale_and_slim_defaults():
    encoder = _encoder()
    norms = [l for l in encoder.layers
             if isinstance(l, keras.layers.BatchNormalization)]
    assert len(norms) == 14  # 2 stem, 5 pre-activations, 6 inner, 1 fc
    for layer in norms:
        assert layer.gamma is None and layer.beta is not None
        assert layer.momentum == 0.999 and layer.epsilon == 1e-3


def test_only_the_last_conv_of_each_residual_branch_has_a_bias():
    encoder = _encoder()
    blocks = ("conv2_1", "conv2_3", "conv3_1", "conv3_3", "conv4_1", "conv4_3")
    with_bias = {f"{block}_2" for block in blocks}
    for layer in encoder.layers:
        if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            assert (layer.bias is not None) == (layer.name in with_bias), \
                layer.name


def test_output_shapes_and_unit_norm_features():
    encoder = _encoder()
    assert encoder.get_layer("conv4_3_add").output.shape[1:] == (16, 8, 128)
    images = tf.random.uniform((3, 128, 64, 3), seed=1)
    for training in (False, True):
        features = encoder(images, training=training).numpy()
        assert features.shape == (3, 128)
        np.testing.assert_allclose(np.linalg.norm(features, axis=1), 1.0,
                                   rtol=1e-5)


def test_weight_decay_is_slim_l2_of_1e_8():
    encoder = _encoder()
    kernels = [l.kernel.numpy() for l in encoder.layers
               if isinstance(l, (keras.layers.Conv2D, keras.layers.Dense))]
    assert len(kernels) == len(encoder.losses) == 17
    expected = sum(1e-8 * np.sum(k.astype(np.float64) ** 2) / 2 for k in kernels)
    actual = float(tf.add_n(encoder.losses))
    np.testing.assert_allclose(actual, expected, rtol=1e-4)


def test_kernels_start_from_truncated_normal_with_stddev_1e_3():
    kernel = _encoder().get_layer("fc1").kernel.numpy()
    assert np.abs(kernel).max() <= 2e-3 + 1e-9
    # a normal truncated at 2 sigma has std 0.88 sigma
    np.testing.assert_allclose(kernel.std(), 0.88e-3, rtol=0.05)


def test_cosine_head_logits_match_numpy():
    classifier = network_definition.create_classifier(7)
    head = classifier.get_layer("ball")
    rng = np.random.default_rng(0)
    head.mean_vectors.assign(rng.normal(size=(128, 7)).astype(np.float32))
    head.scale.assign(1.5)
    features = rng.normal(size=(4, 128)).astype(np.float32)
    features /= np.linalg.norm(features, axis=1, keepdims=True)

    means = head.mean_vectors.numpy()
    means = means / np.linalg.norm(means, axis=0, keepdims=True)
    expected = np.log1p(np.exp(1.5)) * features @ means
    np.testing.assert_allclose(classifier(features).numpy(), expected,
                               rtol=1e-5, atol=1e-6)
    # the scale's decay is slim l2_regularizer(1e-1) on the raw value
    np.testing.assert_allclose(float(tf.add_n(classifier.losses)),
                               0.1 * 1.5 ** 2 / 2, rtol=1e-6)


def test_cosine_head_starts_at_the_given_logit_scale():
    for scale in (network_definition.ORIGINAL_LOGIT_SCALE, 10.0, 30.0):
        head = network_definition.create_classifier(
            7, initial_scale=scale).get_layer("ball")
        np.testing.assert_allclose(float(tf.nn.softplus(head.scale)), scale,
                                   rtol=1e-6)
    original = network_definition.create_classifier(7).get_layer("ball")
    assert float(original.scale) == 0.0  # the original's softplus(0)


def test_batch_norm_moving_averages_update_in_training():
    encoder = _encoder()
    bn = encoder.get_layer("fc1_bn")
    before = bn.moving_variance.numpy().copy()
    encoder(tf.random.uniform((8, 128, 64, 3), seed=2), training=True)
    after = bn.moving_variance.numpy()
    assert not np.allclose(before, after)
    # momentum 0.999: one step moves the average by 0.1 % of the gap
    assert np.max(np.abs(after - before)) < 2e-3 * np.max(np.abs(before))


def test_train_from_freezes_the_layers_before_it():
    import pytest
    from cosine_metric_learning import model as model_lib
    from cosine_metric_learning.errors import ArgumentError
    encoder = network_definition.create_encoder()
    every = len(encoder.trainable_variables)
    model_lib.train_from(encoder, "fc1")
    # fc1's kernel and its batch norm's offset: what the head trains
    assert sorted(v.path for v in encoder.trainable_variables) == [
        "fc1/kernel", "fc1_bn/beta"]
    assert every > 2
    with pytest.raises(ArgumentError) as error:
        model_lib.train_from(network_definition.create_encoder(), "fc9")
    message = error.value.for_flags({"train_from": "--train_from"})
    assert message.startswith("--train_from=fc9: expected a layer of the "
                              "encoder: conv1_1")
    assert "fc1" in message


def test_reestimated_batch_norm_holds_each_layers_input_statistics():
    from cosine_metric_learning import model as model_lib
    inputs = keras.Input((4,))
    first = keras.layers.Dense(3, use_bias=False, name="first")
    second = keras.layers.Dense(2, use_bias=False, name="second")
    norm1 = keras.layers.BatchNormalization(epsilon=1e-3, name="norm1")
    norm2 = keras.layers.BatchNormalization(epsilon=1e-3, name="norm2")
    dropout = keras.layers.Dropout(0.5)
    outputs = norm2(second(dropout(norm1(first(inputs)))))
    model = keras.Model(inputs, outputs)
    rng = np.random.default_rng(0)
    images = (rng.normal(size=(37, 4)) * [1, 2, 3, 4] + 5).astype(np.float32)
    w1, w2 = first.get_weights()[0], second.get_weights()[0]
    beta = np.array([0.5, -1.0, 2.0], np.float32)  # an offset learnt
    norm1.beta.assign(beta)
    names = model_lib.reestimate_batch_norm(model, images, batch_size=8)
    assert names == ["norm1", "norm2"]
    # by hand, in float64: the first layer's inputs, then the second's
    # through the first normalised with its new statistics, no dropout
    x1 = images.astype(np.float64) @ w1
    mean1, var1 = x1.mean(0), x1.var(0)
    x2 = ((x1 - mean1) / np.sqrt(var1 + 1e-3) + beta) @ w2
    np.testing.assert_allclose(norm1.moving_mean.numpy(), mean1, rtol=1e-5)
    np.testing.assert_allclose(norm1.moving_variance.numpy(), var1,
                               rtol=1e-4)
    np.testing.assert_allclose(norm2.moving_mean.numpy(), x2.mean(0),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(norm2.moving_variance.numpy(), x2.var(0),
                               rtol=1e-4)
    # the weights are untouched
    np.testing.assert_array_equal(first.get_weights()[0], w1)
