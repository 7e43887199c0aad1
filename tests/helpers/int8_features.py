"""Features of int8 models beside the float32 model's, on the runtimes'
kernels of this process's instruction set (capped by the environment):
``python -m tests.helpers.int8_features FLOAT PATCHES.npy MODEL:BACKEND...``
prints a JSON object ``{"MODEL:BACKEND": {"cosines": [...], "norms":
[...]}}``; the float model's entry is under ``"float"``."""

import json
import sys

import numpy as np

from cosine_metric_learning import encoder as encoder_lib

float_model, patches_path, *models = sys.argv[1:]
patches = np.load(patches_path)
floats = encoder_lib.load(float_model)(patches)
result = {}
for name, spec in [("float", f"{float_model}:auto")] + [(m, m)
                                                        for m in models]:
    path, backend = spec.rsplit(":", 1)
    features = encoder_lib.load(path, backend=backend)(patches)
    norms = np.linalg.norm(features, axis=1)
    cosines = np.sum(features * floats, axis=1) / norms / np.linalg.norm(
        floats, axis=1)
    result[name] = {"cosines": cosines.tolist(), "norms": norms.tolist()}
print(json.dumps(result))
