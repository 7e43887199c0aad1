"""A format registered as a new one would be: one record of
``formats.FORMATS`` and its writer, here a NumPy file of the encoder's
features of a fixed batch. Run before anything imports the modes
(``python -m tests.helpers.dummy_format RESTORE_PATH OUTPUT_DIR``);
prints what the rest of the project derived from the record, as JSON."""

import json
import os
import sys

import numpy as np

from cosine_metric_learning import files, formats

NPY = files.Kind("features written by the dummy format",
                 lambda path: path.endswith(".features.npy"))


def write(encoder, output, image_shape, **options):
    patches = np.zeros((2, *image_shape), np.uint8)
    files.write_atomically(output, lambda f: np.save(
        f, np.asarray(encoder(patches, training=False))), NPY, binary=True)
    return output


formats.FORMATS += (formats.Format(
    "dummy", "dummy", ".features.npy", "{name}.features.npy",
    (formats.TENSORFLOW,), write, lambda output: files.check_output(
        output, NPY), "a dummy feature file (.features.npy)"),)

from cosine_metric_learning import adapt, backends, checkpoints  # noqa: E402
from cosine_metric_learning import cli, settings  # noqa: E402
from cosine_metric_learning.datasets import spec  # noqa: E402
from cosine_metric_learning.errors import UsageError  # noqa: E402

restore_path, output_dir = sys.argv[1:3]
os.chdir(output_dir)
config = settings.ExportConfig(restore_path=restore_path)
config.validate()
status = cli.run_mode(spec.MARKET1501, cli.Mode("dummy"), config)
written = sorted(os.listdir("."))
try:
    checkpoints.resolve_checkpoint(os.path.join(output_dir, written[0]))
    refused = None
except UsageError as e:
    refused = str(e)
help_text = " ".join(str(f.metadata["help"]) for f in
                     settings.ExportConfig.__dataclass_fields__.values())
print(json.dumps({
    "status": status, "written": written,
    "features": np.load(written[0]).shape if written else None,
    "format_of_path": formats.of_path("x.features.npy"),
    "runs_on": backends.RUNS_ON["dummy"],
    "refused_as_checkpoint": refused,
    "adapt_exports": "dummy" in adapt.EXPORTS,
    "in_help": "a dummy feature file" in help_text}))
