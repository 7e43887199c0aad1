"""Writing output files so that a failure never leaves half a file behind."""

import os
import tempfile

from cosine_metric_learning.errors import UsageError


def check_writable(directory, path):
    """Raise a UsageError naming ``path`` unless ``directory`` takes files."""
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write {path}: the folder {directory} does "
                         "not exist")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"cannot write {path}: the folder {directory} is not "
                         "writable")


def umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomically(path, write, binary=False):
    """Let ``write(file)`` fill a temporary file, then rename it to ``path``.

    Raises
    ------
    UsageError
        If the folder does not exist or the file cannot be written; the
        temporary file is removed and ``path`` is left as it was.
    """
    directory = os.path.dirname(os.path.abspath(path))
    check_writable(directory, path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp made it private
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise UsageError(f"cannot write {path}: {e.strerror}") from e
    return path
