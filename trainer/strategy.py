"""Which tf.distribute strategy runs, decided once at start-up (before any other TensorFlow op).

``auto``: TPUStrategy when a TPU is configured (TPU_NAME set, Vertex AI's TPU_CONFIG, or TPU devices on a TPU VM),
MultiWorkerMirrored when TF_CONFIG describes more than one task, Mirrored with more than one GPU,
else the default strategy. An explicit choice the machine cannot honour raises HardwareError at
once, naming what is missing; nothing here waits for hardware that is not there.

Peers are waited for, but never forever: ``TF_CONFIG`` is validated first
(:func:`trainer.cluster.parse_tf_config`), then every other chief/worker's port is probed (while this
task answers on its own, see :class:`trainer.rendezvous.Rendezvous`) for up to ``--cluster_timeout_seconds`` before the
strategy is created, and TensorFlow's coordination service gets the same register timeout. A peer that
never answers is exit 3 with one line naming the task and its ``host:port`` (TensorFlow's leader task
would otherwise wait forever, ignoring SIGTERM). A ``TPU_NAME=grpc://host:port`` that refuses
connections fails at once; one that does not answer is waited for up to the same timeout.

``central_storage``: CentralStorageStrategy on one machine (variables on the CPU, or the single GPU;
computation mirrored over every GPU, else every logical CPU device).

``parameter_server`` (also ``auto`` when TF_CONFIG has a ``ps`` job): the ``chief`` is the coordinator
(ParameterServerStrategy + ClusterCoordinator, it runs Keras ``fit``); ``worker`` and ``ps`` tasks only
serve (``tf.distribute.Server(...).join()``, never returning). The coordinator probes every worker and
ps task first, like the multi-worker start-up.

``--gpu_memory`` / ``--virtual_gpus`` are applied first of all (:func:`configure_gpus`), before any
device is initialised; on a machine without a GPU they are a HardwareError, never ignored.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Mapping

import tensorflow as tf

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer.cluster import ClusterConfig, VertexTpu, parse_tf_config, parse_tpu_name, parse_vertex_tpu
from trainer.errors import HardwareError, UsageError
from trainer.rendezvous import AddressProbe, await_tasks, wait_for_peers

DEFAULT_TIMEOUT = 300.0


@dataclasses.dataclass
class StrategyInfo:
    strategy: tf.distribute.Strategy
    kind: str  # tpu | mirrored | multi_worker | one_device | default | central_storage | parameter_server
    num_workers: int = 1
    task_type: str | None = None
    task_id: int = 0
    is_chief: bool = True
    devices: tuple[str, ...] = ()

    @property
    def num_replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    def input_pipelines(self) -> tuple[int, int]:
        """(how many input pipelines tf.distribute reads a dataset with, this process's index among them):
        one per MultiWorkerMirrored worker (indexed as tf.distribute's input context does: the chief 0,
        then the workers), one per host of a multi-host TPU slice, else one. Parameter servers: each worker
        runs its own dataset function, (1, 0)."""
        if self.kind == "multi_worker" and self.num_workers > 1:
            if self.task_type == "chief":
                return self.num_workers, 0
            has_chief = "chief" in self.strategy.cluster_resolver.cluster_spec().as_dict()
            return self.num_workers, self.task_id + (1 if has_chief else 0)
        if self.kind == "tpu":
            return max(1, int(getattr(self.strategy.extended, "num_hosts", 1))), 0
        return 1, 0


def cluster_size(cluster: ClusterConfig | None) -> int:
    """Number of training tasks (chief + workers; evaluators and parameter servers don't train)."""
    return cluster.size if cluster else 1


def _task_role(cluster: ClusterConfig | None) -> tuple[str | None, int, bool]:
    if not cluster:
        return None, 0, True
    return cluster.task_type, cluster.task_index, cluster.is_chief


def _configure_coordination(cluster: ClusterConfig, timeout: float) -> None:
    """What MultiWorkerMirroredStrategy configures itself, plus TensorFlow's own register timeout."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.eager import context

    if cluster.task_type not in ("chief", "worker") or context.context().coordination_service is not None:
        return
    jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=len(cluster.jobs[job]))
            for job in ("chief", "worker") if cluster.jobs.get(job)]
    leader = "chief" if cluster.jobs.get("chief") else "worker"
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=f"/job:{leader}/replica:0/task:0", coordinated_jobs=jobs,
        cluster_register_timeout_in_ms=int(timeout * 1000))


def _multi_worker(cluster: ClusterConfig | None, timeout: float) -> StrategyInfo:
    task_type, task_id, is_chief = _task_role(cluster)
    if cluster is None:
        return StrategyInfo(tf.distribute.MultiWorkerMirroredStrategy(), "multi_worker")
    if task_type not in ("chief", "worker"):
        raise UsageError(f"TF_CONFIG task type {task_type!r} does not train; expected chief or worker")
    wait_for_peers(cluster, timeout)
    try:
        _configure_coordination(cluster, timeout)
        # Collectives: RING on CPU hosts, NCCL picked automatically on GPUs.
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    except tf.errors.OpError as err:  # e.g. a peer died between the probe and the registration
        first = (err.message or type(err).__name__).strip().splitlines()[0]
        raise HardwareError(f"TF_CONFIG cluster did not form within {timeout:g} s (TensorFlow: {first}); "
                            "start every task of the cluster, or raise --cluster_timeout_seconds") from None
    return StrategyInfo(strategy, "multi_worker", num_workers=max(1, cluster.size),
                        task_type=task_type, task_id=task_id, is_chief=is_chief)


def _gpus() -> list:
    return tf.config.list_physical_devices("GPU")


# ---------------------------------------------------------------------------------------------- GPU memory
def configure_gpus(gpu_memory: str | int | None, virtual_gpus: int) -> None:
    """``--gpu_memory growth|MB`` and ``--virtual_gpus N`` on GPU 0; must run before any device is used.

    ``tf.config.experimental.set_memory_growth`` and ``tf.config.set_logical_device_configuration``
    raise RuntimeError once the runtime is initialised (TensorFlow docs, tf.config.experimental.
    set_memory_growth: "GPU memory growth ... must be set before GPUs have been initialized"; the guide
    "Use a GPU", "Using a single GPU on a multi-GPU system" / "Simulate multiple GPUs with a single GPU").
    """
    if gpu_memory is None and not virtual_gpus:
        return
    flag = "--gpu_memory" if gpu_memory is not None else "--virtual_gpus"
    gpus = _gpus()
    if not gpus:
        raise HardwareError(f"{flag}: TensorFlow sees no GPU on this machine (no CUDA device or driver); "
                            "drop the flag to train on the CPU")
    from trainer.config import DEFAULT_VIRTUAL_GPU_MB

    try:
        if gpu_memory == "growth":
            for gpu in gpus:
                tf.config.experimental.set_memory_growth(gpu, True)
        else:
            limit = int(gpu_memory) if gpu_memory is not None else DEFAULT_VIRTUAL_GPU_MB
            count = max(1, virtual_gpus)
            tf.config.set_logical_device_configuration(
                gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=limit)] * count)
    except (RuntimeError, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HardwareError(f"{flag}: cannot configure GPU 0 ({first})") from None


def _logical_gpus() -> list[str]:
    """GPU device names after :func:`configure_gpus` (virtual GPUs included); initialises the runtime."""
    return [d.name for d in tf.config.list_logical_devices("GPU")]


# ---------------------------------------------------------------------------------------------- central storage
def _central_storage(cluster: ClusterConfig | None) -> StrategyInfo:
    if cluster_size(cluster) > 1 or (cluster and cluster.jobs.get("ps")):
        raise UsageError("--distribution_strategy central_storage runs on one machine; TF_CONFIG describes a "
                         "cluster (use multi_worker or parameter_server)")
    gpus = _logical_gpus() if _gpus() else []
    compute = gpus or [d.name for d in tf.config.list_logical_devices("CPU")]
    # Variables on the CPU (the one GPU when it is the only compute device): CentralStorageStrategy's
    # own default (tf.distribute.experimental.CentralStorageStrategy(compute_devices, parameter_device)).
    parameter_device = gpus[0] if len(gpus) == 1 else "/cpu:0"
    strategy = tf.distribute.experimental.CentralStorageStrategy(compute_devices=compute,
                                                                 parameter_device=parameter_device)
    return StrategyInfo(strategy, "central_storage", devices=tuple(compute))


# ---------------------------------------------------------------------------------------------- parameter servers
def _parameter_server_runtime() -> None:
    """Runtime settings every parameter-server task needs, made before its server or strategy starts."""
    # An RPC to an unavailable worker must fail at once (not wait for it) so ClusterCoordinator can
    # migrate the function to another worker: tf.distribute.experimental.coordinator.ClusterCoordinator
    # docs (v2.21.0, "Handling Task Failure": "If the worker it is executed on becomes unavailable before
    # its completion, it will be migrated to another worker"); use_caller is the default since
    # tensorflow/community RFC 355 ("GRPC Fail Fast By Default"), set here when the environment
    # says nothing (setdefault).
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    # Parameter-server tasks deadlock with a single inter-op thread (found in tests/trainer/
    # test_strategies.py with TF_NUM_INTEROP_THREADS=1: the chief scheduled every step, no closure ever
    # finished); raise it to 2 while the runtime is not initialised yet.
    if os.environ.get("TF_NUM_INTEROP_THREADS", "").strip() == "1":
        os.environ["TF_NUM_INTEROP_THREADS"] = "2"  # read by the C++ runtime when its thread pools start
    if tf.config.threading.get_inter_op_parallelism_threads() == 1:
        try:
            tf.config.threading.set_inter_op_parallelism_threads(2)
        except RuntimeError:  # the runtime is already up: too late to change, nothing better to do
            pass


def _cluster_resolver(cluster: ClusterConfig):
    spec = tf.train.ClusterSpec({job: list(addresses) for job, addresses in cluster.jobs.items()})
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        spec, task_type=cluster.task_type, task_id=cluster.task_index, rpc_layer="grpc")


def serve_forever(cluster: ClusterConfig) -> None:
    """A ``worker`` or ``ps`` task of parameter-server training: serve the coordinator, never return.

    ``tf.distribute.Server(cluster_spec, job_name, task_index, protocol, start=True).join()``, as in
    TensorFlow's parameter-server tutorial; the process ends when it is killed (Vertex AI ends the job
    when the chief finishes).
    """
    _parameter_server_runtime()
    resolver = _cluster_resolver(cluster)
    try:
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=cluster.task_type,
                                      task_index=cluster.task_index, protocol="grpc", start=True)
    except (tf.errors.OpError, RuntimeError, ValueError) as err:
        first = (getattr(err, "message", None) or str(err) or type(err).__name__).strip().splitlines()[0]
        raise HardwareError(f"TF_CONFIG: cannot serve {cluster.task_type} {cluster.task_index} at "
                            f"{cluster.address} ({first})") from None
    print(f"serving: {cluster.task_type} {cluster.task_index} at {cluster.address} "
          "(parameter-server training; the chief coordinates)", flush=True)
    server.join()


def _parameter_server(cluster: ClusterConfig | None, timeout: float) -> StrategyInfo:
    need = ("--distribution_strategy parameter_server needs TF_CONFIG with a chief (the coordinator), at least "
            "one worker and at least one ps task")
    if cluster is None:
        raise UsageError(f"{need}; TF_CONFIG is not set")
    missing = [job for job in ("chief", "worker", "ps") if not cluster.jobs.get(job)]
    if missing:
        raise UsageError(f"{need}; TF_CONFIG has no {' and no '.join(missing)} job")
    if cluster.task_type in ("worker", "ps"):
        serve_forever(cluster)
        raise HardwareError(f"{cluster.task_type} {cluster.task_index}: the server stopped")  # join() returned
    if cluster.task_type != "chief":
        raise UsageError(f"TF_CONFIG task type {cluster.task_type!r} takes no part in parameter-server training "
                         "(chief, worker or ps)")
    await_tasks(cluster.server_peers(), timeout)
    _parameter_server_runtime()
    num_ps = len(cluster.jobs["ps"])
    # Large variables are split over the ps tasks (TensorFlow's tutorial uses the same partitioner).
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 << 10,
                                                                             max_shards=num_ps)
    try:
        strategy = tf.distribute.experimental.ParameterServerStrategy(_cluster_resolver(cluster),
                                                                      variable_partitioner=partitioner)
        # One coordinator per strategy (ClusterCoordinator is a singleton for it); Keras fit reuses it.
        tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    except tf.errors.OpError as err:
        first = (err.message or type(err).__name__).strip().splitlines()[0]
        raise HardwareError(f"TF_CONFIG cluster did not form (TensorFlow: {first}); start every task of the "
                            "cluster, or raise --cluster_timeout_seconds") from None
    return StrategyInfo(strategy, "parameter_server", num_workers=len(cluster.jobs["worker"]),
                        task_type="chief", task_id=0, is_chief=True)


def _tpu_strategy(tpu_name: str | None, timeout: float = DEFAULT_TIMEOUT, vertex: VertexTpu | None = None) -> StrategyInfo:
    if tpu_name and tpu_name.startswith("grpc://"):  # a host:port address (parse_tpu_name checked it)
        host_port = tpu_name[len("grpc://"):]
        # A TPU VM's gRPC worker listens as long as the TPU exists: refused = wrong address, fail now.
        probe = AddressProbe([(f"TPU_NAME={tpu_name}", host_port)], time.monotonic() + timeout, refused_is_final=True)
        probe.run()
        if probe.refused or probe.unresolved or probe.pending:
            why = ("connection refused" if probe.refused else "host name does not resolve" if probe.unresolved
                   else f"no answer within {timeout:g} s")
            raise HardwareError(f"--distribution_strategy tpu: no TPU at TPU_NAME={tpu_name} ({why} from "
                                f"{host_port}); check the address or that the TPU is running")
    # A TPU *name* is resolved through the GCE metadata server and the Cloud TPU API with urllib calls that
    # have no timeout of their own (a metadata address that drops packets waited for minutes): Python's
    # default socket timeout bounds each of them while the resolver and the connection are set up.
    previous_timeout = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout)
    try:
        try:
            if tpu_name is None and vertex is not None:   # a Vertex AI replica of several TPU VMs
                resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=vertex.name, zone=vertex.zone,
                                                                             project=vertex.project)
            else:
                resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_name or None)
        except Exception as err:  # noqa: BLE001 - ValueError (none configured), URLError (name not resolvable), ...
            where = (f"TPU_NAME={tpu_name!r}" if tpu_name else f"Vertex AI's TPU node {vertex.name!r}" if vertex
                     else "TPU_NAME is not set and this is not a TPU VM")
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise HardwareError(f"--distribution_strategy tpu: no TPU found ({where}): {first}") from None

        try:
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except Exception as err:  # noqa: BLE001 - any failure here means: no usable TPU
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            if tpu_name in (None, "local") and not tf.config.list_physical_devices("TPU_SYSTEM"):
                # This machine's own TPU, and TensorFlow loaded no TPU runtime (`tpuctl train -a tpu-v3-8` on a laptop:
                # its first line was "TPUs not found in the cluster. Failed in initialization: No OpKernel was
                # registered to support Op 'ConfigureDistributedTPU' …", six rows of a terminal and no way out).
                raise HardwareError("no TPU here: cannot initialise the TPU system (TensorFlow has no TPU runtime on "
                                    "this machine); run on a TPU (tpuctl train --target tpu-vm or --target vertex) or "
                                    "choose another accelerator") from None
            raise HardwareError(f"--distribution_strategy tpu: cannot initialise the TPU system ({first})") from None
    finally:
        socket.setdefaulttimeout(previous_timeout)
    strategy = tf.distribute.TPUStrategy(resolver)
    devices = tuple(d.name for d in tf.config.list_logical_devices("TPU"))
    return StrategyInfo(strategy, "tpu", devices=devices)


def _mirrored(devices: list[str], kind: str = "mirrored") -> StrategyInfo:
    return StrategyInfo(tf.distribute.MirroredStrategy(devices=devices), kind, devices=tuple(devices))


def resolve_strategy(choice: str, *, num_gpus: int = 0, environ: Mapping[str, str] | None = None,
                     timeout: float = DEFAULT_TIMEOUT, gpu_memory: str | int | None = None,
                     virtual_gpus: int = 0) -> StrategyInfo:
    """Build the strategy for ``--distribution_strategy choice``; see the module docstring.

    ``timeout``: seconds to wait for TF_CONFIG peers / the TPU (``--cluster_timeout_seconds``).
    With ``parameter_server``, a worker or ps task serves here and never returns.
    """
    env = os.environ if environ is None else environ
    tf_config = parse_tf_config(env)
    tpu_name = parse_tpu_name(env)
    vertex_tpu = parse_vertex_tpu(env) if tpu_name is None else None
    configure_gpus(gpu_memory, virtual_gpus)

    if choice == "auto":
        if tpu_name or vertex_tpu or tf.config.list_physical_devices("TPU"):
            choice = "tpu"
        elif tf_config is not None and tf_config.jobs.get("ps"):
            choice = "parameter_server"
        elif cluster_size(tf_config) > 1:
            choice = "multi_worker"
        elif len(_gpus()) > 1 or virtual_gpus > 1:
            choice = "gpu"
        else:
            gpus = _gpus()
            if num_gpus > len(gpus):
                raise HardwareError(f"--num_gpus {num_gpus} requested but TensorFlow sees {len(gpus)} GPU(s)")
            return StrategyInfo(tf.distribute.get_strategy(), "default",
                                devices=("/gpu:0",) if gpus else ("/cpu:0",))

    if choice == "tpu":
        return _tpu_strategy(tpu_name, timeout, vertex_tpu)

    if choice == "gpu":
        gpus = _logical_gpus() if virtual_gpus else _gpus()  # virtual GPUs count as GPUs
        if not gpus:
            raise HardwareError("--distribution_strategy gpu: TensorFlow sees no GPU on this machine "
                                "(no CUDA device or driver); use --distribution_strategy cpu or auto")
        wanted = num_gpus or len(gpus)
        if wanted > len(gpus):
            raise HardwareError(f"--distribution_strategy gpu: --num_gpus {wanted} requested but only "
                                f"{len(gpus)} GPU(s) are visible")
        return _mirrored([f"/gpu:{i}" for i in range(wanted)])

    if choice == "multi_worker":
        if tf_config is not None and tf_config.jobs.get("ps"):
            raise UsageError("--distribution_strategy multi_worker: TF_CONFIG has ps tasks, which only "
                             "parameter_server uses")
        return _multi_worker(tf_config, timeout)

    if choice == "central_storage":
        return _central_storage(tf_config)

    if choice == "parameter_server":
        return _parameter_server(tf_config, timeout)

    if choice == "one_device":
        # A one-device MirroredStrategy places everything on that device exactly like OneDeviceStrategy,
        # and unlike it is supported by BackupAndRestore (preemption safety on every path).
        return _mirrored(["/gpu:0" if _gpus() else "/cpu:0"], "one_device")

    if choice == "cpu":
        # Several logical CPU devices (configured before start-up) are mirrored like GPUs would be.
        cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
        if len(cpus) > 1:
            return _mirrored(cpus)
        return _mirrored(["/cpu:0"], "one_device")

    raise UsageError(f"unknown --distribution_strategy {choice!r}")
