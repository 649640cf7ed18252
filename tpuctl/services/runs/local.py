"""The local target: a planned run (``spec.RunSpec``) as processes on this machine, exactly what a cloud worker runs:
``python -m trainer.task`` in the trainer environment, one process, or a chief + workers MultiWorkerMirrored cluster
(or a coordinator + workers + parameter servers) on 127.0.0.1 with TF_CONFIG.

A local run exists once its folder is claimed (the planner makes a fresh one); leaving ``submit``'s context on a
failure or Ctrl-C removes that folder when the run left it empty, and records a run that left work behind as
interrupted (``runs ls``).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TextIO

from ground.envs import trainer_env
from ground.errors import UserError
from ground.storagepath import is_gs
from tpuctl.services.data import ensure_demo_data
from tpuctl.services.runs import records
from tpuctl.services.runs.spec import RunSpec, release
from tpuctl.services.runs.target import SUCCEEDED, Outcome
from tpuctl.services.supervisor import (
    RunOutcome,
    Task,
    TaskFailed,
    free_ports,
    require_trainer_python,
    run_tasks,
    trainer_module_argv,
    user_program_argv,
)
from trainer import protocol

Echo = Callable[[str], None]


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


def cluster_labels(workers: int, parameter_servers: int = 0) -> list[str]:
    """The processes of a run, as the supervisor names them: ``trainer`` alone; else ``chief``, ``worker N``, ``ps N``
    (without ps tasks ``workers`` counts the chief)."""
    if workers == 1 and not parameter_servers:
        return ["trainer"]
    size = 1 + workers + parameter_servers if parameter_servers else workers
    labels = []
    for index in range(size):
        task = tf_config(range(size), index, parameter_servers)["task"]
        labels.append("chief" if task["type"] == "chief" else f"{task['type']} {task['index']}")
    return labels


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
    command: Sequence[str] = (),
    cwd: str | None = None,
) -> RunOutcome:
    """Run ``python -m trainer.task ARGS`` once, or as a ``workers``-process cluster with TF_CONFIG.

    With ``parameter_servers`` M: a chief (the coordinator) + ``workers`` workers + M ps tasks; the workers and
    ps serve until the chief is done, and a lost worker does not stop the run (the coordinator re-schedules).

    ``on_message(label, message)``: each protocol line a process prints; True when it is consumed (not echoed).
    ``command``: the user's own program instead of the trainer (in ``cwd``, with the same TF_CONFIG).
    """
    argv = user_program_argv(command) if command else trainer_module_argv("trainer.task", args)
    if workers == 1 and not parameter_servers:
        task_env = trainer_env(env)
        task_env.pop("TF_CONFIG", None)
        return run_tasks([Task("trainer", argv, task_env, on_message=_bound(on_message, "trainer"), cwd=cwd)],
                         out=out, err=err, on_started=on_started)
    ports = free_ports(1 + workers + parameter_servers if parameter_servers else workers)
    tasks = []
    for index, label in enumerate(cluster_labels(workers, parameter_servers)):
        config = tf_config(ports, index, parameter_servers)
        kind = config["task"]["type"]
        tasks.append(Task(label, argv, trainer_env({**(env or {}), "TF_CONFIG": json.dumps(config)}),
                          on_message=_bound(on_message, label), serves=bool(parameter_servers) and kind != "chief",
                          essential=not parameter_servers or kind != "worker", cwd=cwd))
    return run_tasks(tasks, out=out, err=err, prefix_output=True, on_started=on_started)


def _bound(on_message, label: str):
    return None if on_message is None else (lambda message: on_message(label, message))


def trainer_help() -> str:
    """``python -m trainer.task --help``, for ``tpuctl train -- --help``: answered before anything is planned (no demo
    data generated, no run folder claimed, no launch record)."""
    try:
        proc = subprocess.run(trainer_module_argv("trainer.task", ["--help"]), env=trainer_env(),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UserError(f"cannot run the trainer for its --help ({err})") from None
    if proc.returncode != 0 or not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"the trainer's --help failed (exit {proc.returncode}): {last}")
    return proc.stdout


@dataclass
class LocalTarget:
    """A planned local run. ``display`` filters and shows the trainer's output (``stdout_sink()``, ``stderr_sink()``,
    ``on_message``, ``event(line)``, ``close()``, as the CLI's ``TrainDisplay``); without one the output goes through
    unchanged (``out``/``err``: where; None: this process's stdout / stderr)."""

    name: ClassVar[str] = "local"
    flags: ClassVar[frozenset[str]] = frozenset({"parameter_servers", "verbose"})

    spec: RunSpec
    display: Any = None
    note: Echo | None = None
    out: TextIO | None = None
    err: TextIO | None = None
    #: a line on the display when each process starts (a tuning trial shows only its own line)
    say_started: bool = True

    def preflight(self) -> None:
        """The trainer environment is there (else one line, and the folder the plan made is given back)."""
        try:
            require_trainer_python()
        except UserError:
            release(self.spec)
            raise
        if self.note is not None:
            if self.spec.data_dir is not None:
                self.note(f"{'demo dataset' if self.spec.demo_data else 'data'}: {self.spec.data_dir}")
            if self.spec.command:
                self.note(f"your program: {' '.join(self.spec.command)} (in {self.spec.code})")
            self.note(f"model dir: {self.spec.model_dir}")

    def describe(self) -> dict[str, Any]:
        """The processes the run starts (each also gets TF_CONFIG with a free port on 127.0.0.1 per task)."""
        return {"target": self.name, "name": self.spec.name, "data_dir": self.spec.data_dir,
                "model_dir": self.spec.model_dir, "environment": dict(self.spec.env),
                **({"folder": self.spec.code} if self.spec.command else {}),
                "processes": [{"label": label,
                               "command": list(self.spec.command) or ["python", "-m", "trainer.task", *self.spec.argv]}
                              for label in cluster_labels(self.spec.workers, self.spec.parameter_servers)]}

    @contextmanager
    def submit(self) -> Iterator[float]:
        """The run, from its start time: the demo dataset made first when it is the data; a run that fails before
        writing anything leaves no empty folder, and an interrupted one that left work behind is recorded."""
        started = time.time()
        try:
            if self.spec.demo_data:
                ensure_demo_data(self.note)
            yield started
        except BaseException as exc:
            release(self.spec)
            if isinstance(exc, KeyboardInterrupt) or (isinstance(exc, TaskFailed) and exc.exit_code == 130):
                self._record(started, state="interrupted")
            raise
        finally:
            if self.display is not None:
                self.display.close()

    def follow(self, started: float) -> Outcome:
        display = self.display
        sinks: dict[str, Any] = dict(out=self.out, err=self.err)
        say = None
        if display is not None:
            sinks = dict(out=display.stdout_sink(), err=display.stderr_sink(), on_message=display.on_message)
            if self.say_started:
                say = lambda task: display.event(f"started {task.label} (pid {task.pid})")  # noqa: E731
        provisioned: list[float] = []

        def on_started(task: Task) -> None:
            # a local run's resources are there once its processes run (the time the run record keeps, as a cloud
            # run's is when its job or slice is)
            provisioned.append(time.time())
            if say is not None:
                say(task)

        outcome = run_local(self.spec.argv, workers=self.spec.workers, env=self.spec.env,
                            parameter_servers=self.spec.parameter_servers, command=self.spec.command,
                            cwd=self.spec.code if self.spec.command else None, on_started=on_started, **sinks)
        self._record(started, provisioned=min(provisioned, default=None))
        return Outcome(self.name, Path(self.spec.model_dir).name, SUCCEEDED, self.spec.model_dir,
                       result=outcome.result)

    def _record(self, started: float, state: str | None = None, provisioned: float | None = None) -> None:
        """The launch record ``runs ls`` reads. An interrupted run is recorded only when it left work behind
        (checkpoints, logs) and no result. A run that continues an interrupted one keeps its first start."""
        earlier = records.earlier_start(self.spec.model_dir)
        record = self.spec.launch_record(started=earlier if earlier is not None and earlier <= started else started,
                                         provisioned=provisioned, finished=time.time(), state=state)
        if state is None:
            if not is_gs(self.spec.model_dir):   # a local run into gs:// keeps no record (as before: no credentials asked)
                records.write_launch_record(self.spec.model_dir, record)
            return
        folder = Path(self.spec.model_dir)
        if is_gs(self.spec.model_dir) or not folder.is_dir() or (folder / records.RESULT_FILE).exists():
            return
        try:
            records.write_launch_record(self.spec.model_dir, record)
        except OSError:
            pass   # the interrupt is what the user sees; the record is a courtesy
