"""The ``deploy`` extra's packages (ONNX, ONNX Runtime, OpenVINO, NNCF,
LiteRT): imported when a command needs one, or one line naming the extra
to install. Imports no TensorFlow, so a command that needs only OpenVINO
(the pedestrian detector of ``datasets.video``) starts without it."""

import importlib

from cosine_metric_learning.errors import UsageError

INSTALL_HINT = ("pip install 'cosine-metric-learning[deploy]' (in a source "
                "checkout: pip install -e '.[deploy]')")


def require(module, purpose):
    """Import an optional dependency; UsageError naming the extra if it is
    missing."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise UsageError(f"{purpose} needs the optional package '{module}', "
                         f"which is not installed: {INSTALL_HINT}") from e
