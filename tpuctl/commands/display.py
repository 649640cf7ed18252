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
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Column

from ground.durations import format_duration
from ground.envs import trainer_python
from tpuctl.commands.options import program, shown, tpuctl_program
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
    r"Your kernel may have been built without NUMA|successful NUMA node read|"
    # the rest of TensorFlow's coordination-service error (its first line an E0000 notice) a chief logs at a
    # cluster's stop, when its workers left first: the lines after the stop said "The tasks have crashed"
    r"(^|\] )/job:\w+/replica:\d+/task:\d+\s*$|The tasks have crashed\. Check the task logs|"
    r"The following tasks are unhealthy \(stopped sending heartbeats\)|"
    # a worker's last heartbeat to a chief that has stopped (two lines after a two-worker Ctrl-C, between tpuctl's
    # stop line and its error line): gRPC's account of the refused connection
    r"Additional GRPC error information from remote target|:UNKNOWN:Error received from peer|"
    # a parameter-server chief retraces TensorFlow's own checkpoint saver at every save (two warnings a run, issue
    # 57); a retracing warning about any other function (the user's) is shown
    r"calls to <function MultiDeviceSaver\.save\.<locals>\.tf_function_save at \w+> triggered tf\.function retracing"
)


@dataclass
class EpochStats:
    epoch: int
    epochs: int
    metrics: dict[str, float]
    seconds: float


@dataclass
class TrainDisplay:
    """Sinks and protocol hook for one run. ``terminal``: live display; else plain lines on ``stream``.

    ``resume_hint``: how the user continues this run (``RunSpec.resume_hint``: "run the same command again with --name
    NAME"); the trainer's own lines say it in its words (``--model_dir``), which the display replaces, and the
    ``preempted:`` line of a stop becomes one ``stopped:`` line (one for a whole cluster; the signal tpuctl got is its
    error line's)."""
    terminal: bool
    verbose: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    #: False: no line per epoch (a tuning trial shows its one line, the live bar only while it runs)
    epoch_lines: bool = True
    resume_hint: str | None = None
    history: list[EpochStats] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    _epoch_started: float = 0.0
    _progress: Any = None
    #: the supervisor's reader threads (stdout, stderr) both draw: a line printed while the other thread starts the
    #: live row would land on the row itself (a CI run showed an epoch row and TensorFlow's error on one line)
    _lock: Any = field(default_factory=threading.RLock)
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
        """The processes' stderr: everything but TensorFlow's start-up notices (all of it with --verbose), the trainer's
        resume hints in the user's words (``resume_hint``)."""
        return _Sink(self, keep=lambda line: self.verbose or _ERROR_LINE.match(line) is not None
                     or not STARTUP_NOISE.search(line), rewrite=self._rewrite)

    def _rewrite(self, line: str) -> str | None:
        """A trainer's stderr line as this run's user reads it (None: not shown)."""
        if self.verbose or not self.resume_hint:
            return line
        hint = f"to go on from there, {self.resume_hint}"
        stop = _PREEMPTED.match(line)
        if stop is not None:
            if stop["label"] not in (None, "[chief] "):
                return None             # every worker backs up the same step: the chief's line says it
            return "stopped: " + stop["rest"].replace(protocol.CONTINUE_HINT, hint)
        return line.replace(protocol.CONTINUE_HINT, hint)

    def event(self, text: str) -> None:
        """One line for a worker event (started, stopped)."""
        self._print(text)

    # -- rendering -----------------------------------------------------------------------------
    def _print(self, text: str) -> None:
        with self._lock:
            self._print_unlocked(text)

    def _print_unlocked(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            write_quietly(self.stream, text + "\n")

    def _start_epoch(self, epoch: int, epochs: int) -> None:
        if not self.terminal:
            return
        with self._lock:
            self._start_live(epoch, epochs)

    def _start_live(self, epoch: int, epochs: int) -> None:
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
        with self._lock:
            self._end_epoch_unlocked(stats)

    def _end_epoch_unlocked(self, stats: EpochStats) -> None:
        # on a terminal the line fits its width, wrapped between metrics; in a pipe one line an epoch
        text = format_epoch(stats, self._progress.console.width if self._progress is not None else None)
        if self._progress is not None and self._task is not None:
            if self.epoch_lines:
                self._progress.console.print(text, markup=False, highlight=False)
        elif self.epoch_lines:
            self._print_unlocked(text)

    def close(self) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None


#: A process's own error line (``error: …``, prefixed with its label in a cluster): always shown, even when it quotes
#: what is noise elsewhere (issue 56: a chief's error naming the worker that left, "The following tasks are unhealthy",
#: was dropped and the run ended with no line at all).
_ERROR_LINE = re.compile(r"^(\[[^]]+\] )?error: ")

#: A process's ``preempted:`` line (the trainer's stop after a SIGTERM), prefixed with its label in a cluster.
_PREEMPTED = re.compile(rf"^(?P<label>\[[^]]+\] )?{re.escape(protocol.PREEMPTED)}stopped by \S+; (?P<rest>.*)$")


class _Sink:
    """A text sink for one stream of every process: whole lines, kept or dropped, maybe rewritten; kept lines go to
    ``target`` (default: the display's stream, above a live display)."""

    def __init__(self, display: TrainDisplay, keep, target: TextIO | None = None, rewrite=None):
        self.display, self.keep, self.target, self.rewrite = display, keep, target, rewrite

    def write(self, text: str) -> None:
        for line in text.splitlines():
            if not (line.strip() and self.keep(line)):
                continue
            if self.rewrite is not None:
                line = self.rewrite(line)
                if line is None:
                    continue
            if self.target is None:
                self.display._print(shown(line))    # a file or class name in a trainer's line: no escapes
            else:
                write_quietly(self.target, shown(line) + "\n")   # a program's own output too (a sixth trial)

    def flush(self) -> None:
        pass


_ORDER = ("loss", "accuracy", "val_loss", "val_accuracy")


_RATE = "examples_per_second"


def fill(head: str, items: list[str], width: int | None, sep: str = " ") -> str:
    """``head`` then ``items`` on as many lines as ``width`` needs (None: one line), each continuation indented under
    the first item; an item is never cut (a metric, a name, a path: one that is wider alone keeps its own line)."""
    lines, line = [], head
    for item in items:
        joined = line + (sep if line != head else "") + item
        if width is None or len(joined) <= width or line == head or line.isspace():
            line = joined
        else:
            lines.append(line + sep.rstrip())
            line = " " * len(head) + item
    return "\n".join([*lines, line])


def _metrics(metrics: dict[str, float]) -> list[str]:
    """``name=value`` of an epoch's metrics: loss, accuracy, val_loss, val_accuracy first, then the others by name."""
    metrics = {k: v for k, v in metrics.items() if k != _RATE}
    names = [k for k in _ORDER if k in metrics] + sorted(k for k in metrics if k not in _ORDER)
    return [f"{k}={metrics[k]:.4f}" for k in names]


def format_epoch(stats: EpochStats, width: int | None = None) -> str:
    """An epoch's line: ``epoch i/N: metrics (time, examples/s)``, wrapped between metrics to ``width``."""
    rate = stats.metrics.get(_RATE)
    timing = f"({stats.seconds:.1f}s" + (f", {rate:.0f}\N{NO-BREAK SPACE}examples/s)" if rate else ")")
    return fill(f"epoch {stats.epoch}/{stats.epochs}: ", [*_metrics(stats.metrics), timing], width).replace(
        "\N{NO-BREAK SPACE}", " ")


def _terminal_width() -> int | None:
    """The width of the terminal stderr is (None: a pipe, whose lines are not wrapped)."""
    if not sys.stderr.isatty():
        return None
    import shutil

    return shutil.get_terminal_size().columns


def summary_lines(result: dict[str, Any] | None, history: list[EpochStats], seconds: float,
                  model_dir: str, run_name: str | None, width: int | None = -1,
                  since_first: float | None = None) -> list[str]:
    """The block after a run: best/final metrics, time, export, how to serve it and look at it.

    The run's story is the trainer's result (``best_epoch``, ``epochs``, ``last_val_accuracy``) when it has one: a run
    resumed from its backup trained only its last epochs in this process (``history``), and the best may be an earlier
    one. ``width``: lines wrapped to it between metrics and words (-1: the terminal's; None: not wrapped).
    ``since_first``: a continued run's time since it first started (what ``runs ls`` says), shown with this
    launch's own ``seconds`` (issue 57: the summary said 27.2s of a run ``runs ls`` listed as 57s)."""
    width = _terminal_width() if width == -1 else width
    result = result or {}

    def row(name: str, items: list[str]) -> str:
        return fill(f"  {name:<19}", items, width)

    lines = ["", "run summary"]
    best_epoch, best_value = result.get("best_epoch"), result.get("best_val_accuracy")
    last = history[-1] if history else None
    if isinstance(best_epoch, int) and isinstance(best_value, (int, float)):
        lines.append(row("best val_accuracy", [f"{best_value:.4f}", f"(epoch {best_epoch})"]))
    elif history:
        best = max(history, key=lambda s: s.metrics.get("val_accuracy", float("-inf")))
        if "val_accuracy" in best.metrics:
            lines.append(row("best val_accuracy", [f"{best.metrics['val_accuracy']:.4f}", f"(epoch {best.epoch})"]))
    epochs = result.get("epochs")
    if last is not None:                    # the run's last epoch is this process's last
        metrics = _metrics(last.metrics)
        lines.append(row("final", [f"epoch {last.epoch}:", *(m + "," for m in metrics[:-1]), *metrics[-1:]]))
    elif isinstance(epochs, int) and isinstance(result.get("last_val_accuracy"), (int, float)):
        lines.append(row("final", [f"epoch {epochs}:", f"val_accuracy={result['last_val_accuracy']:.4f}"]))
    exported, accuracy = result.get("exported_epoch"), result.get("val_accuracy")
    if isinstance(exported, int) and isinstance(accuracy, (int, float)):
        which = result.get("export")
        stopped = ", stopped early" if result.get("stopped_early") is True else ""
        lines.append(row("exported", [f"epoch {exported},", f"val_accuracy {accuracy:.4f}",
                                      *([f"(--export {which}{stopped})"] if which in ("best", "last") else [])]))
    resumes = (result.get("timing") or {}).get("resumes") if isinstance(result.get("timing"), dict) else None
    if isinstance(resumes, list) and resumes:
        lines.append(row("resumed", [f"{len(resumes)} time(s) from its backup"]))
    if since_first is not None:
        lines.append(row("time", [format_duration(since_first), "since the run first started",
                                  f"({seconds:.1f}s this time)"]))
    else:
        lines.append(row("time", [f"{seconds:.1f}s"]))

    # hints as they can be typed here: `tpuctl` only when PATH finds it (scripts/setup.sh links it), else its path
    # (the export's path itself is the `SavedModel:` line on stdout, once); a command wider than the terminal goes on
    # the next line after a shell continuation, so it still pastes whole
    tpuctl = tpuctl_program()
    export = result.get("export_dir")
    if export:
        lines += [_command("serve it", [tpuctl, "serve", run_name or export], width),
                  _command("try it", [program("saved_model_cli", trainer_python().parent), "show", "--dir", export,
                                      "--tag_set serve", "--signature_def serving_default"], width)]
    lines.append(_command("curves", [tpuctl, "board", run_name or model_dir], width))
    return [line for block in lines for line in block.split("\n")]


def _command(name: str, words: list[str], width: int | None) -> str:
    """A summary row that is a command: on one line when it fits, else continued (`` \\``, the next lines indented
    by up to four) so it still pastes whole; a word (a path) is never cut."""
    head = f"  {name:<19}"
    one = head + " ".join(words)
    if width is None or len(one) <= width:
        return one
    def indented(word: str) -> str:
        return " " * max(0, min(4, width - len(word) - 2)) + word     # less than 4 if that makes it fit

    # the program's path too wide beside the label: the command starts on the next line
    lines, line = ([], head + words[0]) if len(head) + len(words[0]) + 2 <= width else ([f"  {name}"], indented(words[0]))
    for word in words[1:]:
        if len(line) + 1 + len(word) + 2 <= width:
            line += " " + word
        else:
            lines.append(line + " \\")
            line = indented(word)
    return "\n".join([*lines, line])
