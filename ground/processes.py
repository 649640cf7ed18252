"""Processes found by what they carry (Linux ``/proc``): the processes of a run (``tpuctl.services.strays``) and the
processes a test started (tests/fixtures/procfixtures.py) are the ones whose environment holds a token. Standard
library only: both environments import it, and a test script runs it before anything else is importable."""

from __future__ import annotations

import os
from collections.abc import Iterable


def environment_holds(pid: int, needle: bytes) -> bool:
    """Whether process ``pid``'s environment holds the entry ``needle`` (``VAR=value``); False when it is gone,
    another user's or a zombie."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def carrying(var: str, value: str, *, skip: Iterable[int] = ()) -> list[int]:
    """Processes whose environment has ``var=value`` (this process and ``skip`` left out); [] without /proc."""
    needle = f"{var}={value}".encode()
    ignored = {os.getpid(), *skip}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    return [int(e) for e in entries if e.isascii() and e.isdigit() and int(e) not in ignored
            and environment_holds(int(e), needle)]


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")
