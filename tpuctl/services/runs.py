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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuctl.ground.errors import UserError
from tpuctl.ground.outputs import StackOutputs
from tpuctl.services.supervisor import Task, TaskFailed, run_tasks, trainer_module_argv
from trainer import protocol

RESULT_FILE = "result.json"
RUN_FILE = "tpuctl-run.json"
#: A result.json larger than this is not a trainer's (it writes a few hundred bytes).
MAX_RUN_FILE_BYTES = 1 << 20


@dataclass
class Run:
    name: str                      # folder name under the base (the run id users type)
    path: str                      # local path or gs:// URL of the model folder
    result: dict[str, Any]
    launch: dict[str, Any] = field(default_factory=dict)
    modified: float = 0.0          # result.json's modification time (seconds since the epoch)

    @property
    def date(self) -> str:
        started = self.launch.get("started")
        when = started if isinstance(started, (int, float)) else self.modified
        return dt.datetime.fromtimestamp(when).strftime("%Y-%m-%d %H:%M")

    @property
    def seconds(self) -> float | None:
        start, end = self.launch.get("started"), self.launch.get("finished")
        if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end >= start:
            return float(end - start)
        return None

    def row(self) -> dict[str, Any]:
        r = self.result
        return {
            "run": self.name,
            "date": self.date,
            "target": self.launch.get("target", "local"),
            "model": r.get("model"),
            "accelerator": self.launch.get("accelerator") or r.get("strategy"),
            "workers": r.get("num_workers"),
            "epochs": r.get("epochs"),
            "val_accuracy": r.get("val_accuracy"),
            "seconds": self.seconds,
            "export_dir": r.get("export_dir"),
        }


def write_launch_record(model_dir: str, record: dict[str, Any]) -> None:
    """What ``tpuctl train`` asked for, next to the trainer's result (local model folders only)."""
    if model_dir.startswith("gs://"):
        return
    path = Path(model_dir) / RUN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _json_object(text: bytes | str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise UserError(f"{where} is not valid JSON") from None
    if not isinstance(value, dict):
        raise UserError(f"{where} must hold a JSON object")
    return value


def _read_local(folder: Path) -> Run | None:
    result_file = folder / RESULT_FILE
    try:
        stat = result_file.stat()
    except OSError:
        return None
    if stat.st_size > MAX_RUN_FILE_BYTES:
        return None
    try:
        result = _json_object(result_file.read_bytes(), str(result_file))
    except UserError:
        return None           # a half-written or foreign file: not a run
    launch = {}
    launch_file = folder / RUN_FILE
    if launch_file.is_file() and launch_file.stat().st_size <= MAX_RUN_FILE_BYTES:
        try:
            launch = _json_object(launch_file.read_bytes(), str(launch_file))
        except UserError:
            launch = {}
    return Run(folder.name, str(folder), result, launch, stat.st_mtime)


def list_runs(base: str = "runs", *, outputs: StackOutputs | None = None, storage_client=None) -> list[Run]:
    """Runs under ``base`` (a local folder), or under ``gs://<artifacts bucket>/runs`` with ``outputs``;
    newest first."""
    if outputs is not None:
        artifacts = outputs.bucket_url("artifacts")
        if not artifacts:
            raise UserError("the stack outputs name no artifacts bucket")
        base = f"{artifacts}/runs"
    if base.startswith("gs://"):
        runs = _list_gcs(base, storage_client)
    else:
        root = Path(base).expanduser()
        if not root.exists():
            return []
        if not root.is_dir():
            raise UserError(f"{base} is not a folder of runs")
        runs = [r for r in (_read_local(p) for p in root.iterdir() if p.is_dir()) if r is not None]
    return sorted(runs, key=lambda r: (r.launch.get("started") or r.modified, r.name), reverse=True)


def _list_gcs(base: str, storage_client) -> list[Run]:
    from bootstrap import clients
    from tpuctl.ground import domain

    bucket_name = domain.bucket_name_from(base)
    prefix = base[len("gs://") + len(bucket_name):].strip("/") + "/"
    storage_client = storage_client or clients.storage_client()
    runs: dict[str, Run] = {}
    with clients.google_errors(f"listing runs in {base}",
                               not_found=f"bucket gs://{bucket_name} does not exist",
                               forbidden=f"permission denied listing {base}: you need storage.objects.list"):
        blobs = [b for b in storage_client.list_blobs(bucket_name, prefix=prefix)
                 if b.name.count("/") == prefix.count("/") + 1 and b.name.rsplit("/", 1)[1] in (RESULT_FILE, RUN_FILE)
                 and (b.size or 0) <= MAX_RUN_FILE_BYTES]
        for blob in sorted(blobs, key=lambda b: b.name.endswith(RUN_FILE)):
            name = blob.name[len(prefix):].split("/", 1)[0]
            try:
                doc = _json_object(blob.download_as_bytes(), f"gs://{bucket_name}/{blob.name}")
            except UserError:
                continue
            if blob.name.endswith(RESULT_FILE):
                modified = blob.updated.timestamp() if blob.updated else 0.0
                runs[name] = Run(name, f"gs://{bucket_name}/{prefix}{name}", doc, {}, modified)
            elif name in runs:
                runs[name].launch = doc
    return list(runs.values())


def find_run(runs: list[Run], key: str) -> Run:
    """A run by folder name, unique prefix, or path."""
    exact = [r for r in runs if key in (r.name, r.path)]
    if exact:
        return exact[0]
    matches = [r for r in runs if r.name.startswith(key)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        known = ", ".join(r.name for r in runs[:5]) or "none"
        raise UserError(f"no run {key!r} (newest: {known}); `tpuctl runs ls` lists them")
    raise UserError(f"run {key!r} is ambiguous: {', '.join(r.name for r in matches[:5])}")


def scalars(runs: list[Run]) -> dict[str, dict[str, list[list[float]]]]:
    """``{run path: {"<run>/<tag>": [[step, value], ...]}}`` read by ``python -m trainer.runlog``."""
    from tpuctl.ground.envs import trainer_env

    task = Task("trainer.runlog", trainer_module_argv("trainer.runlog", [r.path for r in runs]), trainer_env(),
                on_message=lambda m: m.kind == protocol.SUMMARY)
    try:
        with open(os.devnull, "w") as discard:
            run_tasks([task], out=discard, echo_stderr=False)
    except TaskFailed as exc:
        last = (exc.task.last_error_line() if exc.task else None) or str(exc)
        raise UserError(f"reading the runs' event files failed: {last.removeprefix('error: ')}", exc.exit_code) from None
    summary = task.messages.get(protocol.SUMMARY) or {}
    return {path: (doc or {}).get("scalars", {}) for path, doc in summary.items()}
