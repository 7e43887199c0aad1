"""Cosine metric learning for person re-identification (TensorFlow 2).

The dataset readers and the network live in the top-level folders
``datasets/`` and ``nets/`` of the source tree and are imported as
``cosine_metric_learning.datasets`` and ``cosine_metric_learning.nets``:
an installed copy keeps them inside this package (``package_dir`` in
``setup.cfg``), so it never installs a top-level ``datasets`` package that
would hide Hugging Face's. In a source checkout the parent folder is added
to this package's search path to find them.
"""

import os

__version__ = "0.1.0"

_here = os.path.dirname(os.path.abspath(__file__))
if not os.path.isdir(os.path.join(_here, "datasets")):  # a source checkout
    __path__.append(os.path.dirname(_here))  # noqa: F821 (a package's path)
