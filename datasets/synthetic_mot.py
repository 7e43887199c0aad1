"""A synthetic MOTChallenge sequence: pairs of unseen synthetic people
walk side by side across the frame and swap lanes behind a pillar, so
that motion alone swaps their tracks; and scenes of several such
sequences."""

import os

import numpy as np
from absl import logging

from cosine_metric_learning.datasets.synthetic_people import \
    cameras as _cameras, identity as _identity, \
    look_alike_of as _look_alike, render, save as _save

# the MOT sequence: frame size, a person's box, the pillar in the middle
MOT_FRAME = (640, 360)  # (width, height)
MOT_BOX = (40, 80)
MOT_PILLAR = (290, 350)
MOT_SPEED = 4  # pixels a frame


def _pair_paths(num_pairs, num_frames):
    """``[(start, direction, top_y, [(frame, x, y), ...] per person)]``:
    pairs of people walking side by side across the frame, one lane
    apart, who swap lanes while they are behind the pillar."""
    width, _ = MOT_FRAME
    box_w, box_h = MOT_BOX
    lane = box_h + 6
    centre = (MOT_PILLAR[0] + MOT_PILLAR[1]) / 2 - box_w / 2
    paths = []
    for k in range(num_pairs):
        direction = 1 if k % 2 == 0 else -1
        start = 12 * k
        top = 8 + (k % 2) * 2 * lane
        x0 = -box_w // 2 if direction > 0 else width - box_w // 2
        people = [[], []]
        for t in range(num_frames - start):
            x = x0 + direction * MOT_SPEED * t
            if not -box_w < x < width:
                break
            # lanes swap at the pillar's centre, where both are hidden
            swapped = (x - centre) * direction > 0
            for person in (0, 1):
                y = top + lane * (person ^ swapped)
                people[person].append((start + t + 1, x, y))
        paths.append(people)
    return paths


# the benchmarks' crossing scenes of unseen people (pairs:frames:seed;
# 10, 16 and 20 people), long enough for every pair to cross
HELD_OUT_SCENES = "5:215:31,8:250:32,10:280:33"


def crossing_frames(num_pairs):
    """The frame from which the last of ``num_pairs`` pairs is past the
    pillar (whole again on its far side); a scene with fewer frames has
    pairs that never cross. Pair k enters at frame 12k + 1."""
    last = 0
    for first, _ in _pair_paths(num_pairs, 12 * num_pairs + 2 * MOT_FRAME[0]):
        rightward = first[0][1] < MOT_PILLAR[0]
        last = max(last, next(frame for frame, x, _ in first
                              if _visibility(x) == 1.0
                              and (x > MOT_PILLAR[0]) == rightward))
    return last


def _visibility(x):
    """The fraction of a box at ``x`` not behind the pillar."""
    left, right = MOT_PILLAR
    hidden = max(0.0, min(x + MOT_BOX[0], right) - max(x, left))
    return 1.0 - hidden / MOT_BOX[0]


def write_mot_sequence(output_dir, num_pairs=4, num_frames=160, seed=0,
                       name="SYNTH-01", look_alike=0.0):
    """Write a MOTChallenge sequence folder ``output_dir/name``:
    ``seqinfo.ini``, ``img1/000001.jpg...``, ``gt/gt.txt`` and
    ``det/det.txt``.

    Pairs of held-out synthetic people (identities not drawn for any
    training set of the same seed) walk side by side across the frame and
    swap lanes behind a pillar, so that after it motion alone pairs each
    track with the other person. ``gt.txt`` has every box (class 1,
    visibility from the pillar); ``det.txt`` has the visible ones with
    jitter, about 5 % missed, and a false positive in about one frame in
    five (confidences below Deep SORT's usual 0.3 for most of them).

    ``look_alike`` above 0 makes each pair two people of one build, pattern
    and bag whose colours differ by about that much (a normal shift per
    channel, on 0-255; each frame's rendering jitters them by up to 12 and
    adds noise of 8): the crossings of similar-looking people that only a
    fine descriptor tells apart. 0 (the default) draws every person on
    their own.

    A scene of fewer than :func:`crossing_frames` frames has pairs that
    never cross: it is written with a warning.

    Returns
    -------
    str
        The sequence folder.
    """
    needed = crossing_frames(num_pairs)
    if num_frames < needed:
        logging.warning(
            "%s: %d frames are too few for %d pairs: the last never get "
            "past the pillar (every pair has from frame %d)", name,
            num_frames, num_pairs, needed)
    rng = np.random.default_rng(seed)
    camera = _cameras(seed + 7)[0]
    width, height = MOT_FRAME
    box_w, box_h = MOT_BOX
    folder = os.path.join(output_dir, name)
    for sub in ("img1", "gt", "det"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    people, boxes = [], {}  # frame -> [(track id, person, x, y)]
    for pair in _pair_paths(num_pairs, num_frames):
        for k, path in enumerate(pair):
            people.append(_identity(rng) if k == 0 or not look_alike else
                          _look_alike(people[-1], rng, look_alike))
            for frame, x, y in path:
                boxes.setdefault(frame, []).append((len(people), x, y))
    gradient = np.linspace(-20, 20, width)[None, :, None]
    background = np.clip(np.asarray(camera["background"], np.float64)
                         + gradient + np.zeros((height, width, 3)), 0, 255)
    gt_rows, det_rows = [], []
    for frame in range(1, num_frames + 1):
        image = background.copy()
        for track, x, y in boxes.get(frame, []):
            sprite = render(people[track - 1], camera, rng,
                            size=MOT_BOX).astype(np.float64)
            x0, x1 = max(int(x), 0), min(int(x) + box_w, width)
            if x1 > x0:
                image[y:y + box_h, x0:x1] = sprite[:, x0 - int(x):
                                                   x1 - int(x)]
            visibility = _visibility(x)
            gt_rows.append((frame, track, int(x), y, box_w, box_h, 1, 1,
                            round(visibility, 3)))
            if visibility >= 0.5 and rng.random() > 0.05:
                jitter = rng.normal(0, 1.5, 4)
                det_rows.append((frame, -1, int(x) + jitter[0],
                                 y + jitter[1], box_w + jitter[2],
                                 box_h + jitter[3],
                                 float(rng.uniform(0.6, 1.0))))
        if rng.random() < 0.2:
            det_rows.append((frame, -1, float(rng.uniform(0, width - box_w)),
                             float(rng.uniform(0, height - box_h)), box_w,
                             box_h, float(rng.uniform(0.05, 0.5))))
        image[:, MOT_PILLAR[0]:MOT_PILLAR[1]] = (120, 120, 125)
        _save(os.path.join(folder, "img1", f"{frame:06d}.jpg"),
              np.clip(image, 0, 255).astype(np.uint8))
    with open(os.path.join(folder, "gt", "gt.txt"), "w") as f:
        f.writelines(",".join(str(v) for v in row) + "\n"
                     for row in gt_rows)
    with open(os.path.join(folder, "det", "det.txt"), "w") as f:
        f.writelines(
            f"{row[0]},-1,{row[2]:.2f},{row[3]:.2f},{row[4]:.2f},"
            f"{row[5]:.2f},{row[6]:.3f},-1,-1,-1\n" for row in det_rows)
    with open(os.path.join(folder, "seqinfo.ini"), "w") as f:
        f.write(f"[Sequence]\nname={name}\nimDir=img1\nframeRate=10\n"
                f"seqLength={num_frames}\nimWidth={width}\n"
                f"imHeight={height}\nimExt=.jpg\n")
    return folder


def parse_scenes(text):
    """``(pairs, frames, seed)`` of each ``pairs:frames:seed`` of the
    comma-separated ``text``; ValueError naming the one that is not."""
    scenes = []
    for spec in text.split(","):
        parts = spec.split(":")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts) \
                or int(parts[0]) < 1 or int(parts[1]) < 1:
            raise ValueError(f"scene '{spec}': expected pairs:frames:seed, "
                             "whole numbers, at least one pair and frame")
        scenes.append(tuple(int(p) for p in parts))
    return scenes


def write_mot_scenes(folder, text, look_alike=0.0, prefix="SCENE"):
    """Crossing scenes (:func:`write_mot_sequence`) in ``folder``, one for
    each ``pairs:frames:seed`` of the comma-separated ``text``, named
    ``<prefix>-01``, ...; returns their folders. A scene too short for
    every pair to cross is written with a warning
    (:func:`write_mot_sequence`)."""
    written = []
    for k, (pairs, frames, seed) in enumerate(parse_scenes(text)):
        written.append(write_mot_sequence(
            folder, num_pairs=pairs, num_frames=frames, seed=seed,
            name=f"{prefix}-{k + 1:02d}", look_alike=look_alike))
    return written
