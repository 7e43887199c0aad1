"""The tracker's crops against Deep SORT's, detection by detection: each
detection of a sequence encoded by a model as ``track`` cuts it (all of a
frame's boxes at once, :func:`encoder.box_patches`) and as Deep SORT's
``tools/generate_detections.py`` describes it (the box widened to the
patch's aspect ratio, its corners truncated to whole pixels and clipped
to the frame, the region resized with OpenCV's bilinear ``cv2.resize``);
prints the least and the median cosine between the two features.

    python benchmarks/crop_trace.py --sequence=SEQUENCE --model=MODEL.xml
"""

import argparse
import sys

import numpy as np


def deep_sort_patch(image, box, patch_shape):
    """A box ``(left, top, width, height)`` cut as Deep SORT's box encoder
    cuts it; None where it covers no pixel."""
    import cv2
    box = np.array(box, float)
    width = float(patch_shape[1]) / patch_shape[0] * box[3]
    box[0] -= (width - box[2]) / 2
    box[2] = width
    box[2:] += box[:2]
    box = box.astype(int)
    box[:2] = np.maximum(0, box[:2])
    box[2:] = np.minimum(np.asarray(image.shape[:2][::-1]) - 1, box[2:])
    if np.any(box[:2] >= box[2:]):
        return None
    left, top, right, bottom = box
    return cv2.resize(image[top:bottom, left:right],
                      tuple(int(v) for v in patch_shape[::-1]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequence", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--min_confidence", type=float, default=0.3)
    args = parser.parse_args(argv)
    from cosine_metric_learning import encoder as encoder_lib
    from cosine_metric_learning import mot_sequences, tracking
    sequence = mot_sequences.read_sequence(args.sequence)
    rows = tracking.detection_rows(sequence, "det", args.min_confidence, 1.0)
    encoder = encoder_lib.load(args.model)
    ours = tracking.encode_rows(encoder, sequence, rows)
    theirs = np.zeros_like(ours)
    shape = encoder.image_shape[:2]
    for number, frame in sequence.frames(np.unique(rows[:, 0]).astype(int)):
        index = np.flatnonzero(rows[:, 0] == number)
        patches = [deep_sort_patch(frame, rows[i, 2:6], shape)
                   for i in index]
        kept = [k for k, p in enumerate(patches) if p is not None]
        theirs[index[kept]] = encoder(np.stack([patches[k] for k in kept]))
    cosine = np.sum(ours * theirs, axis=1)
    print(f"{len(rows)} detections of {sequence.name}, {args.model}: "
          f"cosine between the two crops' features least "
          f"{cosine.min():.5f}, median {np.median(cosine):.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
