"""Data tools: the trainer's data tools run in the trainer environment, results optionally uploaded.

``trainer.make_tfrecords`` and ``trainer.sample_data`` (trainer environment, TensorFlow) write shards
to a local folder and report ``progress: done/total`` and a final ``summary: {json}`` on stdout.
A local destination is replaced by the tools only when the new output is complete (trainer.atomicdir). A
``gs://`` destination must hold no objects yet (objects cannot be swapped in atomically; an earlier dataset
is never written over); it is written to a local temporary folder first, then uploaded by a few threads of
the ops side, so the trainer environment never needs cloud credentials. Uploads only create objects
(``if_generation_match=0``) and never follow symbolic links. The manifest goes last, so a destination never
has a manifest naming shards that are not there. Ctrl-C / SIGTERM during the upload
stops submitting files, waits briefly for the ones in flight, removes the objects this run uploaded and
ends with exit code 130: a re-run starts from a clean destination.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from cloud.clients import REQUEST_TIMEOUT_SECONDS, as_user_error, google_errors, storage_client
from cloud.google import api_exceptions
from cloud.uploads import upload_files
from ground import domain
from ground.envs import cache_dir, trainer_env
from ground.errors import EXIT_INTERRUPTED, UserError
from ground.files import read_file, replace_folder
from ground.localtree import user_path
from ground.storagepath import GsPath, is_gs
from tpuctl.services.supervisor import Task, TaskFailed, run_tasks, signal_handlers, trainer_module_argv
from trainer import protocol
from trainer.flags import MAKE_TFRECORDS_BOUNDS

ProgressCallback = Callable[[int, int], None]


def run_tool(module: str, args: list[str], on_progress: ProgressCallback | None = None) -> dict:
    """Run ``python -m <module> ARGS`` in the trainer env under the supervisor; return its ``summary:`` JSON.

    Progress messages go to ``on_progress``, other stdout lines nowhere; stderr is kept for the one-line
    failure message only.
    """
    def on_message(message: protocol.Message) -> bool:
        if message.kind == protocol.PROGRESS:
            if on_progress:
                on_progress(*message.payload)
            return True
        return message.kind == protocol.SUMMARY

    task = Task(module, trainer_module_argv(module, args), trainer_env(), on_message=on_message)
    try:
        with open(os.devnull, "w") as discard:
            run_tasks([task], out=discard, echo_stderr=False)
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

def check_gcs_destination(uri: str, client=None) -> tuple[str, str]:
    """Validate ``gs://bucket/prefix`` and that the bucket exists, before anything is written."""
    try:
        place = GsPath.parse(uri)
        bucket, prefix = place.bucket, place.path
    except domain.DomainError as exc:
        raise UserError(f"destination {uri}: {exc}") from None

    client = client or storage_client()
    with google_errors(f"checking bucket gs://{bucket}"):   # a Google failure becomes a one-line UserError
        exists = client.bucket(bucket).exists()
    if not exists:
        raise UserError(f"bucket {bucket} does not exist (create it with `pulumi up`, or fix the destination)")
    check_gcs_empty(uri, client)
    return bucket, prefix


def check_gcs_empty(uri: str, client) -> None:
    """Refuse a ``gs://`` destination that already holds objects: objects cannot be swapped in atomically like a
    local folder, so writing over an earlier dataset would break it (shards replaced under its manifest), and a
    failed upload's cleanup would delete objects that were not this run's. Checked before the conversion and
    again right before the upload."""

    place = GsPath.parse(uri)

    bucket, prefix = place.bucket, place.path
    with google_errors(f"listing gs://{bucket}/{prefix}"):
        present = next(iter(client.list_blobs(bucket, prefix=f"{prefix}/" if prefix else None, max_results=1)), None)
    if present is not None:
        where = f"gs://{bucket}/{prefix}" if prefix else f"gs://{bucket}"
        fix = (f"choose a new path, or remove the old one first (`gcloud storage rm -r {where}/`)" if prefix
               else f"choose a new path (gs://{bucket}/NEW-NAME)")
        raise UserError(f"destination {where} already holds objects (e.g. gs://{bucket}/{present.name}); "
                        f"tpuctl data never writes over an earlier dataset: {fix}")


#: Seconds the uploads in flight get to finish quietly after Ctrl-C / SIGTERM.
UPLOAD_STOP_GRACE_SECONDS = 3.0
#: Then, with a notice, at most this long more: an upload still running when its object is deleted would
#: create that object afterwards, so the cleanup waits for it (a second Ctrl-C stops waiting).
UPLOAD_STOP_WAIT_SECONDS = 30.0
#: Files handed out by the walk: the manifest last (it names the shards; it must never arrive first).
LAST_FILES = ("manifest.json",)


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT/SIGTERM while the block runs (main thread only; elsewhere it never fires).

    The signal name is kept on ``event.signal_name``, how many arrived on ``event.count``."""
    event = threading.Event()
    event.signal_name = None  # type: ignore[attr-defined]
    event.count = 0  # type: ignore[attr-defined]

    def _on_signal(signum, _frame):
        event.signal_name = event.signal_name or signal.Signals(signum).name  # type: ignore[attr-defined]
        event.count += 1  # type: ignore[attr-defined]
        event.set()

    with signal_handlers(_on_signal):
        yield event


def upload_dir(local: Path, uri: str, client=None, workers: int = 8,
               on_progress: ProgressCallback | None = None,
               on_notice: Callable[[str], None] | None = None) -> list[str]:
    """Upload every file under ``local`` to ``gs://bucket/prefix/<relative path>``; return object names.

    Through ``cloud.uploads.upload_files`` in a thread of its own, while this (main) thread watches signals.
    A failure or Ctrl-C/SIGTERM stops handing out files; the objects this call uploaded are deleted again
    (the destination is left as it was) and the error says so. The manifest is uploaded last, alone.
    Uploads in flight are waited for (``UPLOAD_STOP_GRACE_SECONDS``, then with a notice through
    ``on_notice`` up to ``UPLOAD_STOP_WAIT_SECONDS``; a second signal stops waiting) before anything is deleted,
    since one that finished after the cleanup would leave its object behind; any still running then are named in
    the error, which also tells the CLI not to wait for their threads (``abandoned_threads``).
    """

    place = GsPath.parse(uri)

    bucket_name, prefix = place.bucket, place.path
    client = client or storage_client()
    files = sorted(files_to_upload(local), key=lambda rel: rel in LAST_FILES)   # stable: the manifest last
    if not files:
        return []
    names = [f"{prefix}/{rel}" if prefix else rel for rel in files]
    with stop_on_signals() as stop:
        # if_generation_match=0: only ever creates an object, never replaces one (a concurrent writer's)
        # window=workers: a failure stops the handing out of files once the uploads in flight ended
        upload = upload_files(client.bucket(bucket_name), [(local / rel, name) for rel, name in zip(files, names)],
                              workers=workers, window=workers, last=sum(rel in LAST_FILES for rel in files), stop=stop,
                              background=True,
                              upload_kwargs={"if_generation_match": 0, "timeout": REQUEST_TIMEOUT_SECONDS})
        reported = 0
        while not upload.wait(0.05) and not stop.is_set():
            if on_progress and (count := len(upload.created())) != reported:
                on_progress(reported := count, len(files))
        if stop.is_set() and not _ended(upload, UPLOAD_STOP_GRACE_SECONDS, stop) and stop.count < 2:  # type: ignore[attr-defined]
            if on_notice:
                on_notice(f"stopping: {len(upload.in_flight())} upload(s) still in flight; waiting up to "
                          f"{UPLOAD_STOP_WAIT_SECONDS:g} s for them to end so that they can be removed "
                          "(Ctrl-C again to stop waiting)")
            _ended(upload, UPLOAD_STOP_WAIT_SECONDS, stop)
        uploaded = upload.created()
        if upload.wait(0) and upload.error is None and len(uploaded) == len(files):
            if on_progress and reported != len(files):
                on_progress(len(files), len(files))
            return names
        abandoned = sorted(upload.in_flight())
        removed, kept = upload.remove()
    running = not upload.wait(0)   # the library's threads are still blocked in the network: not to be waited for
    cleaned = (f"removed the {removed} object(s) it had uploaded" if not kept
               else f"removed {removed} object(s); could not remove {len(kept)} (e.g. gs://{bucket_name}/{kept[0]})")
    cut = ""
    if abandoned:
        shown = " ".join(f"gs://{bucket_name}/{n}" for n in abandoned[:3]) + (" …" if len(abandoned) > 3 else "")
        cut = (f"; {len(abandoned)} upload(s) were still in flight and may yet appear: remove them with "
               f"`gcloud storage rm {shown}`")
    if stop.is_set():
        raise UserError(f"interrupted by {stop.signal_name} while uploading to {uri} "  # type: ignore[attr-defined]
                        f"({len(uploaded)} of {len(files)} files done); {cleaned}{cut}; nothing else was written",
                        EXIT_INTERRUPTED, abandoned_threads=running)
    if not upload.errors:  # no file failed: a bug, shown as it is
        raise upload.error or AssertionError(f"upload to {uri} ended early")
    index = min(upload.errors)
    error = upload.errors[index]


    translated = as_user_error(error)
    detail = str(translated) if translated is not None else (str(error).splitlines() or [type(error).__name__])[0]
    if isinstance(error, api_exceptions.PreconditionFailed):
        detail = ("an object of that name appeared meanwhile (another run writing to the same destination?) "
                  "and was left as it is")
    raise UserError(f"uploading {files[index]} to {uri} failed ({len(upload.errors)} of {len(files)} files): "
                    f"{detail}; {cleaned}{cut}", 1)


def _ended(upload, seconds: float, stop) -> bool:
    """Wait up to ``seconds`` for ``upload`` to end, less if a second signal comes (``stop.count``); whether it ended."""
    deadline = time.monotonic() + seconds
    while not upload.wait(0.05):
        if time.monotonic() >= deadline or stop.count >= 2:
            return False
    return True


def files_to_upload(local: Path) -> list[str]:
    """The regular files under ``local`` (relative, sorted), walked without following symbolic links: a link
    is refused in one line naming it (an upload never carries files from outside the folder)."""
    files = []
    for top, dirs, names in os.walk(local):  # followlinks=False: a linked folder is listed, never walked
        for name in [*dirs, *names]:
            path = Path(top) / name
            if path.is_symlink():
                raise UserError(f"{path} is a symbolic link (to {os.path.realpath(path)}); uploads never follow "
                                f"links out of {local}: copy the file in or remove the link")
        files += [(Path(top) / name).relative_to(local).as_posix() for name in names if (Path(top) / name).is_file()]
    return sorted(files)


def local_folder(value: str, what: str, *, must_exist: bool) -> Path:
    """``value`` as a resolved local folder path, or a one-line UserError: a file where a folder is
    expected (also among its parents), a path the OS refuses (too long, no permission), a missing folder."""
    path = user_path(value, what)
    try:
        resolved = path.resolve()
        if resolved.exists():
            if not resolved.is_dir():
                raise UserError(f"{what} {value} exists and is not a folder")
        elif must_exist:
            raise UserError(f"{what} {value} does not exist")
        else:
            for parent in resolved.parents:
                if parent.exists():
                    if not parent.is_dir():
                        raise UserError(f"{what} {value}: {parent} is a file, not a folder")
                    break
    except ValueError:  # a NUL byte in the path
        raise UserError(f"{what} {value!r}: a path cannot contain a NUL byte") from None
    except OSError as exc:
        reason = "the path is longer than the OS allows" if exc.errno == errno.ENAMETOOLONG else (exc.strerror or str(exc))
        raise UserError(f"{what} {_short(value)}: {reason}") from None
    return resolved


def _short(value: str, limit: int = 80) -> str:
    return value if len(value) <= limit else f"{value[:limit - 20]}…{value[-17:]} ({len(value)} characters)"


def _local_destination(dest: str) -> Path:
    return local_folder(dest, "destination", must_exist=False)


# --------------------------------------------------------------------------------------------
# The two commands
# --------------------------------------------------------------------------------------------

def make_tfrecords(src: str, dest: str, *, shard_mb: float = 100, validation_fraction: float = 0.1,
                   full_decode: bool = False, max_side: int | None = None,
                   on_progress: ProgressCallback | None = None, client=None,
                   on_notice: Callable[[str], None] | None = None) -> dict:
    """Convert a folder of class sub-folders of images into TFRecord shards at ``dest`` (local or gs://).

    The summary is the tool's: ``skipped_reasons`` says why each skipped file was left out."""
    if is_gs(src):
        raise UserError("SRC must be a local folder of class sub-folders (copy it down with `gcloud storage cp -r` first)")
    if not (math.isfinite(shard_mb) and shard_mb > 0):
        raise UserError(f"--shard-mb must be a positive number (got {shard_mb})")
    if not (math.isfinite(validation_fraction) and 0 < validation_fraction < 1):
        raise UserError(f"--validation-fraction must be between 0 and 1 (got {validation_fraction})")
    if max_side is not None and not MAKE_TFRECORDS_BOUNDS["max_side"].contains(max_side):
        raise UserError(f"--max-side must be {MAKE_TFRECORDS_BOUNDS['max_side'].describe()} (got {max_side})")
    source = local_folder(src, "source folder", must_exist=True)
    try:
        has_classes = any(p.is_dir() for p in source.iterdir())
    except OSError as exc:
        raise UserError(f"cannot read source folder {src}: {exc.strerror or exc}") from None
    if not has_classes:
        raise UserError(f"source folder {src} has no class sub-folders (expected SRC/<class name>/<image files>)")
    if not is_gs(dest):
        out = _local_destination(dest)
        if out == source or source in out.parents:
            shown_out = "" if out == Path(dest) else f" ({out} is in {source})"
            raise UserError(f"destination {dest} is inside the source folder {src}{shown_out}; "
                            "choose a destination outside it")
    tool_args = ["--shard-mb", _num(shard_mb), "--validation-fraction", _num(validation_fraction)]
    if full_decode:
        tool_args.append("--full-decode")
    if max_side is not None:
        tool_args += ["--max-side", str(int(max_side))]
    return _run_to(dest, "trainer.make_tfrecords", lambda out: [str(source.resolve()), str(out), *tool_args],
                   on_progress, client, on_notice)


def sample(dest: str, *, on_progress: ProgressCallback | None = None, client=None,
           on_notice: Callable[[str], None] | None = None) -> dict:
    """Write the embedded demo dataset (scikit-learn digits) as shards + manifest at ``dest``."""
    return _run_to(dest, "trainer.sample_data", lambda out: ["--out", str(out)], on_progress, client, on_notice)


def _num(value: float) -> str:
    return repr(float(value)).rstrip("0").rstrip(".") if float(value) != int(value) else str(int(value))


def _run_to(dest: str, module: str, build_args: Callable[[Path], list[str]],
            on_progress: ProgressCallback | None, client,
            on_notice: Callable[[str], None] | None = None) -> dict:
    if is_gs(dest):
        client = client or storage_client()   # one client for the check and the upload
        check_gcs_destination(dest, client)
        with tempfile.TemporaryDirectory(prefix="tpuctl-data-") as tmp:
            out = Path(tmp) / "out"
            summary = run_tool(module, build_args(out), on_progress)
            check_gcs_empty(dest, client)  # still: nothing else wrote there during the conversion
            objects = upload_dir(out, dest, client, on_progress=on_progress, on_notice=on_notice)
        return {**summary, "destination": dest.rstrip("/"), "uploaded": len(objects)}
    out = _local_destination(dest)
    return {**run_tool(module, build_args(out), on_progress), "destination": str(out)}


# --------------------------------------------------------------------------------------------
# The embedded demo dataset, generated once into the local cache
# --------------------------------------------------------------------------------------------

#: The demo manifest is a few KB (it names four shards).
MAX_DEMO_MANIFEST_BYTES = 1 << 20


def demo_data_dir() -> Path:
    return cache_dir() / "demo-data"


def demo_data_complete(folder: Path) -> bool:
    """Manifest present and parseable, and train + validation shards (and every file it names) there."""
    try:  # bounded and never blocking: a FIFO or a link to a device in its place is an incomplete dataset, made again
        data = json.loads(read_file(folder / "manifest.json", "demo manifest", MAX_DEMO_MANIFEST_BYTES, hint=""))
    except (UserError, ValueError, RecursionError):
        return False
    if not folder.is_dir():
        return False
    # regular files only (a FIFO in place of a shard would hang the trainer): the dataset is made again
    names = {p.name for p in folder.iterdir() if p.is_file() and not p.is_symlink()}
    if not any("-train-" in n for n in names) or not any("-validation-" in n for n in names):
        return False
    return all(ref in names for ref in _file_refs(data))


def _file_refs(node) -> set[str]:
    if isinstance(node, (dict, list)):
        return set().union(*map(_file_refs, node.values() if isinstance(node, dict) else node))
    return {node} if isinstance(node, str) and ".tfrecord" in node and "/" not in node and "*" not in node else set()


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
        try:
            replace_folder(partial, target)     # an incomplete one (an older run's) is replaced whole
        except OSError:
            # Another tpuctl generated it at the same time; keep theirs if it is whole.
            if not demo_data_complete(target):
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target
