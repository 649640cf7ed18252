"""Which tf.distribute strategy runs, decided once at start-up (before any other TensorFlow op).

``auto``: TPUStrategy when a TPU is configured (TPU_NAME set, or TPU devices on a TPU VM),
MultiWorkerMirrored when TF_CONFIG describes more than one task, Mirrored with more than one GPU,
else the default strategy. An explicit choice the machine cannot honour raises HardwareError at
once, naming what is missing; nothing here waits for hardware that is not there.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Mapping

import tensorflow as tf

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer.errors import HardwareError, UsageError


@dataclasses.dataclass
class StrategyInfo:
    strategy: tf.distribute.Strategy
    kind: str  # tpu | mirrored | multi_worker | one_device | default
    num_workers: int = 1
    task_type: str | None = None
    task_id: int = 0
    is_chief: bool = True
    devices: tuple[str, ...] = ()

    @property
    def num_replicas(self) -> int:
        return self.strategy.num_replicas_in_sync


def parse_tf_config(environ: Mapping[str, str]) -> dict | None:
    raw = environ.get("TF_CONFIG", "").strip()
    if not raw:
        return None
    try:
        tf_config = json.loads(raw)
        cluster = tf_config.get("cluster") or {}
        task = tf_config.get("task") or {}
        if not isinstance(cluster, dict) or not isinstance(task, dict):
            raise TypeError("cluster and task must be objects")
        for jobs in cluster.values():
            if not isinstance(jobs, list):
                raise TypeError("every cluster job must be a list of host:port")
    except (ValueError, TypeError, AttributeError) as err:
        raise UsageError(f"TF_CONFIG is not valid ({err}); expected {{\"cluster\": {{...}}, \"task\": {{\"type\", \"index\"}}}}") from None
    return tf_config


def cluster_size(tf_config: dict | None) -> int:
    """Number of training tasks (chief + workers; evaluators and parameter servers don't train)."""
    if not tf_config:
        return 1
    cluster = tf_config.get("cluster") or {}
    return sum(len(cluster.get(job, [])) for job in ("chief", "worker"))


def _task_role(tf_config: dict | None) -> tuple[str | None, int, bool]:
    if not tf_config:
        return None, 0, True
    task = tf_config.get("task") or {}
    task_type, task_id = task.get("type"), int(task.get("index", 0))
    has_chief = bool((tf_config.get("cluster") or {}).get("chief"))
    is_chief = task_type == "chief" or (not has_chief and task_type == "worker" and task_id == 0)
    return task_type, task_id, is_chief


def _gpus() -> list:
    return tf.config.list_physical_devices("GPU")


def _tpu_strategy(tpu_name: str | None) -> StrategyInfo:
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_name or None)
    except Exception as err:  # noqa: BLE001 - ValueError (none configured), URLError (name not resolvable), ...
        where = f"TPU_NAME={tpu_name!r}" if tpu_name else "TPU_NAME is not set and this is not a TPU VM"
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HardwareError(f"--distribution_strategy tpu: no TPU found ({where}): {first}") from None
    try:
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except Exception as err:  # noqa: BLE001 - any failure here means: no usable TPU
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HardwareError(f"--distribution_strategy tpu: cannot initialise the TPU system ({first})") from None
    strategy = tf.distribute.TPUStrategy(resolver)
    devices = tuple(d.name for d in tf.config.list_logical_devices("TPU"))
    return StrategyInfo(strategy, "tpu", devices=devices)


def _mirrored(devices: list[str], kind: str = "mirrored") -> StrategyInfo:
    return StrategyInfo(tf.distribute.MirroredStrategy(devices=devices), kind, devices=tuple(devices))


def _one_device(device: str) -> StrategyInfo:
    # A one-device MirroredStrategy places everything on that device exactly like OneDeviceStrategy,
    # and unlike it is supported by BackupAndRestore (preemption safety on every path).
    return StrategyInfo(tf.distribute.MirroredStrategy(devices=[device]), "one_device", devices=(device,))


def resolve_strategy(choice: str, *, num_gpus: int = 0, environ: Mapping[str, str] | None = None) -> StrategyInfo:
    """Build the strategy for ``--distribution_strategy choice``; see the module docstring."""
    env = os.environ if environ is None else environ
    tf_config = parse_tf_config(env)
    tpu_name = env.get("TPU_NAME", "").strip() or None

    if choice == "auto":
        if tpu_name or tf.config.list_physical_devices("TPU"):
            choice = "tpu"
        elif cluster_size(tf_config) > 1:
            choice = "multi_worker"
        elif len(_gpus()) > 1:
            choice = "gpu"
        else:
            gpus = _gpus()
            if num_gpus > len(gpus):
                raise HardwareError(f"--num_gpus {num_gpus} requested but TensorFlow sees {len(gpus)} GPU(s)")
            return StrategyInfo(tf.distribute.get_strategy(), "default",
                                devices=("/gpu:0",) if gpus else ("/cpu:0",))

    if choice == "tpu":
        return _tpu_strategy(tpu_name)

    if choice == "gpu":
        gpus = _gpus()
        if not gpus:
            raise HardwareError("--distribution_strategy gpu: TensorFlow sees no GPU on this machine "
                                "(no CUDA device or driver); use --distribution_strategy cpu or auto")
        wanted = num_gpus or len(gpus)
        if wanted > len(gpus):
            raise HardwareError(f"--distribution_strategy gpu: --num_gpus {wanted} requested but only "
                                f"{len(gpus)} GPU(s) are visible")
        return _mirrored([f"/gpu:{i}" for i in range(wanted)])

    if choice == "multi_worker":
        task_type, task_id, is_chief = _task_role(tf_config)
        if tf_config and task_type not in ("chief", "worker"):
            raise UsageError(f"TF_CONFIG task type {task_type!r} does not train; expected chief or worker")
        # Collectives: RING on CPU hosts, NCCL picked automatically on GPUs.
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        return StrategyInfo(strategy, "multi_worker", num_workers=max(1, cluster_size(tf_config)),
                            task_type=task_type, task_id=task_id, is_chief=is_chief)

    if choice == "one_device":
        return _one_device("/gpu:0" if _gpus() else "/cpu:0")

    if choice == "cpu":
        # Several logical CPU devices (configured before start-up) are mirrored like GPUs would be.
        cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
        if len(cpus) > 1:
            return _mirrored(cpus)
        return _one_device("/cpu:0")

    raise UsageError(f"unknown --distribution_strategy {choice!r}")
