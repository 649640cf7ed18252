"""`tpuctl train --target local`: resolve what the user asked for, then run the trainer as a cluster of processes.

Locally a run is exactly what a cloud worker runs: ``python -m trainer.task`` in the trainer environment,
one process, or a chief + workers MultiWorkerMirrored cluster on 127.0.0.1 with TF_CONFIG.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from tpuctl.ground import domain
from tpuctl.ground.envs import trainer_env
from tpuctl.ground.errors import UserError
from tpuctl.ground.outputs import StackOutputs
from tpuctl.services.data import ensure_demo_data, local_folder
from tpuctl.services.supervisor import (
    RunOutcome,
    Task,
    free_ports,
    require_trainer_python,
    run_tasks,
    trainer_module_argv,
)
from trainer import protocol


def tf_config(ports: Sequence[int], index: int, parameter_servers: int = 0) -> dict:
    """TF_CONFIG of task ``index`` in a cluster on 127.0.0.1: index 0 is the chief, the last
    ``parameter_servers`` ports are ps tasks, the ones between are workers."""
    hosts = [f"127.0.0.1:{p}" for p in ports]
    rest = hosts[1:]
    workers, ps = rest[:len(rest) - parameter_servers], rest[len(rest) - parameter_servers:]
    cluster = {kind: tasks for kind, tasks in (("chief", hosts[:1]), ("worker", workers), ("ps", ps)) if tasks}
    if index == 0:
        task = {"type": "chief", "index": 0}
    elif index <= len(workers):
        task = {"type": "worker", "index": index - 1}
    else:
        task = {"type": "ps", "index": index - 1 - len(workers)}
    return {"cluster": cluster, "task": task}


def run_local(
    args: Sequence[str],
    *,
    workers: int = 1,
    env: dict[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    on_started: Callable[[Task], None] | None = None,
    on_message: Callable[[str, protocol.Message], bool] | None = None,
    parameter_servers: int = 0,
) -> RunOutcome:
    """Run ``python -m trainer.task ARGS`` once, or as a ``workers``-process cluster with TF_CONFIG.

    With ``parameter_servers`` M: a chief (the coordinator) + ``workers`` workers + M ps tasks; the workers and
    ps serve until the chief is done, and a lost worker does not stop the run (the coordinator re-schedules).

    ``on_message(label, message)``: each protocol line a process prints; True when it is consumed (not echoed).
    """
    if workers < 1:
        raise UserError(f"--workers must be at least 1 (got {workers})")
    argv = trainer_module_argv("trainer.task", args)
    if workers == 1 and not parameter_servers:
        task_env = trainer_env(env)
        task_env.pop("TF_CONFIG", None)
        return run_tasks([Task("trainer", argv, task_env, on_message=_bound(on_message, "trainer"))],
                         out=out, err=err, on_started=on_started)
    # Without ps tasks, ``workers`` counts the chief.
    ports = free_ports(1 + workers + parameter_servers if parameter_servers else workers)
    tasks = []
    for index in range(len(ports)):
        config = tf_config(ports, index, parameter_servers)
        kind, number = config["task"]["type"], config["task"]["index"]
        label = "chief" if kind == "chief" else f"{kind} {number}"
        tasks.append(Task(label, argv, trainer_env({**(env or {}), "TF_CONFIG": json.dumps(config)}),
                          on_message=_bound(on_message, label), serves=bool(parameter_servers) and kind != "chief",
                          essential=not parameter_servers or kind != "worker"))
    return run_tasks(tasks, out=out, err=err, prefix_output=True, on_started=on_started)


#: Trainer arguments (after ``--``) that ask for the trainer's help text instead of a run.
HELP_FLAGS = frozenset({"-h", "--help"})


def trainer_help(extra: Sequence[str]) -> str | None:
    """``python -m trainer.task --help`` when the trainer arguments ask for help, else None.

    Answered before anything is planned: no demo data generated, no run folder claimed, no launch record
    (``tpuctl train -- --help`` used to start a "run" that printed nothing, reported "training finished"
    and left an empty runs/<timestamp> folder).
    """
    if not HELP_FLAGS.intersection(extra):
        return None
    try:
        proc = subprocess.run(trainer_module_argv("trainer.task", ["--help"]), env=trainer_env(),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UserError(f"cannot run the trainer for its --help ({err})") from None
    if proc.returncode != 0 or not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"the trainer's --help failed (exit {proc.returncode}): {last}")
    return proc.stdout


def _bound(on_message, label: str):
    return None if on_message is None else (lambda message: on_message(label, message))


# --------------------------------------------------------------------------------------------
# `tpuctl train --target local`: defaults, then the run
# --------------------------------------------------------------------------------------------

@dataclass
class TrainOptions:
    """What the user asked for on the command line (None = not given: use the default)."""

    accelerator: str | None = None
    workers: int = 1
    data_dir: str | None = None
    model_dir: str | None = None
    model: str | None = None
    hub_handle: str | None = None
    hub_cache_dir: str | None = None
    epochs: int | None = None
    batch_size: int | None = None
    extra: list[str] = field(default_factory=list)
    name: str | None = None   # local: the run's folder name under runs/ (default: a timestamp)
    #: Parameter-server training: this many ps tasks next to ``workers`` workers and a coordinator (chief).
    parameter_servers: int = 0


@dataclass
class LocalPlan:
    args: list[str]
    env: dict[str, str]
    workers: int
    data_dir: str
    model_dir: str
    demo_data: bool
    parameter_servers: int = 0
    #: the model folder was claimed (created empty) by this plan: remove it again if the run fails at once
    claimed: bool = False


def timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def claim_fresh_dir(parent: Path, stem: str, what: str) -> str:
    """``parent/<stem>``, suffixed ``-2``, ``-3``… if taken: a reused folder would resume its backup.

    The folder is claimed by creating it (``mkdir`` fails if it exists), so runs (or tunes) started in the same
    second never share one (checking for it first let three concurrent runs pick the same folder)."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create {parent} for the {what} ({err.strerror or err}); pass --model-dir") from None
    n = 1
    while True:
        candidate = parent / (stem if n == 1 else f"{stem}-{n}")
        try:
            candidate.mkdir()
            return str(candidate)
        except FileExistsError:
            n += 1
        except OSError as err:
            raise UserError(f"cannot create the {what} {candidate} ({err.strerror or err}); pass --model-dir") from None


def _fresh_run_dir(base: Path) -> str:
    """``runs/<timestamp>`` (suffixed if taken), claimed by creating it."""
    return claim_fresh_dir(base, timestamp(), "model folder")


_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def check_run_name(name: str) -> None:
    """A run name is one folder name: letters, digits, '.', '_', '-', at most 63, starting with a letter or digit."""
    if not _RUN_NAME.fullmatch(name):
        from tpuctl.ground.files import printable

        raise UserError(f"--name {printable(name, 80)!r}: use 1-63 letters, digits, '.', '_' or '-', starting with a "
                        "letter or digit (it becomes the folder runs/NAME)")


def _named_run_dir(base: Path, name: str) -> str:
    """``runs/NAME``, claimed by creating it; an existing one is refused (a reused folder would resume its backup)."""
    try:
        base.mkdir(parents=True, exist_ok=True)
        (base / name).mkdir()
    except FileExistsError:
        raise UserError(f"run {name!r} exists ({base / name}): pick another --name, or continue that run with "
                        f"--model-dir {base / name}") from None
    except OSError as err:
        raise UserError(f"cannot create the model folder {base / name} ({err.strerror or err})") from None
    return str(base / name)


def release_run_dir(plan: LocalPlan) -> None:
    """Remove the model folder the plan claimed if the run left it empty (nothing half-created)."""
    if plan.claimed:
        try:
            Path(plan.model_dir).rmdir()
        except OSError:
            pass  # not empty (the trainer wrote into it) or already gone


def check_common(opts: TrainOptions) -> None:
    if opts.workers < 1:
        raise UserError(f"--workers must be at least 1 (got {opts.workers})")
    if opts.epochs is not None and opts.epochs < 1:
        raise UserError(f"--epochs must be at least 1 (got {opts.epochs})")
    if opts.batch_size is not None and opts.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (got {opts.batch_size})")
    if opts.hub_handle and opts.model not in (None, "hub"):
        raise UserError(f"--hub-handle only applies to --model hub (got --model {opts.model})")
    if opts.model == "hub" and not opts.hub_handle:
        raise UserError("--model hub needs --hub-handle (a TF-Hub/Kaggle handle or a local SavedModel path)")
    if not 0 <= opts.parameter_servers <= MAX_PARAMETER_SERVERS:
        raise UserError(f"--parameter-servers must be 0..{MAX_PARAMETER_SERVERS} (got {opts.parameter_servers})")


#: Most ps tasks tpuctl starts (a few hold a small model's variables; more is a typo).
MAX_PARAMETER_SERVERS = 16


def model_args(opts: TrainOptions) -> list[str]:
    args: list[str] = []
    model = "hub" if opts.hub_handle and opts.model is None else opts.model
    if model:
        args += ["--model", model]
    if opts.hub_handle:
        args += ["--hub_handle", opts.hub_handle]
    if opts.epochs is not None:
        args += ["--train_epochs", str(opts.epochs)]
    if opts.batch_size is not None:
        args += ["--train_batch_size", str(opts.batch_size)]
    return args


def plan_local(opts: TrainOptions, outputs: StackOutputs | None = None,
               echo: Callable[[str], None] | None = None) -> LocalPlan:
    """Resolve defaults for a local run. Validates every input before the demo data is generated."""
    check_common(opts)
    accel = domain.parse_accelerator(opts.accelerator) if opts.accelerator else None
    if accel is not None and accel.kind == "tpu" and opts.workers > 1:
        raise UserError(f"--workers {opts.workers} cannot be combined with {accel.name}: TPUStrategy runs one "
                        "process per TPU host")
    require_trainer_python()
    if accel is not None and accel.kind == "tpu" and opts.parameter_servers:
        raise UserError("--parameter-servers cannot be combined with a TPU: TPUStrategy runs one process per host")
    if opts.parameter_servers:
        strategy = "parameter_server"
    elif opts.workers > 1:
        strategy = "multi_worker"
    elif accel is None:
        strategy = "auto"
    else:
        strategy = accel.strategy
    args = ["--distribution_strategy", strategy]
    if accel is not None and accel.kind == "gpu":
        args += ["--num_gpus", str(accel.gpu_count)]

    data_dir = opts.data_dir or (outputs.bucket_url("data") if outputs else None)
    if data_dir and not data_dir.startswith("gs://"):
        try:
            data_dir = str(local_folder(data_dir, "data folder", must_exist=True))
        except UserError as exc:
            if "does not exist" in str(exc):
                raise UserError(f"{exc} (make one with `tpuctl data make-tfrecords`)") from None
            raise
    model_dir = opts.model_dir
    artifacts = outputs.bucket_url("artifacts") if outputs else None
    if opts.name is not None:
        check_run_name(opts.name)
        if model_dir:
            raise UserError("give --name or --model-dir, not both (--name NAME is the folder runs/NAME)")
    if model_dir and not model_dir.startswith("gs://"):
        model_dir = str(local_folder(model_dir, "model folder", must_exist=False))
    env: dict[str, str] = {}
    hub_cache = opts.hub_cache_dir or (outputs.tfhub_cache_dir if outputs else None)
    if hub_cache:
        env["TFHUB_CACHE_DIR"] = hub_cache

    demo = data_dir is None
    if demo:
        data_dir = str(ensure_demo_data(echo))
    claimed = False
    if not model_dir and opts.name is not None:
        claimed = not artifacts
        model_dir = f"{artifacts}/runs/{opts.name}" if artifacts else _named_run_dir(Path("runs").resolve(), opts.name)
    elif not model_dir:   # last: a folder claimed here is the only thing planning creates
        claimed = not artifacts
        model_dir = f"{artifacts}/runs/{timestamp()}" if artifacts else _fresh_run_dir(Path("runs").resolve())
    args += ["--data_dir", data_dir, "--model_dir", model_dir, *model_args(opts), *opts.extra]
    return LocalPlan(args, env, opts.workers, data_dir, model_dir, demo, opts.parameter_servers, claimed)
