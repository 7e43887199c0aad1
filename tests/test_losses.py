"""Each loss against an independent NumPy computation on hand-made batches."""

import numpy as np
import pytest
import tensorflow as tf

from cosine_metric_learning import losses


def _batch(seed=0, num_ids=3, per_id=3, dim=5):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(num_ids) * 7 + 2, per_id).astype(np.int64)
    features = rng.normal(size=(len(labels), dim)).astype(np.float32)
    return labels, features


def _softplus(x):
    return np.log1p(np.exp(x))


def test_cosine_softmax_loss_and_accuracy_match_numpy():
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0], [1.0, 1.0, 0.0],
                       [0.0, 4.0, 1.0]], np.float32)
    labels = np.array([0, 1, 1, 1], np.int64)
    log_prob = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = -np.mean(log_prob[np.arange(4), labels])
    np.testing.assert_allclose(
        float(losses.cosine_softmax_loss(labels, logits)), expected, rtol=1e-6)
    # arg-max predictions: 0, 2, 0 (first of a tie), 1 -> two right
    assert float(losses.accuracy(labels, logits)) == pytest.approx(0.5)


def test_label_smoothing_spreads_the_targets_and_sums_to_one():
    logits = np.array([[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 3.0, 1.0]],
                      np.float32)
    labels = np.array([0, 2], np.int64)
    eps, classes = 0.1, 4
    targets = np.full((2, classes), eps / classes)
    targets[np.arange(2), labels] += 1 - eps
    np.testing.assert_allclose(targets.sum(axis=1), 1.0)
    log_prob = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = -np.mean((targets * log_prob).sum(axis=1))
    np.testing.assert_allclose(
        float(losses.cosine_softmax_loss(labels, logits, eps)), expected,
        rtol=1e-6)
    # no smoothing: the plain cross-entropy of the true class
    np.testing.assert_allclose(
        float(losses.cosine_softmax_loss(labels, logits, 0.0)),
        -np.mean(log_prob[np.arange(2), labels]), rtol=1e-6)


def test_the_margin_lowers_the_true_class_logit_only():
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]], np.float32)
    labels = np.array([1, 2], np.int64)
    # s * m per sample (a scale per class gathered by label), or one
    margins = np.array([0.3, 0.5], np.float32)
    result = losses.additive_margin(logits, labels, margins).numpy()
    expected = logits.copy()
    expected[0, 1] -= 0.3
    expected[1, 2] -= 0.5
    np.testing.assert_allclose(result, expected, rtol=1e-6)
    scalar = losses.additive_margin(logits, labels, 0.25).numpy()
    assert (scalar != logits).sum() == 2
    np.testing.assert_allclose(scalar[[0, 1], [1, 2]],
                               logits[[0, 1], [1, 2]] - 0.25, rtol=1e-6)


def test_triplet_loss_on_points_worked_out_by_hand():
    # Two identities on a line: A at 0 and 1, B at 3 and 6.
    features = np.array([[0.0], [1.0], [3.0], [6.0]], np.float32)
    labels = np.array([0, 0, 1, 1], np.int64)
    # hardest positive / negative distances per anchor
    positive = np.array([1.0, 1.0, 3.0, 3.0])
    negative = np.array([3.0, 2.0, 2.0, 5.0])
    expected = np.mean(_softplus(positive - negative))
    loss, diag = losses.soft_margin_triplet_loss(labels, features, eps=0.0)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    # anchor 2 (B at 3) has its positive farther than its negative
    assert float(diag["fraction_active_triplets"]) == pytest.approx(0.25)
    assert float(diag["mean_positive_distance"]) == pytest.approx(2.0)
    assert float(diag["mean_negative_distance"]) == pytest.approx(3.0)


def test_only_labels_known_to_differ_are_negatives():
    # Three tracklets on a line: A at 0 and 1, B at 3 and 6, C at 1.5 and
    # 2. A and B were seen in one frame; C, seen with neither, may be
    # either's person, so it is no one's negative.
    features = np.array([[0.0], [1.0], [3.0], [6.0], [1.5], [2.0]],
                        np.float32)
    labels = np.array([0, 0, 1, 1, 2, 2], np.int64)
    seen_together = np.zeros((3, 3), bool)
    seen_together[0, 1] = seen_together[1, 0] = True
    loss, diag = losses.soft_margin_triplet_loss(labels, features, eps=0.0,
                                                 seen_together=seen_together)
    # anchors of A and B as without C; C's anchors have no negative
    positive = np.array([1.0, 1.0, 3.0, 3.0])
    negative = np.array([3.0, 2.0, 2.0, 5.0])
    np.testing.assert_allclose(float(loss), np.mean(_softplus(
        positive - negative)), rtol=1e-5)
    assert float(diag["fraction_with_negative"]) == pytest.approx(4 / 6)
    assert float(diag["fraction_active_triplets"]) == pytest.approx(0.25)
    # every label a negative of every other: C is A's and B's nearest
    everyone = ~np.eye(3, dtype=bool)
    loss_all, _ = losses.soft_margin_triplet_loss(labels, features, eps=0.0,
                                                  seen_together=everyone)
    plain, _ = losses.soft_margin_triplet_loss(labels, features, eps=0.0)
    assert float(loss_all) == pytest.approx(float(plain), rel=1e-6)
    assert float(loss_all) > float(loss)
    # nobody known to differ: nothing to learn, no NaN
    nobody, diag = losses.soft_margin_triplet_loss(
        labels, features, seen_together=np.zeros((3, 3), bool))
    assert float(nobody) == 0.0
    assert float(diag["fraction_with_negative"]) == 0.0


def _triplet_numpy(labels, features, eps=1e-5, seen_together=None):
    n = len(labels)
    terms = []
    for i in range(n):
        d = [np.sqrt(max(0.0, eps + np.sum((features[i] - features[j]) ** 2)))
             for j in range(n)]
        pos = max(d[j] for j in range(n) if labels[j] == labels[i])
        negatives = [d[j] for j in range(n) if labels[j] != labels[i] and (
            seen_together is None or seen_together[labels[i], labels[j]])]
        if negatives:
            terms.append(_softplus(pos - min(negatives)))
    return np.mean(terms)


def test_triplet_loss_matches_a_loop_on_random_batches():
    for seed in range(3):
        labels, features = _batch(seed)
        loss, _ = losses.soft_margin_triplet_loss(labels, features)
        np.testing.assert_allclose(float(loss), _triplet_numpy(
            labels, features.astype(np.float64)), rtol=1e-4)
        # half the pairs of labels known to differ
        rng = np.random.default_rng(seed)
        num = labels.max() + 1
        seen_together = np.triu(rng.random((num, num)) < 0.5, 1)
        seen_together |= seen_together.T
        loss, _ = losses.soft_margin_triplet_loss(labels, features,
                                                  seen_together=seen_together)
        np.testing.assert_allclose(float(loss), _triplet_numpy(
            labels, features.astype(np.float64), seen_together=seen_together),
            rtol=1e-4)


def _magnet_numpy(labels, features, margin=1.0, eps=1e-4):
    classes = sorted(set(labels.tolist()))
    means = {c: features[labels == c].mean(axis=0) for c in classes}
    n = len(labels)
    d2 = np.array([[np.sum((features[i] - means[c]) ** 2) for c in classes]
                   for i in range(n)])
    own = np.array([[labels[i] == c for c in classes] for i in range(n)],
                   np.float64)
    variance = np.sum(d2 * own) / (n - 1)
    per_sample = []
    for i in range(n):
        linear = -d2[i] / (2 * (variance + eps)) - margin * own[i]
        e = np.exp(linear - linear.max())
        a = sum(e[k] for k in range(len(classes)) if own[i, k])
        b = sum(e[k] for k in range(len(classes)) if not own[i, k])
        per_sample.append(max(0.0, -np.log(eps + a / (eps + b))))
    return np.mean(per_sample)


def test_magnet_loss_matches_a_loop_on_random_batches():
    for seed in range(3):
        labels, features = _batch(seed, num_ids=4, per_id=2)
        # labels out of sorted order exercise the unique-label mapping
        order = np.random.default_rng(seed).permutation(len(labels))
        labels, features = labels[order], features[order]
        np.testing.assert_allclose(
            float(losses.magnet_loss(labels, features)),
            _magnet_numpy(labels, features.astype(np.float64)), rtol=1e-4)


def test_magnet_loss_is_zero_for_well_separated_classes():
    features = np.array([[0.0, 0.0], [0.1, 0.0], [50.0, 0.0], [50.1, 0.0]],
                        np.float32)
    labels = np.array([3, 3, 9, 9], np.int64)
    assert float(losses.magnet_loss(labels, features)) == pytest.approx(0.0)
    # and large when the classes sit on top of each other
    mixed = np.array([3, 9, 3, 9], np.int64)
    assert float(losses.magnet_loss(mixed, features)) > 0.5


def test_losses_agree_inside_tf_function():
    labels, features = _batch(1)
    eager = float(losses.magnet_loss(labels, features))
    traced = float(tf.function(losses.magnet_loss)(labels, features))
    assert eager == pytest.approx(traced, rel=1e-6)
    eager_t = float(losses.soft_margin_triplet_loss(labels, features)[0])
    traced_t = float(tf.function(
        lambda l, f: losses.soft_margin_triplet_loss(l, f)[0])(labels, features))
    assert eager_t == pytest.approx(traced_t, rel=1e-6)


def test_pairwise_squared_distance():
    a = np.array([[0.0, 0.0], [1.0, 2.0]], np.float32)
    b = np.array([[3.0, 4.0], [1.0, 0.0], [1.0, 2.0]], np.float32)
    expected = np.array([[25.0, 1.0, 5.0], [8.0, 4.0, 0.0]])
    np.testing.assert_allclose(losses.pairwise_squared_distance(a, b).numpy(),
                               expected, atol=1e-5)
