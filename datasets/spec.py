"""What the entry points need to know about a dataset, the specs of the
datasets the original trains on, and their registry (:data:`DATASETS`).

A spec whose ``relabel`` is set has its training identities numbered
0..n-1 in the order of their ids before training (:func:`relabelled`): the
classifier gets a row per identity, however the ids are spread (DukeMTMC's
702 training identities have ids up to 7,140), and the run records the
numbering as ``labels.json``. The original's three datasets keep their
ids as the classifier's rows (``relabel=False``), as the original does, so
its checkpoints and Deep SORT's published model keep their classifier's
shape.
"""

import dataclasses
from typing import Callable, Optional, Tuple

import numpy as np

from cosine_metric_learning.datasets import market1501, mars, veri
from cosine_metric_learning.datasets.util import TrainSplit
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.nets.deep_sort import network_definition


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """A dataset as the shared entry point sees it.

    ``read_train(dataset_dir)`` returns a :class:`datasets.util.TrainSplit`;
    ``read_test(dataset_dir)`` a :class:`datasets.util.TestSplit` (None:
    no standard test split). Exported kit features go to ``--sdk_dir`` for
    datasets that have a default for it, else to ``--dataset_dir``.
    """
    name: str
    num_classes: int
    read_train: Callable
    default_dataset_dir: str
    read_test: Optional[Callable] = None
    default_sdk_dir: Optional[str] = None
    num_validation_galleries: int = 10
    image_shape: Tuple[int, int, int] = network_definition.IMAGE_SHAPE
    label_names: Optional[list] = None  # saved as labels.json when set
    # the network trained (network_definition.NETWORKS): a run's own, or
    # that of the model it starts from
    network: str = network_definition.DEEP_SORT.name
    # bool (num_classes, num_classes): the pairs of labels known to be
    # different people, the triplet loss's only negatives (tracklets seen
    # in one frame); None: every other label is a negative
    seen_together: Optional[np.ndarray] = dataclasses.field(default=None,
                                                            compare=False)
    # number the training identities 0..n-1 before training (relabelled)
    relabel: bool = True


# the registered datasets, by name
DATASETS = {}


def register(spec):
    """Add ``spec`` to :data:`DATASETS` (its name must be new); returns
    it."""
    if spec.name in DATASETS:
        raise ValueError(f"a dataset named {spec.name!r} is registered "
                         "already")
    DATASETS[spec.name] = spec
    return spec


def get_dataset(name):
    """The registered spec named ``name``; UsageError listing the names."""
    if name not in DATASETS:
        raise UsageError(f"unknown dataset {name!r}; expected one of "
                         f"{', '.join(sorted(DATASETS))}")
    return DATASETS[name]


def relabelled(spec, dataset_dir):
    """``spec`` training on the identities of ``dataset_dir`` numbered
    0..n-1 in the order of their ids: ``num_classes`` is n and
    ``label_names`` the original ids (the run's ``labels.json``). The
    same spec where ``relabel`` is not set or the reader numbers its
    identities itself (``label_names`` of its split)."""
    if not spec.relabel:
        return spec
    split = spec.read_train(dataset_dir)
    if split.label_names is not None:
        return dataclasses.replace(spec, num_classes=len(split.label_names),
                                   label_names=list(split.label_names))
    ids, labels = np.unique(split.ids, return_inverse=True)
    relabelled_split = TrainSplit(split.filenames, labels.astype(np.int64),
                                  split.cameras, [str(i) for i in ids])
    return dataclasses.replace(
        spec, num_classes=len(ids), label_names=relabelled_split.label_names,
        read_train=lambda _: relabelled_split)


MARKET1501 = DatasetSpec(
    name="market1501",
    num_classes=market1501.MAX_LABEL + 1,
    read_train=market1501.read_train_split_to_str,
    read_test=market1501.read_test_protocol,
    num_validation_galleries=10,
    default_dataset_dir="./Market-1501-v15.09.15/",
    default_sdk_dir="./Market-1501_baseline-v16.01.14/",
    relabel=False)

MARS = DatasetSpec(
    name="mars",
    num_classes=mars.MAX_LABEL + 1,
    read_train=mars.read_train_split_to_str,
    read_test=mars.read_test_protocol,
    num_validation_galleries=20,
    default_dataset_dir="./MARS-evaluation-master/",
    relabel=False)

VERI = DatasetSpec(
    name="veri",
    num_classes=veri.MAX_LABEL + 1,
    read_train=veri.read_train_split_to_str,
    read_test=veri.read_test_protocol,
    num_validation_galleries=10,
    default_dataset_dir="./resources/VeRi/",
    relabel=False)

for _spec in (MARKET1501, MARS, VERI):
    register(_spec)
