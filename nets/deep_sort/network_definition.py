"""The Deep SORT appearance descriptor and its cosine-softmax classifier.

The encoder maps preprocessed float images (values in [0, 1], RGB) of shape
``(128, 64, 3)`` to L2-normalised 128-d features. The classifier is kept as
a separate model so a checkpoint stores ``encoder`` and ``classifier`` apart
and the classifier can be left out when fine-tuning on other identities.

The networks (:data:`NETWORKS`): ``deep_sort``, the paper's, which this
project trains (``deep_sort_bnneck`` with ``--bnneck``); and
``mars_small128``, the earlier one of Deep SORT's published model,
configured by what differs (:class:`Network`). Both take
images in [0, 1]; the release's network scales them to [0, 255] itself.
"""

import dataclasses
import math
from typing import Optional

import keras
import tensorflow as tf

from cosine_metric_learning.nets.deep_sort import residual_net

IMAGE_SHAPE = (128, 64, 3)
FEATURE_DIM = 128

# softplus(0): the original's logit scale at the start of training
ORIGINAL_LOGIT_SCALE = math.log(2.0)
# training's default start: about the smallest scale at which a softmax over
# 1,502 classes can give the true class 0.9 (NormFace, Wang et al. 2017:
# s >= (C - 1) / C * log((C - 1) * 0.9 / 0.1) = 9.5); at 0.69 it cannot
# exceed 0.003, and Adam raises the scale by about the learning rate a step
DEFAULT_LOGIT_SCALE = 10.0

# Layers whose outputs are logged as activation histograms.
ACTIVATION_LAYERS = ("conv1_1_elu", "conv1_2_elu", "pool1", "conv2_3_add",
                     "conv3_3_add", "conv4_3_add", "fc1_elu")


@dataclasses.dataclass(frozen=True)
class Network:
    """What distinguishes a network of the descriptor from the paper's.

    Attributes
    ----------
    name : str
        As run.json records it.
    pool1_padding : str
        ``"same"`` (64x32 after pool1), or ``"valid"`` (63x31).
    ball_batch_norm : bool
        A batch norm (offset, no scale) on fc1's output, in the ``ball``
        scope, before the normalisation.
    normalisation_epsilon : float or None
        Features are ``x / sqrt(epsilon + sum(x**2))``; None: Keras'
        ``UnitNormalization`` (``tf.math.l2_normalize``).
    per_class_scale : bool
        The cosine head's scale is one per class, not a scalar.
    input_scale : float
        The network's first step multiplies the [0, 1] images by it.
    """
    name: str
    pool1_padding: str = "same"
    ball_batch_norm: bool = False
    normalisation_epsilon: Optional[float] = None
    per_class_scale: bool = False
    input_scale: float = 1.0


DEEP_SORT = Network("deep_sort")
# the paper's with a batch norm before the normalisation (a "BNNeck",
# Luo et al. 2019): --bnneck
DEEP_SORT_BNNECK = Network("deep_sort_bnneck", ball_batch_norm=True)
# Deep SORT's mars-small128 (resources/networks/): trained on MARS
MARS_SMALL128 = Network("mars_small128", pool1_padding="valid",
                        ball_batch_norm=True, normalisation_epsilon=1e-8,
                        per_class_scale=True, input_scale=255.0)
NETWORKS = {n.name: n for n in (DEEP_SORT, DEEP_SORT_BNNECK, MARS_SMALL128)}


def get_network(name):
    """The :class:`Network` of a name; ValueError naming the known ones."""
    if name not in NETWORKS:
        raise ValueError(f"network={name!r}: expected one of "
                         f"{', '.join(NETWORKS)}")
    return NETWORKS[name]


@keras.saving.register_keras_serializable("cosine_metric_learning")
class Normalisation(keras.layers.Layer):
    """``x / sqrt(epsilon + sum(x**2))`` over the last axis, in float32."""

    def __init__(self, epsilon, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)

    def call(self, x):
        x = tf.cast(x, tf.float32)
        return x * tf.math.rsqrt(self.epsilon + tf.reduce_sum(
            tf.square(x), axis=-1, keepdims=True))

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


def create_encoder(image_shape=IMAGE_SHAPE, feature_dim=FEATURE_DIM,
                   name="encoder", network=DEEP_SORT):
    """Build the residual encoder network (``network``: a
    :class:`Network` or its name).

    Returns
    -------
    keras.Model
        Maps float32 images ``(N, H, W, 3)`` in [0, 1] to L2-normalised
        features ``(N, feature_dim)``. Call with ``training=True`` for batch
        statistics and dropout.
    """
    if isinstance(network, str):
        network = get_network(network)
    images = keras.Input(shape=image_shape, name="images")
    x = images
    if network.input_scale != 1.0:
        x = keras.layers.Rescaling(network.input_scale, name="input_scale")(x)
    x = residual_net.conv_bn_elu(x, 32, 1, name="conv1_1")
    x = residual_net.conv_bn_elu(x, 32, 1, name="conv1_2")
    x = keras.layers.MaxPooling2D(3, strides=2,
                                  padding=network.pool1_padding,
                                  name="pool1")(x)

    x = residual_net.residual_block(x, "conv2_1", is_first=True)
    x = residual_net.residual_block(x, "conv2_3")
    x = residual_net.residual_block(x, "conv3_1", increase_dim=True)
    x = residual_net.residual_block(x, "conv3_3")
    x = residual_net.residual_block(x, "conv4_1", increase_dim=True)
    x = residual_net.residual_block(x, "conv4_3")

    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dropout(residual_net.DROPOUT_RATE, name="fc1_dropout")(x)
    x = keras.layers.Dense(
        feature_dim, use_bias=False,
        kernel_initializer=residual_net.kernel_initializer(),
        kernel_regularizer=residual_net.kernel_regularizer(), name="fc1")(x)
    x = residual_net.batch_norm("fc1_bn")(x)
    x = keras.layers.Activation("elu", name="fc1_elu")(x)
    if network.ball_batch_norm:
        x = residual_net.batch_norm("ball_bn")(x)
    # float32 whatever the dtype policy: the features leave the network
    if network.normalisation_epsilon is None:
        features = keras.layers.UnitNormalization(axis=-1, name="features",
                                                  dtype="float32")(x)
    else:
        features = Normalisation(network.normalisation_epsilon,
                                 name="features", dtype="float32")(x)
    return keras.Model(images, features, name=name)


def create_activation_model(encoder):
    """A model sharing the encoder's layers that also returns activations.

    Returns
    -------
    keras.Model
        Outputs ``[features, {layer_name: activation}]``; one forward pass
        gives both the training features and the histogram summaries.
    """
    activations = {name: encoder.get_layer(name).output
                   for name in ACTIVATION_LAYERS}
    return keras.Model(encoder.inputs, [encoder.outputs[0], activations],
                       name=f"{encoder.name}_with_activations")


class CosineSoftmaxHead(keras.layers.Layer):
    """Cosine-softmax classifier (the original's ``ball`` scope).

    ``logits = softplus(scale) * features @ normalize(mean_vectors)``, where
    every column of ``mean_vectors`` is L2-normalised and ``scale`` is a
    scalar (``per_class_scale``: one per class) with L2 decay 1e-1 in slim's
    convention (Keras ``L2(0.05)``).
    """

    def __init__(self, num_classes, initial_scale=ORIGINAL_LOGIT_SCALE,
                 per_class_scale=False, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = int(num_classes)
        if not initial_scale > 0:
            raise ValueError(f"initial_scale={initial_scale}: expected > 0")
        self.initial_scale = float(initial_scale)
        self.per_class_scale = bool(per_class_scale)

    def build(self, input_shape):
        self.mean_vectors = self.add_weight(
            name="mean_vectors", shape=(int(input_shape[-1]), self.num_classes),
            initializer=keras.initializers.TruncatedNormal(stddev=1e-3))
        self.scale = self.add_weight(
            # the raw value whose softplus is initial_scale
            name="scale",
            shape=(self.num_classes,) if self.per_class_scale else (),
            initializer=keras.initializers.Constant(
                math.log(math.expm1(self.initial_scale))),
            regularizer=keras.regularizers.L2(0.05))

    def call(self, features):
        mean_vectors = tf.math.l2_normalize(self.mean_vectors, axis=0)
        return tf.nn.softplus(self.scale) * tf.matmul(features, mean_vectors)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes,
                "initial_scale": self.initial_scale,
                "per_class_scale": self.per_class_scale}


def create_classifier(num_classes, feature_dim=FEATURE_DIM, name="classifier",
                      initial_scale=ORIGINAL_LOGIT_SCALE, network=DEEP_SORT):
    """The cosine-softmax head as a model of its own: features -> logits;
    ``initial_scale`` is softplus(scale) before training."""
    if isinstance(network, str):
        network = get_network(network)
    features = keras.Input(shape=(feature_dim,), name="features")
    # the normalisations and the softmax stay float32 under mixed precision
    logits = CosineSoftmaxHead(num_classes, initial_scale,
                               network.per_class_scale, name="ball",
                               dtype="float32")(features)
    return keras.Model(features, logits, name=name)
