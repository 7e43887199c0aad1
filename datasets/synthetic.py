"""Synthetic re-identification data in the real Market-1501, MARS and
VeRi-776 layouts, identity folders, and a MOTChallenge tracking sequence.

Each identity is a stick-figure person with its own hair, skin, shirt,
trousers and shoe colours, a shirt pattern, an optional bag and a build.
Every image of it varies with the camera (colour gain, brightness,
background), the pose (shift, scale, mirror) and noise, so a network has to
learn appearance, not pixels. Enough identities (a few hundred) let the
validation CMC rise within a few hundred CPU training steps.

Usage::

    python -m cosine_metric_learning.datasets.synthetic \
        --layout=market1501|mars|veri|identity_folders|mot --output_dir=DIR
"""

import argparse
import os
import sys

import numpy as np
import scipy.io
from absl import logging
from PIL import Image, ImageDraw

from cosine_metric_learning.datasets import market1501, mars, veri

NUM_CAMERAS = 6
BASE_SIZE = (64, 128)  # (width, height) of a rendered person


def _identity(rng):
    """Random appearance attributes of one identity."""
    return {
        "hair": rng.integers(0, 256, 3), "skin": rng.integers(90, 256, 3),
        "shirt": rng.integers(0, 256, 3), "shirt2": rng.integers(0, 256, 3),
        "trousers": rng.integers(0, 256, 3), "shoes": rng.integers(0, 256, 3),
        "pattern": int(rng.integers(0, 4)), "bag": int(rng.integers(0, 3)),
        "bag_color": rng.integers(0, 256, 3),
        "width": float(rng.uniform(0.8, 1.2)),
        "legs": float(rng.uniform(0.85, 1.15)),
    }


def _cameras(seed):
    """Per-camera colour gains, brightness and background colours."""
    rng = np.random.default_rng(seed)
    return [{"gain": rng.uniform(0.75, 1.25, 3), "offset": rng.uniform(-25, 25),
             "background": rng.integers(40, 220, 3)}
            for _ in range(NUM_CAMERAS)]


def render(person, camera, rng, size=BASE_SIZE):
    """Render one uint8 RGB image (H, W, 3) of ``person`` seen by ``camera``.

    ``person`` None renders a distractor: background and random clutter.
    """
    w, h = BASE_SIZE
    bg = np.asarray(camera["background"], np.float64)
    gradient = np.linspace(-30, 30, h)[:, None, None] * rng.uniform(-1, 1)
    canvas = Image.fromarray(np.clip(bg + gradient + np.zeros((h, w, 3)),
                                     0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(canvas)
    if person is None:
        for _ in range(int(rng.integers(2, 6))):
            x0, y0 = rng.integers(0, w), rng.integers(0, h)
            draw.rectangle([x0, y0, x0 + rng.integers(5, 30),
                            y0 + rng.integers(5, 50)],
                           fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    else:
        _draw_person(draw, person, rng, w, h)
    image = np.asarray(canvas, np.float64)
    image = image * camera["gain"] + camera["offset"]
    image += rng.normal(0.0, 8.0, image.shape)
    image = Image.fromarray(np.clip(image, 0, 255).astype(np.uint8))
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    if size != BASE_SIZE:
        image = image.resize(size, Image.Resampling.BILINEAR)
    return np.asarray(image)


def _draw_person(draw, p, rng, w, h):
    def color(key):
        jitter = rng.integers(-12, 13, 3)
        return tuple(int(v) for v in np.clip(p[key] + jitter, 0, 255))

    scale = rng.uniform(0.9, 1.1)
    cx = w / 2 + rng.uniform(-5, 5)
    top = 6 + rng.uniform(-4, 4)
    half = 14 * p["width"] * scale
    head = 9 * scale
    torso_top = top + 2 * head
    torso_bottom = torso_top + 42 * scale
    feet = min(h - 2.0, torso_bottom + 46 * scale * p["legs"])

    # head and hair
    draw.ellipse([cx - head, top, cx + head, top + 2 * head], fill=color("skin"))
    draw.chord([cx - head, top - 1, cx + head, top + 2 * head], 180, 360,
               fill=color("hair"))
    # torso with its pattern
    torso = [cx - half, torso_top, cx + half, torso_bottom]
    draw.rectangle(torso, fill=color("shirt"))
    if p["pattern"] == 1:  # horizontal stripes
        for y in np.arange(torso_top, torso_bottom, 8 * scale):
            draw.rectangle([cx - half, y, cx + half, y + 3 * scale],
                           fill=color("shirt2"))
    elif p["pattern"] == 2:  # two-tone, split vertically
        draw.rectangle([cx, torso_top, cx + half, torso_bottom],
                       fill=color("shirt2"))
    elif p["pattern"] == 3:  # a logo block on the chest
        draw.rectangle([cx - half / 2, torso_top + 8, cx + half / 2,
                        torso_top + 22], fill=color("shirt2"))
    # arms
    for side in (-1, 1):
        x = cx + side * (half + 3)
        draw.rectangle([min(x, x - side * 5), torso_top + 2,
                        max(x, x - side * 5), torso_bottom - 4],
                       fill=color("shirt"))
    # legs and shoes
    for side in (-1, 1):
        x0 = cx + (side - 1) * half * 0.45 + side * 1.5
        draw.rectangle([x0, torso_bottom, x0 + half * 0.9, feet - 5],
                       fill=color("trousers"))
        draw.rectangle([x0, feet - 5, x0 + half * 0.9, feet],
                       fill=color("shoes"))
    # bag on one side
    if p["bag"]:
        side = -1 if p["bag"] == 1 else 1
        x = cx + side * (half + 4)
        draw.rectangle([min(x, x + side * 10), torso_top + 20,
                        max(x, x + side * 10), torso_top + 40],
                       fill=color("bag_color"))


def _save(path, image):
    Image.fromarray(image).save(path, quality=90)


def _shot_cameras(rng, num_images):
    """The cameras of ``num_images`` images of one identity: 2 to 4
    cameras, each at least once."""
    cams = rng.choice(NUM_CAMERAS, int(rng.integers(2, 5)), replace=False)
    return np.concatenate([cams, rng.choice(cams, num_images - len(cams))])


def _person_ids(rng, num_train, num_test, max_label):
    ids = rng.choice(np.arange(1, max_label), num_train + num_test,
                     replace=False)
    return np.sort(ids[:num_train]), np.sort(ids[num_train:])


def _people(rng, splits, look_alike, twin_seed):
    """Each identity of the ``splits`` (arrays of ids) drawn from ``rng``;
    with ``look_alike`` the second of each pair in a split is then made
    like the first (:func:`_look_alike`), from its own stream seeded
    ``twin_seed``."""
    people = {pid: _identity(rng) for pid in np.concatenate(splits)}
    if look_alike:
        twins = np.random.default_rng(twin_seed)
        for ids in splits:
            for first, second in zip(ids[0::2], ids[1::2]):
                people[second] = _look_alike(people[first], twins,
                                             look_alike)
    return people


def write_market1501(output_dir, num_train_ids=300, num_test_ids=100,
                     num_distractors=40, num_junk=20, seed=0,
                     look_alike=0.0):
    """Write a synthetic dataset in the Market-1501 layout.

    Training identities get 4 to 9 images from 2 to 4 cameras; test
    identities get gallery images from 2 to 4 cameras and one query from
    each of up to two cameras. ``gt_query/`` holds the kit's good/junk
    indices (1-based into the sorted ``bounding_box_test``). A ``Thumbs.db``
    and one ``.jpg.jpg`` name are included, as in the real download.
    ``look_alike`` above 0 pairs the identities, training with training and
    test with test, each pair's second person made like the first as in
    :func:`write_mot_sequence` (its colours shifted by that spread): a
    harder set, whose test people also have look-alikes never trained on.

    Returns
    -------
    str
        ``output_dir``.
    """
    rng = np.random.default_rng(seed)
    cameras = _cameras(seed + 1)
    train_ids, test_ids = _person_ids(rng, num_train_ids, num_test_ids,
                                      market1501.MAX_LABEL)
    people = _people(rng, (train_ids, test_ids), look_alike, seed + 2)
    dirs = {name: os.path.join(output_dir, name) for name in (
        "bounding_box_train", "bounding_box_test", "query", "gt_query",
        "gt_bbox")}
    for d in dirs.values():
        os.makedirs(d, exist_ok=True)

    frame = iter(range(1, 10 ** 6))

    def name(pid, cam, det=1):
        prefix = "-1" if pid == -1 else f"{pid:04d}"
        return f"{prefix}_c{cam + 1}s1_{next(frame):06d}_{det:02d}.jpg"

    def images_of(pid, num_images):
        return [(name(pid, cam), render(people[pid], cameras[cam], rng))
                for cam in _shot_cameras(rng, num_images)]

    for i, pid in enumerate(train_ids):
        for j, (filename, image) in enumerate(
                images_of(pid, int(rng.integers(4, 10)))):
            if i == 0 and j == 0:
                filename += ".jpg"  # the real set has doubled extensions
            _save(os.path.join(dirs["bounding_box_train"], filename), image)

    queries = []
    for pid in test_ids:
        shots = images_of(pid, int(rng.integers(4, 8)))
        for filename, image in shots:
            _save(os.path.join(dirs["bounding_box_test"], filename), image)
        for cam in sorted({int(n.split("_c")[1][0]) - 1 for n, _ in shots})[:2]:
            filename = name(pid, cam)
            _save(os.path.join(dirs["query"], filename),
                  render(people[pid], cameras[cam], rng))
            _save(os.path.join(dirs["gt_bbox"], filename),
                  render(people[pid], cameras[cam], rng))
            queries.append((filename, pid, cam))
    for _ in range(num_distractors):
        cam = int(rng.integers(NUM_CAMERAS))
        _save(os.path.join(dirs["bounding_box_test"], name(0, cam)),
              render(None, cameras[cam], rng))
    junk_ids = rng.choice(test_ids, num_junk)
    for pid in junk_ids:  # badly cropped detections of real people
        cam = int(rng.integers(NUM_CAMERAS))
        image = render(people[pid], cameras[cam], rng)
        image = np.roll(image, int(rng.integers(40, 90)), axis=0)
        _save(os.path.join(dirs["bounding_box_test"], name(-1, cam)), image)

    gallery, gallery_ids, gallery_cams = market1501.read_split_to_str(
        dirs["bounding_box_test"])
    del gallery
    for filename, pid, cam in queries:
        same = gallery_ids == pid
        good = np.flatnonzero(same & (gallery_cams != cam)) + 1
        junk = np.flatnonzero((same & (gallery_cams == cam))
                              | (gallery_ids == -1)) + 1
        stem = os.path.join(dirs["gt_query"], filename[:-len(".jpg")])
        scipy.io.savemat(stem + "_good.mat", {"good_index": good[:, None]})
        scipy.io.savemat(stem + "_junk.mat", {"junk_index": junk[:, None]})

    for d in ("bounding_box_train", "bounding_box_test"):
        with open(os.path.join(dirs[d], "Thumbs.db"), "wb") as f:
            f.write(b"\xd0\xcf\x11\xe0 not an image")
    return output_dir


# a synthetic vehicle's image (width, height): wider than tall, as VeRi's
VERI_SIZE = (96, 80)


def write_veri(output_dir, num_train_ids=40, num_test_ids=20, seed=0):
    """Write a synthetic dataset in the VeRi-776 layout: ``image_train/``,
    ``image_test/``, ``image_query/`` and ``name_*.txt``, files named
    ``VVVV_cCCC_FFFFFFFF_N.jpg`` (three-digit cameras), images wider than
    tall.

    Training vehicles (ids up to 769, the original's MAX_LABEL) get 4 to 9
    images from 2 to 4 cameras; test vehicles (other ids up to 776) get
    gallery images from 2 to 4 cameras and one query from one of them (so
    the gallery holds junk: the query's vehicle in its camera). Strays
    that must be skipped: a ``Thumbs.db``, a ``readme.txt`` and a name
    with a two-digit camera; one name has a doubled ``.jpg.jpg``.

    Returns
    -------
    str
        ``output_dir``.
    """
    rng = np.random.default_rng(seed)
    cameras = _cameras(seed + 1)
    train_ids = np.sort(rng.choice(np.arange(1, veri.MAX_LABEL + 1),
                                   num_train_ids, replace=False))
    others = np.setdiff1d(np.arange(1, 777), train_ids)
    test_ids = np.sort(rng.choice(others, num_test_ids, replace=False))
    vehicles = {vid: _identity(rng) for vid in np.concatenate([train_ids,
                                                               test_ids])}
    dirs = {name: os.path.join(output_dir, f"image_{name}")
            for name in ("train", "test", "query")}
    for d in dirs.values():
        os.makedirs(d, exist_ok=True)
    frame = iter(range(1, 10 ** 7))

    def name(vid, cam):
        return f"{vid:04d}_c{cam + 1:03d}_{next(frame):08d}_0.jpg"

    def shots(vid, num_images):
        return [(name(vid, cam), cam,
                 render(vehicles[vid], cameras[cam], rng, size=VERI_SIZE))
                for cam in _shot_cameras(rng, num_images)]

    for i, vid in enumerate(train_ids):
        for j, (filename, _, image) in enumerate(
                shots(vid, int(rng.integers(4, 10)))):
            if i == 0 and j == 0:
                filename += ".jpg"  # a doubled extension
            _save(os.path.join(dirs["train"], filename), image)
    for vid in test_ids:
        gallery = shots(vid, int(rng.integers(4, 8)))
        for filename, _, image in gallery:
            _save(os.path.join(dirs["test"], filename), image)
        cam = gallery[int(rng.integers(len(gallery)))][1]
        _save(os.path.join(dirs["query"], name(vid, cam)),
              render(vehicles[vid], cameras[cam], rng, size=VERI_SIZE))
    for split, directory in dirs.items():
        with open(os.path.join(output_dir, f"name_{split}.txt"), "w") as f:
            f.writelines(n + "\n" for n in sorted(os.listdir(directory)))
    with open(os.path.join(dirs["test"], "Thumbs.db"), "wb") as f:
        f.write(b"\xd0\xcf\x11\xe0 not an image")
    with open(os.path.join(dirs["train"], "readme.txt"), "w") as f:
        f.write("not an image\n")
    _save(os.path.join(dirs["train"], f"{train_ids[0]:04d}_c01_00000001_0.jpg"),
          render(vehicles[train_ids[0]], cameras[0], rng, size=VERI_SIZE))
    return output_dir


def write_mars(output_dir, num_train_ids=60, num_test_ids=30,
               frames_per_tracklet=(4, 8), seed=0):
    """Write a synthetic dataset in the MARS evaluation-kit layout.

    Every identity has 2 to 4 tracklets, each from its own camera, of 256x128
    images. ``bbox_test`` also holds a ``0000`` distractor and a ``00-1``
    junk tracklet. ``info/`` holds ``train_name.txt``, ``test_name.txt``,
    ``tracks_train_info.mat`` / ``tracks_test_info.mat`` (rows: start and
    end index, 1-based into the name list, person id, camera) and
    ``query_IDX.mat`` (1-based rows of the test tracks: one query per test
    identity).

    Returns
    -------
    str
        ``output_dir``.
    """
    rng = np.random.default_rng(seed)
    cameras = _cameras(seed + 1)
    train_ids, test_ids = _person_ids(rng, num_train_ids, num_test_ids,
                                      mars.MAX_LABEL)
    info_dir = os.path.join(output_dir, "info")
    os.makedirs(info_dir, exist_ok=True)

    def write_split(split, ids, extra):
        names, tracks = [], []
        tracklet = iter(range(1, 10 ** 4))
        entries = [(pid, _identity(rng)) for pid in ids] + extra
        for pid, person in entries:
            folder = "00-1" if pid == -1 else f"{pid:04d}"
            os.makedirs(os.path.join(output_dir, f"bbox_{split}", folder),
                        exist_ok=True)
            cams = rng.choice(NUM_CAMERAS, int(rng.integers(2, 5)),
                              replace=False)
            for cam in sorted(cams):
                t = next(tracklet)
                start = len(names) + 1
                for f in range(int(rng.integers(*frames_per_tracklet))):
                    image_name = f"{folder}C{cam + 1}T{t:04d}F{f + 1:03d}.jpg"
                    _save(os.path.join(output_dir, f"bbox_{split}", folder,
                                       image_name),
                          render(person, cameras[cam], rng, size=(128, 256)))
                    names.append(image_name)
                tracks.append([start, len(names), pid, cam + 1])
        with open(os.path.join(info_dir, f"{split}_name.txt"), "w") as f:
            f.write("".join(n + "\n" for n in names))
        tracks = np.asarray(tracks, np.float64)
        scipy.io.savemat(os.path.join(info_dir, f"tracks_{split}_info.mat"),
                         {f"track_{split}_info": tracks})
        return tracks

    write_split("train", train_ids, [])
    tracks = write_split("test", test_ids, [(0, None), (-1, _identity(rng))])
    first_track = {}
    for row, pid in enumerate(tracks[:, 2].astype(int)):
        if pid > 0:
            first_track.setdefault(pid, row + 1)
    query = np.asarray(sorted(first_track.values()), np.float64)
    scipy.io.savemat(os.path.join(info_dir, "query_IDX.mat"),
                     {"query_IDX": query[None, :]})
    return output_dir


def write_identity_folders(output_dir, num_ids=60, images_per_id=(3, 8),
                           seed=0):
    """Write ``output_dir/person_NNN/cC_KKK.jpg``: one folder per identity.

    The camera is in the file name (``c3_...`` for camera 3), for
    ``--camera_regex='^c(\\d+)_'``.

    Returns
    -------
    str
        ``output_dir``.
    """
    rng = np.random.default_rng(seed)
    cameras = _cameras(seed + 1)
    for n in range(num_ids):
        person = _identity(rng)
        folder = os.path.join(output_dir, f"person_{n:03d}")
        os.makedirs(folder, exist_ok=True)
        for k in range(int(rng.integers(*images_per_id))):
            cam = int(rng.integers(NUM_CAMERAS))
            _save(os.path.join(folder, f"c{cam + 1}_{k:03d}.jpg"),
                  render(person, cameras[cam], rng))
    return output_dir


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


COLOUR_KEYS = ("hair", "skin", "shirt", "shirt2", "trousers", "shoes",
               "bag_color")


def _look_alike(person, rng, spread):
    """A person built like ``person``, the same pattern and bag, whose
    colours each differ by a normal shift of ``spread`` per channel."""
    twin = dict(person)
    for key in COLOUR_KEYS:
        twin[key] = np.clip(person[key] + rng.normal(0.0, spread, 3), 0,
                            255).astype(int)
    return twin


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layout",
                        choices=("market1501", "mars", "veri",
                                 "identity_folders", "mot"),
                        default="market1501")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--num_train_ids", type=int, default=None,
                        help="default: 300 (market1501), 60 (mars), 40 "
                        "(veri)")
    parser.add_argument("--num_test_ids", type=int, default=None,
                        help="default: 100 (market1501), 30 (mars), 20 "
                        "(veri)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="SYNTH-01",
                        help="--layout=mot: the sequence's name (its folder)")
    parser.add_argument("--pairs", type=int, default=4,
                        help="--layout=mot: the pairs of people who cross")
    parser.add_argument("--frames", type=int, default=None,
                        help="--layout=mot: the sequence's length "
                        "(default: 160, or the frames every pair needs to "
                        "cross where that is more)")
    parser.add_argument("--look_alike", type=float, default=0.0,
                        help="--layout=mot or market1501: each pair's "
                        "colours differ by about this much (0-255); 0 "
                        "draws people independently")
    args = parser.parse_args(argv)
    sizes = {k: v for k, v in (("num_train_ids", args.num_train_ids),
                               ("num_test_ids", args.num_test_ids))
             if v is not None}
    for key, value in sizes.items():
        if value < 2:
            parser.error(f"--{key}={value}: expected at least 2")
    if not 0 <= args.look_alike <= 255:
        parser.error(f"--look_alike={args.look_alike:g}: expected a colour "
                     "difference from 0 to 255")
    if args.look_alike and args.layout not in ("mot", "market1501"):
        parser.error(f"--look_alike with --layout={args.layout}: only the "
                     "mot and market1501 layouts pair look-alikes")
    if args.pairs < 1:
        parser.error(f"--pairs={args.pairs}: expected at least 1")
    if args.frames is not None and args.frames < 1:
        parser.error(f"--frames={args.frames}: expected at least 1")
    if args.layout != "mot" and (args.pairs != 4 or args.frames is not None):
        parser.error(f"--pairs and --frames with --layout={args.layout}: "
                     "only the mot layout has them")
    if args.layout == "mot":
        frames = args.frames or max(160, crossing_frames(args.pairs))
        write_mot_sequence(args.output_dir, num_pairs=args.pairs,
                           num_frames=frames, seed=args.seed,
                           name=args.name, look_alike=args.look_alike)
    elif args.layout == "identity_folders":
        write_identity_folders(args.output_dir, seed=args.seed,
                               num_ids=sizes.get("num_train_ids", 60))
    elif args.layout == "market1501":
        write_market1501(args.output_dir, seed=args.seed,
                         look_alike=args.look_alike, **sizes)
    else:
        writer = {"mars": write_mars, "veri": write_veri}[args.layout]
        writer(args.output_dir, seed=args.seed, **sizes)
    print(f"wrote a synthetic {args.layout} dataset to {args.output_dir}")


if __name__ == "__main__":
    sys.exit(main())
