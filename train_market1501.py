"""Train (and use) the cosine metric learning descriptor on Market-1501.

    python train_market1501.py --dataset_dir=./Market-1501-v15.09.15/ \
        --loss_mode=cosine-softmax --log_dir=./output/market1501/ \
        --run_id=cosine-softmax
"""

from cosine_metric_learning import train_app
from datasets import market1501

DATASET = train_app.DatasetSpec(
    name="market1501",
    num_classes=market1501.MAX_LABEL + 1,
    read_train=market1501.read_train_split_to_str,
    read_test=market1501.read_test_protocol,
    num_validation_galleries=10,
    default_dataset_dir="./Market-1501-v15.09.15/",
    default_sdk_dir="./Market-1501_baseline-v16.01.14/",
    image_shape=market1501.IMAGE_SHAPE)

if __name__ == "__main__":
    train_app.main(DATASET)
