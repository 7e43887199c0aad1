"""Train (and use) the cosine metric learning descriptor on MARS.

    python train_mars.py --dataset_dir=./MARS-evaluation-master/ \
        --loss_mode=cosine-softmax --log_dir=./output/mars/ \
        --run_id=cosine-softmax
"""

from cosine_metric_learning import cli
from cosine_metric_learning.datasets.spec import MARS as DATASET

if __name__ == "__main__":
    cli.main(DATASET)
