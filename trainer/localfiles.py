"""The trainer's one bounded reader of local files: a data manifest, a hub cache's manifest, and the check of a
TFRecord shard before TensorFlow streams it. The ops side's rules (``ground.files``), here for the trainer, which
ships alone: regular files only (a FIFO is opened non-blocking and never read, a device is never read, a link is
judged by what it points at), a size cap for what is read whole, every failure one ``DataError`` line naming the
file. Standard library only; a ``gs://`` object is not a local file (``is_local`` says so, its readers use
``tf.io.gfile``, where an object is always a regular blob)."""

from __future__ import annotations

import os
import re
import stat

from trainer.errors import DataError

#: A URL such as gs://bucket/x (TensorFlow's file systems); anything else is a local path.
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_local(path: str) -> bool:
    return not _URL_RE.match(str(path))


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse(path: str, what: str, reason: str, hint: str) -> DataError:
    return DataError(f"{what} {path} is {reason}, not a regular file; {hint}")


def regular_size(path: str, what: str, *, hint: str) -> int:
    """The size of the local regular file ``path`` (a link followed); a FIFO, device, socket or folder is one
    ``DataError`` line naming ``what``, the path and its kind. Nothing is opened, so nothing can block."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise DataError(f"{what} {path} is missing; {hint}") from None
    except OSError as err:
        raise DataError(f"cannot read {what} {path}: {err.strerror or err}; {hint}") from None
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(path, what, _kind(info.st_mode), hint)
    return info.st_size


def read_small(path: str, what: str, limit: int, *, hint: str) -> bytes:
    """The whole of the local regular file ``path``, at most ``limit`` bytes: opened non-blocking and checked with
    ``fstat`` before a byte is read (a FIFO never blocks, ``/dev/zero`` is never read, a file swapped after the
    check is still the one checked); a larger file is refused by its size, never read past ``limit + 1`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise DataError(f"{what} {path} is missing; {hint}") from None
    except (OSError, ValueError) as err:
        raise DataError(f"cannot read {what} {path}: {getattr(err, 'strerror', None) or err}; {hint}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):          # before fdopen, which raises on a folder (issue 56, a fresh trial)
        os.close(fd)
        raise _refuse(path, what, _kind(mode), hint)
    with os.fdopen(fd, "rb", buffering=0) as handle:
        chunks, size = [], 0
        try:
            while size <= limit:
                chunk = handle.read(limit + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as err:
            raise DataError(f"cannot read {what} {path}: {err.strerror or err}; {hint}") from None
    if size > limit:
        raise DataError(f"{what} {path} is larger than {limit} bytes; {hint}")
    return b"".join(chunks)
