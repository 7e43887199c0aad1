"""Encode detections in a frame the way Deep SORT does, with a frozen graph.

Pastes query images of a synthetic Market-1501 set into a larger frame (BGR,
as OpenCV gives it), encodes their boxes with
``create_box_encoder(model)`` and prints the cosine distances between the
boxes: two views of the same person should be nearer than other people.

    python examples/box_encoder.py --model=demo/market1501.pb \
        --dataset_dir=demo/Market-1501-synthetic
"""

import argparse
import collections
import os
import sys

import numpy as np
from PIL import Image

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning.datasets import market1501
from cosine_metric_learning.errors import ArgumentError, UsageError


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--dataset_dir", required=True)
    parser.add_argument("--num_people", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        return encode_people(args)
    except UsageError as e:  # a bad --model or --dataset_dir: one line
        text = e.for_flags({"path": "--model"}) \
            if isinstance(e, ArgumentError) else e
        print(f"error: {text}", file=sys.stderr)
        return 2


def encode_people(args):
    files, ids, _ = market1501.read_split_to_str(
        os.path.join(args.dataset_dir, "query"))
    by_id = collections.defaultdict(list)
    for f, i in zip(files, ids):
        by_id[int(i)].append(f)
    people = [i for i, fs in sorted(by_id.items()) if len(fs) >= 2]
    people = people[:args.num_people]

    # a 480x640 frame with two views of each person, boxes 1.5x the crops
    frame = np.full((480, 640, 3), 90, np.uint8)
    boxes, labels = [], []
    for k, person in enumerate(people):
        for view, path in enumerate(by_id[person][:2]):
            crop = Image.open(path).convert("RGB").resize((96, 192))
            x, y = 20 + 210 * k + 100 * view, 40 + 200 * view
            frame[y:y + 192, x:x + 96] = np.asarray(crop)[..., ::-1]  # BGR
            boxes.append((x, y, 96, 192))
            labels.append(f"{person:04d}/{view}")

    encode = encoder_lib.create_box_encoder(args.model, batch_size=32)
    features = encode(frame, np.asarray(boxes, np.float64))
    distances = 1.0 - features @ features.T
    print(f"{len(boxes)} boxes -> features {features.shape}; "
          "cosine distances:")
    print(" " * 8 + "".join(f"{l:>8s}" for l in labels))
    for label, row in zip(labels, distances):
        print(f"{label:>8s}" + "".join(f"{d:8.3f}" for d in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
