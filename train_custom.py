"""Train (and use) the descriptor on your own data.

    python train_custom.py --dataset_dir=./my_people/ --image_shape=128,64 \
        --loss_mode=cosine-softmax --log_dir=./output/custom/ --run_id=mine

``--dataset_dir`` holds one folder per identity (``<identity>/<image>``) or
Market-1501-style file names in one folder (see ``datasets/image_folder.py``).
Same modes and flags as ``train_market1501.py``, plus ``--image_shape``,
``--layout``, ``--camera_regex`` and ``--min_frame_gap``; the identities'
numbering is saved as ``labels.json`` in the run's folder.

``--mode=test`` (and ``--mode=export --format=pytorch_result``) takes a
``--dataset_dir`` of people the model was not trained on: one query per
identity and camera, every other image in the gallery, images of the
query's identity and camera fewer than ``--min_frame_gap`` frames away
left out (see ``datasets/image_folder.py``).
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

import dataclasses
import functools
from typing import Optional

from cosine_metric_learning import cli, commands, settings
from cosine_metric_learning.datasets import image_folder
from cosine_metric_learning.datasets.spec import DatasetSpec

DATASET = DatasetSpec(
    name="custom", num_classes=0, read_train=None,
    default_dataset_dir="./data/")


@dataclasses.dataclass
class CustomConfig:
    """The flags of this entry point beside the modes' own."""
    layout: str = commands.setting(
        "auto", "How identities are laid out in --dataset_dir.",
        commands.one_of(image_folder.LAYOUTS))
    camera_regex: Optional[str] = commands.setting(
        None, "A regex with one group that finds the camera in a file name "
        "(identity folders only).")
    min_frame_gap: int = commands.setting(
        image_folder.MIN_FRAME_GAP, "test: images of the query's identity "
        "and camera fewer than this many frames from it are left out (the "
        "frame is the last number in a file name); 0 keeps them all.")


def make_dataset(template, values):
    """The dataset as the parsed flags describe it."""
    @functools.lru_cache(maxsize=None)
    def read_train(dataset_dir):
        return image_folder.read_image_folder(dataset_dir, values.layout,
                                              values.camera_regex)

    def read_test(dataset_dir):
        return image_folder.read_test_protocol(
            dataset_dir, values.layout, values.camera_regex,
            values.min_frame_gap)

    # training numbers the identities (datasets.spec.relabelled)
    return cli.with_image_shape(dataclasses.replace(
        template, read_train=read_train, read_test=read_test), values)


if __name__ == "__main__":
    cli.main(DATASET, make_dataset=make_dataset,
             extra_settings=[settings.ShapeConfig, CustomConfig])
