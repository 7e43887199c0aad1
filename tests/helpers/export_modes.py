"""Model exports of one run in one process, each as its entry point runs
the mode (to the mode's default file name, in the current folder):

    python -m tests.helpers.export_modes DATASET RESTORE_PATH MODE...

``DATASET`` names a spec of ``datasets/spec.py`` (``VERI``); prints what
each mode prints."""

import sys

from cosine_metric_learning import cli, settings
from cosine_metric_learning.datasets import spec

dataset, restore_path, *modes = sys.argv[1:]
for mode in modes:
    config = settings.ExportConfig(restore_path=restore_path)
    config.validate()
    status = cli.run_mode(getattr(spec, dataset), cli.Mode(mode), config)
    if status:
        sys.exit(status)
