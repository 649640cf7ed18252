"""TF-Hub models in tensorflow_hub's cache layout, in a bucket (``hub-cache add``) or locally (``fetch``).

tensorflow_hub looks for ``<TFHUB_CACHE_DIR>/<sha1(exact handle)>/`` with ``saved_model.pb`` at its
root; anything else is ignored and it tries to download. A model comes from
``HANDLE?tf-hub-format=compressed`` over HTTP(S) (redirects followed: tfhub.dev now redirects to
Kaggle), or from a local folder / .tar.gz. Archives are validated member by member BEFORE anything
is extracted (no absolute paths, no ``..``, no links leaving the tree, no devices) and unpacked into
a temporary folder, so a bad archive writes nothing where it matters.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import os
import posixpath
import secrets
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bootstrap.uploads import upload_files
from tpuctl.ground import domain, localtree
from tpuctl.ground.errors import UserError
from tpuctl.ground.files import digest_b64
from tpuctl.ground.localtree import scan_tree

DEFAULT_LOCAL_CACHE = Path(".tpuctl-cache/hub")
DOWNLOAD_TIMEOUT = 60
#: tpuctl's own bounds on one model (not Google's): TF-Hub SavedModels are at most a few GB and a few dozen
#: files, so a download or an archive beyond these is refused before it fills the disk (an endless response,
#: a gzip bomb, an archive of millions of empty files).
MAX_MODEL_BYTES = 64 * 1024**3
MAX_MODEL_FILES = 100_000
SAVED_MODEL = "saved_model.pb"

Progress = Callable[[int], None]


def is_url(handle: str) -> bool:
    return handle.startswith(("http://", "https://"))


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

    url = handle + ("&" if "?" in handle else "?") + "tf-hub-format=compressed"
    try:
        with requests.get(url, stream=True, allow_redirects=True, timeout=DOWNLOAD_TIMEOUT) as resp:
            if resp.status_code >= 400:
                raise UserError(f"downloading {handle} failed: HTTP {resp.status_code} from {resp.url}", 1)
            total = resp.headers.get("Content-Length")
            total = int(total) if total and total.isdigit() else None
            too_big = UserError(f"downloading {handle} stopped: more than {MAX_MODEL_BYTES:,} bytes; a TF-Hub model "
                                "is a few GB at most (check the handle)", 1)
            if total is not None and total > MAX_MODEL_BYTES:
                raise too_big
            if on_total:
                on_total(total)
            written = 0
            with open(dest, "wb") as fh:
                for chunk in resp.iter_content(chunk_size=1 << 20):
                    written += len(chunk)
                    if written > MAX_MODEL_BYTES:
                        raise too_big
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
    """Reject path traversal, absolute paths, odd segments, links leaving the tree, devices. Returns the members."""
    checked = []
    for m in members:
        name = m.name
        problem = localtree.path_problem(name)
        if problem == "has an absolute path":
            raise UserError(f"{source}: refusing archive member with an absolute path: {name!r}")
        if problem == "climbs out of the folder" or not _inside("", name):
            raise UserError(f"{source}: refusing archive member that climbs out of the folder: {name!r}")
        if problem:
            raise UserError(f"{source}: refusing archive member {name!r}: it {problem}")
        if m.issym():
            target = m.linkname
            if ("\\" in target or posixpath.isabs(target)
                    or not _inside("", posixpath.join(posixpath.dirname(localtree.strip_dot_prefix(name)), target))):
                raise UserError(f"{source}: refusing symlink {name!r} -> {target!r} that points outside the archive")
        elif m.islnk():
            if "\\" in m.linkname or posixpath.isabs(m.linkname) or not _inside("", m.linkname):
                raise UserError(f"{source}: refusing hardlink {name!r} -> {m.linkname!r} that points outside the archive")
        elif not (m.isfile() or m.isdir()):
            raise UserError(f"{source}: refusing special file {name!r} (device, FIFO) in the archive")
        checked.append(m)
    return checked


def safe_extract(archive: Path, dest: Path, source: str | None = None) -> None:
    """Validate every member first, then extract (with tarfile's 'data' filter as a second guard).

    Empty, truncated and non-tar files are one line: tarfile, gzip, zlib, lzma and bz2 each signal a
    damaged stream their own way (ReadError, EOFError, zlib.error, LZMAError, OSError)."""
    import lzma
    import zlib

    source = source or str(archive)
    try:
        if archive.stat().st_size == 0:
            raise UserError(f"{source} is empty; it is not a .tar/.tar.gz archive")
        with tarfile.open(archive, "r:*") as tar:
            members = validate_tar_members(_bounded_members(tar, source), source)
            if not members:
                raise UserError(f"{source} is an archive with no files in it")
            unpacked = sum(m.size for m in members if m.isfile())
            if unpacked > MAX_MODEL_BYTES:
                raise UserError(f"{source} would unpack to {unpacked:,} bytes (at most {MAX_MODEL_BYTES:,}); "
                                "a TF-Hub model is a few GB at most")
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise UserError(f"{source} is not a readable .tar/.tar.gz archive (truncated or damaged: "
                        f"{exc.__class__.__name__}: {localtree.first_line(exc)})") from None
    except OSError as exc:
        if isinstance(exc, (FileNotFoundError, PermissionError)) or exc.errno == errno.ENAMETOOLONG:
            raise localtree.os_error(exc, source) from None
        raise UserError(f"{source} is not a readable .tar/.tar.gz archive ({localtree.first_line(exc)})") from None


def _bounded_members(tar: tarfile.TarFile, source: str) -> list[tarfile.TarInfo]:
    """The archive's members, read one header at a time and refused past ``MAX_MODEL_FILES``."""
    members = []
    for member in tar:
        members.append(member)
        if len(members) > MAX_MODEL_FILES:
            raise UserError(f"{source} has more than {MAX_MODEL_FILES:,} entries; a TF-Hub model has a few dozen")
    return members


def model_root(folder: Path, source: str) -> Path:
    """The folder with saved_model.pb at its root (the folder itself, or its single sub-folder)."""
    if (folder / SAVED_MODEL).is_file():
        return folder
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and (entries[0] / SAVED_MODEL).is_file():
        if entries[0].is_symlink() and not localtree.resolves_within(entries[0], folder):
            raise UserError(f"{source}: refusing symlink {entries[0].name!r} -> {os.readlink(entries[0])!r} "
                            "that points outside the folder")
        return entries[0]
    raise UserError(f"{source} has no {SAVED_MODEL} at its top level; it is not a TF-Hub SavedModel")


# --------------------------------------------------------------------------------------------
# The files of a model folder: one scan, used by add (upload) and fetch (local copy) alike
# --------------------------------------------------------------------------------------------

@dataclass
class LocalFile:
    path: Path        # where to read the bytes (an in-tree symlink: its target)
    rel: str          # relative posix path in the model (the object name under <sha1>/)
    size: int
    _crc: str | None = None

    def crc32c(self) -> str:
        if self._crc is None:
            import google_crc32c

            self._crc = digest_b64(self.path, google_crc32c.Checksum())
        return self._crc


def scan_folder(root: Path, source: str) -> list[LocalFile]:
    """Every file of the model folder ``root`` (``localtree.scan_tree``'s rules), with saved_model.pb at its top."""
    out = [LocalFile(f.path, f.rel, f.size) for f in scan_tree(root, source)]
    if not any(f.rel == SAVED_MODEL for f in out):
        raise UserError(f"{source} has no {SAVED_MODEL} at its top level; it is not a TF-Hub SavedModel")
    return out


@dataclass
class Materialized:
    handle: str
    key: str
    root: Path               # folder with saved_model.pb at its root
    workdir: Path | None     # temporary folder to remove afterwards (None for a local folder)
    files: list[LocalFile]   # checked by scan_folder

    def cleanup(self) -> None:
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def materialize(handle: str, source: str | None = None, workdir_parent: Path | None = None,
                progress: Progress | None = None, on_total=None) -> Materialized:
    """Get ``handle``'s model as a checked local folder. ``source`` (path) overrides where it comes from;
    without it a URL handle is downloaded and a local-path handle is used as is."""
    key = domain.hub_cache_key(handle)
    src = source
    if src is None and not is_url(handle):
        src = handle
    archive: Path | None = None     # a local .tar.gz; None: download src (or handle)
    if src is not None and not is_url(src):
        path = Path(src).expanduser()
        try:
            exists, is_dir = path.exists(), path.is_dir()
        except OSError as exc:
            raise localtree.os_error(exc, f"hub model source {src}") from None
        if not exists:
            if path.is_symlink():
                raise UserError(f"hub model source {src} is a dangling symlink")
            raise UserError(f"hub model source {src} does not exist (give an http(s) handle, a folder or a .tar.gz)")
        if is_dir:
            root = model_root(path, src)
            return Materialized(handle, key, root, None, scan_folder(root, src))
        if not path.is_file():
            raise UserError(f"hub model source {src} is not a folder or an archive (a FIFO, socket or device)")
        archive = path
    src = src or handle
    workdir = Path(tempfile.mkdtemp(prefix="tpuctl-hub-", dir=workdir_parent))
    try:
        if archive is None:
            archive = download(src, workdir / "model.tar.gz", progress, on_total)
        safe_extract(archive, workdir / "x", src)
        root = model_root(workdir / "x", src)
        return Materialized(handle, key, root, workdir, scan_folder(root, src))
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


# --------------------------------------------------------------------------------------------
# Bucket side: upload with skip-unchanged, listing
# --------------------------------------------------------------------------------------------

def same_content(local: LocalFile, blob) -> bool:
    """Is ``blob`` exactly the local file? Size, then CRC32C (MD5 when the server gives no CRC32C)."""
    if blob.size is not None and int(blob.size) != local.size:
        return False
    if blob.crc32c:
        return blob.crc32c == local.crc32c()
    if blob.md5_hash:
        return blob.md5_hash == digest_b64(local.path, hashlib.md5())
    return False


@dataclass
class UploadResult:
    handle: str
    key: str
    uploaded: list[str] = field(default_factory=list)   # sent from this machine in this run
    reused: list[str] = field(default_factory=list)     # verified objects a previous interrupted run staged
    skipped: list[str] = field(default_factory=list)    # already in <sha1>/ with the same size and crc32c
    extra: list[str] = field(default_factory=list)      # objects in the folder that the model does not have
    cleaned: int = 0                                    # stray staging objects removed
    manifest_written: bool = False


def _rel_in_staging(name: str, staging_prefix: str) -> str | None:
    rest = name[len(staging_prefix):]
    _run, sep, rel = rest.partition("/")
    return rel if sep and rel else None


def _commit_copy(bucket, src, dest_name: str) -> None:
    """Server-side copy with the rewrite API (large objects take several calls; ``token`` resumes)."""
    dest = bucket.blob(dest_name)
    token, _done, _total = dest.rewrite(src)
    while token is not None:
        token, _done, _total = dest.rewrite(src, token=token)


def _read_manifest(blob) -> bytes | None:
    from google.api_core import exceptions

    try:
        return blob.download_as_bytes()
    except exceptions.NotFound:
        return None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def upload_model(bucket, prefix: str, m: Materialized, workers: int = 8,
                 progress: Progress | None = None, on_total: Callable[[int], None] | None = None,
                 created_by: str = "tpuctl hub-cache add") -> UploadResult:
    """Put the model into ``<prefix>/<sha1(handle)>/`` so that the folder is complete or detectably not.

    1. files not already there (same size + crc32c) go to ``<prefix>/.staging/<sha1>-<random>/`` (outside
       anything tensorflow_hub reads), in parallel through transfer_manager; verified objects a previous
       interrupted run staged are reused;
    2. every staged object's crc32c is compared with the local file's;
    3. the old manifest is deleted (the folder is now incomplete), staged objects are copied in
       server-side, the folder is listed and checked again;
    4. the descriptor, then the manifest (handle, files, sizes, crc32c) are written LAST;
    5. every staging object of this model is removed.
    An interruption anywhere leaves either the previous complete folder (steps 1-2) or a folder without
    a valid manifest (3-4), which ``ls``, ``tpuctl doctor`` and the trainer report as incomplete.
    """
    from bootstrap.clients import google_errors

    domain.validate_hub_prefix(prefix)
    client = bucket.client
    folder = domain.hub_folder(prefix, m.handle)
    staging = domain.hub_staging_prefix(prefix, m.key)
    local = {f.rel: f for f in m.files}
    result = UploadResult(m.handle, m.key)
    where = f"gs://{bucket.name}/{folder}"

    with google_errors(f"listing {where}"):
        final = {b.name[len(folder):]: b for b in client.list_blobs(bucket, prefix=folder)}
        staged = list(client.list_blobs(bucket, prefix=staging))
    manifest_blob = final.pop(domain.HUB_MANIFEST, None)
    result.extra = sorted(rel for rel in final if rel not in local)
    in_place = {rel for rel, f in local.items() if rel in final and same_content(f, final[rel])}
    reusable: dict[str, object] = {}
    for b in staged:
        rel = _rel_in_staging(b.name, staging)
        if rel in local and rel not in in_place and rel not in reusable and same_content(local[rel], b):
            reusable[rel] = b
    layout = domain.hub_layout(prefix, m.handle, {rel: (f.size, f.crc32c()) for rel, f in local.items()},
                               created_by, _now())
    manifest = layout.manifest[1]
    if len(in_place) == len(local) and manifest_blob is not None:
        with google_errors(f"reading {where}{domain.HUB_MANIFEST}"):
            old = _read_manifest(manifest_blob)
        try:
            complete = old is not None and domain.parse_hub_manifest(old, m.handle) == domain.parse_hub_manifest(manifest)
        except domain.DomainError:
            complete = False
        if complete:
            result.skipped = sorted(in_place)
            result.cleaned = _remove_staging(bucket, staging)
            return result

    todo = [f for rel, f in sorted(local.items()) if rel not in in_place and rel not in reusable]
    if on_total:
        on_total(sum(f.size for f in todo))
    run_dir = f"{staging}{secrets.token_hex(6)}/"
    with google_errors(f"uploading to gs://{bucket.name}/{run_dir}"):
        upload_files(bucket, [(f.path, run_dir + f.rel) for f in todo], workers=workers, progress=progress,
                     done=lambda i: result.uploaded.append(todo[i].rel))
        # verify what was staged: the uploaded object's crc32c against the local file's
        fresh = {_rel_in_staging(b.name, staging): b for b in client.list_blobs(bucket, prefix=run_dir)}
    bad = [f.rel for f in todo if f.rel not in fresh or not same_content(f, fresh[f.rel])]
    if bad:
        raise UserError(f"upload of {m.handle} could not be verified: {len(bad)} object(s) in "
                        f"gs://{bucket.name}/{run_dir} differ from the local files (e.g. {bad[0]}); "
                        "nothing was placed in the cache folder, run the same command again", 1)
    sources = {**reusable, **{f.rel: fresh[f.rel] for f in todo}}
    result.reused = sorted(reusable)
    result.skipped = sorted(in_place)

    with google_errors(f"writing {where}"):
        if manifest_blob is not None:
            manifest_blob.delete()                        # from here the folder is detectably incomplete
        for rel, src in sorted(sources.items(), key=lambda kv: (kv[0] == SAVED_MODEL, kv[0])):
            _commit_copy(bucket, src, layout.files[rel])
        placed = {b.name[len(folder):]: b for b in client.list_blobs(bucket, prefix=folder)}
        wrong = [rel for rel, f in local.items() if rel not in placed or not same_content(f, placed[rel])]
        if wrong:
            raise UserError(f"{where} does not hold what was uploaded after the copy ({len(wrong)} object(s), "
                            f"e.g. {wrong[0]}); it stays incomplete, run the same command again", 1)
        bucket.blob(layout.descriptor[0]).upload_from_string(layout.descriptor[1])
        bucket.blob(layout.manifest[0]).upload_from_string(manifest, content_type="application/json")
        result.manifest_written = True
        result.cleaned = _remove_staging(bucket, staging)
    return result


def _remove_staging(bucket, staging_prefix: str) -> int:
    """Delete every staging object of one model (this run's and strays of interrupted runs)."""
    from bootstrap.clients import google_errors

    with google_errors(f"removing gs://{bucket.name}/{staging_prefix}*"):
        blobs = list(bucket.client.list_blobs(bucket, prefix=staging_prefix))
        for b in blobs:
            try:
                b.delete()
            except Exception as exc:
                if type(exc).__name__ != "NotFound":
                    raise
    return len(blobs)


@dataclass
class CacheEntry:
    key: str
    handle: str | None
    files: int
    size: int
    complete: bool
    problem: str | None = None          # why it is incomplete
    staging: int = 0                    # objects of interrupted uploads under .staging/


def _folder_state(bucket, prefix: str, key: str, objects: list,
                  handle: str | None = None) -> tuple[bool, str | None, str | None]:
    """(complete, problem, handle from the manifest) of one ``<sha1>/`` folder from its listed objects."""
    import json

    listed = {}
    manifest_blob = None
    for b in objects:
        rel = b.name[len(prefix) + len(key) + 2:]
        if rel == domain.HUB_MANIFEST:
            manifest_blob = b
        else:
            listed[rel] = (int(b.size or 0), b.crc32c)
    text = _read_manifest(bucket.blob(manifest_blob.name)) if manifest_blob is not None else None
    problem = domain.hub_folder_problem(text, listed, handle)
    found = None
    if text is not None:
        with contextlib.suppress(ValueError):
            found = json.loads(text).get("handle")
    if problem is None and found is not None and domain.hub_cache_key(found) != key:
        problem = f"manifest is for {found!r}, whose sha1 is not {key}"
    return problem is None, problem, found


def list_cache(client, bucket_name: str, prefix: str) -> list[CacheEntry]:
    """Every ``<sha1>/`` folder under ``prefix``: handle, files, size, complete (a valid manifest whose
    files are all there with their size and crc32c) or why not; and staged objects of interrupted uploads."""
    domain.validate_hub_prefix(prefix)
    folders: dict[str, list] = {}
    descriptors: dict[str, str] = {}
    staging: dict[str, int] = {}
    for blob in client.list_blobs(bucket_name, prefix=f"{prefix}/"):
        rest = blob.name[len(prefix) + 1:]
        top, _, inner = rest.partition("/")
        if top == domain.HUB_STAGING:
            key = inner.partition("/")[0].partition("-")[0]
            if domain.is_hub_cache_key(key):
                staging[key] = staging.get(key, 0) + 1
            continue
        if not inner:
            if top.endswith(".descriptor.txt") and domain.is_hub_cache_key(top[: -len(".descriptor.txt")]):
                descriptors[top[: -len(".descriptor.txt")]] = blob.name
            continue
        if domain.is_hub_cache_key(top):
            folders.setdefault(top, []).append(blob)
    bucket = client.bucket(bucket_name)
    out = []
    for key in sorted(set(folders) | set(staging)):
        objects = folders.get(key, [])
        if objects:
            complete, problem, handle = _folder_state(bucket, prefix, key, objects)
        else:
            complete, problem, handle = False, "only an interrupted upload (nothing in the folder yet)", None
        if handle is None and key in descriptors:
            handle = handle_from_descriptor(bucket.blob(descriptors[key]).download_as_text())
        files = [b for b in objects if not b.name.endswith("/" + domain.HUB_MANIFEST)]
        out.append(CacheEntry(key, handle, len(files), sum(int(b.size or 0) for b in files), complete, problem,
                              staging.get(key, 0)))
    return out


@dataclass
class HubStatus:
    handle: str
    complete: bool
    detail: str          # where it is (complete) or what is wrong


def hub_status(client, bucket_name: str, prefix: str, handles: Iterable[str]) -> list[HubStatus]:
    """For each handle: is ``<prefix>/<sha1>/`` complete (doctor's hub check)? Lists only that model's
    folder and staging objects, reads its manifest."""
    domain.validate_hub_prefix(prefix)
    bucket = client.bucket(bucket_name)
    out = []
    for h in handles:
        key = domain.hub_cache_key(h)
        objects = list(client.list_blobs(bucket_name, prefix=domain.hub_folder(prefix, h)))
        staged = sum(1 for _ in client.list_blobs(bucket_name, prefix=domain.hub_staging_prefix(prefix, key)))
        where = f"gs://{bucket_name}/{prefix}/{key}/"
        note = f"; an interrupted upload left {staged} object(s) in {prefix}/{domain.HUB_STAGING}/" if staged else ""
        if not objects:
            out.append(HubStatus(h, False, "not in the cache (no saved_model.pb)" + note))
            continue
        complete, problem, _found = _folder_state(bucket, prefix, key, objects, h)
        out.append(HubStatus(h, True, where) if complete else
                   HubStatus(h, False, f"INCOMPLETE {where}: {problem}{note}"))
    return out


# --------------------------------------------------------------------------------------------
# Local side: fetch into a folder (the Pulumi program's hubCacheSource)
# --------------------------------------------------------------------------------------------

def install_local(m: Materialized, dest_root: Path, created_by: str = "tpuctl hub-cache fetch") -> tuple[Path, bool]:
    """Copy the model's checked files to ``dest_root/<key>/`` atomically (temp folder + rename), with the
    same manifest as in a bucket. Returns (path, replaced)."""
    what = f"--dest {dest_root}"
    try:
        if dest_root.exists() and not dest_root.is_dir():
            raise UserError(f"{what} is a file, not a folder; give a folder for the local hub cache")
        dest_root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"{what}: a parent of it is a file, not a folder") from None
    except OSError as exc:
        raise localtree.os_error(exc, what) from None
    final = dest_root / m.key
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{m.key}.", dir=dest_root))
    except OSError as exc:
        raise localtree.os_error(exc, what) from None
    try:
        model = staging / "model"
        for f in m.files:
            target = model / f.rel
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f.path, target)
            except OSError as exc:
                raise localtree.os_error(exc, f"{what}: {target}") from None
        layout = domain.hub_layout("", m.handle, {f.rel: (f.size, f.crc32c()) for f in m.files}, created_by, _now())
        (model / domain.HUB_MANIFEST).write_text(layout.manifest[1])
        replaced = final.exists()
        if replaced:
            old = dest_root / f".{m.key}.old-{os.getpid()}"
            os.replace(final, old)
            os.replace(model, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(model, final)
        (dest_root / layout.descriptor[0]).write_text(layout.descriptor[1])
        return final, replaced
    finally:
        shutil.rmtree(staging, ignore_errors=True)
