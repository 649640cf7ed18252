"""Where a ``--backend jax`` run's steps go: ``keras.distribution`` over every device of every host, the processes
joined through ``jax.distributed.initialize`` from the cluster tpuctl already describes.

- ``TF_CONFIG`` with several training tasks (local processes on 127.0.0.1, Vertex AI worker pools): the chief's
  address is the coordinator, each task's place in the cluster (the chief first, then the workers, as
  ``trainer.cluster`` lists them) its process id. Every task first answers on its own port and waits for the others'
  (trainer.rendezvous, ``--cluster_timeout_seconds``), so a peer that never starts is one line naming it.
- A TPU VM host (tpuctl's startup script sets ``TPUCTL_TPU_WORKER``; Vertex AI's TPU replicas ``TPU_CONFIG`` or
  ``TPU_NODE_NAME``; ``TPU_NAME``): ``jax.distributed.initialize()`` with no arguments, which finds the slice's hosts
  itself ("If you are using TPU, Slurm, or Open MPI, all arguments are optional: if omitted, they will be chosen
  automatically": https://docs.jax.dev/en/latest/_autosummary/jax.distributed.initialize.html, read 2026-12-07; jax
  0.10.2 reads them from the TPU VM's metadata, ``jax/_src/clusters/cloud_tpu_cluster.py`` ``GceTpuCluster``).
  [unverified: jax-tpu-vm-hosts] Not run on a TPU here.
- Otherwise one process.

CPU collectives between processes go through gloo (``jax_cpu_collectives_implementation``; without it a CPU
cluster's collectives fail). Keras ``DataParallel`` shards each global batch over the devices: with several
processes every process reads the whole tf.data stream and keeps its part of each global batch
(``Distribution.distribute_dataset``: ``rebatch`` to the per-process batch, then ``shard``), as the TensorFlow path's
DATA sharding does. A plug-in's ``layout(ctx)`` (docs/your-code.md) makes it ``ModelParallel`` instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from trainer.cluster import ClusterConfig, parse_tf_config, parse_tpu_name, parse_vertex_tpu
from trainer.errors import HardwareError, UsageError
from trainer.profiling import TPU_WORKER_ENV

#: What a plug-in's layout function is called (next to its model function) and the mesh axis that carries the batch.
LAYOUT_FUNCTION = "layout"
BATCH_AXIS = "batch"
#: What each --distribution_strategy asks of the JAX devices (parameter_server / central_storage: trainer.backends).
_PLATFORMS = {"tpu": "tpu", "gpu": "gpu", "cpu": "cpu"}


@dataclasses.dataclass
class JaxInfo:
    """The JAX run's place in its cluster, shaped like trainer.strategy.StrategyInfo for the code both paths share
    (the training line, profiles, result)."""
    kind: str                       # data_parallel | model_parallel | one_device
    num_workers: int                # processes
    task_type: str | None
    task_id: int
    is_chief: bool
    devices: tuple[str, ...]        # every device of every process
    platform: str                   # cpu | gpu | tpu
    strategy: Any = None            # no tf.distribute strategy: Keras' distribution is global

    @property
    def num_replicas(self) -> int:
        return len(self.devices)

    def input_pipelines(self) -> tuple[int, int]:
        """One stream: every process reads it whole and keeps its part of each global batch (keras.distribution's
        dataset sharding), so a step consumes one global batch of it (trainer.data.records_read)."""
        return 1, 0


@dataclasses.dataclass(frozen=True)
class LayoutContext:
    """What a plug-in's ``layout(ctx)`` receives."""
    devices: tuple[str, ...]        # every device of every process, as Keras names them ("cpu:0", "tpu:3" …)
    hparams: Mapping[str, Any]


def _process_of(cluster: ClusterConfig) -> int:
    return [(job, i) for job, i, _ in cluster.training_tasks].index((cluster.task_type, cluster.task_index))


def start(choice: str, environ: Mapping[str, str], timeout: float) -> tuple[JaxInfo, Any]:
    """Join the cluster (if any) and check the devices ``--distribution_strategy`` asks for; returns the run's info
    and jax. Must run before any JAX computation."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    cluster = parse_tf_config(environ)
    tpu_host = any(environ.get(name) for name in (TPU_WORKER_ENV, "TPU_NAME")) or (
        parse_tpu_name(environ) is None and parse_vertex_tpu(environ) is not None)
    task_type, task_id, is_chief = None, 0, True
    if cluster is not None and cluster.size > 1:
        if cluster.task_type not in ("chief", "worker"):
            raise UsageError(f"TF_CONFIG task type {cluster.task_type!r} does not train; expected chief or worker")
        from trainer.rendezvous import wait_for_peers

        wait_for_peers(cluster, timeout)
        chief = cluster.training_tasks[0][2]
        _initialize(jax, dict(coordinator_address=chief, num_processes=cluster.size, process_id=_process_of(cluster),
                              initialization_timeout=int(timeout)), f"the coordinator at {chief} (TF_CONFIG's chief)")
        task_type, task_id, is_chief = cluster.task_type, cluster.task_index, cluster.is_chief
    elif tpu_host:
        _initialize(jax, dict(initialization_timeout=int(timeout)), "the TPU slice's hosts")
        is_chief = jax.process_index() == 0
        task_id = jax.process_index()
        task_type = None if is_chief else "worker"
    devices = jax.devices()
    platform = devices[0].platform
    wanted = _PLATFORMS.get(choice)
    if wanted is not None and platform != wanted:
        raise HardwareError(f"--distribution_strategy {choice}: JAX sees no {wanted.upper()} here (its devices: "
                            f"{len(devices)} {platform.upper()}); use --distribution_strategy auto")
    if choice == "one_device":
        devices = devices[:1]
    info = JaxInfo("data_parallel", jax.process_count(), task_type, task_id, is_chief,
                   tuple(str(d) for d in devices), platform)
    return info, jax


def _initialize(jax, arguments: dict, what: str) -> None:
    try:
        jax.distributed.initialize(**arguments)
    except Exception as err:  # noqa: BLE001 - any failure here: the cluster did not form
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        raise HardwareError(f"JAX's processes did not join through {what} ({type(err).__name__}: {first}); start "
                            "every task of the cluster, or raise --cluster_timeout_seconds") from None


def distribute(info: JaxInfo, layout_fn: Any, hparams: Mapping[str, Any], where: str):
    """``keras.distribution.DataParallel`` over the run's devices, or ``ModelParallel`` on the layout the plug-in's
    ``layout(ctx)`` returns (a ``keras.distribution.LayoutMap`` on a ``DeviceMesh`` of every device whose axis
    ``batch`` carries the batch); set as Keras' distribution before the model is built."""
    import jax
    import keras

    devices = [f"{d.platform}:{d.id}" for d in jax.devices()[:info.num_replicas]]
    if layout_fn is None and len(devices) == 1:
        # One device: nothing to distribute (DataParallel's per-step sharded transfer cost ~9 ms a step on this
        # machine's CPU, benchmarks/README.md "Keras 3 parity").
        info.kind = "one_device"
        return None
    if layout_fn is None:
        distribution = keras.distribution.DataParallel(devices=devices)
    else:
        layout_map = layout_fn.call("the layout function of --model", LayoutContext(tuple(devices), dict(hparams)))
        mesh = getattr(layout_map, "device_mesh", None)
        if not isinstance(layout_map, keras.distribution.LayoutMap) or mesh is None:
            raise UsageError(f"{where}: {LAYOUT_FUNCTION}(ctx) must return a keras.distribution.LayoutMap on a "
                             f"DeviceMesh, got {type(layout_map).__name__}")
        if BATCH_AXIS not in mesh.axis_names or int(mesh.devices.size) != len(devices):
            raise UsageError(f"{where}: {LAYOUT_FUNCTION}(ctx)'s DeviceMesh must span all {len(devices)} devices "
                             f"(ctx.devices) with an axis named {BATCH_AXIS!r}; it has {int(mesh.devices.size)} "
                             f"devices, axes {list(mesh.axis_names)}")
        distribution = keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name=BATCH_AXIS)
        info.kind = "model_parallel"
    keras.distribution.set_distribution(distribution)
    return distribution


def accelerators_for_jax() -> None:
    """TensorFlow only feeds the input here: it is kept off the GPUs and TPUs JAX drives (jax-ml/jax#13260:
    TensorFlow's CPU build next to JAX)."""
    import tensorflow as tf

    for kind in ("GPU", "TPU"):
        try:
            tf.config.set_visible_devices([], kind)
        except (RuntimeError, ValueError):     # no such devices, or the runtime is up already: nothing to hide
            pass
