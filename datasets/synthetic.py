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

from cosine_metric_learning.datasets import market1501, mars, veri
from cosine_metric_learning.datasets import synthetic_people
from cosine_metric_learning.datasets.synthetic_mot import crossing_frames
from cosine_metric_learning.datasets.synthetic_mot import write_mot_sequence
from cosine_metric_learning.datasets.synthetic_people import render
from cosine_metric_learning.datasets.synthetic_people import \
    cameras as _cameras, identity as _identity, people as _people, \
    save as _save

NUM_CAMERAS = synthetic_people.NUM_CAMERAS


def _shot_cameras(rng, num_images):
    """The cameras of ``num_images`` images of one identity: 2 to 4
    cameras, each at least once."""
    cams = rng.choice(NUM_CAMERAS, int(rng.integers(2, 5)), replace=False)
    return np.concatenate([cams, rng.choice(cams, num_images - len(cams))])


def _person_ids(rng, num_train, num_test, max_label):
    ids = rng.choice(np.arange(1, max_label), num_train + num_test,
                     replace=False)
    return np.sort(ids[:num_train]), np.sort(ids[num_train:])


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
