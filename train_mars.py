"""Train (and use) the cosine metric learning descriptor on MARS.

    python train_mars.py --dataset_dir=./MARS-evaluation-master/ \
        --loss_mode=cosine-softmax --log_dir=./output/mars/ \
        --run_id=cosine-softmax
"""

from cosine_metric_learning import train_app
from datasets import mars

DATASET = train_app.DatasetSpec(
    name="mars",
    num_classes=mars.MAX_LABEL + 1,
    read_train=mars.read_train_split_to_str,
    read_test=mars.read_test_protocol,
    num_validation_galleries=20,
    default_dataset_dir="./MARS-evaluation-master/",
    image_shape=mars.IMAGE_SHAPE)

if __name__ == "__main__":
    train_app.main(DATASET)
