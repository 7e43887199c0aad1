"""Deep SORT's published model, rebuilt as a TF1 graph from the facts of
its network (slim's variable names and shapes; pool1 with VALID padding;
a ``ball`` batch norm after fc1; ``x / sqrt(1e-8 + sum(x**2))``; inputs
in [0, 255], BGR reversed to RGB; a scale per class), with seeded weights
of a sensible scale, written as Deep SORT ships it: a V1 checkpoint (one
file, Adam slots and ``global_step`` beside the weights) and a frozen
graph (``images`` uint8 -> ``features``, Const nodes named after the
variables).

    python -m tests.helpers.release_graph OUT_DIR [PATCHES.npy FEATURES.npy]

writes ``OUT_DIR/mars-small128.ckpt-68577`` and ``mars-small128.pb``, and
with patch and feature files the graph's features of the patches.
"""

import os
import sys

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1
STEP = 68577
NUM_CLASSES = 1501
BLOCKS = (("conv2_1", False, True), ("conv2_3", False, False),
          ("conv3_1", True, False), ("conv3_3", False, False),
          ("conv4_1", True, False), ("conv4_3", False, False))


class _Builder:
    def __init__(self, rng):
        self.rng = rng
        self.variables = []

    def variable(self, name, value):
        variable = v1.Variable(np.asarray(value, np.float32), name=name)
        self.variables.append(variable)
        return variable

    def batch_norm(self, x, prefix):
        width = int(x.shape[-1])
        beta = self.variable(f"{prefix}/beta",
                             self.rng.normal(0, 0.1, width))
        mean = self.variable(f"{prefix}/moving_mean",
                             self.rng.normal(0, 0.1, width))
        variance = self.variable(f"{prefix}/moving_variance",
                                 self.rng.uniform(0.5, 2.0, width))
        return tf.nn.batch_normalization(x, mean, variance, beta, None, 1e-3)

    def conv(self, x, scope, filters, size, stride, bias=False,
             bn_elu=True, gain=1.0):
        fan_in = size * size * int(x.shape[-1])
        weights = self.variable(f"{scope}/weights", self.rng.normal(
            0, gain * np.sqrt(2.0 / fan_in),
            (size, size, int(x.shape[-1]), filters)))
        y = tf.nn.conv2d(x, weights, stride, "SAME")
        if bias:
            y = y + self.variable(f"{scope}/biases",
                                  self.rng.normal(0, 0.1, filters))
        if bn_elu:
            y = tf.nn.elu(self.batch_norm(y, f"{scope}/{scope}/bn"))
        return y

    def block(self, x, scope, increase, first):
        width = int(x.shape[-1]) * (2 if increase else 1)
        stride = 2 if increase else 1
        y = x if first else tf.nn.elu(self.batch_norm(x, f"{scope}/bn"))
        y = self.conv(y, f"{scope}/1", width, 3, stride)
        y = self.conv(y, f"{scope}/2", width, 3, 1, bias=True, bn_elu=False,
                      gain=0.5)
        link = x
        if increase:
            link = self.conv(x, f"{scope}/projection", width, 1, 2,
                             bn_elu=False)
        return link + y

    def network(self, images):
        x = tf.cast(images, tf.float32)[..., ::-1]  # BGR -> RGB, [0, 255]
        x = self.conv(x, "conv1_1", 32, 3, 1, gain=1.0 / 128)
        x = self.conv(x, "conv1_2", 32, 3, 1)
        x = tf.nn.max_pool2d(x, 3, 2, "VALID")
        for scope, increase, first in BLOCKS:
            x = self.block(x, scope, increase, first)
        x = tf.reshape(x, [-1, int(np.prod(x.shape[1:]))])
        weights = self.variable("fc1/weights", self.rng.normal(
            0, np.sqrt(2.0 / int(x.shape[-1])), (int(x.shape[-1]), 128)))
        x = tf.nn.elu(self.batch_norm(tf.matmul(x, weights),
                                      "fc1/fc1/bn"))
        x = self.batch_norm(x, "ball")
        features = x / tf.sqrt(1e-8 + tf.reduce_sum(tf.square(x), axis=1,
                                                    keepdims=True))
        # the classifier, in the checkpoint only
        self.variable("ball/mean_vectors",
                      self.rng.normal(0, 1e-3, (128, NUM_CLASSES)))
        self.variable("ball/scale", self.rng.normal(1.0, 0.1, NUM_CLASSES))
        return tf.identity(features, name="features")


def write_release(out_dir, seed=0, patches=None):
    """Write the checkpoint and the frozen graph; returns their paths and
    the graph's features of ``patches`` (uint8 BGR, N x 128 x 64 x 3)."""
    os.makedirs(out_dir, exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        builder = _Builder(np.random.default_rng(seed))
        images = v1.placeholder(tf.uint8, (None, 128, 64, 3), name="images")
        features = builder.network(images)
        # what training leaves beside the weights
        for variable in list(builder.variables):
            name = variable.op.name
            builder.variable(f"{name}/Adam", np.zeros(variable.shape))
            builder.variable(f"{name}/Adam_1", np.zeros(variable.shape))
        v1.Variable(STEP, dtype=tf.int64, name="global_step")
        v1.Variable(0.9, name="beta1_power")
        v1.Variable(0.999, name="beta2_power")
        saver = v1.train.Saver(write_version=v1.train.SaverDef.V1)
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            prefix = os.path.join(out_dir, "mars-small128.ckpt")
            checkpoint = saver.save(session, prefix, global_step=STEP,
                                    write_meta_graph=False)
            frozen = v1.graph_util.convert_variables_to_constants(
                session, graph.as_graph_def(), ["features"])
            values = (None if patches is None else
                      session.run(features, {images: patches}))
    graph_path = os.path.join(out_dir, "mars-small128.pb")
    with open(graph_path, "wb") as f:
        f.write(frozen.SerializeToString())
    return checkpoint, graph_path, values


if __name__ == "__main__":
    out_dir, *files = sys.argv[1:]
    patches = np.load(files[0]) if files else None
    _, _, values = write_release(out_dir, patches=patches)
    if files:
        np.save(files[1], values)
