"""The trained export: where it is (a folder, a run, ``gs://``), whether it is one, its files and class names.

The export is the trainer's (trainer/export.py, docs/trainer.md): ``<model_dir>/export/<model>/<version>/`` with
``saved_model.pb`` and a ``serving_default`` signature taking ``image_bytes`` (encoded JPEG/PNG, tf.string [None])
and returning ``probabilities`` [None, C], ``class_id`` and ``class_name``.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ground import domain
from ground.errors import DomainError, UserError
from ground.files import printable, read_file
from ground.localtree import user_path
from ground.numbers import is_digits
from ground.outputs import StackOutputs
from ground.storagepath import GsPath, is_gs
from tpuctl.services.runs import records as runs

#: A data manifest names a few thousand classes at most.
MAX_MANIFEST_BYTES = 16 * 1024 * 1024


#: Files and bytes of one export upload (the trainer's exports are a few files, a few MB to ~100 MB).
MAX_EXPORT_FILES = 10_000


MAX_EXPORT_BYTES = 20 * 1024**3


@dataclass(frozen=True)
class Export:
    path: str                  # the version folder (local path or gs:// URL)
    model_name: str            # the folder above it (the trainer's --model), or --model-name
    version: int
    run: Any = None            # tpuctl.services.runs.records.Run when the export came from a run

    @property
    def is_local(self) -> bool:
        return not is_gs(self.path)


def check_export_dir(path: str, model_name: str | None = None, run: Any = None) -> Export:
    """Validate an export folder at the edge: a version folder named by an integer, with saved_model.pb
    (local: checked on disk; gs://: by name only, the upload or Vertex AI reads it)."""
    text = path.rstrip("/")
    name = text.rsplit("/", 1)[-1]
    parent = text.rsplit("/", 2)[-2] if text.count("/") >= 1 else ""
    try:
        version = domain.model_version(name)
        if is_gs(text):
            GsPath.parse(text)                 # the bucket's naming rules, before any request
    except DomainError as exc:
        raise UserError(f"{path}: {exc}") from None
    if not is_gs(text):
        folder = user_path(text, "export folder")
        if not folder.is_dir():
            raise UserError(f"{path}: no such export folder")
        if not (folder / "saved_model.pb").is_file():
            raise UserError(f"{path}: no saved_model.pb in it (not a SavedModel export; "
                            "the trainer writes <model_dir>/export/<model>/<version>/)")
        text = str(folder.resolve())
        parent = folder.resolve().parent.name
    chosen = model_name or parent
    try:
        domain.check_model_name(chosen)
    except DomainError as exc:
        hint = "" if model_name else " (the export's model folder); pass --model-name"
        raise UserError(f"{exc}{hint}") from None
    return Export(text, chosen, version, run)


def resolve_export(ref: str, *, runs_dir: str = "runs", model_name: str | None = None,
                   outputs: StackOutputs | None = None, storage_client=None) -> Export:
    """``ref``: an export version folder, a run folder (with result.json), a gs:// export URL, or a run name
    (a unique prefix is enough) under ``runs_dir`` or, with ``outputs``, the stack's artifacts bucket."""

    if is_gs(ref):
        return check_export_dir(ref, model_name)
    local = user_path(ref, "model")
    if local.is_dir() and ((local / "saved_model.pb").exists() or is_digits(local.name)):
        return check_export_dir(ref, model_name)
    if local.is_dir() and (local / runs.RESULT_FILE).is_file():
        run = runs.read_local_run(local)
        if run is None or run.problem is not None:
            raise UserError(f"{ref}: its {runs.RESULT_FILE} is not a trainer result"
                            + (f" ({run.problem})" if run is not None else ""))
        return _run_export(run, model_name)
    if local.is_dir():
        if any(p.is_dir() and is_digits(p.name) for p in local.iterdir()):
            raise UserError(f"{ref} is a model folder: name one of its version folders (…/{ref.rstrip('/').rsplit('/', 1)[-1]}/N)")
        raise UserError(f"{ref}: neither an export (no saved_model.pb) nor a run folder (no {runs.RESULT_FILE})")
    found = runs.list_runs(runs_dir)
    try:
        return _run_export(runs.find_run(found, ref), model_name)
    except UserError:
        if outputs is None:
            raise
    return _run_export(runs.find_run(runs.list_runs(outputs=outputs, storage_client=storage_client), ref), model_name)


def _run_export(run, model_name: str | None) -> Export:
    if run.problem is not None:
        raise UserError(f"run {run.name} has a bad record: {run.problem}")
    export_dir = run.result.get("export_dir")
    if not isinstance(export_dir, str) or not export_dir:
        raise UserError(f"run {run.name} names no export_dir in its result.json")
    if not is_gs(run.path) and not is_gs(export_dir):
        export_dir = _own_export(run, export_dir)
    return check_export_dir(export_dir, model_name, run)


def _own_export(run, export_dir: str) -> str:
    """A local run's export, in its own folder: the trainer records it as an absolute path, so a run folder moved or
    copied since names the original's (a sixth trial served another folder's export as the named run's). The same
    place in the run's folder (``export/<name>/<version>``) is the one; a record naming a folder elsewhere is one
    line."""
    folder = os.path.realpath(run.path)
    recorded = os.path.realpath(export_dir)
    if recorded.startswith(folder + os.sep):
        return export_dir
    parts = export_dir.rstrip("/").split("/")
    if len(parts) >= 3 and parts[-3] == "export":
        own = os.path.join(run.path, *parts[-3:])
        if os.path.isdir(own):
            return own
    raise UserError(f"run {run.name}'s record names an export outside its folder ({printable(export_dir, 200)}): "
                    f"serve an export folder by its path, or train the run again")


def read_class_names(manifest: str) -> list[str]:
    """``classes`` of a data folder's manifest.json (local); the order is the model's class ids."""
    path = user_path(manifest, "class names")
    if path.is_dir():
        path = path / "manifest.json"
    data = read_file(path, "data manifest", MAX_MANIFEST_BYTES,
                     hint="give a data folder's manifest.json (or the folder), as `tpuctl data make-tfrecords` wrote it")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise UserError(f"{manifest}: not valid JSON") from None
    classes = doc.get("classes") if isinstance(doc, dict) else None
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
        raise UserError(f"{manifest}: no \"classes\" list of names")
    return classes


def export_files(root: Path) -> list[Path]:
    """The regular files of an export folder, walked without following symlinks: a symlink (to a file or a folder,
    inside or out) or a FIFO/device in it is refused in one line, so an upload never carries files from outside
    the folder (or blocks on a FIFO)."""
    files: list[Path] = []
    for top, dirs, names in os.walk(root):          # never descends into a symlinked folder
        for name in sorted([*dirs, *names]):
            path = Path(top) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise UserError(f"{root} holds a symbolic link ({path}); an export is uploaded as it is, without "
                                "following links: replace it with the file")
            if name in names:
                if not stat.S_ISREG(mode):
                    raise UserError(f"{path} in {root} is not a regular file (a FIFO, device or socket)")
                files.append(path)
                if len(files) > MAX_EXPORT_FILES:
                    raise UserError(f"{root} holds more than {MAX_EXPORT_FILES} files: not a trainer export")
    return sorted(files)
