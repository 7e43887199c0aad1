"""Exported models measured on a test split beside the float model, on the
runtimes' kernels of this process's instruction set (capped by the
environment):

    python -m tests.helpers.int8_features DATASET_DIR OUT.npz \
        FLOAT MODEL:BACKEND...

For the float model (``FLOAT``, run on its default runtime) and each
``MODEL:BACKEND``: ``--mode=test``'s numbers on the Market-1501 test
split and the features it computed them from, saved in ``OUT.npz`` under
the index of the model (0 is the float model), and the norm of the
features of a black patch, printed as a JSON list on the last line."""

import json
import sys

import numpy as np

from cosine_metric_learning import protocol
from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning.datasets.spec import MARKET1501 as MARKET

dataset_dir, output, float_model, *models = sys.argv[1:]
black = np.zeros((1, 128, 64, 3), np.uint8)
features, results = {}, []
# the features --mode=test computes its numbers from: the real function,
# its result kept
encoded = []
test_features = protocol.test_features
protocol.test_features = lambda *args, **kwargs: encoded.append(
    test_features(*args, **kwargs)) or encoded[-1]
for index, spec in enumerate([f"{float_model}:auto"] + models):
    path, backend = spec.rsplit(":", 1)
    numbers = protocol.run_test(MARKET, path, dataset_dir, backend=backend)
    features[str(index)] = encoded[-1][1]
    results.append({"model": spec, "numbers": numbers, "black_norm": float(
        np.linalg.norm(encoder_lib.load(path, backend=backend)(black)))})
np.savez(output, **features)
print(json.dumps(results))
