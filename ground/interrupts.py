"""An interrupt is never lost: Ctrl-C (or SIGTERM, which the CLI turns into the same KeyboardInterrupt) that Python
swallowed is raised again at the next turn of the wait loop (:func:`ground.polling.poll`).

Python raises a signal's KeyboardInterrupt in the main thread wherever it is; when that is inside a weakref callback
or a ``__del__`` (the import system's module-lock callback, run when another thread's import drops a lock), the
exception cannot propagate: Python prints "Exception ignored in …" and goes on. Seen: `tpuctl train --target
tpu-vm` kept waiting for its queued resource after Ctrl-C, once in 25 runs beside three CPU-bound processes, while
its log follower thread imported the Cloud Logging client. Such an exception reaches ``sys.unraisablehook``;
:func:`kept` installs a hook that remembers it, and :func:`raise_lost` raises it again.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

_lost: list[str] = []


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """While the block runs, a swallowed KeyboardInterrupt is remembered (and not printed) for :func:`raise_lost`;
    anything else unraisable goes to the hook there was."""
    previous = sys.unraisablehook

    def keep(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _lost.append(str(unraisable.exc_value) or "KeyboardInterrupt")
        else:
            previous(unraisable)

    sys.unraisablehook = keep
    try:
        yield
    finally:
        sys.unraisablehook = previous
        _lost.clear()


def raise_lost() -> None:
    """Raise the KeyboardInterrupt Python swallowed since the last call, if any (once)."""
    if _lost:
        name = _lost[0]
        _lost.clear()
        raise KeyboardInterrupt(name)
