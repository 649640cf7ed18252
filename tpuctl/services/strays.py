"""Processes a run's programs left behind: found by a token in their environment and ended with the run.

Every process of a local run (a trainer worker, a ``--command`` program, a plug-in's own children) is started in a
process group the supervisor signals; a child that detaches with ``setsid`` (a new session, a daemon's double fork)
leaves that group and would outlive the run. Each run gives its processes ``TPUCTL_RUN_TOKEN`` (a random token) in
their environment, which every descendant inherits wherever it is re-parented; when the run ends, whatever still
carries the token is stopped (SIGTERM, SIGKILL after a grace period).

The limits: the processes are found in ``/proc`` (Linux); elsewhere none is found. A process that clears its
environment (``env -i``, ``execve`` with an environment of its own) does not carry the token and is not found.
"""

from __future__ import annotations

import os
import secrets
import signal
from contextlib import suppress

from ground import processes
from ground.polling import wait_until

#: The variable every process of a run inherits.
TOKEN_VARIABLE = "TPUCTL_RUN_TOKEN"
#: How long a stray process gets between SIGTERM and SIGKILL.
GRACE_SECONDS = 3.0
#: How long the processes carrying the token are looked for again after SIGKILL (a stray may fork while it is being
#: stopped).
KILL_SECONDS = 1.0


def new_token() -> str:
    return secrets.token_hex(16)


def carrying(token: str) -> list[int]:
    """The running processes (not this one) whose environment holds ``TOKEN_VARIABLE=token``; [] without /proc."""
    return [pid for pid in processes.carrying(TOKEN_VARIABLE, token) if processes.alive(pid)]


def _signal(pid: int, sig: int, needle: bytes) -> None:
    """``sig`` to ``pid`` if it still carries the token: through a pidfd where there is one, so a pid reused by an
    unrelated process after the check is never signalled."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        if not processes.environment_holds(pid, needle):
            return
        with suppress(ProcessLookupError, PermissionError):
            if fd is not None:
                signal.pidfd_send_signal(fd, sig)
            else:
                os.kill(pid, sig)
    finally:
        if fd is not None:
            os.close(fd)


def end(token: str, grace: float = GRACE_SECONDS) -> int:
    """Stop every process that carries ``token``: SIGTERM, then SIGKILL for what is left after ``grace`` s; looked
    for again until none is left (for at most ``KILL_SECONDS``). Returns how many there were at first."""
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    first = carrying(token)
    if not first:
        return 0
    for pid in first:
        _signal(pid, signal.SIGTERM, needle)
    wait_until(lambda: not any(processes.alive(pid) for pid in first), timeout=grace, interval=0.05)

    def none_left() -> bool:       # SIGKILL for every process still carrying it, looked for again each round
        left = carrying(token)
        for pid in left:
            _signal(pid, signal.SIGKILL, needle)
        return not left

    wait_until(none_left, timeout=KILL_SECONDS, interval=0.05)
    return len(first)
