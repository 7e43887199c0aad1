"""What a training step computes: the networks of a loss mode, the optimizer
and the step function (forward pass, losses, gradients, update)."""

import contextlib
import dataclasses
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from cosine_metric_learning import losses, preprocessing
from cosine_metric_learning import summaries as summaries_lib
from cosine_metric_learning.nets.deep_sort import network_definition

# --mixed_precision -> Keras dtype policy of the network's layers
MIXED_PRECISION_POLICIES = {"none": "float32", "bf16": "mixed_bfloat16",
                            "fp16": "mixed_float16"}


@dataclasses.dataclass(frozen=True)
class Tricks:
    """Training options beyond the original's, each off at its default
    (the recipes of ``settings.RECIPES`` set them).

    Attributes
    ----------
    warmup_steps : int
        The learning rate rises linearly from a tenth of its value to it
        over these steps (:class:`WarmUp`).
    random_erasing : float
        The probability that a training image gets a rectangle of noise
        (:func:`preprocessing.random_erasing`).
    label_smoothing : float
        ε of the cosine-softmax's smoothed targets
        (:func:`losses.cosine_softmax_loss`).
    cosine_margin : float
        m subtracted from the true class's cosine before the scale
        (:func:`losses.additive_margin`).
    imprint : bool
        A new classifier's mean vectors start at the mean features of each
        class's training images under the starting encoder
        (:func:`imprint`), not at random.
    triplet_weight : float
        The soft-margin batch-hard triplet loss of the features, times this,
        is added to the trained loss (cosine-softmax's or magnet's;
        :func:`losses.soft_margin_triplet_loss`).
    """
    warmup_steps: int = 0
    random_erasing: float = 0.0
    label_smoothing: float = 0.0
    cosine_margin: float = 0.0
    imprint: bool = False
    triplet_weight: float = 0.0

    def added_triplet_weight(self, loss_mode):
        """The weight of the triplet loss added to ``loss_mode``'s: 0 when
        that is the triplet loss itself."""
        return 0.0 if loss_mode == "triplet" else self.triplet_weight


@keras.saving.register_keras_serializable("cosine_metric_learning")
class WarmUp(keras.optimizers.schedules.LearningRateSchedule):
    """``learning_rate * (0.1 + 0.9 * step / warmup_steps)`` for the first
    ``warmup_steps`` steps, then ``learning_rate`` (Goyal et al. 2017; Luo
    et al. 2019 warm up from a tenth)."""

    def __init__(self, learning_rate, warmup_steps):
        self.learning_rate = float(learning_rate)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        fraction = tf.cast(step, tf.float32) / float(self.warmup_steps)
        return self.learning_rate * tf.minimum(1.0, 0.1 + 0.9 * fraction)

    def get_config(self):
        return {"learning_rate": self.learning_rate,
                "warmup_steps": self.warmup_steps}


@dataclasses.dataclass
class TrainingModel:
    """The networks a loss mode trains; the classifier only if it needs one."""

    encoder: keras.Model
    activation_model: keras.Model
    classifier: Optional[keras.Model]

    @property
    def models(self):
        """The models with weights: the encoder and the classifier, if any."""
        return [m for m in (self.encoder, self.classifier) if m is not None]

    @property
    def trainable_variables(self):
        return [v for m in self.models for v in m.trainable_variables]

    @property
    def variables(self):
        """All weights, batch-norm statistics included."""
        return [v for m in self.models for v in m.variables]

    def weight_loss(self):
        return tf.add_n([term for m in self.models for term in m.losses])


IMPRINT_IMAGES = 8  # training images per identity that --imprint encodes


def imprint(classifier, features, labels):
    """Set each class's mean vector of the cosine-softmax ``classifier``
    to the normalised mean of its rows of ``features`` ``(N, D)``
    (``labels`` ``(N,)``, class indices): "imprinted weights" (Qi et al.
    2018). A class without rows keeps its vector. Returns the number of
    classes set."""
    head = classifier.get_layer("ball")
    vectors = head.mean_vectors.numpy()
    features = np.asarray(features, np.float64)
    labels = np.asarray(labels)
    classes = np.unique(labels)
    for label in classes:
        mean = features[labels == label].mean(axis=0)
        norm = np.linalg.norm(mean)
        if norm > 0:  # features that cancel out say nothing: kept random
            vectors[:, label] = mean / norm
    head.mean_vectors.assign(vectors)
    return len(classes)


@contextlib.contextmanager
def dtype_policy(name):
    """Build layers under a Keras dtype policy, restoring the old one."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def create_model(dataset, loss_mode, mixed_precision="none",
                 initial_logit_scale=network_definition.DEFAULT_LOGIT_SCALE):
    """The encoder and, if the loss mode needs it, the classifier head
    (its logit scale starting at ``initial_logit_scale``).

    With mixed precision the layers compute in bfloat16 or float16 and keep
    float32 weights; the features and the classifier stay float32.
    """
    with dtype_policy(MIXED_PRECISION_POLICIES[mixed_precision]):
        encoder = network_definition.create_encoder(
            dataset.image_shape, network=dataset.network)
        classifier = None
        if losses.get(loss_mode).needs_classifier:
            classifier = network_definition.create_classifier(
                dataset.num_classes, initial_scale=initial_logit_scale,
                network=dataset.network)
        activations = network_definition.create_activation_model(encoder)
    return TrainingModel(encoder, activations, classifier)


def train_from(encoder, name):
    """Freeze the layers of ``encoder`` before the layer ``name`` (their
    weights and batch-norm statistics stay as they are); None trains them
    all. ArgumentError for a name the encoder has no layer of."""
    if name is None:
        return
    names = [layer.name for layer in encoder.layers]
    if name not in names:
        from cosine_metric_learning.errors import ArgumentError
        weighted = [layer.name for layer in encoder.layers if layer.weights]
        raise ArgumentError("train_from", name, "expected a layer of the "
                            "encoder: " + ", ".join(weighted))
    for layer in encoder.layers[:names.index(name)]:
        layer.trainable = False


def reestimate_batch_norm(encoder, images, batch_size=64):
    """Set every batch-norm layer's moving mean and variance of
    ``encoder`` to those of its inputs over ``images`` (float32 network
    inputs ``(N, H, W, 3)``), layer after layer in the network's order,
    each from the inputs the layers before it give once re-estimated
    (inference mode: no dropout). The weights stay as they are; the
    features then see ``images``' statistics, not the training set's.
    Returns the layers' names."""
    layers = [layer for layer in encoder.layers
              if isinstance(layer, keras.layers.BatchNormalization)]
    for layer in layers:
        inputs = tf.function(keras.Model(encoder.input, layer.input))
        count, total, squares = 0, 0.0, 0.0
        for start in range(0, len(images), batch_size):
            x = tf.cast(inputs(images[start:start + batch_size],
                               training=False), tf.float64)
            axes = list(range(len(x.shape) - 1))
            count += x.shape.num_elements() // x.shape[-1]
            total += tf.reduce_sum(x, axes)
            squares += tf.reduce_sum(tf.square(x), axes)
        mean = total / count
        variance = tf.maximum(squares / count - tf.square(mean), 0.0)
        layer.moving_mean.assign(tf.cast(mean, layer.moving_mean.dtype))
        layer.moving_variance.assign(
            tf.cast(variance, layer.moving_variance.dtype))
    return [layer.name for layer in layers]


def create_optimizer(learning_rate, mixed_precision="none", warmup_steps=0):
    """Adam with TF1's defaults (epsilon 1e-8, not Keras' 1e-7), the
    learning rate warmed up over ``warmup_steps`` (:class:`WarmUp`); with
    fp16, wrapped in dynamic loss scaling."""
    if warmup_steps:
        learning_rate = WarmUp(learning_rate, warmup_steps)
    optimizer = keras.optimizers.Adam(learning_rate=learning_rate,
                                      beta_1=0.9, beta_2=0.999, epsilon=1e-8)
    if mixed_precision == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def make_train_step(model, optimizer, loss_mode, step, summaries=False,
                    tricks=Tricks(), seen_together=None):
    """One optimisation step on a batch; wrap it in a ``tf.function``.
    ``tricks`` (:class:`Tricks`) adds random erasing to the images, the
    margin to the logits, the smoothing to the cosine-softmax loss and the
    weighted triplet loss to it; ``seen_together`` (bool ``(C, C)``, the
    dataset's :attr:`~datasets.spec.DatasetSpec.seen_together`) limits the
    triplet loss's negatives to the pairs of labels it marks.

    Returns
    -------
    callable
        ``step_fn(images, labels) -> dict`` of ``scalars``: every loss the
        model can compute, the weight loss, the losses' monitors and the
        classifier's scale. With ``summaries`` also, for TensorBoard, the
        first ``summaries.SUMMARY_IMAGES`` input images under ``images``
        and a bounded sample of every activation under ``activations``
        (``summaries.sample_values``): a step without summaries returns
        nothing of the batch's size.
    """
    variables = model.trainable_variables
    trained = losses.get(loss_mode).summary_name
    triplet_weight = tricks.added_triplet_weight(loss_mode)
    if seen_together is not None:
        seen_together = tf.constant(seen_together, tf.bool)

    def step_fn(images, labels):
        if tricks.random_erasing:
            images, _ = preprocessing.random_erasing(images,
                                                     tricks.random_erasing)
        with tf.GradientTape() as tape:
            if summaries:
                features, activations = model.activation_model(
                    images, training=True)
            else:
                features = model.encoder(images, training=True)
            logits = scale = None
            if model.classifier is not None:
                logits = model.classifier(features, training=True)
                scale = tf.nn.softplus(
                    model.classifier.get_layer("ball").scale)
                if tricks.cosine_margin:
                    logits = losses.additive_margin(
                        logits, labels, tricks.cosine_margin * (
                            tf.gather(scale, labels) if scale.shape.rank
                            else scale))  # a scale per class, or one
            terms, metrics = losses.compute_all(labels, features, logits,
                                                tricks.label_smoothing,
                                                seen_together)
            if scale is not None:
                # the mean where the network has a scale per class
                metrics["scale"] = tf.reduce_mean(scale)
            weight_loss = tf.cast(model.weight_loss(), tf.float32)
            total = terms[trained] + weight_loss
            if triplet_weight:
                total += triplet_weight * terms["triplet_loss"]
            # replicas' gradients are summed: each contributes its share
            replicas = tf.distribute.get_replica_context().num_replicas_in_sync
            scaled = total / replicas
            if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
                scaled = optimizer.scale_loss(scaled)
        gradients = tape.gradient(scaled, variables)
        optimizer.apply_gradients(zip(gradients, variables))
        step.assign_add(1)
        metrics.update({f"losses/{k}": v for k, v in terms.items()})
        metrics["losses/weight_loss"] = weight_loss
        metrics["losses/total_loss"] = total
        if not summaries:
            return {"scalars": metrics}
        return {"scalars": metrics,
                "images": images[:summaries_lib.SUMMARY_IMAGES],
                "activations": {name: summaries_lib.sample_values(value)
                                for name, value in activations.items()}}

    return step_fn
