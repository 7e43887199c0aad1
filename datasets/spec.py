"""What the entry points need to know about a dataset, and the specs of
the datasets the original trains on."""

import dataclasses
from typing import Callable, Optional, Tuple

import numpy as np

from cosine_metric_learning.datasets import market1501, mars, veri
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


MARKET1501 = DatasetSpec(
    name="market1501",
    num_classes=market1501.MAX_LABEL + 1,
    read_train=market1501.read_train_split_to_str,
    read_test=market1501.read_test_protocol,
    num_validation_galleries=10,
    default_dataset_dir="./Market-1501-v15.09.15/",
    default_sdk_dir="./Market-1501_baseline-v16.01.14/")

MARS = DatasetSpec(
    name="mars",
    num_classes=mars.MAX_LABEL + 1,
    read_train=mars.read_train_split_to_str,
    read_test=mars.read_test_protocol,
    num_validation_galleries=20,
    default_dataset_dir="./MARS-evaluation-master/")

VERI = DatasetSpec(
    name="veri",
    num_classes=veri.MAX_LABEL + 1,
    read_train=veri.read_train_split_to_str,
    read_test=veri.read_test_protocol,
    num_validation_galleries=10,
    default_dataset_dir="./resources/VeRi/")
