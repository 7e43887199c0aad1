"""Feed generators: which inputs each training batch holds.

A feed generator yields ``(inputs, labels)`` batches forever; the
QueuedTrainer's producers take them through a ``ThreadSafeIterator``. :func:`random_sample_identities_forever`
is the identity sampler of the triplet and magnet losses: P identities x K
images. :func:`run_in_batches` cuts a finite input into batches.
"""

import numpy as np

from cosine_metric_learning.errors import UsageError


def _check_batch_size(batch_size):
    if batch_size < 1:
        raise UsageError(f"batch_size={batch_size}: expected at least 1")


def _neighbours_first(rng, seen_together):
    """Every identity once, in random order, except that an identity
    ``seen_together`` (bool ``(C, C)``) with one drawn before is drawn
    first."""
    drawn = np.zeros(len(seen_together), bool)
    touched = np.zeros(len(seen_together), bool)  # seen with one drawn
    for _ in range(len(seen_together)):
        pool = np.flatnonzero(touched & ~drawn)
        if not len(pool):
            pool = np.flatnonzero(~drawn)
        identity = rng.choice(pool)
        drawn[identity] = True
        touched |= seen_together[identity]
        yield identity


def random_sample_identities_forever(batch_size, num_samples_per_id, data_x,
                                     data_y, seed=None, exclude=(),
                                     seen_together=None):
    """A generator of identity-balanced batches ``(x, y)``, forever.

    Each batch holds ``batch_size // num_samples_per_id`` distinct
    identities with ``num_samples_per_id`` images each, drawn without
    replacement. An identity with fewer images contributes all it has and
    the batch is filled up with further identities, so every batch holds
    exactly ``batch_size`` real samples. Inputs found in ``exclude`` (a
    container that may grow while the generator runs, e.g. the unreadable
    files a :class:`QueuedTrainer` found) are not drawn. With
    ``seen_together`` (bool ``(C, C)`` over the labels: pairs known to be
    different people, a dataset's ``distinct``), a batch starts at a
    random identity and takes the identities seen seen_together with those
    drawn before others, so that its anchors have negatives.

    Raises
    ------
    UsageError
        If ``batch_size`` is not a multiple of ``num_samples_per_id``, or
        the data has fewer identities than a batch needs or fewer images
        than ``batch_size``.
    """
    _check_batch_size(batch_size)
    if num_samples_per_id < 1 or batch_size % num_samples_per_id:
        raise UsageError(
            f"batch_size={batch_size} is not a multiple of the number of "
            f"images per identity ({num_samples_per_id})")
    data_x, data_y = np.asarray(data_x), np.asarray(data_y)
    unique_ids, inverse = np.unique(data_y, return_inverse=True)
    num_ids_per_batch = batch_size // num_samples_per_id
    if len(unique_ids) < num_ids_per_batch:
        raise UsageError(
            f"too few identities: {len(unique_ids)} in the training data, "
            f"a batch of {batch_size} with {num_samples_per_id} images per "
            f"identity needs at least {num_ids_per_batch}")
    if len(data_y) < batch_size:
        raise UsageError(f"too few images: {len(data_y)} in the training "
                         f"data, a batch needs {batch_size}")
    indices_of = [np.flatnonzero(inverse == i) for i in range(len(unique_ids))]
    rng = np.random.RandomState(seed)
    if seen_together is not None:  # over the identities drawn from
        seen_together = np.asarray(seen_together, bool)[
            np.ix_(unique_ids, unique_ids)]

    def generate():
        while True:
            batch = []
            for identity in (rng.permutation(len(unique_ids))
                             if seen_together is None
                             else _neighbours_first(rng, seen_together)):
                candidates = indices_of[identity]
                if exclude:
                    candidates = [i for i in candidates
                                  if data_x[i] not in exclude]
                take = min(num_samples_per_id, len(candidates),
                           batch_size - len(batch))
                batch.extend(rng.choice(candidates, take, replace=False))
                if len(batch) == batch_size:
                    break
            batch = np.asarray(batch)
            yield data_x[batch], data_y[batch]

    return generate()


def run_in_batches(fn, inputs, batch_size):
    """Apply ``fn`` to consecutive batches of ``inputs``; concatenate.

    Every sample is processed: the last batch may be smaller.

    Parameters
    ----------
    fn : callable
        Maps an array of up to ``batch_size`` inputs to an array whose first
        dimension matches.
    inputs : array_like
    batch_size : int

    Returns
    -------
    ndarray
    """
    _check_batch_size(batch_size)
    inputs = np.asarray(inputs)
    outputs = [np.asarray(fn(inputs[i:i + batch_size]))
               for i in range(0, len(inputs), batch_size)]
    if not outputs:
        raise UsageError("run_in_batches: no inputs")
    return np.concatenate(outputs, axis=0)


