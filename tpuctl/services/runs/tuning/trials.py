"""Trials: one table (``TrialRow``, best first) for Vertex AI and local runs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ground.numbers import is_digits


@dataclass(frozen=True)
class TrialRow:
    trial: str
    state: str
    params: dict[str, Any]
    metric: float | None
    export: str | None


def rank(rows: list[TrialRow]) -> list[TrialRow]:
    """Best first: highest val_accuracy; trials without a metric last, in id order."""
    def key(row: TrialRow):
        known = row.metric is not None and math.isfinite(row.metric)
        order = (0, int(row.trial)) if is_digits(row.trial) and len(row.trial) < 20 else (1, row.trial)
        return (0 if known else 1, -(row.metric or 0.0) if known else 0.0, order)
    return sorted(rows, key=key)


def cell_value(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v
