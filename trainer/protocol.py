"""The trainer's line protocol: how trainer processes tell the launching CLI what happened.

One message per stdout line, ``<kind>: <payload>``. Standard library only, so the ops side (the CLI's
process supervisor) parses exactly what the trainer writes: ``tpuctl.services`` imports this module and
nothing else of ``trainer`` (the layers contract in pyproject.toml checks it).

    progress: 120/1797                       data tools, conversion progress
    summary: {"examples": 1797, ...}         data tools, last line on success
    epoch-start: 2/5                         trainer, before each epoch
    epoch-end: 2/5 accuracy=0.9 loss=0.3     trainer, after each epoch
    skipped-records: 3                       trainer, corrupt records skipped (--skip_corrupt)
    tpuctl-result: {"export_dir": ...}       trainer chief, last line on success
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any, TextIO

PROGRESS = "progress"
SUMMARY = "summary"
EPOCH_START = "epoch-start"
EPOCH_END = "epoch-end"
SKIPPED_RECORDS = "skipped-records"
RESULT = "tpuctl-result"
#: The fields of every completion record the trainer prints (trainer.rundir.result_of, on either backend): a record
#: without one of them is no record of this trainer (a launcher refuses it as a finished run).
RESULT_FIELDS = ("export_dir", "val_accuracy", "exported_epoch", "best_epoch", "best_val_accuracy", "last_val_accuracy",
                 "epochs", "stopped_early", "export", "export_name", "model", "source", "strategy", "mixed_precision",
                 "num_workers", "train_examples", "validation_examples", "validation_exact", "skipped_records", "timing",
                 "backend", "keras")
#: Kinds whose payload is one JSON object.
JSON_KINDS = frozenset({SUMMARY, RESULT})
KINDS = frozenset({PROGRESS, SUMMARY, EPOCH_START, EPOCH_END, SKIPPED_RECORDS, RESULT})

#: How the trainer's own lines say a stopped run continues (``preempted:``, a divergence's ``error:``). Launchers
#: that know how their user continues (tpuctl: the same command with --name) put that in its place.
CONTINUE_HINT = "a run in the same --model_dir goes on from there"
#: The line the trainer ends with after a SIGTERM, its backup written (stderr; trainer.errors.Preempted).
PREEMPTED = "preempted: "

_LINE = re.compile(r"^(?P<kind>[a-z-]+):\s?(?P<payload>.*)$")
#: A count in a fraction: ASCII digits, at most 18 (a longer number is no count a process reports; int() of thousands
#: of digits raises, issue 56).
_FRACTION = re.compile(r"^\s*([0-9]{1,18})\s*/\s*([0-9]{1,18})\s*(.*)$")


@dataclass(frozen=True)
class Message:
    kind: str
    payload: Any          # dict for JSON kinds; (done, total) for progress; (i, n, metrics) for epochs; str else


def format_line(kind: str, payload: Any) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown protocol message kind {kind!r}")
    if kind in JSON_KINDS:
        return f"{kind}: {json.dumps(payload, separators=(',', ':'))}"
    if kind == PROGRESS:
        done, total = payload
        return f"{kind}: {done}/{total}"
    if kind in (EPOCH_START, EPOCH_END):
        epoch, epochs, metrics = payload
        tail = " ".join(f"{k}={float(v):.4f}" for k, v in sorted(metrics.items()))
        return f"{kind}: {epoch}/{epochs}" + (f" {tail}" if tail else "")
    return f"{kind}: {payload}"


def emit(kind: str, payload: Any, stream: TextIO | None = None) -> None:
    """Write one message line and flush (the launcher reads lines as they come)."""
    print(format_line(kind, payload), file=stream or sys.stdout, flush=True)


def parse(line: str) -> Message | None:
    """The message on ``line``, or None when it is not a well-formed protocol line."""
    m = _LINE.match(line.rstrip("\n"))
    if not m or m.group("kind") not in KINDS:
        return None
    kind, text = m.group("kind"), m.group("payload")
    if kind in JSON_KINDS:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):      # not JSON, a number past int()'s digits, nested past the stack
            return None
        return Message(kind, value) if isinstance(value, dict) else None
    if kind in (PROGRESS, EPOCH_START, EPOCH_END):
        f = _FRACTION.match(text)
        if not f:
            return None
        done, total, rest = int(f.group(1)), int(f.group(2)), f.group(3)
        if kind == PROGRESS:
            return Message(kind, (done, total)) if not rest.strip() else None
        metrics = {}
        for item in rest.split():
            key, sep, value = item.partition("=")
            try:
                metrics[key] = float(value)
            except ValueError:
                return None
            if not sep:
                return None
        return Message(kind, (done, total, metrics))
    return Message(kind, text.strip())
