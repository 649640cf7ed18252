"""Run the bundled trainer locally: one process, or a multi-worker TensorFlow cluster on 127.0.0.1.

Every trainer process runs in its own session (process group), so the launcher alone decides when
it stops: a terminal Ctrl-C reaches the launcher, which stops every group it started. When one
worker of a cluster dies, MultiWorkerMirroredStrategy would leave its peers blocked in collectives;
the launcher notices within a poll interval and stops the rest, then names the worker and the cause.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, TextIO

from tpuctl.envs import trainer_env, trainer_python
from tpuctl.errors import UserError

#: The trainer's last stdout line on success: ``tpuctl-result: {json}`` (see trainer/task.py).
RESULT_PREFIX = "tpuctl-result:"
#: How long a stopped worker gets between SIGTERM and SIGKILL.
STOP_GRACE_SECONDS = 5.0
POLL_SECONDS = 0.1
#: Exit code of a run that was interrupted (Ctrl-C / SIGTERM), as shells report SIGINT.
EXIT_INTERRUPTED = 130


class TrainingFailed(UserError):
    """The trainer (or one worker of the cluster) ended unsuccessfully; message says which and why."""


def require_trainer_python() -> Path:
    python = trainer_python()
    if not python.exists():
        raise UserError(
            f"trainer interpreter {python} does not exist; run scripts/setup.sh to create .venv-trainer "
            "or point TPUCTL_TRAINER_PYTHON at a Python with TensorFlow"
        )
    return python


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (all sockets held open until every port is picked)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(ports: Sequence[int], index: int) -> dict:
    """TF_CONFIG of task ``index`` in a chief + workers cluster on 127.0.0.1 (index 0 is the chief)."""
    chief, *workers = [f"127.0.0.1:{p}" for p in ports]
    cluster: dict[str, list[str]] = {"chief": [chief]}
    if workers:
        cluster["worker"] = workers
    task = {"type": "chief", "index": 0} if index == 0 else {"type": "worker", "index": index - 1}
    return {"cluster": cluster, "task": task}


def describe_status(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


@dataclass
class Task:
    """One trainer process and what it printed."""

    label: str                      # "trainer", "chief", "worker 0" (as in TF_CONFIG)
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    last_stderr: deque = field(default_factory=lambda: deque(maxlen=20))
    result: dict | None = None
    threads: list[threading.Thread] = field(default_factory=list)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def last_error_line(self) -> str | None:
        """The most telling stderr line: the last ``error: …`` line, else the last non-empty one."""
        lines = [line for line in self.last_stderr if line.strip()]
        for line in reversed(lines):
            if line.lstrip().startswith("error:") or "Error" in line:
                return line.strip()
        return lines[-1].strip() if lines else None


@dataclass
class RunOutcome:
    returncode: int
    result: dict | None
    tasks: list[Task]


def _pump(task: Task, stream: TextIO, sink: TextIO, prefix: str, is_stdout: bool) -> None:
    for line in iter(stream.readline, ""):
        text = line.rstrip("\n")
        if is_stdout:
            if text.startswith(RESULT_PREFIX):
                try:
                    task.result = json.loads(text[len(RESULT_PREFIX):])
                except json.JSONDecodeError:
                    pass
        else:
            task.last_stderr.append(text)
        try:
            sink.write(f"{prefix}{text}\n")
            sink.flush()
        except (ValueError, OSError):  # sink closed (e.g. pytest capture torn down)
            pass
    stream.close()


def _start(task: Task, prefix: str, out: TextIO, err: TextIO) -> None:
    try:
        task.proc = subprocess.Popen(
            task.argv, env=task.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            text=True, encoding="utf-8", errors="replace", bufsize=1, start_new_session=True,
        )
    except OSError as exc:
        raise UserError(f"cannot start {task.argv[0]}: {exc.strerror or exc}") from None
    for stream, sink, is_stdout in ((task.proc.stdout, out, True), (task.proc.stderr, err, False)):
        t = threading.Thread(target=_pump, args=(task, stream, sink, prefix, is_stdout), daemon=True)
        t.start()
        task.threads.append(t)


def _signal_group(task: Task, sig: int) -> None:
    if task.proc is None:
        return
    try:
        os.killpg(task.proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def exit_status(task: Task) -> int | None:
    """Exit status (negative signal number if killed), or None while running — WITHOUT reaping.

    An unreaped leader keeps its process-group id reserved, so signalling the group stays safe.
    """
    proc = task.proc
    if proc is None:
        return None
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return proc.poll()
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def stop_tasks(tasks: Sequence[Task], grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM every running task's process group, SIGKILL whatever is left after ``grace`` s, reap all."""
    running = [t for t in tasks if t.proc is not None and exit_status(t) is None]
    for t in running:
        _signal_group(t, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while running and time.monotonic() < deadline:
        running = [t for t in running if exit_status(t) is None]
        if running:
            time.sleep(0.05)
    for t in tasks:
        if t.proc is None or t.proc.returncode is not None:
            continue
        # Leader not reaped yet: the group id is still ours. Children it spawned die with it.
        _signal_group(t, signal.SIGKILL)
        t.proc.wait()


def run_tasks(
    tasks: Sequence[Task],
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    prefix_output: bool = False,
    on_started: Callable[[Task], None] | None = None,
) -> RunOutcome:
    """Start every task, stream its output, and supervise: the first failure stops all the others.

    Raises TrainingFailed naming the task that failed first (with its exit status and last stderr
    line), or TrainingFailed with exit code 130 on SIGINT/SIGTERM after stopping everything.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    interrupted: list[int] = []

    def _on_signal(signum, _frame):
        interrupted.append(signum)

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {}
    if in_main_thread:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, _on_signal)
    failed: Task | None = None
    still_running: list[Task] = []
    try:
        for task in tasks:
            _start(task, f"[{task.label}] " if prefix_output else "", out, err)
            if on_started:
                on_started(task)
        while not interrupted:
            codes = [exit_status(t) for t in tasks]
            bad = [t for t, c in zip(tasks, codes) if c is not None and c != 0]
            if bad:
                failed = bad[0]
                still_running = [t for t, c in zip(tasks, codes) if c is None]
                break
            if all(c == 0 for c in codes):
                break
            time.sleep(POLL_SECONDS)
    finally:
        stop_tasks(tasks)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _join(tasks)
    if interrupted:
        name = signal.Signals(interrupted[0]).name
        raise TrainingFailed(f"interrupted by {name}; stopped {_names(tasks)}", EXIT_INTERRUPTED)
    if failed is not None:
        code = failed.proc.returncode
        why = describe_status(code)
        last = failed.last_error_line()
        detail = f"; last stderr line: {last}" if last else ""
        stopped = f"; stopped {_names(still_running)}" if still_running else ""
        exit_code = code if code > 0 else 1
        raise TrainingFailed(f"{failed.label} (pid {failed.pid}) {why}{detail}{stopped}", exit_code)
    result = next((t.result for t in tasks if t.result is not None), None)
    return RunOutcome(0, result, list(tasks))


def _names(tasks: Sequence[Task]) -> str:
    return ", ".join(t.label for t in tasks) or "nothing"


def _join(tasks: Sequence[Task]) -> None:
    for t in tasks:
        for th in t.threads:
            th.join(timeout=5)


def trainer_argv(args: Sequence[str]) -> list[str]:
    return [str(require_trainer_python()), "-u", "-m", "trainer.task", *args]


def run_local(
    args: Sequence[str],
    *,
    workers: int = 1,
    env: dict[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    on_started: Callable[[Task], None] | None = None,
) -> RunOutcome:
    """Run ``python -m trainer.task ARGS`` once, or as a ``workers``-process cluster with TF_CONFIG."""
    if workers < 1:
        raise UserError(f"--workers must be at least 1 (got {workers})")
    argv = trainer_argv(args)
    if workers == 1:
        task_env = trainer_env(env)
        task_env.pop("TF_CONFIG", None)
        return run_tasks([Task("trainer", argv, task_env)], out=out, err=err, on_started=on_started)
    ports = free_ports(workers)
    tasks = []
    for index in range(workers):
        extra = dict(env or {})
        extra["TF_CONFIG"] = json.dumps(tf_config(ports, index))
        label = "chief" if index == 0 else f"worker {index - 1}"
        tasks.append(Task(label, argv, trainer_env(extra)))
    return run_tasks(tasks, out=out, err=err, prefix_output=True, on_started=on_started)


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


@dataclass
class LocalPlan:
    args: list[str]
    env: dict[str, str]
    workers: int
    data_dir: str
    model_dir: str
    demo_data: bool


def timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def _fresh_run_dir(base: Path) -> str:
    """``runs/<timestamp>``, suffixed ``-2``, ``-3``… if taken: a reused folder would resume its backup."""
    stamp = timestamp()
    candidate, n = base / stamp, 1
    while candidate.exists():
        n += 1
        candidate = base / f"{stamp}-{n}"
    return str(candidate)


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


def plan_local(opts: TrainOptions, outputs=None, echo: Callable[[str], None] | None = None) -> LocalPlan:
    """Resolve defaults for a local run. Validates every input before the demo data is generated."""
    from tpuctl import domain

    check_common(opts)
    accel = domain.parse_accelerator(opts.accelerator) if opts.accelerator else None
    if accel is not None and accel.kind == "tpu" and opts.workers > 1:
        raise UserError(f"--workers {opts.workers} cannot be combined with {accel.name}: TPUStrategy runs one "
                        "process per TPU host")
    require_trainer_python()
    if opts.workers > 1:
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
        path = Path(data_dir).expanduser()
        if not path.is_dir():
            raise UserError(f"data folder {data_dir} does not exist (make one with `tpuctl data make-tfrecords`)")
        data_dir = str(path.resolve())
    model_dir = opts.model_dir
    if not model_dir:
        artifacts = outputs.bucket_url("artifacts") if outputs else None
        model_dir = f"{artifacts}/runs/{timestamp()}" if artifacts else _fresh_run_dir(Path("runs"))
    if not model_dir.startswith("gs://"):
        path = Path(model_dir).expanduser()
        if path.exists() and not path.is_dir():
            raise UserError(f"model folder {model_dir} exists and is not a folder")
        model_dir = str(path.resolve())
    env: dict[str, str] = {}
    hub_cache = opts.hub_cache_dir or (outputs.tfhub_cache_dir if outputs else None)
    if hub_cache:
        env["TFHUB_CACHE_DIR"] = hub_cache

    demo = data_dir is None
    if demo:
        from tpuctl.datatools import ensure_demo_data

        data_dir = str(ensure_demo_data(echo))
    args += ["--data_dir", data_dir, "--model_dir", model_dir, *model_args(opts), *opts.extra]
    return LocalPlan(args, env, opts.workers, data_dir, model_dir, demo)
