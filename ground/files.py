"""Reading a small file the user named (an outputs file, a stack config file, a tuning spec, a run record, a data
manifest): one bounded reader, regular files only, every way it can fail one line; the one way a small file is
written (beside it, then swapped in); and the checksums GCS lists for an object, computed over a local file."""

from __future__ import annotations

import base64
import os
import re
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from ground.errors import UserError


def read_head(path: Path, what: str, limit: int, *, folder_hint: str, missing_hint: str,
              error: Callable[[str], Exception] = UserError) -> bytes:
    """The first ``limit + 1`` bytes of the regular file ``path`` (so a caller can tell one that is too big); a
    folder, a missing or unreadable file, a FIFO, device or socket, or a NUL byte in the name is one ``error``
    line naming ``what`` and the path, with a hint. The file is opened non-blocking and checked with ``fstat``
    before a byte is read: a FIFO never blocks, ``/dev/zero`` is never read, and a file swapped after a check
    is still the one checked."""
    source = f"{what} {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{source} does not exist ({missing_hint})") from None
    except OSError as exc:
        raise error(f"cannot read {source}: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte in the name: no OS accepts it
        raise error(f"{what} {str(path)!r}: a path cannot contain a NUL byte") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise error(f"{source} is a folder; {folder_hint}")
        raise error(f"{source} is not a regular file (a FIFO, device or socket); {folder_hint}")
    with os.fdopen(fd, "rb", buffering=0) as handle:
        try:
            chunks, size = [], 0
            while size <= limit:
                chunk = handle.read(limit + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise error(f"cannot read {source}: {exc.strerror or exc}") from None


def read_file(path: Path, what: str, limit: int, *, hint: str, error: Callable[[str], Exception] = UserError) -> bytes:
    """The whole of a regular file the user named, at most ``limit`` bytes: ``read_head``, and a larger file is one
    ``error`` line too (refused by its size, never parsed)."""
    data = read_head(Path(path), what, limit, folder_hint=hint, missing_hint=hint, error=error)
    if len(data) > limit:
        raise error(f"{what} {path} is larger than {limit} bytes; {hint}")
    return data


#: Terminal escape sequences (CSI ``ESC [ … final``, OSC ``ESC ] … BEL|ST``, DCS/SOS/PM/APC ``ESC P|X|^|_ … ST``, any
#: other ``ESC x``) and the characters that are not text on a terminal: C0/C1 controls, DEL, bidirectional overrides.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]?|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[PX^_][^\x1b]*(?:\x1b\\)?|.?)|\x9b[0-?]*[ -/]*[@-~]?",
                      re.DOTALL)
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(value: object, limit: int | None = None) -> str:
    """Text from a file or a server, safe to put on a terminal as one line: escape sequences removed, line breaks
    and tabs as spaces, other control characters dropped; longer than ``limit`` is shortened with an ellipsis."""
    text = _ESCAPES.sub("", str(value))
    text = _CONTROLS.sub(lambda m: " " if m.group() in "\t\n\r" else "", text)
    if limit is not None and len(text) > limit:
        text = text[:max(limit - 1, 0)] + "…"
    return text


def write_atomically(path: Path, content: str | bytes) -> Path:
    """Write ``content`` (text as UTF-8, or bytes) to ``path`` so that a reader sees the old file or the new one,
    never half of one: written beside it under a name no other writer uses (process and thread), then swapped in;
    nothing is left behind when the write fails. The folder is created if needed. The ops side's one file write.
    What is in the way and is not a file (a folder, a FIFO, a socket, a device) is left as it is: one line."""
    check_writable(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"cannot write {path}: a parent of it is a file, not a folder") from None
    tmp = _beside(path, "tmp")
    try:
        tmp.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def check_writable(path: Path) -> None:
    """``path`` may be written as a file (``write_atomically``): nothing is there, or a regular file (a link to
    one); a folder, a FIFO, a socket or a device is one UserError line (checked before any work, by a command that
    writes its result last)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    except ValueError:
        raise UserError(f"{str(path)!r}: a path cannot contain a NUL byte") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        raise UserError(f"{path} is {kind}; give the path of a file to write")
    if mode is None and any(p.exists() and not p.is_dir() for p in path.parents):
        raise UserError(f"cannot write {path}: a parent of it is a file, not a folder")


def replace_folder(new: Path, dest: Path) -> bool:
    """Move the complete folder ``new`` to ``dest`` (the same file system), replacing an earlier ``dest`` whole: a
    reader finds the old folder or the new one, never a mix (for a moment between the two renames, none). The
    earlier one is removed after; if the move fails it is put back. Returns whether there was an earlier one. The
    ops side's one folder swap (the trainer's, with its lock and signal handling, is trainer.atomicdir)."""
    old = _beside(dest, "old") if dest.exists() or dest.is_symlink() else None
    if old is not None:
        os.replace(dest, old)
    try:
        os.replace(new, dest)
    except OSError:
        if old is not None and not os.path.lexists(dest):
            os.replace(old, dest)
        raise
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
    return old is not None


def _beside(path: Path, role: str) -> Path:
    """A hidden name next to ``path`` that no other writer (process, thread) uses."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{role}")


def digest_b64(path: Path, hasher) -> str:
    """Base64 digest of a file, read in 1 MiB chunks (the encoding GCS uses for crc32c and md5Hash)."""
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            hasher.update(chunk)
    return base64.b64encode(hasher.digest()).decode()
