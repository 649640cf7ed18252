"""What `tpuctl train` shows while the trainer runs, rendered from the trainer's line protocol.

On a terminal: one live row (epoch i/N, a step bar, steps done, ETA) under the lines of the epochs done (metrics,
time, examples/s); the row fits the terminal's width (issue 44: below ~170 columns it lost its bar to the previous
epoch's metrics) and goes when the run ends. In a pipe (CI, logs): one plain line per epoch. Either way the
protocol lines and Keras' own lines are not echoed, and TensorFlow's
C++ start-up notices are dropped; ``--verbose`` shows everything as the trainer printed it. A real error from
TensorFlow (a line that is not a known start-up notice) is always shown. Multi-worker runs show the chief's
progress and one line per worker event.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Column

from ground.envs import trainer_python
from tpuctl.commands.options import echo_err, program, show_outcome, shown, tpuctl_program
from tpuctl.services.runs.target import launch
from tpuctl.services.supervisor import write_quietly
from trainer import protocol

#: TensorFlow / XLA / CUDA start-up notices that say nothing about the run (CPU-only machines print the CUDA
#: ones as errors even though nothing is wrong). Matched anywhere in a stderr line.
STARTUP_NOISE = re.compile(
    r"oneDNN custom operations are on|This TensorFlow binary is optimized|rebuild TensorFlow with the "
    r"appropriate compiler flags|Could not find cuda drivers|failed call to cuInit|cuda_executor\.cc|"
    r"Unable to register cu(DNN|FFT|BLAS) factory|computation placer already registered|TF-TRT Warning|"
    r"cuda_(dnn|fft|blas)\.cc|Attempting to register factory|absl::InitializeLog\(\)|WARNING: All log messages "
    r"before absl|external/local_xla/|E0000 00:00|I0000 00:00|W0000 00:00|TF_ENABLE_ONEDNN_OPTS|"
    r"cpu_feature_guard\.cc|port\.cc:\d+\] oneDNN|gpu_device\.cc.*Cannot dlopen|"
    r"Your kernel may have been built without NUMA|successful NUMA node read"
)


@dataclass
class EpochStats:
    epoch: int
    epochs: int
    metrics: dict[str, float]
    seconds: float


@dataclass
class TrainDisplay:
    """Sinks and protocol hook for one run. ``terminal``: live display; else plain lines on ``stream``."""
    terminal: bool
    verbose: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    #: False: no line per epoch (a tuning trial shows its one line, the live bar only while it runs)
    epoch_lines: bool = True
    history: list[EpochStats] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    _epoch_started: float = 0.0
    _progress: Any = None
    _task: Any = None

    # -- the protocol (called from the supervisor's reader threads) --------------------------
    def on_message(self, label: str, message: protocol.Message, at: float | None = None) -> bool:
        """Consume protocol lines (True: not echoed). Only the chief's (or the single trainer's) progress
        drives the display. ``at``: when the line was written (a cloud run's log entry time, epoch seconds), so epochs
        read back later, or in batches, are timed as they ran; None: now."""
        if self.verbose:
            return False
        if label not in ("trainer", "chief"):
            return True
        now = time.monotonic() if at is None else at
        if message.kind == protocol.EPOCH_START:
            epoch, epochs, _ = message.payload
            self._epoch_started = now
            self._start_epoch(epoch, epochs)
        elif message.kind == protocol.PROGRESS:
            done, total = message.payload
            self._step(done, total)
        elif message.kind == protocol.EPOCH_END:
            epoch, epochs, metrics = message.payload
            begin = self._epoch_started or (self.started if at is None else now)
            stats = EpochStats(epoch, epochs, metrics, max(now - begin, 0.0))
            self.history.append(stats)
            self._end_epoch(stats)
        return True

    # -- sinks for the processes' plain lines ------------------------------------------------
    def stdout_sink(self) -> _Sink:
        """The processes' plain stdout (Keras' lines): to stdout, only with --verbose."""
        return _Sink(self, keep=lambda line: self.verbose, target=sys.stdout)

    def stderr_sink(self) -> _Sink:
        """The processes' stderr: everything but TensorFlow's start-up notices (all of it with --verbose)."""
        return _Sink(self, keep=lambda line: self.verbose or not STARTUP_NOISE.search(line))

    def event(self, text: str) -> None:
        """One line for a worker event (started, stopped)."""
        self._print(text)

    # -- rendering -----------------------------------------------------------------------------
    def _print(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            write_quietly(self.stream, text + "\n")

    def _start_epoch(self, epoch: int, epochs: int) -> None:
        if not self.terminal:
            return
        if self._progress is None:

            # Never wrapped or cut: the epoch, the steps done and the ETA; the bar takes what is left. The metrics
            # are the epoch lines printed above the row (the row itself knows only steps).
            fixed = {"no_wrap": True, "overflow": "ignore"}
            self._progress = Progress(TextColumn("{task.description}", table_column=Column(**fixed)),
                                      BarColumn(bar_width=None, table_column=Column(ratio=1, min_width=10)),
                                      MofNCompleteColumn(table_column=Column(**fixed)),
                                      TimeRemainingColumn(table_column=Column(**fixed)),
                                      console=Console(file=self.stream), transient=True, expand=True)
            self._progress.start()
        description = f"epoch {epoch}/{epochs}"
        if self._task is None:
            self._task = self._progress.add_task(description, total=None)
        else:
            self._progress.reset(self._task, total=None, description=description)

    def _step(self, done: int, total: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=done, total=total)

    def _end_epoch(self, stats: EpochStats) -> None:
        text = format_epoch(stats)
        if self._progress is not None and self._task is not None:
            if self.epoch_lines:
                self._progress.console.print(text, markup=False, highlight=False)
        elif self.epoch_lines:
            self._print(text)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class _Sink:
    """A text sink for one stream of every process: whole lines, kept or dropped; kept lines go to ``target``
    (default: the display's stream, above a live display)."""

    def __init__(self, display: TrainDisplay, keep, target: TextIO | None = None):
        self.display, self.keep, self.target = display, keep, target

    def write(self, text: str) -> None:
        for line in text.splitlines():
            if not (line.strip() and self.keep(line)):
                continue
            if self.target is None:
                self.display._print(shown(line))    # a file or class name in a trainer's line: no escapes
            else:
                write_quietly(self.target, line + "\n")

    def flush(self) -> None:
        pass


_ORDER = ("loss", "accuracy", "val_loss", "val_accuracy")


_RATE = "examples_per_second"


def format_epoch(stats: EpochStats) -> str:
    metrics = {k: v for k, v in stats.metrics.items() if k != _RATE}
    shown = [k for k in _ORDER if k in metrics] + sorted(k for k in metrics if k not in _ORDER)
    parts = " ".join(f"{k}={metrics[k]:.4f}" for k in shown)
    rate = stats.metrics.get(_RATE)
    timing = f"{stats.seconds:.1f}s" + (f", {rate:.0f} examples/s" if rate else "")
    return f"epoch {stats.epoch}/{stats.epochs}: {parts} ({timing})"


def summary_lines(result: dict[str, Any] | None, history: list[EpochStats], seconds: float,
                  model_dir: str, run_name: str | None) -> list[str]:
    """The block after a run: best/final metrics, time, export, how to serve it and look at it."""
    lines = ["", "run summary"]
    if history:
        best = max(history, key=lambda s: s.metrics.get("val_accuracy", float("-inf")))
        last = history[-1]
        if "val_accuracy" in best.metrics:
            lines.append(f"  best val_accuracy  {best.metrics['val_accuracy']:.4f} (epoch {best.epoch})")
        lines.append("  final              " + ", ".join(f"{k}={v:.4f}" for k, v in sorted(last.metrics.items())
                                                         if k != _RATE))
    exported, accuracy = (result or {}).get("exported_epoch"), (result or {}).get("val_accuracy")
    if isinstance(exported, int) and isinstance(accuracy, (int, float)):
        which = (result or {}).get("export")
        stopped = ", stopped early" if (result or {}).get("stopped_early") is True else ""
        lines.append(f"  exported           epoch {exported}, val_accuracy {accuracy:.4f}"
                     + (f" (--export {which}{stopped})" if which in ("best", "last") else ""))
    lines.append(f"  time               {seconds:.1f}s")

    # hints as they can be typed here: `tpuctl` only when PATH finds it (scripts/setup.sh links it), else its path
    # (the export's path itself is the `SavedModel:` line on stdout, once)
    tpuctl = tpuctl_program()
    export = (result or {}).get("export_dir")
    if export:
        lines += [f"  serve it           {tpuctl} serve {run_name or export}",
                  f"  try it             {program('saved_model_cli', trainer_python().parent)} show --dir {export} "
                  "--tag_set serve --signature_def serving_default"]
    lines.append(f"  curves             {tpuctl} board {run_name or model_dir}")
    return lines


def follow_cloud_run(target, display: TrainDisplay | None, dry_run: bool = False, started: float | None = None) -> None:
    """A cloud run (``train --target vertex|tpu-vm``, ``tpu attach``): its chief's progress lines, read back from Cloud
    Logging, drive the same live display a local run has, and a run that showed epochs ends with the same run summary
    (its time counted from ``started``: now, or an attached run's first submission)."""
    started = time.time() if started is None else started
    try:
        outcome = launch(target, dry_run=dry_run)
    finally:
        if display is not None:
            display.close()
    if display is not None and display.history and not isinstance(outcome, dict):
        for line in summary_lines(outcome.result, display.history, time.time() - started, outcome.outputs,
                                  outcome.name):
            echo_err(line)
    show_outcome(outcome)
