"""Installing the project: what lands in site-packages."""

import glob
import os
import shutil
import sys
import zipfile

import pytest

from tests.conftest import ROOT, run

pytestmark = pytest.mark.slow


def _run(*args, **kwargs):
    """Run a command (of another Python, or pip) that must succeed."""
    result = run(list(args), timeout=600, **kwargs)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result


def test_install_leaves_another_datasets_package_importable(tmp_path):
    # a wheel of the project, built from a copy of its sources (a build
    # writes a build/ folder beside them), installed into a fresh venv
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".*", "build", "demo", "output", "__pycache__", "*.egg-info"))
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
         "--wheel-dir", str(tmp_path / "wheel"), str(source))
    wheel, = glob.glob(str(tmp_path / "wheel" / "*.whl"))
    top_level = {name.split("/")[0] for name in
                 zipfile.ZipFile(wheel).namelist()}
    assert "datasets" not in top_level and "nets" not in top_level
    _run(sys.executable, "-m", "venv", str(tmp_path / "venv"))
    python = str(tmp_path / "venv" / "bin" / "python")
    _run(python, "-m", "pip", "install", "--quiet", "--no-deps", wheel)
    # another library's top-level "datasets" (as Hugging Face's) beside it
    other = tmp_path / "other" / "datasets"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("OTHER_LIBRARY = True\n")
    result = _run(python, os.path.join(ROOT, "tests", "helpers",
                                       "other_datasets.py"),
                  cwd=str(tmp_path),
                  env={"PYTHONPATH": str(tmp_path / "other")})
    assert result.stdout.strip() == "ok"


def test_the_package_is_its_folder_and_the_two_it_maps():
    """In a checkout (an editable install): ``datasets/`` and ``nets/`` are
    subpackages, and nothing else of the checkout is part of the
    package."""
    result = _run(sys.executable, "-c", """
import importlib.util
import cosine_metric_learning
import cosine_metric_learning.datasets.synthetic as synthetic
import cosine_metric_learning.nets.deep_sort.network_definition as network
print(cosine_metric_learning.__path__)
print(synthetic.__file__)
print(network.__file__)
for name in ("tests", "benchmarks", "examples"):
    print(importlib.util.find_spec(f"cosine_metric_learning.{name}"))
""", cwd=ROOT)
    lines = result.stdout.splitlines()
    assert lines[0] == str([os.path.join(ROOT, "cosine_metric_learning")])
    assert lines[1] == os.path.join(ROOT, "datasets", "synthetic.py")
    assert lines[2] == os.path.join(ROOT, "nets", "deep_sort",
                                    "network_definition.py")
    assert lines[3:] == ["None"] * 3
    # the module's documented command runs
    _run(sys.executable, "-m", "cosine_metric_learning.datasets.synthetic",
         "--help", cwd=str(os.path.dirname(ROOT)))
