"""The local target: a planned run (``LocalRun``) as processes on this machine, exactly what a cloud worker runs:
``python -m trainer.task`` in the trainer environment, one process, or a chief + workers MultiWorkerMirrored cluster
(or a coordinator + workers + parameter servers) on 127.0.0.1 with TF_CONFIG.

A local run exists once its folder is claimed (the planner makes a fresh one); leaving ``submit``'s context on a
failure or Ctrl-C removes that folder when the run left it empty, and records a run that left work behind as
interrupted (``runs ls``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TextIO

from ground import domain
from ground.envs import trainer_env
from ground.errors import UserError
from ground.files import printable, read_file
from ground.storagepath import is_gs, normalized
from tpuctl.services import usercode
from tpuctl.services.data import demo_data_dir, ensure_demo_data, local_folder
from tpuctl.services.runs import exports, records
from tpuctl.services.runs.request import ClusterOptions, VerboseOptions
from tpuctl.services.runs.spec import (
    Planning,
    RunSpec,
    aip_folders,
    check_local_name,
    local_name,
    refuse_finished,
)
from tpuctl.services.runs.target import SUCCEEDED, Outcome, Report
from tpuctl.services.supervisor import (
    RunOutcome,
    Task,
    TaskFailed,
    free_ports,
    max_line_bytes,
    require_trainer_python,
    run_tasks,
    trainer_module_argv,
    user_program_argv,
)
from trainer import protocol
from trainer.flags import DEFAULT_MODEL

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
        # a --command run's one process is the user's program, and its lines say so ("started program (pid N)")
        label = "program" if command else "trainer"
        return run_tasks([Task(label, argv, task_env, on_message=_bound(on_message, label), cwd=cwd)],
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


class LocalOptions(ClusterOptions, VerboseOptions):
    """``--target local``: a run of processes on this machine (its own flags: parameter servers, verbose)."""
    target: Literal["local"] = "local"


def _export_unproven(result: dict, model_dir: str, model: str | None = None) -> str | None:
    """Why a local run's completion record does not stand (None: it does): the trainer wrote the record it printed
    to the run's ``result.json`` (issue 56, a fresh trial: a plug-in that printed a record of its own and ended the
    process left none), and the export it names is a SavedModel in the run's folder: ``saved_model.pb`` a SavedModel
    message (``_saved_model_problem``) and the variables' index there (issue 56: a plug-in that printed a copied record
    and left an empty export folder, or a one-byte file, was a finished run with its accuracy). Code running inside
    the trainer has the trainer's powers, so this proves what was recorded exists and has the shape of what the trainer
    writes, not how it was made (docs/your-code.md)."""
    problem = records.record_problem(result, model)
    if problem is not None:
        return problem
    export = result.get("export_dir")
    if is_gs(model_dir) or not isinstance(export, str):
        return None if is_gs(model_dir) else "no export_dir"
    folder, pb = Path(export), Path(export) / "saved_model.pb"
    try:           # bounded and never blocking, as every run file is read back (a plug-in may have written it)
        written = json.loads(read_file(Path(model_dir) / records.RESULT_FILE, records.RESULT_FILE,
                                       records.MAX_RUN_FILE_BYTES, hint="not the trainer's record"))
    except (UserError, ValueError):
        return f"no readable {records.RESULT_FILE} in {model_dir}"
    if written != result:
        return f"{records.RESULT_FILE} in {model_dir} is not the record the trainer printed"
    try:
        inside = folder.resolve().is_relative_to(Path(model_dir).resolve())
        if not inside:
            return f"{export} is outside the run's folder {model_dir}" + (
                f" (a link to {folder.resolve()})" if folder.resolve() != folder.absolute() else "")
        if pb.is_symlink() or not pb.is_file():
            return f"{pb} is missing"
        problem = _saved_model_problem(pb) or _variables_problem(folder / "variables")
    except OSError as err:
        return f"{export}: {err.strerror}"
    return problem


def set_aside_result(model_dir: str, started: float) -> None:
    """A ``result.json`` written since ``started`` into a run that did not finish as recorded: kept aside as
    ``result.json.unproven`` (not deleted), so the run is listed as failed."""
    if is_gs(model_dir):
        return
    result_file = Path(model_dir) / records.RESULT_FILE
    try:
        if result_file.is_file() and result_file.stat().st_mtime >= started:
            result_file.replace(result_file.with_name(records.RESULT_FILE + ".unproven"))
    except OSError:
        pass


def _saved_model_problem(pb: Path) -> str | None:
    """Whether ``pb`` is a servable SavedModel message (``exports.saved_model_problem``; None: it is)."""
    size = pb.stat().st_size
    if not 0 < size <= exports.MAX_SAVED_MODEL_BYTES:
        return f"{pb} is empty" if size == 0 else f"{pb} is larger than any SavedModel"
    return exports.saved_model_problem(pb.read_bytes(), str(pb))


def _variables_problem(variables: Path) -> str | None:
    """Whether ``variables/`` holds what TensorFlow restores an export's weights from (``exports.variables_problem``;
    None: it does)."""
    index = variables / "variables.index"
    if index.is_symlink() or not index.is_file():
        return f"{index} is missing or empty"
    with open(index, "rb") as f:
        f.seek(max(0, index.stat().st_size - len(exports.TABLE_MAGIC)))
        tail = f.read()
    sizes = {name: (variables / name).stat().st_size for name in os.listdir(variables)
             if exports.DATA_SHARD.fullmatch(name)}
    return exports.variables_problem(str(variables), tail, sizes)


class LocalRun(RunSpec):
    """A run on this machine."""
    target: Literal["local"] = "local"
    #: the demo dataset (made before the first run) is the data
    demo_data: bool = False
    #: this plan made the (empty) run folder; it is removed again if the run leaves it empty
    claimed: bool = False


def release(spec: LocalRun) -> None:
    """Remove the run folder the plan made if the run left it empty (nothing half-created)."""
    if spec.claimed:
        # the empty output folders a program's run was given first (local_output_folders), then the run's own
        for folder in [*(aip_folders(spec.model_dir).values() if spec.command else ()), spec.model_dir]:
            try:
                Path(folder).rmdir()
            except OSError:
                pass  # not empty (the trainer wrote into it) or already gone


def local_output_folders(spec: LocalRun) -> None:
    """The AIP_* folders a user's program is given, there before it starts: on Vertex AI they are Cloud Storage
    prefixes, which a program writes into without making them, so a program that opens
    ``$AIP_MODEL_DIR/model.keras`` works here as it does there (issue 56: it failed locally for want of the folder)."""
    if spec.command and "://" not in spec.model_dir:
        for folder in aip_folders(spec.model_dir).values():
            Path(folder).mkdir(parents=True, exist_ok=True)


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


class LocalPlanning:
    """The planning hooks of a run on this machine (``target.RunTarget``): a folder name, any accelerator the
    catalogue knows (none: the machine decides), local folders (the demo dataset by default), a claimed run folder."""
    name: ClassVar[str] = "local"
    options: ClassVar[type] = LocalOptions
    Spec: ClassVar[type[RunSpec]] = LocalRun
    notes: ClassVar[dict[str, str]] = {}
    TPU_WORKERS: ClassVar[str] = "TPUStrategy runs one process per host: drop --workers"
    SUPPORT: ClassVar[str] = "local"

    @classmethod
    def default_name(cls, command: str) -> str:
        return local_name(command)

    @classmethod
    def check_name(cls, name: str) -> str:
        return check_local_name(name)

    @classmethod
    def accelerator(cls, p: Planning) -> domain.Accelerator | None:
        return domain.parse_accelerator(p.request.accelerator) if p.request.accelerator is not None else None

    @classmethod
    def place(cls, p: Planning, accel: domain.Accelerator | None, name: str) -> dict[str, Any]:
        return {}

    @classmethod
    def data_dir(cls, p: Planning) -> tuple[str | None, dict[str, Any]]:
        """The data folder (the stack's data bucket, else the demo dataset), and whether it is the demo's."""
        data_dir = p.request.data_dir or (p.outputs.bucket_url("data") if p.outputs else None)
        if data_dir is None:
            return str(demo_data_dir()), {"demo_data": True}
        if is_gs(data_dir):
            return normalized(data_dir), {}
        folder = local_folder(data_dir, "data folder", must_exist=False)
        if not folder.is_dir():
            raise UserError(f"data folder {printable(data_dir, 200)} does not exist (make one with `tpuctl data "
                            "make-tfrecords`)")
        return str(folder), {}

    @classmethod
    def hub_cache(cls, p: Planning) -> str | None:
        return p.request.hub_cache_dir or (p.outputs.tfhub_cache_dir if p.outputs else None)

    @classmethod
    def check_plan(cls, p: Planning) -> None:
        return None

    @classmethod
    def image(cls, p: Planning, accel: domain.Accelerator | None, name: str, code: str | None) -> dict[str, Any]:
        return {}

    @classmethod
    def model_dir(cls, p: Planning, name: str) -> tuple[str, dict[str, Any]]:
        """(the run's folder, ``claimed``: whether this plan made it). Default ``<artifacts>/runs/NAME`` for a run of a
        stack, else ``./runs/NAME``. A folder that holds a finished run is refused: training again there would start
        over at epoch 1 over its checkpoints; one that holds an interrupted run is continued (its backup)."""
        request = p.request
        artifacts = p.outputs.bucket_url("artifacts") if p.outputs else None
        if request.model_dir:
            if is_gs(request.model_dir):
                return normalized(request.model_dir), {}
            folder = local_folder(request.model_dir, "model folder", must_exist=False)
            refuse_finished(str(folder))
            return str(folder), {}
        if artifacts:
            return f"{artifacts}/runs/{name}", {}
        return cls.run_folder(p, Path("runs").resolve(), name, given=request.name is not None)

    @staticmethod
    def run_folder(p: Planning, base: Path, name: str, *, given: bool) -> tuple[str, dict[str, Any]]:
        """``base/NAME``: a fresh timestamped folder (suffixed if taken) when the name was not given, else the
        named one (continued when it holds an interrupted run); claimed by making it unless ``p.claim`` is off."""
        if not given:       # a fresh timestamped folder, suffixed if taken
            if not p.claim:
                return str(base / name), {}
            return claim_fresh_dir(base, name, "model folder"), {"claimed": True}
        folder = base / name
        refuse_finished(str(folder))
        if folder.exists() or not p.claim:
            return str(folder), {}          # an interrupted run: continued from its backup
        try:
            folder.mkdir(parents=True)
        except FileExistsError:             # made in the meantime by another run of the same name: continued
            return str(folder), {}
        except OSError as err:
            raise UserError(f"cannot create the model folder {folder} ({err.strerror or err})") from None
        return str(folder), {"claimed": True}

    @classmethod
    def code_dir(cls, code: str) -> str:
        return code

    @classmethod
    def plugin_ref(cls, code: str, ref: str, flag: str) -> str:
        """A ``--model``/``--dataset`` function as given: the trainer imports it from the folder on this machine,
        and a problem with it is its own one line (trainer.plugin)."""
        return ref

    @classmethod
    def command_ref(cls, code: str, program: tuple[str, ...]) -> None:
        """The program runs in the folder itself (a missing script is its own one line); a command that names no
        program (``python`` alone: no standard input, status 0, nothing ran) is refused here as everywhere."""
        usercode.command_program(program)

    @classmethod
    def log_source(cls, record: dict[str, Any], name: str, project: str | None, host: int | None) -> Any:
        raise UserError(f"{printable(name, 80)} is a local run: its output was its terminal's (logs are kept for "
                        "Vertex AI and TPU VM runs)")

    @classmethod
    def environment(cls, p: Planning, accel: domain.Accelerator | None, name: str, program: tuple[str, ...],
                    model_dir: str) -> dict[str, str]:
        """Vertex AI's output folders for the user's program (as a Vertex AI job gets them:
        CustomJobSpec.base_output_directory's <base>/model/, <base>/checkpoints/, <base>/logs/), and the TPU
        runtime's variables on a TPU (attached to this machine)."""
        env = aip_folders(model_dir) if program else {}
        if accel is not None and accel.tpu is not None:
            env["TPU_NAME"] = "local"
            env.update(domain.tpu_runtime_env(accel.tpu.generation, p.backend))
        return env


@dataclass
class LocalTarget(LocalPlanning):
    """A planned local run. The report's ``display`` filters and shows the trainer's output (``stdout_sink()``,
    ``stderr_sink()``, ``on_message``, ``event(line)``, ``close()``, as the CLI's ``TrainDisplay``); without one the
    output goes through unchanged (``out``/``err``: where; None: this process's stdout / stderr)."""

    spec: LocalRun
    report: Report = field(default_factory=Report)
    out: TextIO | None = None
    err: TextIO | None = None
    #: a line on the display when each process starts (a tuning trial shows only its own line)
    say_started: bool = True
    display: Any = None
    #: when each process started (the run's resources were there: the run record's ``provisioned``)
    provisioned: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.display is None:
            self.display = self.report.new_display()

    def preflight(self) -> None:
        """The trainer environment is there (else one line, and the folder the plan made is given back)."""
        try:
            require_trainer_python()
            max_line_bytes()      # TPUCTL_MAX_LINE_BYTES, checked before the run says anything
        except UserError:
            release(self.spec)
            raise
        note = self.report.note
        if self.spec.data_dir is not None:
            note(f"{'demo dataset' if self.spec.demo_data else 'data'}: {self.spec.data_dir}")
        if self.spec.command:
            note(f"your program: {' '.join(self.spec.command)} (in {self.spec.code})")
        note(f"model dir: {self.spec.model_dir}")

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
                ensure_demo_data(self.report.note)
            local_output_folders(self.spec)
            yield started
        except BaseException as exc:
            release(self.spec)
            if isinstance(exc, KeyboardInterrupt) or (isinstance(exc, TaskFailed) and exc.exit_code == 130):
                self._record(started, state="interrupted", provisioned=min(self.provisioned, default=None))
            elif isinstance(exc, TaskFailed):
                # a run that failed after it wrote something (a diverged model: exit 4) is listed as failed, as one
                # that ended without its completion record is (issue 56: runs ls said "no runs" beside its folder);
                # a result.json in it is no trainer's (issue 56, a fresh trial: a plug-in's detached child wrote one
                # while it was being stopped, and the failed run was listed as finished)
                set_aside_result(self.spec.model_dir, started)
                self._record(started, state="failed", provisioned=min(self.provisioned, default=None))
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
        provisioned = self.provisioned

        def on_started(task: Task) -> None:
            # a local run's resources are there once its processes run (the time the run record keeps, as a cloud
            # run's is when its job or slice is)
            provisioned.append(time.time())
            if say is not None:
                say(task)

        outcome = run_local(self.spec.argv, workers=self.spec.workers, env=self.spec.env,
                            parameter_servers=self.spec.parameter_servers, command=self.spec.command,
                            cwd=self.spec.code if self.spec.command else None, on_started=on_started, **sinks)
        if outcome.result is None and not self.spec.command:
            # the bundled trainer's run finished only when its chief printed its completion record (written last,
            # after result.json): an exit status of 0 alone proves nothing (a plug-in may end the process itself)
            self._record(started, state="failed", provisioned=min(provisioned, default=None))
            message = ("the trainer ended with exit status 0 but without its completion record (result.json "
                       f"in {self.spec.model_dir}): the run did not finish; the lines above say where it "
                       f"stopped ({self.spec.resume_hint} once fixed)")
            # a trainer that said why in its own `error:` line (then a plug-in's exit handler ended it with status
            # 0): that line is the one shown (the CLI's said_why), the run failed all the same
            said = next((t for t in outcome.tasks if (t.last_error_line() or "").startswith("error:")), None)
            raise TaskFailed(message, 1, said) if said is not None else UserError(message, 1)
        unproven = (_export_unproven(outcome.result, self.spec.model_dir, self.spec.trainer.model or DEFAULT_MODEL)
                    if not self.spec.command else None)
        if unproven is not None:
            set_aside_result(self.spec.model_dir, started)
            self._record(started, state="failed", provisioned=min(provisioned, default=None))
            raise UserError(f"the trainer's completion record does not stand ({unproven}): the "
                            f"run did not finish as recorded; the lines above say what ran ({self.spec.resume_hint} "
                            "once fixed)", 1)
        first = self._record(started, provisioned=min(provisioned, default=None))
        # a --command program speaks no protocol: a completion record it prints is its own text, never the trainer's
        # (issue 56, a fresh trial: a program that printed one had tpuctl vouch for its SavedModel and accuracy)
        return Outcome(self.name, Path(self.spec.model_dir).name, SUCCEEDED, self.spec.model_dir,
                       result=None if self.spec.command else outcome.result, started=first if first < started else None)

    def _record(self, started: float, state: str | None = None, provisioned: float | None = None) -> float:
        """The launch record ``runs ls`` reads. An interrupted run is recorded only when it left work behind
        (checkpoints, logs) and no result. A run that continues an interrupted one keeps its first start (returned:
        the run's start as recorded)."""
        earlier = records.earlier_start(self.spec.model_dir)
        first = earlier if earlier is not None and earlier <= started else started
        record = self.spec.launch_record(started=first, provisioned=provisioned, finished=time.time(), state=state)
        if state is None:
            if not is_gs(self.spec.model_dir):   # a local run into gs:// keeps no record (as before: no credentials asked)
                records.write_launch_record(self.spec.model_dir, record)
            return first
        folder = Path(self.spec.model_dir)
        if is_gs(self.spec.model_dir) or not folder.is_dir() or (folder / records.RESULT_FILE).exists():
            return first
        try:
            records.write_launch_record(self.spec.model_dir, record)
        except OSError:
            pass   # the interrupt is what the user sees; the record is a courtesy
        return first
