"""Losses for cosine metric learning, and the registry of loss modes.

The loss functions are pure TensorFlow: they take integer ``labels`` of
shape (N,) and float ``features`` (or ``logits``) of shape (N, D) and
return scalar tensors. :data:`LOSS_MODES` says, for each ``--loss_mode``,
how its loss is computed, whether it needs the classifier head and with
which distance its features are evaluated; the model factory, the train
step, the progress line and the evaluators ask it. A new loss is one
entry there.
"""

import dataclasses
from typing import Callable

import tensorflow as tf

from cosine_metric_learning.errors import UsageError


@dataclasses.dataclass(frozen=True)
class LossMode:
    """One ``--loss_mode``.

    ``compute(labels, features, logits, label_smoothing=0.0,
    seen_together=None)`` returns ``(loss, monitors)``:
    the scalar loss and a dict of scalars for TensorBoard; ``logits`` is
    None unless ``needs_classifier``; ``seen_together`` (the pairs of labels
    known to be different people) is read by the triplet loss. Every mode whose needs are met is
    computed at each step, the ones not trained on as monitors.
    """
    name: str                # the --loss_mode value
    needs_classifier: bool   # trains the cosine-softmax head
    compute: Callable

    @property
    def summary_name(self):
        """``"cosine-softmax"`` -> ``"cosine_softmax_loss"``."""
        return self.name.replace("-", "_") + "_loss"


def pairwise_squared_distance(a, b):
    """Squared Euclidean distances ``d[i, j] = |a_i - b_j|^2``, shape (N, M)."""
    a2 = tf.reduce_sum(tf.square(a), axis=1, keepdims=True)
    b2 = tf.reduce_sum(tf.square(b), axis=1, keepdims=True)
    return a2 - 2.0 * tf.matmul(a, b, transpose_b=True) + tf.transpose(b2)


def cosine_softmax_loss(labels, logits, label_smoothing=0.0):
    """Mean softmax cross-entropy of the cosine-softmax logits; with
    ``label_smoothing`` ε, against targets of ``1 - ε + ε / C`` for the
    true class and ``ε / C`` for each other of the C classes (Szegedy et
    al. 2016; Luo et al. 2019's "bag of tricks")."""
    if not label_smoothing:
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(labels, tf.int64), logits=logits))
    num_classes = tf.shape(logits)[-1]
    targets = tf.one_hot(labels, num_classes, dtype=logits.dtype)
    targets = (1.0 - label_smoothing) * targets + label_smoothing / tf.cast(
        num_classes, logits.dtype)
    return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(
        labels=targets, logits=logits))


def additive_margin(logits, labels, margin):
    """The logits with ``margin`` subtracted from each sample's true-class
    logit only (CosFace, Wang et al. 2018; AM-softmax, Wang et al. 2018):
    ``s * (cos - m)`` for the true class. ``margin`` is ``s * m``, a scalar
    or one per sample."""
    return logits - tf.one_hot(labels, tf.shape(logits)[-1],
                               dtype=logits.dtype) * tf.reshape(
        tf.cast(margin, logits.dtype), (-1, 1))


def accuracy(labels, logits):
    """Fraction of samples whose arg-max logit is their label."""
    predicted = tf.argmax(logits, axis=1, output_type=tf.int64)
    return tf.reduce_mean(tf.cast(
        tf.equal(predicted, tf.cast(labels, tf.int64)), tf.float32))


def soft_margin_triplet_loss(labels, features, eps=1e-5, seen_together=None):
    """Soft-margin batch-hard triplet loss (Hermans, Beyer, Leibe 2017).

    ``seen_together`` (optional, bool ``(C, C)`` over the labels): only
    pairs of labels it marks are negatives, as where labels are tracklets
    and only tracklets seen in one frame are known to be different people
    (two tracklets of one person must not be pushed apart). An anchor without
    such a negative in the batch adds nothing.

    Returns
    -------
    (loss, diagnostics)
        ``loss`` is the mean of ``softplus(hardest_positive -
        hardest_negative)`` over the anchors that have a negative;
        ``diagnostics`` maps names to scalars for TensorBoard: fraction of
        active triplets (hardest positive farther than hardest negative),
        mean feature norm, mean, positive and negative distances, and with
        ``seen_together`` the fraction of anchors that have a negative.
    """
    # distances
    distances = tf.sqrt(tf.maximum(
        0.0, eps + pairwise_squared_distance(features, features)))
    same = tf.equal(labels[:, None], labels[None, :])
    if seen_together is None:
        negatives = tf.logical_not(same)
    else:
        seen_together = tf.convert_to_tensor(seen_together, tf.bool)
        negatives = tf.gather(tf.gather(seen_together, labels), labels, axis=1)
    # an anchor counts where its batch holds a negative of it
    counted = tf.reduce_any(negatives, axis=1)
    weights = tf.cast(counted, distances.dtype)

    # hardest positive: the farthest sample with the same label
    positive = tf.reduce_max(
        tf.where(same, distances, tf.zeros_like(distances)), axis=1)
    # hardest negative: the nearest sample of a label known to differ
    negative = tf.reduce_min(
        tf.where(negatives, distances,
                 tf.fill(tf.shape(distances), distances.dtype.max)), axis=1)
    negative = tf.where(counted, negative, positive)

    count = tf.maximum(tf.reduce_sum(weights), 1.0)
    loss = tf.reduce_sum(weights * tf.nn.softplus(positive - negative)) / count
    diagnostics = {
        "fraction_active_triplets": tf.reduce_sum(
            weights * tf.cast(positive > negative, tf.float32)) / count,
        "mean_feature_norm": tf.reduce_mean(tf.norm(features, axis=1)),
        "mean_distance": tf.reduce_mean(distances),
        "mean_positive_distance": tf.reduce_sum(weights * positive) / count,
        "mean_negative_distance": tf.reduce_sum(weights * negative) / count,
    }
    if seen_together is not None:
        diagnostics["fraction_with_negative"] = tf.reduce_mean(weights)
    return loss, diagnostics


def magnet_loss(labels, features, margin=1.0, eps=1e-4):
    """Unimodal magnet loss (Rippel et al. 2016) on the classes of the batch.

    Squared distances of samples to the batch class means, normalised by
    the variance of samples around their own mean; per sample
    ``max(0, -log(eps + A / (eps + B)))`` with ``A`` the own-class term and
    ``B`` the sum of the other-class terms of ``exp(linear - rowmax)``.
    """
    # class means of the batch
    unique_labels, class_index = tf.unique(labels)
    num_classes = tf.size(unique_labels)
    means = tf.math.unsorted_segment_mean(features, class_index, num_classes)
    own_class = tf.one_hot(class_index, num_classes, dtype=features.dtype)

    # squared distances to the means and the variance around own means
    d2 = pairwise_squared_distance(features, means)
    num_samples = tf.cast(tf.shape(features)[0], features.dtype)
    variance = tf.reduce_sum(own_class * d2) / (num_samples - 1.0)

    # own-class term A against other-class terms B
    linear = -d2 / (2.0 * (variance + eps)) - margin * own_class
    exponent = tf.exp(linear - tf.reduce_max(linear, axis=1, keepdims=True))
    a = tf.reduce_sum(own_class * exponent, axis=1)
    b = tf.reduce_sum((1.0 - own_class) * exponent, axis=1)
    return tf.reduce_mean(tf.maximum(0.0, -tf.math.log(eps + a / (eps + b))))


# The registry -----------------------------------------------------------------

def _cosine_softmax(labels, features, logits, label_smoothing=0.0, **_):
    return cosine_softmax_loss(labels, logits, label_smoothing), {
        "accuracy": accuracy(labels, logits)}


def _triplet(labels, features, logits, seen_together=None, **_):
    loss, diagnostics = soft_margin_triplet_loss(labels, features,
                                                 seen_together=seen_together)
    return loss, {f"triplet/{k}": v for k, v in diagnostics.items()}


def _magnet(labels, features, logits, **_):
    return magnet_loss(labels, features), {}


LOSS_MODES = {mode.name: mode for mode in (
    LossMode("cosine-softmax", True, _cosine_softmax),
    LossMode("triplet", False, _triplet),
    LossMode("magnet", False, _magnet),
)}


def get(name):
    """The :class:`LossMode` of ``--loss_mode=name``."""
    if name not in LOSS_MODES:
        raise UsageError(f"--loss_mode={name}: expected one of "
                         f"{', '.join(LOSS_MODES)}")
    return LOSS_MODES[name]


def compute_all(labels, features, logits, label_smoothing=0.0,
                seen_together=None):
    """Every mode's loss that can be computed: ``({summary_name: loss},
    monitors)``; with ``logits`` None, the classifier's are left out.
    ``label_smoothing`` applies to the classifier's loss, ``seen_together`` to
    the triplet loss's negatives."""
    terms, monitors = {}, {}
    for mode in LOSS_MODES.values():
        if mode.needs_classifier and logits is None:
            continue
        terms[mode.summary_name], more = mode.compute(
            labels, features, logits, label_smoothing=label_smoothing,
            seen_together=seen_together)
        monitors.update(more)
    return terms, monitors
