"""Run history: the training runs under a folder (``./runs``) or the stack's artifacts bucket (``gs://…/runs``).

A run is a model folder with the trainer's ``result.json`` (trainer/task.py) and, when ``tpuctl train``
launched it, ``tpuctl-run.json`` (what was asked: target, accelerator, workers, arguments, start and end).
Curves come from the run's TensorBoard event files, read in the trainer environment
(``python -m trainer.runlog``), since reading event files needs TensorFlow.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cloud import clients
from ground import localtree
from ground.envs import trainer_env
from ground.errors import UserError
from ground.files import printable, read_file, write_atomically
from ground.localtree import user_path
from ground.outputs import StackOutputs
from ground.storagepath import GsPath, is_gs
from tpuctl.services.supervisor import Task, TaskFailed, run_tasks, trainer_module_argv
from trainer import protocol
from trainer.flags import DEFAULT_BACKEND, DEFAULT_MODEL, flag_value

RESULT_FILE = "result.json"
RUN_FILE = "tpuctl-run.json"
#: A TPU VM run's recovery history (``train --target tpu-vm --recover``; tpuctl/services/runs/tpuvm/api.py writes it).
RECOVERIES_FILE = "tpuctl/recoveries.json"
LOGS = "logs"
#: A result.json larger than this is not a trainer's (it writes a few hundred bytes).
MAX_RUN_FILE_BYTES = 1 << 20
#: Entries of a run's logs folder looked at before its curves are read (a trainer writes a few dozen).
MAX_LOG_ENTRIES = 100_000
#: Times in a run record are seconds since 1970 before the year 3000 (datetime cannot show 1e20).
_LATEST = 32_503_680_000.0


class _Record(BaseModel):
    """Fields tpuctl reads from a run's JSON files, validated on read: strict types, finite numbers; other fields
    are kept as they are."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class Resume(_Record):
    """One resume from the preemption backup (trainer/timing.py): the steps the backup held, when it was written,
    when training went on, and the seconds between (the steps trained after it, redone, and the time down)."""
    from_step: int = Field(ge=0, le=10**12)
    backup_at: float | None = Field(None, ge=0, lt=_LATEST)
    resumed_at: float = Field(ge=0, lt=_LATEST)
    seconds_lost: float | None = Field(None, ge=0, lt=_LATEST)


class Timing(_Record):
    """The trainer's measure of its steps (result.json ``timing``, trainer/timing.py): when the run's first training
    step ended, the steady step time, examples/s, the steps the exported model had in all and its resumes."""
    first_step_at: float | None = Field(None, ge=0, lt=_LATEST)
    process_first_step_at: float | None = Field(None, ge=0, lt=_LATEST)
    step_seconds: float | None = Field(None, gt=0, le=1e6)
    examples_per_second: float | None = Field(None, ge=0, le=1e12)
    steps: int | None = Field(None, ge=0, le=10**12)
    total_steps: int | None = Field(None, ge=0, le=10**12)
    resumes: list[Resume] | None = Field(None, max_length=100_000)


class ResultRecord(_Record):
    """The trainer's result.json (trainer/task.py)."""
    export_dir: str | None = None
    val_accuracy: float | None = Field(None, ge=0, le=1)
    epochs: int | None = Field(None, ge=0, le=10**7)
    model: str | None = None
    strategy: str | None = None
    num_workers: int | None = Field(None, ge=1, le=100_000)
    timing: Timing | None = None


def record_problem(result: dict, model: str | None) -> str | None:
    """Why ``result`` is no completion record of a run of ``--model model`` (None: it has the shape of one), on every
    target: every field the trainer writes (``protocol.RESULT_FIELDS``; issue 56, a fifth trial), the run's own model
    (a sixth trial: a plug-in copied another run's record and ended the process), each value one the trainer
    writes (``ResultRecord``). Where the export it names is, is each target's check."""
    missing = next((f for f in protocol.RESULT_FIELDS if f not in result), None)
    if missing is not None:
        return f"it has no {missing!r}, which every record of the trainer holds"
    if model is not None and result.get("model") != model:
        return f"it is the record of a run of --model {printable(str(result.get('model')), 80)}, not of {model}"
    try:
        ResultRecord.model_validate(result)
    except ValidationError as err:
        first = err.errors()[0]
        return f"its {'.'.join(str(x) for x in first['loc'])!r} is no value the trainer writes ({first['msg']})"
    return None


#: The states of a run that ended without the trainer's completion record, as its launch record says.
UNFINISHED = frozenset({"interrupted", "failed"})


class LaunchRecord(_Record):
    """What ``tpuctl train`` asked for (tpuctl-run.json): written and read through this model."""
    target: str | None = None
    name: str | None = Field(None, max_length=128)
    accelerator: str | None = None
    workers: int | None = Field(None, ge=1, le=100_000)
    parameter_servers: int | None = Field(None, ge=0, le=100_000)
    args: list[str] | None = None
    #: when the run was submitted (a local run: started; a Vertex AI job: created; a TPU VM run: its first slice
    #: queued), its resources were there (the processes started, the job RUNNING, the first slice ACTIVE) and it ended
    started: float | None = Field(None, ge=0, lt=_LATEST)
    provisioned: float | None = Field(None, ge=0, lt=_LATEST)
    finished: float | None = Field(None, ge=0, lt=_LATEST)
    #: "interrupted": stopped (Ctrl-C, SIGTERM) before the trainer's result.json; "failed": the trainer ended without
    #: its completion record (its exit status 0 or not)
    state: str | None = None
    #: the run was the user's own program (--command), which writes no result.json: the record alone lists it
    command: bool | None = None
    spot: bool | None = None
    #: a cloud run's project and, on Vertex AI, its CustomJob (projects/P/locations/R/customJobs/ID): where
    #: `tpuctl logs` finds its lines
    project: str | None = Field(None, max_length=100)
    job: str | None = Field(None, max_length=1000)
    #: what the run's machines cost at list price for the time they ran (compute only; None: not known)
    spent_usd: float | None = Field(None, ge=0, le=1e9)


class Recovery(_Record):
    """One recovered preemption: where, what happened, the seconds trained, lost (since the last backup) and
    down (until the slice was training again), and the run's spend by then."""

    zone: str = Field(max_length=100)
    what: str = Field(max_length=1000)
    seconds_trained: float = Field(ge=0, lt=_LATEST)
    seconds_lost: float = Field(ge=0, lt=_LATEST)
    seconds_down: float | None = Field(None, ge=0, lt=_LATEST)
    since: str | None = Field(None, max_length=100)
    resumed_zone: str | None = Field(None, max_length=100)
    #: what the run's slices had cost when this preemption was seen (ACTIVE time × list price; tpuvm.spend)
    spent_usd: float | None = Field(None, ge=0, le=1e9)


class RecoveriesRecord(_Record):
    """``<model_dir>/tpuctl/recoveries.json``."""
    run: str | None = None
    recoveries: list[Recovery] = Field(max_length=100_000)


@dataclass
class Run:
    name: str                      # folder name under the base (the run id users type)
    path: str                      # local path or gs:// URL of the model folder
    result: dict[str, Any]
    launch: dict[str, Any] = field(default_factory=dict)
    modified: float = 0.0          # result.json's modification time (seconds since the epoch)
    problem: str | None = None     # why its records cannot be used (a bad record: listed, never fatal)

    @property
    def started(self) -> float:
        started = self.launch.get("started")
        return started if isinstance(started, float) else self.modified

    @property
    def date(self) -> str:
        try:
            return dt.datetime.fromtimestamp(self.started).strftime("%Y-%m-%d %H:%M")
        except (ValueError, OverflowError, OSError):
            return "-"

    @property
    def seconds(self) -> float | None:
        start, end = self.launch.get("started"), self.launch.get("finished")
        if isinstance(start, float) and isinstance(end, float) and end >= start:
            return end - start
        return None

    @property
    def state(self) -> str:
        """``finished`` (the trainer's result.json is there), ``interrupted`` (tpuctl recorded a stop before it) or
        ``failed`` (the trainer ended without it)."""
        recorded = self.launch.get("state")
        return recorded if not self.result and recorded in UNFINISHED else "finished"

    @property
    def data(self) -> str | None:
        """The data folder's last part (``demo-data``, ``flowers``), from the launch record's --data_dir."""
        folder = flag_value(self.launch.get("args") or [], "data_dir")
        if not isinstance(folder, str) or not folder.strip("/"):
            return None
        return folder.rstrip("/").rsplit("/", 1)[-1]

    @property
    def timing(self) -> dict[str, Any]:
        timing = self.result.get("timing")
        return timing if isinstance(timing, dict) else {}

    def _since_start(self, when: Any) -> float | None:
        start = self.launch.get("started")
        if isinstance(start, float) and isinstance(when, float) and when >= start:
            return when - start
        return None

    @property
    def resumes(self) -> list[dict[str, Any]]:
        """The trainer's record of its resumes from the preemption backup (every target: a local re-run, a job
        Vertex AI restarted, a TPU VM slice recreated)."""
        resumes = self.timing.get("resumes")
        return resumes if isinstance(resumes, list) else []

    @property
    def goodput(self) -> float | None:
        """Productive training time / wall time: the steps the exported model had in all at the steady step time,
        over submitted → end (the first steps' compilation, provisioning, waiting, lost and redone steps and
        everything after the last step are the rest). None without the timing or the launch times."""
        steps, step = self.timing.get("total_steps"), self.timing.get("step_seconds")
        seconds = self.seconds
        if not isinstance(steps, int) or not isinstance(step, float) or not seconds:
            return None
        return min(steps * step / seconds, 1.0)

    @property
    def model(self) -> str | None:
        """The trainer's model: its result's, else (an interrupted run) the --model its record's arguments give; a
        --command run's is its program (its first two words: ``python train.py``), never the bundled default."""
        args = self.launch.get("args")
        if self.launch.get("command") is True:
            return " ".join(str(a) for a in args[:2]) if isinstance(args, list) and args else None
        if self.result:
            return self.result.get("model")
        if not isinstance(args, list):
            return None
        return flag_value(args, "model") or DEFAULT_MODEL

    @property
    def backend(self) -> str | None:
        """What trained the model (tensorflow, jax) and with which Keras (the result's ``keras``: tf_keras, keras3),
        else the --backend its record's arguments give."""
        if self.result:
            backend, keras = self.result.get("backend"), self.result.get("keras")
            if not isinstance(backend, str):
                return DEFAULT_BACKEND       # a result from before --backend: TensorFlow's
            return f"{backend} ({keras})" if isinstance(keras, str) else backend
        args = self.launch.get("args")
        if not isinstance(args, list):
            return None
        return flag_value(args, "backend") or DEFAULT_BACKEND

    @property
    def provisioned(self) -> float | None:
        """When the run's machines were there; None when the record's time is after the run's first step (a run
        continued after an interruption, whose record kept the later process's start: the first step's is earlier)."""
        provisioned, first = self.launch.get("provisioned"), self.timing.get("first_step_at")
        if isinstance(provisioned, float) and isinstance(first, float) and provisioned > first:
            return None
        return provisioned if isinstance(provisioned, float) else None

    def row(self) -> dict[str, Any]:
        r = self.result
        workers = self.launch.get("workers") if not r else r.get("num_workers")
        return {
            "run": self.name,
            "date": self.date,
            "target": self.launch.get("target", "local"),
            "model": self.model,
            "backend": self.backend,
            "data": self.data,
            "accelerator": self.launch.get("accelerator") or r.get("strategy"),
            "workers": workers,
            "epochs": r.get("epochs"),
            "val_accuracy": r.get("val_accuracy"),
            "seconds": self.seconds,
            "export_dir": r.get("export_dir"),
            "state": self.state,
            "to_provisioned": self._since_start(self.provisioned),
            "to_first_step": self._since_start(self.timing.get("first_step_at")),
            "step_seconds": self.timing.get("step_seconds"),
            "examples_per_second": self.timing.get("examples_per_second"),
            "goodput": self.goodput,
            "spent_usd": self.launch.get("spent_usd"),
        }


def write_launch_record(model_dir: str, record: LaunchRecord, *, storage_client=None) -> None:
    """What ``tpuctl train`` asked for and when it ran, next to the trainer's result (a ``gs://`` folder: uploaded
    with ``storage_client``, else the local file is replaced whole)."""
    if not is_gs(model_dir) and record.provisioned is not None:
        # a run continued after an interruption is one run from its first start: its machines were there first when
        # the interrupted process started (a record without that time has none to keep)
        earlier = _read_interrupted(Path(model_dir), None)
        provisioned = earlier.launch.get("provisioned") if earlier is not None else None
        if isinstance(provisioned, float) and provisioned < record.provisioned:
            record = record.model_copy(update={"provisioned": provisioned})
    text = json.dumps(record.model_dump(exclude_none=True), indent=2, sort_keys=True) + "\n"
    if is_gs(model_dir):
        file = GsPath.parse(model_dir).join(RUN_FILE)
        storage_client = storage_client or clients.storage_client()
        with clients.google_errors(f"writing {model_dir}/{RUN_FILE}"):
            storage_client.bucket(file.bucket).blob(file.path).upload_from_string(text, content_type="application/json")
        return
    write_atomically(Path(model_dir) / RUN_FILE, text)


def read_launch_record(model_dir: str, *, storage_client=None) -> dict[str, Any] | None:
    """A run folder's launch record (validated), None when it has none."""
    where = f"{model_dir.rstrip('/')}/{RUN_FILE}"
    if is_gs(model_dir):
        file = GsPath.parse(model_dir).join(RUN_FILE)
        storage_client = storage_client or clients.storage_client()
        with clients.google_errors(f"reading {where}",
                                   forbidden=f"permission denied reading {where}: you need storage.objects.get"):
            blob = storage_client.bucket(file.bucket).get_blob(file.path)
            if blob is None:
                return None
            data = clients.download_bounded(blob, MAX_RUN_FILE_BYTES, where, "not a tpuctl run record")
        return _record(data, where, LaunchRecord)
    folder = Path(model_dir)
    if not os.path.lexists(folder / RUN_FILE):
        return None
    return _read_run_file(folder, RUN_FILE, LaunchRecord)


def earlier_start(model_dir: str) -> float | None:
    """When the interrupted run a local run continues was started (its launch record's ``started``): a continued run
    is one run from its first start. None for a fresh folder or one that holds no interrupted run."""
    if is_gs(model_dir):
        return None
    run = _read_interrupted(Path(model_dir), None)
    started = run.launch.get("started") if run is not None else None
    return started if isinstance(started, float) else None


def _json_object(text: bytes | str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise UserError(f"{where} is not valid JSON") from None
    if not isinstance(value, dict):
        raise UserError(f"{where} must hold a JSON object")
    return value


def _record(data: bytes, where: str, model: type[_Record]) -> dict[str, Any]:
    """A run file's bytes, validated into ``model`` (UserError: one line naming the file and the field)."""
    doc = _json_object(data, where)
    try:
        return model.model_validate(doc).model_dump(exclude_unset=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        location = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
        raise UserError(f"{where}: {location}: {err.get('msg', 'invalid')}") from None


def recoveries(run: Run, *, storage_client=None) -> list[dict[str, Any]]:
    """A TPU VM run's recovery history (``<run>/tpuctl/recoveries.json``), validated; [] when it has none. A bad file
    is one UserError line naming it and the field."""
    where = f"{run.path}/{RECOVERIES_FILE}"
    if is_gs(run.path):
        file = GsPath.parse(run.path).join(RECOVERIES_FILE)
        storage_client = storage_client or clients.storage_client()
        with clients.google_errors(f"reading {where}",
                                   forbidden=f"permission denied reading {where}: you need storage.objects.get"):
            blob = storage_client.bucket(file.bucket).get_blob(file.path)
            if blob is None:
                return []
            data = clients.download_bounded(blob, MAX_RUN_FILE_BYTES, where, "not tpuctl's recovery history")
    else:
        folder = Path(run.path)
        if not os.path.lexists(folder / RECOVERIES_FILE):
            return []
        if not _inside(folder / RECOVERIES_FILE, folder):
            raise UserError(f"{where} links out of the run folder; not followed")
        data = read_file(folder / RECOVERIES_FILE, RECOVERIES_FILE, MAX_RUN_FILE_BYTES,
                         hint="not tpuctl's recovery history")
    return _record(data, where, RecoveriesRecord).get("recoveries", [])


def _inside(path: Path, folder: Path) -> bool:
    """``path`` (symlinks resolved) is ``folder`` or below it."""
    return localtree.resolves_within(path, folder)


def _read_run_file(folder: Path, name: str, model: type[_Record]) -> dict[str, Any]:
    path = folder / name
    if not _inside(path, folder):
        raise UserError(f"{path} links out of the run folder; not followed")
    return _record(read_file(path, name, MAX_RUN_FILE_BYTES, hint="not a trainer's run record"), str(path), model)


def read_local_run(folder: Path, root: Path | None = None) -> Run | None:
    """The run in ``folder``; None when it holds no result.json (not a run); a bad record is a Run with a
    ``problem``."""
    result_file = folder / RESULT_FILE
    if not os.path.lexists(result_file):
        return _read_interrupted(folder, root)
    if root is not None and not _inside(folder, root):
        return Run(folder.name, str(folder), {}, problem=f"{folder} links out of {root}; not followed")
    try:
        modified = result_file.lstat().st_mtime
        result = _read_run_file(folder, RESULT_FILE, ResultRecord)
        launch = _read_run_file(folder, RUN_FILE, LaunchRecord) if os.path.lexists(folder / RUN_FILE) else {}
    except (UserError, OSError) as exc:
        return Run(folder.name, str(folder), {}, problem=printable(exc, 500))
    return Run(folder.name, str(folder), result, launch, modified)


def _read_interrupted(folder: Path, root: Path | None) -> Run | None:
    """A run tpuctl recorded as unfinished (a launch record with state "interrupted" or "failed", no result.json) or
    a --command run (its program writes no result.json: issue 56, such runs were never listed); None for any other
    folder without a result."""
    if not os.path.lexists(folder / RUN_FILE) or (root is not None and not _inside(folder, root)):
        return None
    try:
        launch = _read_run_file(folder, RUN_FILE, LaunchRecord)
        modified = (folder / RUN_FILE).lstat().st_mtime
    except (UserError, OSError) as exc:
        # tpuctl's own record that cannot be read (edited, a FIFO in its place): a bad record, listed as such below
        # the table (issue 56: such a run vanished from runs ls)
        return Run(folder.name, str(folder), {}, problem=printable(exc, 500))
    listed = launch.get("state") in UNFINISHED or launch.get("command") is True
    return Run(folder.name, str(folder), {}, launch, modified) if listed else None


def list_runs(base: str = "runs", *, outputs: StackOutputs | None = None, storage_client=None) -> list[Run]:
    """Runs under ``base`` (a local folder), or under ``gs://<artifacts bucket>/runs`` with ``outputs``;
    newest first."""
    if outputs is not None:
        base = f"{outputs.require('buckets.artifacts')}/runs"
    if is_gs(base):
        runs = _list_gcs(base, storage_client)
    else:
        root = user_path(base, "run folder")
        if not root.exists():
            return []
        if not root.is_dir():
            raise UserError(f"{base} is not a folder of runs")
        runs = []
        for folder in (p for p in root.iterdir() if p.is_dir()):
            run = read_local_run(folder, root)
            if run is not None:
                runs.append(run)
            elif not folder.is_symlink():   # a local tuning folder: its trials are runs, named tune-…/trial-<n>
                for trial in sorted(t for t in folder.glob("trial-*") if t.is_dir() and not t.is_symlink()):
                    found = read_local_run(trial, root)
                    if found is not None:
                        found.name = f"{folder.name}/{trial.name}"
                        runs.append(found)
    return sorted(runs, key=lambda r: (r.started, r.name), reverse=True)


def _list_gcs(base: str, storage_client) -> list[Run]:
    folder = GsPath.parse(base)
    bucket_name, prefix = folder.bucket, folder.prefix or ""
    storage_client = storage_client or clients.storage_client()
    runs: dict[str, Run] = {}
    with clients.google_errors(f"listing runs in {base}",
                               not_found=f"bucket gs://{bucket_name} does not exist",
                               forbidden=f"permission denied listing {base}: you need storage.objects.list"):
        blobs = [b for b in storage_client.list_blobs(bucket_name, prefix=prefix)
                 if b.name.count("/") == prefix.count("/") + 1 and b.name.rsplit("/", 1)[1] in (RESULT_FILE, RUN_FILE)]
        for blob in sorted(blobs, key=lambda b: b.name.endswith(RUN_FILE)):
            name = blob.name[len(prefix):].split("/", 1)[0]
            where = f"gs://{bucket_name}/{blob.name}"
            is_result = blob.name.endswith(RESULT_FILE)
            if not is_result and name not in runs:
                continue
            try:
                data = clients.download_bounded(blob, MAX_RUN_FILE_BYTES, where, "not a trainer's run record")
                doc = _record(data, where, ResultRecord if is_result else LaunchRecord)
            except UserError as exc:
                runs[name] = Run(name, f"gs://{bucket_name}/{prefix}{name}", {}, problem=str(exc))
                continue
            if is_result:
                modified = blob.updated.timestamp() if blob.updated else 0.0
                runs[name] = Run(name, f"gs://{bucket_name}/{prefix}{name}", doc, {}, modified)
            elif runs[name].problem is None:
                runs[name].launch = doc
    return list(runs.values())


def find_run(runs: list[Run], key: str) -> Run:
    """A run by folder name, unique prefix, or path."""
    if not key.strip():
        raise UserError("name a run (its folder's name, a unique start of it, or its path); `tpuctl runs ls` lists them")
    exact = [r for r in runs if key in (r.name, r.path)]
    if exact:
        return exact[0]
    matches = [r for r in runs if r.name.startswith(key)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        known = ", ".join(printable(r.name, 80) for r in runs[:5]) or "none"
        raise UserError(f"no run {key!r} (newest: {known}); `tpuctl runs ls` lists them")
    raise UserError(f"run {key!r} is ambiguous: {', '.join(printable(r.name, 80) for r in matches[:5])}")


def logs_problem(run: Run) -> str | None:
    """Why a local run's event files are not read (None: they are): a symlink out of the run folder or to a
    folder (the reader would walk it), or an entry that is not a regular file (a FIFO would block it)."""
    if is_gs(run.path):
        return None
    folder = Path(run.path)
    logs = folder / LOGS
    if not os.path.lexists(logs):
        return None
    if not _inside(logs, folder) or (logs.is_symlink() and logs.is_dir()):
        return f"{logs} is a symbolic link; its curves are not read (symlinks out of a run are never followed)"
    return tree_problem(logs, folder)


def tree_problem(tree: Path, owner: Path, limit: int = MAX_LOG_ENTRIES) -> str | None:
    """Why a reader of event files (the runs' reader, TensorBoard) must not walk ``tree`` (None: it may): a symlink
    out of ``owner`` or to a folder (readers walk it), an entry that is not a regular file (a FIFO blocks them), or
    more than ``limit`` entries."""
    count = 0
    for top, dirs, files in os.walk(tree):      # never descends into a symlinked folder
        for name in (*dirs, *files):
            count += 1
            if count > limit:
                return f"{tree} holds more than {limit} entries; its curves are not read"
            path = Path(top) / name
            if path.is_symlink() and (not _inside(path, owner) or path.is_dir()):
                return f"{path} is a symbolic link out of {owner} or to a folder; its curves are not read"
            if name in files:
                try:
                    regular = stat.S_ISREG(path.stat().st_mode)
                except OSError:
                    regular = False
                if not regular:
                    return f"{path} is not a regular file (a FIFO, device or dangling link); its curves are not read"
    return None


def scalars(runs: list[Run]) -> dict[str, dict[str, list[list[float]]]]:
    """``{run path: {"<run>/<tag>": [[step, value], ...]}}`` read by ``python -m trainer.runlog``; a run whose
    logs ``logs_problem`` refuses, or with a bad record, or (locally) without logs, is left out (its curves are not
    read)."""

    # a local run without a logs folder (interrupted before its first epoch ended) has no curves: not an error
    readable = [r.path for r in runs if r.problem is None and logs_problem(r) is None
                and (is_gs(r.path) or os.path.lexists(Path(r.path) / LOGS))]
    if not readable:
        return {}
    task = Task("trainer.runlog", trainer_module_argv("trainer.runlog", readable), trainer_env(),
                on_message=lambda m: m.kind == protocol.SUMMARY)
    try:
        with open(os.devnull, "w") as discard:
            run_tasks([task], out=discard, echo_stderr=False)
    except TaskFailed as exc:
        last = (exc.task.last_error_line() if exc.task else None) or str(exc)
        raise UserError(f"reading the runs' event files failed: {last.removeprefix('error: ')}", exc.exit_code) from None
    summary = task.messages.get(protocol.SUMMARY) or {}
    return {path: (doc or {}).get("scalars", {}) for path, doc in summary.items() if isinstance(doc, dict)}
