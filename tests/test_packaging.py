"""Installing the project: what lands in site-packages."""

import glob
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import ENV, ROOT

pytestmark = pytest.mark.slow


def _run(*args, **kwargs):
    kwargs.setdefault("env", ENV)
    result = subprocess.run(args, capture_output=True, text=True,
                            timeout=600, **kwargs)
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
                  env=dict(ENV, PYTHONPATH=str(tmp_path / "other")))
    assert result.stdout.strip() == "ok"
