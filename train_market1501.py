"""Train (and use) the cosine metric learning descriptor on Market-1501.

    python train_market1501.py --dataset_dir=./Market-1501-v15.09.15/ \
        --loss_mode=cosine-softmax --log_dir=./output/market1501/ \
        --run_id=cosine-softmax
"""

from cosine_metric_learning import cli
from cosine_metric_learning.datasets.spec import MARKET1501 as DATASET

if __name__ == "__main__":
    cli.main(DATASET)
