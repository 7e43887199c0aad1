"""Train (and use) the cosine metric learning descriptor on Market-1501.

    python train_market1501.py --dataset_dir=./Market-1501-v15.09.15/ \
        --loss_mode=cosine-softmax --log_dir=./output/market1501/ \
        --run_id=cosine-softmax
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

from cosine_metric_learning import cli
from cosine_metric_learning.datasets.spec import MARKET1501 as DATASET

if __name__ == "__main__":
    cli.main(DATASET)
