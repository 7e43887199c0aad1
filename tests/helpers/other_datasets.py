"""Run by tests/test_packaging.py with the python of a fresh environment
where the project's wheel is installed and another library's top-level
``datasets`` is on PYTHONPATH: both must import, each from its own place.
Prints ``ok``."""

import importlib.util

import datasets

assert datasets.OTHER_LIBRARY
spec = importlib.util.find_spec("cosine_metric_learning.datasets.market1501")
assert "site-packages" in spec.origin, spec.origin
print("ok")
