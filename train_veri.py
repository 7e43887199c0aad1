"""Train (and use) the descriptor on VeRi-776, vehicles.

    python train_veri.py --dataset_dir=./resources/VeRi/ \
        --loss_mode=cosine-softmax --log_dir=./output/veri/ \
        --run_id=cosine-softmax

The original's defaults: 770 classes (vehicle ids 0..769), the 10 %
identity validation split with seed 1234, a 128x64 input, and
``veri.pb`` and ``veri.ckpt`` from ``--mode=freeze`` and
``--mode=finalize``. Vehicles are wider than tall: ``--image_shape=128,128``
(or 96,96) keeps their shape, where the original squeezed them to 128x64.
Same modes and flags as ``train_market1501.py``; ``--mode=test`` is the
field's VeRi-776 protocol (see ``datasets/veri.py``).
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

from cosine_metric_learning import cli, settings
from cosine_metric_learning.datasets.spec import VERI as DATASET

if __name__ == "__main__":
    cli.main(DATASET, make_dataset=cli.with_image_shape,
             extra_settings=[settings.ShapeConfig])
