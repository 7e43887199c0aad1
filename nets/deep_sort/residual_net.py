"""Building blocks of the Deep SORT residual network (Keras 3, functional).

The numeric defaults carry over the TF1/slim behaviour of the original:
batch norm learns an offset but no scale, uses momentum 0.999 and epsilon
1e-3; a convolution followed by batch norm has no bias; kernels start from a
truncated normal with stddev 1e-3; slim's ``l2_regularizer(1e-8)`` adds
``1e-8 * sum(w**2) / 2``, which is Keras ``L2(5e-9)``.
"""

import keras

WEIGHT_DECAY = 1e-8
DROPOUT_RATE = 0.4  # the original's keep probability 0.6


def kernel_initializer():
    return keras.initializers.TruncatedNormal(stddev=1e-3)


def kernel_regularizer():
    # slim l2_regularizer(scale) == scale * sum(w ** 2) / 2.
    return keras.regularizers.L2(WEIGHT_DECAY / 2.0)


def batch_norm(name):
    return keras.layers.BatchNormalization(
        momentum=0.999, epsilon=1e-3, center=True, scale=False, name=name)


def conv(x, filters, kernel_size, strides, use_bias, name):
    return keras.layers.Conv2D(
        filters, kernel_size, strides=strides, padding="same",
        use_bias=use_bias, kernel_initializer=kernel_initializer(),
        bias_initializer="zeros", kernel_regularizer=kernel_regularizer(),
        name=name)(x)


def conv_bn_elu(x, filters, strides, name):
    """3x3 convolution without bias, batch norm, ELU."""
    x = conv(x, filters, 3, strides, use_bias=False, name=name)
    x = batch_norm(f"{name}_bn")(x)
    return keras.layers.Activation("elu", name=f"{name}_elu")(x)


def residual_block(x, name, increase_dim=False, is_first=False):
    """Pre-activation residual block ``link(x) + F(x)``.

    Parameters
    ----------
    x : KerasTensor
        Block input (N, H, W, C).
    name : str
        Scope name, e.g. ``"conv2_1"``; layers are named after it.
    increase_dim : bool
        If True, F halves the spatial size and doubles the width and the
        link is a 1x1 stride-2 projection without bias or activation.
    is_first : bool
        The first block takes its input as is (the stem already ends in
        batch norm + ELU); every other block starts with batch norm + ELU.
    """
    in_filters = x.shape[-1]
    filters = 2 * in_filters if increase_dim else in_filters
    strides = 2 if increase_dim else 1

    y = x
    if not is_first:
        y = batch_norm(f"{name}_preact_bn")(y)
        y = keras.layers.Activation("elu", name=f"{name}_preact_elu")(y)
    y = conv_bn_elu(y, filters, strides, name=f"{name}_1")
    y = keras.layers.Dropout(DROPOUT_RATE, name=f"{name}_dropout")(y)
    y = conv(y, filters, 3, 1, use_bias=True, name=f"{name}_2")

    link = x
    if increase_dim:
        link = conv(x, filters, 1, 2, use_bias=False, name=f"{name}_projection")
    return keras.layers.Add(name=f"{name}_add")([link, y])
