"""An output folder replaced only when the new one is complete, claimed against concurrent writers.

    with atomicdir.replacing(dest, "make_tfrecords: destination", check=check_dest) as out:
        ... write everything into ``out`` ...
    # here ``dest`` is the new output; an earlier one is gone

- The new output is written into ``.<name>.writing`` next to ``dest`` (same folder, so same file system) and
  renamed to ``dest`` only when the block ends normally. If the block raises (a bad input found late, a full
  disk, Ctrl-C, SIGTERM turned into KeyboardInterrupt), the staging folder is removed and ``dest`` (an earlier
  complete output, or nothing) is left exactly as it was.
- ``dest`` is claimed for the whole block by an ``flock`` on ``.<name>.lock`` next to it: a second writer into
  the same folder (another process, or this one) fails at once with one line instead of mixing its files with
  the first's. The kernel drops the lock when a process dies, so a killed run never blocks the next one.
- The swap (``dest`` → ``.<name>.replaced``, staging → ``dest``, the replaced folder removed) runs with SIGINT
  and SIGTERM held back (re-raised right after), so Ctrl-C cannot leave the old output renamed away. Only a
  hard kill (SIGKILL, power loss) in that moment can; the next claim of ``dest`` repairs it: a
  ``.<name>.replaced`` left without ``dest`` is renamed back, one left beside ``dest`` is removed, as is a
  stale ``.<name>.writing``.

Local folders only (``os.rename``); ``dest`` is resolved first, so a symlinked output folder is replaced where it
really is and the link stays. Needs write access to the folder that holds ``dest``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from trainer.errors import DataError

_DEFERRED = (signal.SIGINT, signal.SIGTERM)


def sibling(dest: Path, role: str) -> Path:
    """The hidden path next to ``dest`` for ``role`` (``writing``, ``replaced``, ``lock``)."""
    return dest.parent / f".{dest.name}.{role}"


class Busy(DataError):
    """Another writer holds the folder."""


@contextlib.contextmanager
def _claimed(lock: Path, what: str, dest: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock`` (created, and removed again when released)."""
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise DataError(f"{what} {dest}: cannot create the lock file {lock} "
                            f"({err.strerror or err}); the folder that holds it must be writable") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise Busy(f"{what} {dest} is being written by another run (it holds {lock}); "
                       "wait for it to finish or choose another folder") from None
        # The previous holder removes the file when it is done: a lock on a file no longer at ``lock`` is no lock.
        try:
            same = os.stat(lock, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT/SIGTERM that arrive in the block are delivered after it (main thread; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, _frame: received.append(signum))
                for signum in _DEFERRED}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _repair(dest: Path) -> None:
    """Undo what a hard-killed run left (under the claim): see the module docstring."""
    replaced, writing = sibling(dest, "replaced"), sibling(dest, "writing")
    if replaced.is_dir() and not replaced.is_symlink() and not os.path.lexists(dest):
        os.rename(replaced, dest)
    _remove(replaced)
    _remove(writing)


@contextlib.contextmanager
def replacing(dest: str | Path, what: str, *, check: Callable[[Path], object] | None = None) -> Iterator[Path]:
    """Claim ``dest``, yield an empty staging folder next to it, and swap it in when the block succeeds.

    ``what`` starts every error line (e.g. ``"make_tfrecords: destination"``). ``check(dest)``, if given, runs
    once ``dest`` is claimed and again just before the swap: it raises (a one-line error) when ``dest`` holds
    something that must not be replaced, e.g. files that are not an earlier output of the same tool.
    """
    dest = Path(os.path.realpath(dest))
    parent = dest.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # e.g. a parent is a file, or not writable
        raise DataError(f"{what} {dest}: cannot create {parent} ({err.strerror or err})") from None
    if os.path.lexists(dest) and not dest.is_dir():
        raise DataError(f"{what} {dest} exists and is not a folder")
    writing, replaced = sibling(dest, "writing"), sibling(dest, "replaced")
    with _claimed(sibling(dest, "lock"), what, dest):
        try:
            _repair(dest)
            if check:
                check(dest)
            os.mkdir(writing)
        except OSError as err:
            raise DataError(f"{what} {dest}: cannot create {writing} ({err.strerror or err})") from None
        try:
            yield writing
            if check:
                check(dest)
            with _signals_held():
                existed = dest.exists()
                if existed:
                    os.rename(dest, replaced)
                try:
                    os.rename(writing, dest)
                except OSError as err:
                    if existed:
                        os.rename(replaced, dest)
                    raise DataError(f"{what} {dest}: cannot move the new output into place "
                                    f"({err.strerror or err}); the earlier one is kept") from None
                if existed:
                    with contextlib.suppress(OSError):  # a leftover is removed by the next claim
                        shutil.rmtree(replaced)
        except BaseException:
            with contextlib.suppress(OSError):
                _remove(writing)
            raise

