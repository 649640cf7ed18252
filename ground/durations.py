"""Durations as tpuctl prints them: one display form for elapsed and lost time, one exact form for a limit.

``format_duration`` (what a run took, time lost to a preemption): ``42s``, ``10m05s``, ``2h07m``, ``3d04h``,
rounded to the unit shown. ``format_exact`` (a limit the user gave, ``--max-run-time``): every unit kept,
``1h30m``, ``7d``, so the value reads back as it was typed.
"""

from __future__ import annotations

from datetime import timedelta


def format_duration(seconds: float | None) -> str:
    """Elapsed time in at most two units, rounded to the smaller one; ``-`` when unknown."""
    if seconds is None:
        return "-"
    total = int(round(max(0.0, float(seconds))))
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m{total % 60:02d}s"
    total = int(round(total / 60))            # whole minutes from here on
    if total < 24 * 60:
        return f"{total // 60}h{total % 60:02d}m"
    hours = int(round(total / 60))
    return f"{hours // 24}d{hours % 24:02d}h"


def format_exact(value: timedelta) -> str:
    """``timedelta(hours=1, minutes=30)`` -> ``1h30m``: every non-zero unit, nothing rounded."""
    seconds = int(value.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"
