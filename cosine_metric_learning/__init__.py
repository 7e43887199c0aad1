"""Cosine metric learning for person re-identification (TensorFlow 2).

The dataset readers and the network live in the top-level folders
``datasets/`` and ``nets/`` of the source tree and are the subpackages
``cosine_metric_learning.datasets`` and ``cosine_metric_learning.nets``
(``package_dir`` in ``setup.cfg``): an installed copy keeps them inside
this package, so it never installs a top-level ``datasets`` package that
would hide Hugging Face's, and an editable install (``pip install -e .``,
which ``make install`` runs) maps the two folders of the checkout to the
same names. Nothing else of the checkout is part of the package.
"""

__version__ = "0.1.0"
