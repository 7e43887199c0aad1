"""Writing output files: never half a file, never over a file of the user's.

Every output has a :class:`Kind` that recognises an earlier output of the
same kind. :func:`check_output` refuses, with one line naming the path, to
replace anything else (a folder of the user's files, a photo, a
``package.json``); the writers call it first, and the modes call it before
their work so a bad path fails at once.
"""

import contextlib
import dataclasses
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import tempfile
import threading
from typing import Callable

import scipy.io
from PIL import Image

from cosine_metric_learning.errors import UsageError

# the image files the commands read (as crops, frames or query images)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
# the quality of the JPEG files the commands write (crops, frames)
JPEG_QUALITY = 95
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# the tEXt chunk that marks the PNG files this project draws
PNG_SOFTWARE = "cosine_metric_learning"


@dataclasses.dataclass(frozen=True)
class Kind:
    """What an output is, to tell whether an existing path may be replaced.

    ``recognise(path)`` is True for an earlier output of this kind (where
    it raises, the path is not one). ``is_dir``: the output is a folder.
    """
    description: str
    recognise: Callable[[str], bool]
    is_dir: bool = False

    def matches(self, path):
        """Whether ``path`` is an earlier output of this kind."""
        if os.path.islink(path) or os.path.isdir(path) != self.is_dir:
            return False
        try:
            return bool(self.recognise(path))
        except Exception:  # unreadable or another format: not ours
            return False


def _starts_with(path, magic):
    with open(path, "rb") as f:
        return f.read(len(magic)) == magic


def mat_kind(keys, description):
    """A MATLAB file holding exactly the variables ``keys``."""
    def recognise(path):
        names = {name for name, _, _ in scipy.io.whosmat(path)}
        return names == set(keys)
    return Kind(description, recognise)


def json_kind(keys, description):
    """A JSON object with all of ``keys``."""
    def recognise(path):
        with open(path) as f:
            value = json.load(f)
        return isinstance(value, dict) and set(keys) <= set(value)
    return Kind(description, recognise)


def _is_own_png(path):
    if not _starts_with(path, PNG_MAGIC):
        return False
    with Image.open(path) as image:
        image.load()
        return image.info.get("Software") == PNG_SOFTWARE


PNG = Kind("a PNG picture drawn by cosine_metric_learning", _is_own_png)
# the model that encoded a feature file, beside it (model_record_path)
MODEL_RECORD = json_kind({"model"}, "a model record written by this project "
                         "(a JSON object with 'model')")


def names_path(npy_path):
    """The file-name list beside a feature file: ``<stem>.filenames.txt``
    (``encode``'s layout, and the shards' of ``encode_shards``)."""
    return os.path.splitext(npy_path)[0] + ".filenames.txt"


def model_record_path(npy_path):
    """The model record beside a feature file: ``<stem>.model.json``
    (``encode``'s, naming the model that encoded the features)."""
    return os.path.splitext(npy_path)[0] + ".model.json"


def dump_model_record(f, model):
    """Write a model record (:data:`MODEL_RECORD`) of ``model`` (a
    ``checkpoints.model_identity``, or None) to the open file ``f``."""
    json.dump({"model": model}, f, indent=1)


def digest(path):
    """SHA-256 of a file's bytes."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def check_writable(directory, path):
    """Raise a UsageError naming ``path`` unless ``directory`` takes files:
    a folder, or missing folders (created when the output is written, as
    :func:`make_parents` does) under a writable one."""
    existing = os.path.abspath(directory)
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UsageError(f"cannot write {path}: {existing} is a file, not a "
                         "folder")
    if not os.access(existing, os.W_OK):
        raise UsageError(f"cannot write {path}: the folder {existing} is not "
                         "writable")


def make_parents(path):
    """Create the missing folders above ``path`` (checked by
    :func:`check_writable`)."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}") from e


def check_output(path, kind):
    """Raise a UsageError unless ``path`` can be written as a ``kind``.

    Its folder must be writable (or missing under a writable one: the
    writers create it); an existing ``path`` is replaced
    only if ``kind`` recognises it as an earlier output of the same kind.
    """
    check_writable(os.path.dirname(os.path.abspath(path)), path)
    if os.path.lexists(path) and not kind.matches(path):
        what = "folder" if os.path.isdir(path) else "file"
        raise UsageError(f"refusing to replace {path}: the existing {what} "
                         f"is not {kind.description}; remove it or choose "
                         "another path")
    return path


def umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomically(path, write, kind, binary=False):
    """Let ``write(file)`` fill a temporary file, then rename it to ``path``.

    Raises
    ------
    UsageError
        If the folder does not exist, ``path`` is something other than a
        ``kind`` (see :func:`check_output`) or cannot be written; the
        temporary file is removed and ``path`` is left as it was.
    """
    return write_together([(path, write, kind, binary)])[0]


def write_together(outputs):
    """Write several files as one output: ``outputs`` is a list of
    ``(path, write, kind, binary)`` as :func:`write_atomically` takes.

    Every file is checked, then written to a temporary file beside it; only
    when all are written are they renamed into place, one after the other
    with SIGINT and SIGTERM held back, so an interruption leaves either
    all the earlier files or all the new ones. Temporary files are removed
    whatever happens.
    """
    for path, _, kind, _ in outputs:
        check_output(path, kind)
    for path, *_ in outputs:
        make_parents(path)
    temporary = []
    try:
        for path, write, _, binary in outputs:
            directory = os.path.dirname(os.path.abspath(path))
            try:
                fd, tmp = tempfile.mkstemp(
                    prefix=f".{os.path.basename(path)}.", dir=directory)
            except OSError as e:
                raise UsageError(f"cannot write {path}: {e.strerror}") from e
            temporary.append(tmp)
            try:
                with os.fdopen(fd, "wb" if binary else "w") as f:
                    write(f)
                os.chmod(tmp, 0o666 & ~umask())  # mkstemp made it private
            except OSError as e:
                raise UsageError(f"cannot write {path}: {e.strerror}") from e
        with _signals_held():
            for (path, *_), tmp in zip(outputs, temporary):
                try:
                    os.replace(tmp, path)
                except OSError as e:
                    raise UsageError(f"cannot write {path}: {e.strerror}") \
                        from e
    finally:
        for tmp in temporary:
            if os.path.exists(tmp):
                os.remove(tmp)
    return [path for path, *_ in outputs]


@contextlib.contextmanager
def _signals_held():
    """Hold SIGINT and SIGTERM back (in the main thread) until the block
    ends; they are delivered then."""
    held = {signal.SIGINT, signal.SIGTERM}
    main = threading.current_thread() is threading.main_thread()
    if main:
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        if main:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def replace_dir_atomically(directory, write, kind, errors=()):
    """Let ``write(tmp_dir)`` fill a temporary folder, then move it to
    ``directory``, replacing an earlier output of ``kind`` only.

    ``errors``: exceptions of ``write`` besides OSError that mean the folder
    cannot be written (a UsageError naming ``directory``); the temporary
    folder is removed whatever happens.
    """
    directory = os.path.abspath(directory)
    check_output(directory, kind)
    make_parents(directory)
    parent = os.path.dirname(directory)
    tmp = None
    try:
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(directory)}.",
                               dir=parent)
        write(tmp)
        os.chmod(tmp, 0o777 & ~umask())  # mkdtemp made it private
        if os.path.isdir(directory):
            old = tmp + ".old"
            os.rename(directory, old)
            try:
                os.rename(tmp, directory)
            except OSError:
                os.rename(old, directory)  # put the earlier one back
                raise
            _rmtree(old)  # recognised as an earlier output above
        else:
            os.rename(tmp, directory)
    except (OSError, *errors) as e:
        raise UsageError(f"cannot write {directory}: "
                         f"{getattr(e, 'strerror', None) or e}") from e
    finally:
        if tmp is not None and os.path.isdir(tmp):
            _rmtree(tmp)
    return directory


def replace_parts_atomically(prefix, write, parts, errors=()):
    """Let ``write(tmp_prefix)`` write files ``<tmp_prefix><suffix>`` (a
    checkpoint's ``.index`` and ``.data-*``), then rename them to
    ``<prefix><suffix>``, first removing the earlier ``<prefix><suffix>``
    files whose suffix matches the regex ``parts``.

    The caller has checked that the earlier files are its own; on failure
    the temporary files are removed. ``write`` returns the prefix it wrote.
    """
    directory = os.path.dirname(os.path.abspath(prefix))
    tmp = os.path.join(directory, f".{os.path.basename(prefix)}.tmp")
    try:
        written = write(tmp)
        for old in glob.glob(glob.escape(prefix) + ".*"):
            if re.fullmatch(parts, old[len(prefix):]):
                os.remove(old)
        for part in glob.glob(glob.escape(written) + ".*"):
            os.replace(part, prefix + part[len(written):])
    except (OSError, *errors) as e:
        for part in glob.glob(glob.escape(tmp) + "*"):
            os.remove(part)
        raise UsageError(f"cannot write {prefix}: "
                         f"{getattr(e, 'strerror', None) or e}") from e
    return prefix


def _rmtree(path):
    shutil.rmtree(path, ignore_errors=True)
