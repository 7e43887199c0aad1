"""Load a frozen encoder as Deep SORT's 2025 tool does, with eager
execution on (the Session's graph gets the ops without the "net/" prefix):
``python -m tests.helpers.deep_sort_eager MODEL.pb PATCHES.npy OUT.npy``."""

import sys

import numpy as np
import tensorflow as tf

model, patches_path, out_path = sys.argv[1:4]
assert tf.executing_eagerly()
graph_def = tf.compat.v1.GraphDef()
with open(model, "rb") as f:
    graph_def.ParseFromString(f.read())
session = tf.compat.v1.Session()
tf.import_graph_def(graph_def, name="net")
images = session.graph.get_tensor_by_name("images:0")
features = session.graph.get_tensor_by_name("features:0")
assert len(images.get_shape()) == 4 and len(features.get_shape()) == 2
assert features.get_shape().as_list()[-1] == 128
np.save(out_path, session.run(features,
                              feed_dict={images: np.load(patches_path)}))
