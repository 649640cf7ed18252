"""Where this process sits in a training cluster: ``TF_CONFIG`` (multi-worker and parameter-server jobs, as
Vertex AI and ``tpuctl train --workers`` set it) and ``TPU_NAME``, checked before TensorFlow starts so a bad
value is one line that says what to fix, not a hang or a trace.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Any

from trainer.errors import UsageError

#: Jobs TensorFlow's multi-worker strategies know; only chief and worker tasks train.
CLUSTER_JOBS = ("chief", "worker", "ps", "evaluator")
TRAINING_JOBS = ("chief", "worker")
_MAX_ENV_CHARS = 1_000_000
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def parse_address(text: Any) -> tuple[str, int] | None:
    """``"host:port"`` (hostname, IPv4 or ``[IPv6]``; port 1-65535) -> (host, port), else None."""
    if not isinstance(text, str) or len(text) > 300:
        return None
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return None
    else:
        host, sep, port = text.rpartition(":")
        labels = host.split(".")
        if not host or len(host) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
            return None
        if labels[-1].isdigit():  # a numeric top label is an IPv4 address, never a name (RFC 1123 2.1)
            try:
                ipaddress.IPv4Address(host)
            except ValueError:  # 999.0.0.1, 1.2.3: no resolver would ever answer for it
                return None
    if not sep or not (port.isascii() and port.isdigit()) or len(port) > 5 or not 1 <= int(port) <= 65535:
        return None
    return host, int(port)


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """A validated ``TF_CONFIG``: every job's ``host:port`` list and this process's task."""

    jobs: Mapping[str, tuple[str, ...]]
    task_type: str
    task_index: int

    @property
    def training_tasks(self) -> list[tuple[str, int, str]]:
        """(job, index, address) of every chief and worker task, chief first."""
        return [(job, i, addr) for job in TRAINING_JOBS for i, addr in enumerate(self.jobs.get(job, ()))]

    @property
    def size(self) -> int:
        """Number of training tasks (chief + workers; evaluators and parameter servers don't train)."""
        return len(self.training_tasks)

    @property
    def is_chief(self) -> bool:
        if self.jobs.get("chief"):
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def address(self) -> str:
        return self.jobs[self.task_type][self.task_index]

    def peers(self) -> list[tuple[str, int, str]]:
        """The other training tasks, which must all be up before the collective can start."""
        return [t for t in self.training_tasks if (t[0], t[1]) != (self.task_type, self.task_index)]

    def server_peers(self) -> list[tuple[str, int, str]]:
        """Parameter-server training: every worker and ps task (the servers the coordinator connects to)."""
        return [(job, i, addr) for job in ("worker", "ps") for i, addr in enumerate(self.jobs.get(job, ()))
                if (job, i) != (self.task_type, self.task_index)]


def _tf_config_error(detail: str) -> UsageError:
    return UsageError(f"TF_CONFIG: {detail}; expected {{\"cluster\": {{\"worker\": [\"host:port\", ...]}}, "
                      "\"task\": {\"type\": \"worker\", \"index\": 0}}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_tf_config(environ: Mapping[str, str]) -> ClusterConfig | None:
    """Validate ``TF_CONFIG`` before anything starts; None when it is unset or names no cluster.

    A JSON object; ``cluster`` maps jobs (chief, worker, ps, evaluator) to lists of unique
    ``"host:port"`` strings (port 1-65535; at most one chief and one evaluator); ``task.type`` is one of
    the cluster's jobs and ``task.index`` an integer within its list. Other keys (``environment``,
    ``job``, ``rpc_layer`` …, as Vertex AI sets them) are ignored.
    """
    raw = environ.get("TF_CONFIG", "")
    if not isinstance(raw, str) or not raw.strip():
        return None
    if len(raw) > _MAX_ENV_CHARS:
        raise _tf_config_error(f"is {len(raw)} characters long (at most {_MAX_ENV_CHARS})")
    try:
        tf_config = json.loads(raw)
    except ValueError as err:
        raise _tf_config_error(f"is not valid JSON ({err})") from None
    except RecursionError:
        raise _tf_config_error("is nested too deeply to be a cluster description") from None
    if not isinstance(tf_config, dict):
        raise _tf_config_error(f"must be a JSON object, got {type(tf_config).__name__}")
    cluster, task = tf_config.get("cluster"), tf_config.get("task")
    if not cluster and task is None:
        return None
    if not isinstance(cluster, dict) or not cluster:
        raise _tf_config_error(f"cluster must be a non-empty object of job -> [\"host:port\", ...], got {_shown(cluster)}")
    jobs: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for job, addresses in cluster.items():
        if job not in CLUSTER_JOBS:
            raise _tf_config_error(f"cluster has an unknown job {_shown(job)} (expected {', '.join(CLUSTER_JOBS)})")
        if not isinstance(addresses, list) or not addresses:
            raise _tf_config_error(f"cluster.{job} must be a non-empty list of \"host:port\", got {_shown(addresses)}")
        if job in ("chief", "evaluator") and len(addresses) > 1:
            raise _tf_config_error(f"cluster.{job} lists {len(addresses)} tasks; at most one is allowed")
        for i, address in enumerate(addresses):
            if parse_address(address) is None:
                raise _tf_config_error(f"cluster.{job}[{i}] must be \"host:port\" with a port from 1 to 65535, "
                                       f"got {_shown(address)}")
            if address in seen:
                raise _tf_config_error(f"cluster.{job}[{i}] {address} is also {seen[address]}")
            seen[address] = f"cluster.{job}[{i}]"
        jobs[job] = tuple(addresses)
    if not any(jobs.get(job) for job in TRAINING_JOBS):
        raise _tf_config_error("cluster has no chief or worker task")
    if not isinstance(task, dict):
        raise _tf_config_error(f"task must be an object {{\"type\", \"index\"}}, got {_shown(task)}")
    task_type, index = task.get("type"), task.get("index", 0)
    if not isinstance(task_type, str) or task_type not in jobs:
        raise _tf_config_error(f"task.type {_shown(task_type)} is not a job of the cluster ({', '.join(jobs)})")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(jobs[task_type]):
        raise _tf_config_error(f"task.index must be an integer from 0 to {len(jobs[task_type]) - 1} "
                               f"(cluster.{task_type} has {len(jobs[task_type])} task(s)), got {_shown(index)}")
    return ClusterConfig(jobs=jobs, task_type=task_type, task_index=index)


def parse_tpu_name(environ: Mapping[str, str]) -> str | None:
    """``TPU_NAME``: a TPU name, ``local``, or ``grpc://host:port``; None when unset."""
    raw = environ.get("TPU_NAME", "")
    name = raw.strip() if isinstance(raw, str) else ""
    if not name:
        return None
    if len(name) > 1024 or any(c.isspace() or not c.isprintable() for c in name):
        raise UsageError(f"TPU_NAME {_shown(name)} must be a TPU name, 'local' or grpc://host:port "
                         "(no spaces or control characters, at most 1024 characters)")
    if name.startswith("grpc://") and parse_address(name[len("grpc://"):]) is None:
        raise UsageError(f"TPU_NAME {_shown(name)} must be grpc://host:port with a port from 1 to 65535")
    return name


@dataclasses.dataclass(frozen=True)
class VertexTpu:
    """The TPU slice of a Vertex AI TPU replica, as Vertex AI describes it to the container."""
    name: str
    zone: str | None = None
    project: str | None = None


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def parse_vertex_tpu(environ: Mapping[str, str]) -> VertexTpu | None:
    """Vertex AI's ``TPU_CONFIG`` (``{"project": …, "zone": …, "tpu_node_name": …}``), else its ``TPU_NODE_NAME``:
    the slice a Vertex AI TPU replica runs on (Google's TPU VM training page, "Environment variables"); None when
    neither is set. tpuctl sets no ``TPU_NAME`` on a replica of several VMs, and the trainer resolves the slice by this
    name on each of them, as it does a TPU VM slice by ``TPU_NAME=<node name>``."""
    raw = environ.get("TPU_CONFIG", "")
    if isinstance(raw, str) and raw.strip():
        if len(raw) > _MAX_ENV_CHARS:
            raise UsageError("TPU_CONFIG is too long to be Vertex AI's TPU description")
        try:
            config = json.loads(raw)
        except ValueError:
            raise UsageError(f"TPU_CONFIG {_shown(raw)} is not JSON (Vertex AI sets "
                             "{\"project\", \"zone\", \"tpu_node_name\"})") from None
        name = config.get("tpu_node_name") if isinstance(config, dict) else None
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise UsageError(f"TPU_CONFIG {_shown(raw)} has no tpu_node_name")
        zone, project = config.get("zone"), config.get("project")
        return VertexTpu(name, zone if isinstance(zone, str) and zone else None,
                         project if isinstance(project, str) and project else None)
    node = environ.get("TPU_NODE_NAME", "")
    node = node.strip() if isinstance(node, str) else ""
    if not node:
        return None
    if not _NAME.fullmatch(node):
        raise UsageError(f"TPU_NODE_NAME {_shown(node)} is not a TPU node name")
    return VertexTpu(node)


def validate_environment(environ: Mapping[str, str]) -> ClusterConfig | None:
    """Check TF_CONFIG, TPU_NAME, Vertex AI's TPU_CONFIG and the TPU runtime before anything starts (TensorFlow is not
    loaded yet); returns the cluster (None: single task)."""
    check_tpu_runtime(environ)
    cluster = parse_tf_config(environ)
    if parse_tpu_name(environ) is None:
        parse_vertex_tpu(environ)
    return cluster


#: The library TensorFlow loads as a pluggable device when it is imported, where this variable names one: the PJRT TPU
#: runtime on TPU v5e, v5p and v6e (tpuctl sets it for those generations: ground/domain/tpu.py, tpu_runtime_env; the
#: trainer's TPU image holds the file).
PLUGGABLE_DEVICE_LIBRARY = "TF_PLUGGABLE_DEVICE_LIBRARY_PATH"


def check_tpu_runtime(environ: Mapping[str, str]) -> None:
    """The TPU runtime the environment names is on this machine: without it, ``import tensorflow`` itself failed with a
    FileNotFoundError traceback (a TPU run started where there is no TPU: `tpuctl train -a tpu-v5e-4` on a laptop).
    One line, exit 3, before TensorFlow loads."""
    import os

    from trainer.errors import HardwareError

    path = environ.get(PLUGGABLE_DEVICE_LIBRARY)
    if path and not os.path.exists(path):
        raise HardwareError(f"no TPU here: {PLUGGABLE_DEVICE_LIBRARY}={path[:200]} (the TPU runtime TensorFlow loads on "
                            "TPU v5e, v5p and v6e) is not on this machine; run on a TPU (tpuctl train --target tpu-vm "
                            "or --target vertex) or choose another accelerator")
