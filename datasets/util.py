"""Helpers shared by the dataset readers: identity split and image loading."""

import os

import numpy as np

from cosine_metric_learning.errors import UsageError

VALIDATION_FRACTION = 0.1
VALIDATION_SEED = 1234


def validation_ids(ids, fraction=VALIDATION_FRACTION, seed=VALIDATION_SEED):
    """Identities held out for validation, drawn as the original does.

    ``n = int(fraction * len(unique))`` identities are drawn without
    replacement by ``np.random.RandomState(seed).choice`` from the sorted
    unique ids, so runs compare with the original's validation numbers.
    """
    unique = np.unique(ids)
    num_validation = int(fraction * len(unique))
    return np.random.RandomState(seed).choice(
        unique, num_validation, replace=False)


def split_validation(ids, fraction=VALIDATION_FRACTION, seed=VALIDATION_SEED):
    """Boolean masks ``(train, validation)`` over ``ids`` by identity."""
    ids = np.asarray(ids)
    is_validation = np.isin(ids, validation_ids(ids, fraction, seed))
    return ~is_validation, is_validation


def require_dir(path, what, layout):
    """Raise a UsageError naming ``path`` unless it is a directory."""
    if not os.path.isdir(path):
        raise UsageError(
            f"{what} not found: '{path}' is not a directory; expected {layout}")


def require_file(path, what, layout):
    """Raise a UsageError naming ``path`` unless it is a file."""
    if not os.path.isfile(path):
        raise UsageError(f"{what} not found: '{path}'; expected {layout}")
