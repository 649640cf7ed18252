"""Durations as tpuctl reads and prints them: one way to read a limit the user gives, one display form for elapsed
and lost time, one exact form for a limit.

``parse_duration`` (``--max-run-time 1h30m``, ``--max-wait 90m``): ``90m``, ``2h``, ``1h30m``, ``3d``, ``3600s`` or
bare seconds, within bounds. ``format_duration`` (what a run took, time lost to a preemption): ``42s``, ``10m05s``,
``2h07m``, ``3d04h``, rounded to the unit shown. ``format_exact`` (a limit the user gave): every unit kept,
``1h30m``, ``7d``, so the value reads back as it was typed.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from ground.errors import UserError

#: ASCII digits only: `\d` took "١h" (an Arabic-Indic one) for 1h (issue 56, ground.numbers' rule)
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([dhms])")
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str, flag: str, low: timedelta, high: timedelta, why: str = "") -> timedelta:
    """``text`` as a duration from ``low`` to ``high``; one UserError naming ``flag`` otherwise (``why``: where the
    bounds come from)."""
    raw = str(text).strip().lower()
    shown = str(text)[:40]
    if re.fullmatch(r"[0-9]+", raw):
        seconds = float(raw)
    else:
        pos, seconds = 0, 0.0
        for m in _DURATION.finditer(raw):
            if m.start() != pos:
                break
            seconds += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if not raw or pos != len(raw):
            raise UserError(f"{flag} {shown!r}: expected a duration like 90m, 2h, 1h30m or 3d")
    span = f"{format_exact(low)} to {format_exact(high)}" + (f" ({why})" if why else "")
    # checked before a timedelta is built: 99999999999999999999d is past what timedelta holds (OverflowError)
    if not math.isfinite(seconds) or not low.total_seconds() <= seconds <= high.total_seconds():
        raise UserError(f"{flag} {shown!r} is out of range: {span}")
    return timedelta(seconds=seconds)


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
