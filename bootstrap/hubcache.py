"""TF-Hub models in tensorflow_hub's cache layout, in a bucket (``hub-cache add``) or locally (``fetch``).

tensorflow_hub looks for ``<TFHUB_CACHE_DIR>/<sha1(exact handle)>/`` with ``saved_model.pb`` at its
root; anything else is ignored and it tries to download. A model comes from
``HANDLE?tf-hub-format=compressed`` over HTTP(S) (redirects followed: tfhub.dev now redirects to
Kaggle), or from a local folder / .tar.gz. Archives are validated member by member BEFORE anything
is extracted (no absolute paths, no ``..``, no links leaving the tree, no devices) and unpacked into
a temporary folder, so a bad archive writes nothing where it matters.
"""

from __future__ import annotations

import base64
import datetime
import io
import os
import posixpath
import shutil
import socket
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from tpuctl.ground import domain
from tpuctl.ground.errors import UserError

DEFAULT_LOCAL_CACHE = Path(".tpuctl-cache/hub")
DOWNLOAD_TIMEOUT = 60
SAVED_MODEL = "saved_model.pb"

Progress = Callable[[int], None]


def compressed_url(handle: str) -> str:
    return handle + ("&" if "?" in handle else "?") + "tf-hub-format=compressed"


def is_url(handle: str) -> bool:
    return handle.startswith(("http://", "https://"))


def descriptor_text(handle: str) -> str:
    """Same content tensorflow_hub writes next to a module folder (``<key>.descriptor.txt``)."""
    return "Module: %s\nDownload Time: %s\nDownloader Hostname: %s (PID:%d)" % (
        handle, datetime.datetime.today(), socket.gethostname(), os.getpid())


def handle_from_descriptor(text: str) -> str | None:
    first = text.splitlines()[0] if text else ""
    return first[len("Module: "):] if first.startswith("Module: ") else None


# --------------------------------------------------------------------------------------------
# Getting a model folder: download, safe unpack, locate saved_model.pb
# --------------------------------------------------------------------------------------------

def download(handle: str, dest: Path, progress: Progress | None = None,
             on_total: Callable[[int | None], None] | None = None) -> Path:
    """GET ``HANDLE?tf-hub-format=compressed`` (redirects followed) into ``dest``."""
    import requests

    url = compressed_url(handle)
    try:
        with requests.get(url, stream=True, allow_redirects=True, timeout=DOWNLOAD_TIMEOUT) as resp:
            if resp.status_code >= 400:
                raise UserError(f"downloading {handle} failed: HTTP {resp.status_code} from {resp.url}", 1)
            total = resp.headers.get("Content-Length")
            if on_total:
                on_total(int(total) if total and total.isdigit() else None)
            with open(dest, "wb") as fh:
                for chunk in resp.iter_content(chunk_size=1 << 20):
                    fh.write(chunk)
                    if progress:
                        progress(len(chunk))
    except requests.RequestException as exc:
        raise UserError(f"downloading {handle} failed: {exc.__class__.__name__}: {exc}", 1) from None
    return dest


def _inside(root: str, path: str) -> bool:
    """Is the normalised archive path ``path`` inside the archive root ``root`` ('' = root)?"""
    norm = posixpath.normpath(path)
    return not (norm == ".." or norm.startswith("../") or posixpath.isabs(norm))


def validate_tar_members(members: Iterable[tarfile.TarInfo], source: str) -> list[tarfile.TarInfo]:
    """Reject path traversal, absolute paths, links leaving the tree, devices. Returns the members."""
    checked = []
    for m in members:
        name = m.name
        if name.startswith("/") or posixpath.isabs(name) or (len(name) > 1 and name[1] == ":"):
            raise UserError(f"{source}: refusing archive member with an absolute path: {name!r}")
        if not _inside("", name) or ".." in name.split("/"):
            raise UserError(f"{source}: refusing archive member that climbs out of the folder: {name!r}")
        if m.issym():
            target = m.linkname
            if posixpath.isabs(target) or not _inside("", posixpath.join(posixpath.dirname(name), target)):
                raise UserError(f"{source}: refusing symlink {name!r} -> {target!r} that points outside the archive")
        elif m.islnk():
            if posixpath.isabs(m.linkname) or not _inside("", m.linkname):
                raise UserError(f"{source}: refusing hardlink {name!r} -> {m.linkname!r} that points outside the archive")
        elif not (m.isfile() or m.isdir()):
            raise UserError(f"{source}: refusing special file {name!r} (device, FIFO) in the archive")
        checked.append(m)
    return checked


def safe_extract(archive: Path, dest: Path, source: str | None = None) -> None:
    """Validate every member first, then extract (with tarfile's 'data' filter as a second guard)."""
    source = source or str(archive)
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = validate_tar_members(tar.getmembers(), source)
            tar.extractall(dest, members=members, filter="data")
    except tarfile.TarError as exc:
        raise UserError(f"{source} is not a readable .tar/.tar.gz archive ({exc})") from None
    except OSError as exc:
        if isinstance(exc, (FileNotFoundError, PermissionError)):
            raise
        raise UserError(f"{source} is not a readable .tar/.tar.gz archive ({exc})") from None


def model_root(folder: Path, source: str) -> Path:
    """The folder with saved_model.pb at its root (the folder itself, or its single sub-folder)."""
    if (folder / SAVED_MODEL).is_file():
        return folder
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and (entries[0] / SAVED_MODEL).is_file():
        return entries[0]
    raise UserError(f"{source} has no {SAVED_MODEL} at its top level; it is not a TF-Hub SavedModel")


@dataclass
class Materialized:
    handle: str
    key: str
    root: Path               # folder with saved_model.pb at its root
    workdir: Path | None     # temporary folder to remove afterwards (None for a local folder)

    def cleanup(self) -> None:
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def materialize(handle: str, source: str | None = None, workdir_parent: Path | None = None,
                progress: Progress | None = None, on_total=None) -> Materialized:
    """Get ``handle``'s model as a local folder. ``source`` (path) overrides where it comes from;
    without it a URL handle is downloaded and a local-path handle is used as is."""
    key = domain.hub_cache_key(handle)
    src = source
    if src is None and not is_url(handle):
        src = handle
    if src is not None and not is_url(src):
        path = Path(src).expanduser()
        if not path.exists():
            raise UserError(f"hub model source {src} does not exist (give an http(s) handle, a folder or a .tar.gz)")
        if path.is_dir():
            return Materialized(handle, key, model_root(path, src), None)
        workdir = Path(tempfile.mkdtemp(prefix="tpuctl-hub-", dir=workdir_parent))
        try:
            safe_extract(path, workdir / "x", src)
            return Materialized(handle, key, model_root(workdir / "x", src), workdir)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
    url_handle = src or handle
    workdir = Path(tempfile.mkdtemp(prefix="tpuctl-hub-", dir=workdir_parent))
    try:
        archive = download(url_handle, workdir / "model.tar.gz", progress, on_total)
        safe_extract(archive, workdir / "x", url_handle)
        return Materialized(handle, key, model_root(workdir / "x", url_handle), workdir)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def model_files(root: Path) -> list[tuple[Path, str]]:
    """(local file, relative posix path) for every file under ``root`` (in-tree symlinks followed)."""
    out = []
    for dirpath, _dirs, files in os.walk(root, followlinks=False):
        for f in files:
            p = Path(dirpath) / f
            if p.is_file():
                out.append((p, p.relative_to(root).as_posix()))
    return sorted(out, key=lambda t: t[1])


# --------------------------------------------------------------------------------------------
# Bucket side: upload with skip-unchanged, listing
# --------------------------------------------------------------------------------------------

def _digest_b64(path: Path, hasher) -> str:
    """Base64 digest of a file, read in 1 MiB chunks (the encoding GCS uses for crc32c and md5Hash)."""
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            hasher.update(chunk)
    return base64.b64encode(hasher.digest()).decode()


def crc32c_b64(path: Path) -> str:
    import google_crc32c

    return _digest_b64(path, google_crc32c.Checksum())


def md5_b64(path: Path) -> str:
    import hashlib

    return _digest_b64(path, hashlib.md5())


def same_content(local: Path, blob) -> bool:
    if blob.size is not None and int(blob.size) != local.stat().st_size:
        return False
    if blob.crc32c:
        return blob.crc32c == crc32c_b64(local)
    if blob.md5_hash:
        return blob.md5_hash == md5_b64(local)
    return False


class _ProgressReader(io.RawIOBase):
    """A file whose reads advance a progress bar (transfer_manager threads read through it)."""

    def __init__(self, path: Path, progress: Progress | None):
        self._fh = open(path, "rb")
        self._progress = progress

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._fh.seek(offset, whence)

    def tell(self) -> int:
        return self._fh.tell()

    def read(self, size: int = -1) -> bytes:
        data = self._fh.read(size)
        if self._progress and data:
            self._progress(len(data))
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._fh.close()
        super().close()


@dataclass
class UploadResult:
    handle: str
    key: str
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)   # objects in the folder that the model does not have


def plan_upload(bucket, prefix: str, m: Materialized) -> tuple[list[tuple[Path, str]], UploadResult]:
    folder = f"{prefix}/{m.key}/"
    existing = {b.name: b for b in bucket.client.list_blobs(bucket, prefix=folder)}
    result = UploadResult(m.handle, m.key)
    todo = []
    for local, rel in model_files(m.root):
        name = domain.hub_object_name(prefix, m.handle, rel)
        blob = existing.pop(name, None)
        if blob is not None and same_content(local, blob):
            result.skipped.append(rel)
        else:
            todo.append((local, rel))
    result.extra = sorted(n[len(folder):] for n in existing)
    return todo, result


def upload_model(bucket, prefix: str, m: Materialized, workers: int = 8,
                 progress: Progress | None = None, on_total: Callable[[int], None] | None = None) -> UploadResult:
    """Upload the model folder to ``<prefix>/<sha1(handle)>/`` in parallel; unchanged files skipped.

    saved_model.pb goes last (and the descriptor after it): a folder that shows saved_model.pb
    holds everything, so an interrupted upload never looks like a complete model to ``ls``/doctor.
    """
    from google.cloud.storage import transfer_manager

    domain.validate_hub_prefix(prefix)
    todo, result = plan_upload(bucket, prefix, m)
    if on_total:
        on_total(sum(p.stat().st_size for p, _ in todo))
    first = [(p, r) for p, r in todo if r != SAVED_MODEL]
    last = [(p, r) for p, r in todo if r == SAVED_MODEL]
    for batch in (first, last):
        if not batch:
            continue
        pairs = [(_ProgressReader(p, progress), bucket.blob(domain.hub_object_name(prefix, m.handle, r)))
                 for p, r in batch]
        try:
            transfer_manager.upload_many(
                pairs, worker_type=transfer_manager.THREAD, max_workers=workers, raise_exception=True,
                upload_kwargs={"checksum": "crc32c"},
            )
        finally:
            for reader, _ in pairs:
                reader.close()
        result.uploaded.extend(r for _, r in batch)
    if result.uploaded:
        bucket.blob(f"{prefix}/{m.key}.descriptor.txt").upload_from_string(descriptor_text(m.handle))
    return result


@dataclass
class CacheEntry:
    key: str
    handle: str | None
    files: int
    size: int
    complete: bool


def list_cache(client, bucket_name: str, prefix: str) -> list[CacheEntry]:
    domain.validate_hub_prefix(prefix)
    entries: dict[str, dict] = {}
    descriptors: dict[str, str] = {}
    for blob in client.list_blobs(bucket_name, prefix=f"{prefix}/"):
        rest = blob.name[len(prefix) + 1:]
        top, _, inner = rest.partition("/")
        if not inner:
            if top.endswith(".descriptor.txt") and domain.is_hub_cache_key(top[: -len(".descriptor.txt")]):
                descriptors[top[: -len(".descriptor.txt")]] = blob.name
            continue
        if not domain.is_hub_cache_key(top):
            continue
        e = entries.setdefault(top, {"files": 0, "size": 0, "complete": False})
        e["files"] += 1
        e["size"] += int(blob.size or 0)
        e["complete"] |= inner == SAVED_MODEL
    bucket = client.bucket(bucket_name)
    out = []
    for key in sorted(entries):
        handle = None
        if key in descriptors:
            handle = handle_from_descriptor(bucket.blob(descriptors[key]).download_as_text())
        out.append(CacheEntry(key, handle, entries[key]["files"], entries[key]["size"], entries[key]["complete"]))
    return out


def cached_handles(client, bucket_name: str, prefix: str, handles: Iterable[str]) -> dict[str, bool]:
    """For each handle: does ``<prefix>/<sha1>/saved_model.pb`` exist? (doctor's hub check)"""
    out = {}
    for h in handles:
        name = domain.hub_object_name(prefix, h, SAVED_MODEL)
        out[h] = any(b.name == name for b in client.list_blobs(bucket_name, prefix=name, max_results=5))
    return out


# --------------------------------------------------------------------------------------------
# Local side: fetch into a folder (the Pulumi program's hubCacheSource)
# --------------------------------------------------------------------------------------------

def install_local(m: Materialized, dest_root: Path) -> tuple[Path, bool]:
    """Copy the model to ``dest_root/<key>/`` atomically (temp folder + rename). Returns (path, replaced)."""
    dest_root.mkdir(parents=True, exist_ok=True)
    final = dest_root / m.key
    staging = Path(tempfile.mkdtemp(prefix=f".{m.key}.", dir=dest_root))
    try:
        shutil.copytree(m.root, staging / "model", symlinks=False)
        replaced = final.exists()
        if replaced:
            old = dest_root / f".{m.key}.old-{os.getpid()}"
            os.replace(final, old)
            os.replace(staging / "model", final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging / "model", final)
        (dest_root / f"{m.key}.descriptor.txt").write_text(descriptor_text(m.handle))
        return final, replaced
    finally:
        shutil.rmtree(staging, ignore_errors=True)
