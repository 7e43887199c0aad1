"""Exported models measured on a test split beside the float model, on the
runtimes' kernels of this process's instruction set (capped by the
environment):

    python -m tests.helpers.int8_features DATASET_DIR OUT.npz \
        FLOAT MODEL:BACKEND...

For the float model (``FLOAT``, run on its default runtime) and each
``MODEL:BACKEND``: the features of the Market-1501 test split as
``--mode=test`` encodes them, saved in ``OUT.npz`` under the index of the
model (0 is the float model), and ``--mode=test``'s numbers and the norm
of the features of a black patch, printed as a JSON list on the last
line."""

import json
import sys

import numpy as np

from cosine_metric_learning import protocol
from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning.datasets.spec import MARKET1501 as MARKET

dataset_dir, output, float_model, *models = sys.argv[1:]
split = MARKET.read_test(dataset_dir)
black = np.zeros((1, 128, 64, 3), np.uint8)
features, results = {}, []
for index, spec in enumerate([f"{float_model}:auto"] + models):
    path, backend = spec.rsplit(":", 1)
    _, values, _ = protocol.test_features(MARKET, path, dataset_dir, 128,
                                          split=split, backend=backend)
    features[str(index)] = values
    numbers = protocol.run_test(MARKET, path, dataset_dir, backend=backend)
    results.append({"model": spec, "numbers": numbers, "black_norm": float(
        np.linalg.norm(encoder_lib.load(path, backend=backend)(black)))})
np.savez(output, **features)
print(json.dumps(results))
