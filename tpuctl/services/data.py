"""Data tools: the trainer's data tools run in the trainer environment, results optionally uploaded.

``trainer.make_tfrecords`` and ``trainer.sample_data`` (trainer environment, TensorFlow) write shards
to a local folder and report ``progress: done/total`` and a final ``summary: {json}`` on stdout.
A ``gs://`` destination is written to a local temporary folder first, then uploaded with the storage
client's transfer manager, so the trainer environment never needs cloud credentials.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from tpuctl.ground import domain
from tpuctl.ground.envs import cache_dir, trainer_env
from tpuctl.ground.errors import UserError
from tpuctl.services.supervisor import Task, TaskFailed, run_tasks, trainer_module_argv
from trainer import protocol

ProgressCallback = Callable[[int, int], None]


def is_gcs(path: str) -> bool:
    return str(path).startswith("gs://")


def split_gcs(uri: str) -> tuple[str, str]:
    """``gs://bucket/some/prefix`` → (bucket, ``some/prefix``), bucket name validated."""
    bucket = domain.bucket_name_from(uri)
    prefix = uri[len("gs://") + len(bucket):].strip("/")
    return bucket, prefix


def run_tool(module: str, args: list[str], on_progress: ProgressCallback | None = None,
             on_line: Callable[[str], None] | None = None) -> dict:
    """Run ``python -m <module> ARGS`` in the trainer env under the supervisor; return its ``summary:`` JSON.

    Progress messages go to ``on_progress``, other stdout lines to ``on_line``; stderr is kept for the
    one-line failure message only.
    """
    def on_message(message: protocol.Message) -> bool:
        if message.kind == protocol.PROGRESS:
            if on_progress:
                on_progress(*message.payload)
            return True
        return message.kind == protocol.SUMMARY

    class _Lines:
        def write(self, text: str) -> None:
            if on_line and text.strip():
                on_line(text.rstrip("\n"))

        def flush(self) -> None:
            pass

    task = Task(module, trainer_module_argv(module, args), trainer_env(), on_message=on_message)
    try:
        run_tasks([task], out=_Lines(), echo_stderr=False)
    except TaskFailed as exc:
        if exc.task is None:
            raise
        code = exc.task.proc.returncode
        last = exc.task.last_error_line() or ""
        last = last[len("error:"):].strip() if last.startswith("error:") else last
        raise UserError(f"{module} failed (exit {code}): {last or 'no message'}", exc.exit_code) from None
    summary = task.messages.get(protocol.SUMMARY)
    if not isinstance(summary, dict):
        raise UserError(f"{module} finished without a 'summary:' line; is the trainer package up to date?", 1)
    return summary


# --------------------------------------------------------------------------------------------
# Destinations
# --------------------------------------------------------------------------------------------

def storage_client(project: str | None = None):
    from google.cloud import storage

    return storage.Client(project=project)


def check_gcs_destination(uri: str, client=None) -> tuple[str, str]:
    """Validate ``gs://bucket/prefix`` and that the bucket exists, before anything is written."""
    from google.api_core import exceptions

    try:
        bucket, prefix = split_gcs(uri)
    except domain.DomainError as exc:
        raise UserError(f"destination {uri}: {exc}") from None
    client = client or storage_client()
    try:
        exists = client.bucket(bucket).exists()
    except exceptions.GoogleAPICallError as exc:
        raise UserError(f"cannot check bucket {bucket}: {exc.message or exc}") from None
    if not exists:
        raise UserError(f"bucket {bucket} does not exist (create it with `pulumi up`, or fix the destination)")
    return bucket, prefix


def upload_dir(local: Path, uri: str, client=None, workers: int = 8) -> list[str]:
    """Upload every file under ``local`` to ``gs://bucket/prefix/<relative path>``; return object names."""
    from google.cloud.storage import transfer_manager

    bucket_name, prefix = split_gcs(uri)
    client = client or storage_client()
    files = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file())
    if not files:
        return []
    bucket = client.bucket(bucket_name)
    results = transfer_manager.upload_many_from_filenames(
        bucket, files, source_directory=str(local), blob_name_prefix=f"{prefix}/" if prefix else "",
        max_workers=workers, worker_type=transfer_manager.THREAD,
    )
    failures = [(name, r) for name, r in zip(files, results) if isinstance(r, Exception)]
    if failures:
        name, error = failures[0]
        raise UserError(f"uploading {name} to {uri} failed ({len(failures)} of {len(files)} files): {error}", 1)
    return [f"{prefix}/{f}" if prefix else f for f in files]


def _local_destination(dest: str) -> Path:
    path = Path(dest).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise UserError(f"destination {dest} exists and is not a folder")
    return path


# --------------------------------------------------------------------------------------------
# The two commands
# --------------------------------------------------------------------------------------------

def make_tfrecords(src: str, dest: str, *, shard_mb: float = 100, validation_fraction: float = 0.1,
                   on_progress: ProgressCallback | None = None, client=None) -> dict:
    """Convert a folder of class sub-folders of images into TFRecord shards at ``dest`` (local or gs://)."""
    source = Path(src).expanduser()
    if is_gcs(src):
        raise UserError("SRC must be a local folder of class sub-folders (copy it down with `gcloud storage cp -r` first)")
    if not source.is_dir():
        raise UserError(f"source folder {src} does not exist")
    if not any(p.is_dir() for p in source.iterdir()):
        raise UserError(f"source folder {src} has no class sub-folders (expected SRC/<class name>/<image files>)")
    if not shard_mb > 0:
        raise UserError(f"--shard-mb must be positive (got {shard_mb})")
    if not 0 < validation_fraction < 1:
        raise UserError(f"--validation-fraction must be between 0 and 1 (got {validation_fraction})")
    tool_args = ["--shard-mb", _num(shard_mb), "--validation-fraction", _num(validation_fraction)]
    return _run_to(dest, "trainer.make_tfrecords", lambda out: [str(source.resolve()), str(out), *tool_args],
                   on_progress, client)


def sample(dest: str, *, on_progress: ProgressCallback | None = None, client=None) -> dict:
    """Write the embedded demo dataset (scikit-learn digits) as shards + manifest at ``dest``."""
    return _run_to(dest, "trainer.sample_data", lambda out: ["--out", str(out)], on_progress, client)


def _num(value: float) -> str:
    return repr(float(value)).rstrip("0").rstrip(".") if float(value) != int(value) else str(int(value))


def _run_to(dest: str, module: str, build_args: Callable[[Path], list[str]],
            on_progress: ProgressCallback | None, client) -> dict:
    if is_gcs(dest):
        client = client or storage_client()
        check_gcs_destination(dest, client)
        with tempfile.TemporaryDirectory(prefix="tpuctl-data-") as tmp:
            out = Path(tmp) / "out"
            summary = run_tool(module, build_args(out), on_progress)
            objects = upload_dir(out, dest, client)
        summary = dict(summary)
        summary["destination"] = dest.rstrip("/")
        summary["uploaded"] = len(objects)
        return summary
    out = _local_destination(dest)
    summary = dict(run_tool(module, build_args(out), on_progress))
    summary["destination"] = str(out)
    return summary


# --------------------------------------------------------------------------------------------
# The embedded demo dataset, generated once into the local cache
# --------------------------------------------------------------------------------------------

def demo_data_dir() -> Path:
    return cache_dir() / "demo-data"


def demo_data_complete(folder: Path) -> bool:
    """Manifest present and parseable, and train + validation shards (and every file it names) there."""
    manifest = folder / "manifest.json"
    try:
        data = json.loads(manifest.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    names = {p.name for p in folder.iterdir() if p.is_file()}
    if not any("-train-" in n for n in names) or not any("-validation-" in n for n in names):
        return False
    return all(ref in names for ref in _file_refs(data))


def _file_refs(node) -> set[str]:
    refs: set[str] = set()
    if isinstance(node, dict):
        for value in node.values():
            refs |= _file_refs(value)
    elif isinstance(node, list):
        for value in node:
            refs |= _file_refs(value)
    elif isinstance(node, str) and ".tfrecord" in node and "/" not in node and "*" not in node:
        refs.add(node)
    return refs


def ensure_demo_data(echo: Callable[[str], None] | None = None) -> Path:
    """The demo dataset folder, generating it first if it is missing or incomplete."""
    target = demo_data_dir()
    if demo_data_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if echo:
        echo(f"generating the demo dataset (scikit-learn digits) into {target} (once)")
    partial = Path(tempfile.mkdtemp(prefix="demo-data.partial-", dir=target.parent))
    try:
        run_tool("trainer.sample_data", ["--out", str(partial)])
        if not demo_data_complete(partial):
            raise UserError(f"trainer.sample_data wrote an incomplete dataset to {partial}", 1)
        if target.exists() and not demo_data_complete(target):
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.rename(partial, target)
        except OSError:
            # Another tpuctl generated it at the same time; keep theirs if it is whole.
            if not demo_data_complete(target):
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target
