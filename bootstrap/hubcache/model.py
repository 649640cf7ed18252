"""Getting a TF-Hub model as a checked local folder (download, safe unpack, scan) and the local cache (``fetch``).

tensorflow_hub looks for ``<TFHUB_CACHE_DIR>/<sha1(exact handle)>/`` with ``saved_model.pb`` at its
root; anything else is ignored and it tries to download. A model comes from
``HANDLE?tf-hub-format=compressed`` over HTTP(S) (redirects followed: tfhub.dev now redirects to
Kaggle), or from a local folder / .tar.gz. Archives are validated member by member BEFORE anything
is extracted (no absolute paths, no ``..``, no links leaving the tree, no devices) and unpacked into
a temporary folder, so a bad archive writes nothing where it matters.
"""

from __future__ import annotations

import datetime
import errno
import lzma
import os
import posixpath
import shutil
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cloud.deadlines import TooSlow, deadline_session, given_up
from cloud.errors import unreachable_reason
from cloud.google import crc32c, requests, urllib3_exceptions
from ground import domain, localtree
from ground.errors import UserError
from ground.files import digest_b64, replace_folder, write_atomically
from ground.localtree import scan_tree
from ground.numbers import whole_number

DEFAULT_LOCAL_CACHE = Path(".tpuctl-cache/hub")
DOWNLOAD_TIMEOUT = 60
#: The whole download's deadline (seconds): the per-read timeout above never ends a server that drips a byte every
#: few seconds; a TF-Hub model of a few GB takes minutes on any working link.
DOWNLOAD_DEADLINE = 2 * 3600
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
    url = handle + ("&" if "?" in handle else "?") + "tf-hub-format=compressed"
    deadline = time.monotonic() + DOWNLOAD_DEADLINE
    try:
        # a session whose requests have an overall deadline (cloud.deadlines): a server dripping its headers, or a
        # body slower than its announced length allows, is given up on, not only one silent for DOWNLOAD_TIMEOUT
        with deadline_session() as session, session.get(url, stream=True, allow_redirects=True,
                                                         timeout=DOWNLOAD_TIMEOUT) as resp:
            if resp.status_code >= 400:
                raise UserError(f"downloading {handle} failed: HTTP {resp.status_code} from {resp.url}", 1)
            total = resp.headers.get("Content-Length")
            total = whole_number(total)
            too_big = UserError(f"downloading {handle} stopped: more than {MAX_MODEL_BYTES:,} bytes; a TF-Hub model "
                                "is a few GB at most (check the handle)", 1)
            if total is not None and total > MAX_MODEL_BYTES:
                raise too_big
            if on_total:
                on_total(total)
            written = 0
            with open(dest, "wb") as fh:
                # read1: what one read of the socket brings (at most 1 MiB), so the deadline is checked as bytes
                # come, however slowly (iter_content waits for a whole chunk: 1 MiB of drips)
                while chunk := resp.raw.read1(1 << 20, decode_content=True):
                    written += len(chunk)
                    if written > MAX_MODEL_BYTES:
                        raise too_big
                    if time.monotonic() > deadline:
                        raise UserError(f"downloading {handle} stopped: not finished within "
                                        f"{_duration(DOWNLOAD_DEADLINE)} ({written:,} bytes received; the server "
                                        "sends too slowly, try again later or give --from a local copy)", 1)
                    fh.write(chunk)
                    if progress:
                        progress(len(chunk))
    except (requests.RequestException, urllib3_exceptions.HTTPError, TooSlow) as exc:
        slow = exc if isinstance(exc, TooSlow) else given_up()
        raise UserError(f"downloading {handle} failed: {slow or _download_failure(exc, url)}", 1) from None
    return dest


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds:g} s"


def _download_failure(exc: BaseException, url: str) -> str:
    """What went wrong, in words: ``cannot reach example.com: connection refused``, ``no answer within 60 s``; the
    library's own text (``HTTPConnectionPool(host=…): Max retries exceeded … Caused by …``) only as a last resort."""

    host = urlsplit(getattr(getattr(exc, "request", None), "url", None) or url).netloc
    reason = unreachable_reason(exc)
    if reason is not None:
        return f"cannot reach {host}: {reason}"
    if isinstance(exc, (requests.Timeout, urllib3_exceptions.TimeoutError)):
        return f"{host} sent nothing for {DOWNLOAD_TIMEOUT} s"
    if isinstance(exc, requests.TooManyRedirects):
        return f"too many redirects (last: {host})"
    return f"{type(exc).__name__} from {host}: {localtree.first_line(exc)[:200]}"


def _inside(root: str, path: str) -> bool:
    """Is the normalised archive path ``path`` inside the archive root ``root`` ('' = root)?"""
    norm = posixpath.normpath(path)
    return not (norm == ".." or norm.startswith("../") or posixpath.isabs(norm))


#: The most in-archive links one path is resolved through (Linux's own limit for a path's links).
MAX_LINK_HOPS = 40


def _resolve(path: str, links: dict[str, str], hops: int = 0) -> str | None:
    """The archive path ``path`` with every symbolic link of the archive seen so far (``links``: member name ->
    target) resolved, as the file system will once they are unpacked; None when it leaves the archive or loops."""
    out: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                return None
            out.pop()
            continue
        out.append(part)
        target = links.get("/".join(out))
        if target is not None:
            if hops >= MAX_LINK_HOPS or posixpath.isabs(target) or "\\" in target:
                return None
            resolved = _resolve(posixpath.join(*out[:-1], target) if len(out) > 1 else target, links, hops + 1)
            if resolved is None:
                return None
            out = resolved.split("/") if resolved else []
    return "/".join(out)


def validate_tar_members(members: Iterable[tarfile.TarInfo], source: str) -> list[tarfile.TarInfo]:
    """Reject path traversal, absolute paths, odd segments, links leaving the tree (resolved through the archive's
    own links, in the order they are unpacked), devices. Returns the members."""
    checked = []
    links: dict[str, str] = {}
    for m in members:
        name = m.name
        problem = localtree.path_problem(name)
        if problem == "has an absolute path":
            raise UserError(f"{source}: refusing archive member with an absolute path: {name!r}")
        if problem == "climbs out of the folder" or not _inside("", name):
            raise UserError(f"{source}: refusing archive member that climbs out of the folder: {name!r}")
        if problem:
            raise UserError(f"{source}: refusing archive member {name!r}: it {problem}")
        plain = localtree.strip_dot_prefix(name).rstrip("/")
        folder = posixpath.dirname(plain)
        if _resolve(folder, links) is None:
            raise UserError(f"{source}: refusing archive member {name!r}: it is written through a link of the archive "
                            "that points outside it")
        if m.issym():
            target = m.linkname
            if ("\\" in target or posixpath.isabs(target) or not _inside("", posixpath.join(folder, target))
                    or _resolve(posixpath.join(folder, target) if folder else target, links) is None):
                raise UserError(f"{source}: refusing symlink {name!r} -> {target!r} that points outside the archive")
            links[plain] = target
        elif m.islnk():
            if ("\\" in m.linkname or posixpath.isabs(m.linkname) or not _inside("", m.linkname)
                    or _resolve(m.linkname, links) is None):
                raise UserError(f"{source}: refusing hardlink {name!r} -> {m.linkname!r} that points outside the archive")
        elif not (m.isfile() or m.isdir()):
            raise UserError(f"{source}: refusing special file {name!r} (device, FIFO) in the archive")
        else:
            links.pop(plain, None)       # a later member of the same name replaces an earlier link
        checked.append(m)
    return checked


def safe_extract(archive: Path, dest: Path, source: str | None = None) -> None:
    """Validate every member first, then extract (with tarfile's 'data' filter as a second guard).

    Empty, truncated and non-tar files are one line: tarfile, gzip, zlib, lzma and bz2 each signal a
    damaged stream their own way (ReadError, EOFError, zlib.error, LZMAError, OSError)."""

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
    except tarfile.FilterError as exc:    # the second guard (tarfile's 'data' filter) found what the first missed
        member = getattr(getattr(exc, "tarinfo", None), "name", "?")
        link = getattr(getattr(exc, "tarinfo", None), "linkname", "")
        raise UserError(f"{source}: refusing {member!r}" + (f" -> {link!r}" if link else "")
                        + f": {type(exc).__name__.removesuffix('Error')} (unpacked, it would leave the archive's "
                        "folder)") from None
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
            self._crc = digest_b64(self.path, crc32c.Checksum())
        return self._crc


def scan_folder(root: Path, source: str) -> list[LocalFile]:
    """Every file of the model folder ``root`` (``localtree.scan_tree``'s rules), with saved_model.pb at its top."""
    out = [LocalFile(f.path, f.rel, f.size) for f in scan_tree(root, source, max_entries=MAX_MODEL_FILES)]
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
        path = localtree.user_path(src, "hub model source")
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


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


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
        layout = domain.hub_layout("", m.handle, {f.rel: (f.size, f.crc32c()) for f in m.files}, created_by, utc_now())
        write_atomically(model / domain.HUB_MANIFEST, layout.manifest[1])
        replaced = replace_folder(model, final)
        write_atomically(dest_root / layout.descriptor[0], layout.descriptor[1])
        return final, replaced
    finally:
        shutil.rmtree(staging, ignore_errors=True)
