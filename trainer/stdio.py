"""The trainer's standard output, where it reports the run (trainer.protocol: its progress, epoch and completion
lines), kept as the run found it.

Plug-in code runs in the trainer's process and can close or replace it (``os.close(1)``, ``os.dup2(fd, 1)``,
``sys.stdout.close()``): the result could then not be reported, and a file the trainer opened later could take
descriptor 1 and receive its lines. :func:`watched` notes what standard output is when a run starts; :func:`check`
(after each call into plug-in code, and before the completion record) and :func:`lost` (for an error a write raised)
turn a change into one line. A reader of standard output that went away (a broken pipe) is one line too, never a
traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import stat
import sys
from collections.abc import Iterator

from trainer.errors import EXIT_OUTPUT_LOST, TrainerError, UsageError

#: What standard output was when the run started: (the sys.stdout object, (st_dev, st_ino) of descriptor 1 or None).
_WATCHED: tuple[object, tuple[int, int] | None] | None = None


class OutputLost(TrainerError):
    """The process that reads the trainer's standard output went away: nothing the trainer reports reaches anyone."""

    exit_code = EXIT_OUTPUT_LOST


def _identity() -> tuple[int, int] | None:
    try:
        st = os.fstat(1)
    except OSError:
        return None
    return st.st_dev, st.st_ino


@contextlib.contextmanager
def watched() -> Iterator[None]:
    """Standard output as it is now watched for as long as the block runs (a run of the trainer)."""
    global _WATCHED
    previous, _WATCHED = _WATCHED, (sys.stdout, _identity())
    try:
        yield
    finally:
        _WATCHED = previous


def changed() -> str | None:
    """How standard output differs from what :func:`watched` noted ("closed", "replaced"), or None."""
    if _WATCHED is None:
        return None
    stream, identity = _WATCHED
    if sys.stdout is not stream:
        return "replaced"
    if getattr(stream, "closed", False):
        return "closed"
    now = _identity()
    if identity is not None and now != identity:
        return "closed" if now is None else "replaced"
    return None


def _said(how: str, who: str) -> str:
    return (f"{who} {how} the trainer's standard output (sys.stdout, file descriptor 1), where the trainer reports "
            "the run: its result cannot be reported; leave standard output open and in place (write your own output "
            "to a file, or to stderr)")


def check(who: str) -> None:
    """One line (exit 2) when standard output was closed or replaced since the run started; ``who``: the code that
    just ran (``data.py: --dataset data.py:examples``)."""
    how = changed()
    if how is not None:
        _quiet()
        raise UsageError(_said(how, who))


def lost(err: BaseException) -> TrainerError | None:
    """The one line for ``err``, raised by a write to standard output that can no longer be written, or None: a
    descriptor that was closed (or a stream closed) under the trainer, or a reader that went away (a broken pipe)."""
    if isinstance(err, OSError) and err.errno in (errno.EBADF, errno.EPIPE):
        pass
    elif not (isinstance(err, ValueError) and getattr(sys.stdout, "closed", False)):  # a closed stream's ValueError
        return None
    how = changed()
    if how is None and isinstance(err, OSError) and err.errno == errno.EBADF and _identity() is None:
        how = "closed"            # descriptor 1 is closed (the error may be any code's: a bad descriptor of its own)
    if how is not None:
        _quiet()
        return UsageError(_said(how, "your code (--model/--dataset)"))
    if isinstance(err, OSError) and err.errno == errno.EPIPE and _stdout_reader_gone():
        _quiet()
        return OutputLost("the process reading the trainer's standard output went away (a broken pipe): the run's "
                          "result cannot be reported; keep the reader open until the trainer exits")
    return None


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe (or socket) whose reader went away: a broken pipe of the user's own code is
    the user's error, not a reader of the trainer's lines that went away."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return True              # a stream without a descriptor (an in-process test's): only print() writes it
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            return False
        poller = select.poll()          # the write end of a pipe whose reader is gone polls as an error
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _quiet() -> None:
    """Standard output (descriptor 1) pointed at /dev/null: Python writes what is still buffered for it when it
    exits, and that write would fail again (an "Exception ignored" message after the error line)."""
    try:
        if sys.stdout.fileno() != 1:       # a stream of its own (an in-process test's): nothing of the process's
            return
    except (AttributeError, OSError, ValueError):    # no descriptor, or a closed stream (which writes nothing out)
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(null, 1)
    except OSError:
        pass
    finally:
        os.close(null)
