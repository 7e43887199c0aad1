"""Training on several devices or machines with ``tf.distribute``: the
strategy of ``--strategy``/``--devices``, which process is the chief, and
how the global batch is shared between replicas."""

import tensorflow as tf

from cosine_metric_learning.errors import UsageError

STRATEGIES = ("none", "mirrored", "multi_worker")
COLLECTIVE_TIMEOUT_SECS = 600


def create_strategy(name, devices=None):
    """The ``tf.distribute`` strategy of ``--strategy`` (``--devices``)."""
    if name == "none":
        return tf.distribute.get_strategy()
    if name == "multi_worker":  # the cluster comes from TF_CONFIG
        # a worker that died leaves the others in an all-reduce: give up
        # after a while instead of waiting forever
        return tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental
            .CommunicationOptions(timeout_seconds=COLLECTIVE_TIMEOUT_SECS))
    available = [d.name for d in tf.config.list_logical_devices()
                 if d.device_type in ("GPU", "CPU")]
    if devices:
        wanted = [d.strip() for d in devices.split(",") if d.strip()]
        for d in wanted:
            try:
                tf.DeviceSpec.from_string(d)
            except ValueError:
                raise UsageError(
                    f"--devices={devices}: '{d}' is not a device name; "
                    "expected comma-separated names such as /gpu:0,/gpu:1; "
                    f"available: {', '.join(available)}") from None
        unknown = [d for d in wanted
                   if tf.DeviceSpec.from_string(d).to_string() not in
                   {tf.DeviceSpec.from_string(a).to_string()
                    for a in available}]
        if unknown or not wanted:
            raise UsageError(f"--devices={devices}: no such device "
                             f"{', '.join(unknown)}; available: "
                             f"{', '.join(available)}")
        return tf.distribute.MirroredStrategy(wanted)
    return tf.distribute.MirroredStrategy()


def is_chief(strategy):
    """Whether this process writes checkpoints and summaries."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return resolver.task_type == "chief" or (
        resolver.task_type == "worker" and resolver.task_id == 0 and
        "chief" not in resolver.cluster_spec().as_dict())


def local_replicas(strategy):
    """How many of the strategy's replicas run in this process."""
    try:
        return len(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy: one device
        return 1


def check_batch_split(batch_size, images_per_id, replicas=1):
    """Raise a UsageError unless every replica gets an equal share of whole
    identities: ``batch_size`` a multiple of ``replicas x images_per_id``."""
    if batch_size % (replicas * images_per_id) == 0:
        return
    if replicas == 1:
        raise UsageError(f"--batch_size={batch_size} is not divisible by "
                         f"--images_per_id={images_per_id}")
    raise UsageError(
        f"--batch_size={batch_size}: each of the {replicas} replicas takes "
        f"an equal share of whole identities; expected a multiple of "
        f"{replicas} x --images_per_id={images_per_id}")
