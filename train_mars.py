"""Train (and use) the cosine metric learning descriptor on MARS.

    python train_mars.py --dataset_dir=./MARS-evaluation-master/ \
        --loss_mode=cosine-softmax --log_dir=./output/mars/ \
        --run_id=cosine-softmax
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

from cosine_metric_learning import cli
from cosine_metric_learning.datasets.spec import MARS as DATASET

if __name__ == "__main__":
    cli.main(DATASET)
