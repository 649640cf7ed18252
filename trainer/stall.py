"""A training step that does not end stops the run with one line (issue 56: every read of user data is bounded in
time). The first examples have their own deadline before anything is written (trainer.inputs, 300 s); this watches
every training step, on both Keras paths: a dataset whose generator blocks mid-training, a read that stalls, waited
the run for good with nothing said. The watches end with the training loop however it ends (``stop_watches``, in a
``finally`` around ``fit``): a step that raised leaves no watch behind to fire during what follows (a scan of the
records for the corrupt one, the export).

A step blocked inside TensorFlow or JAX cannot be interrupted from Python: the watching thread prints the error line
and ends the process (the run's checkpoints and backup stay; nothing is exported; the launcher lists it failed).
A process's first step traces and compiles (minutes for a large model on a TPU) and fills the shuffle buffer: it
has four times the bound. The time between steps (validation, checkpoints, backups, exports) is not watched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from trainer.errors import DataError, abort

#: A process's first step may take this many times ``--max_step_seconds`` (it compiles, fills the shuffle buffer).
FIRST_STEP_FACTOR = 4


class StepWatch:
    """Watches the training steps of one process: ``started()`` and ``ended()`` around each step (a Keras callback's
    ``on_train_batch_begin``/``on_train_batch_end``); a step that has not ended ``limit`` seconds after it started
    (the process's first: ``FIRST_STEP_FACTOR`` times that) ends the process with ``DataError``'s line and exit code
    (``abort``)."""

    def __init__(self, limit: float, *, clock: Callable[[], float] = time.monotonic,
                 on_stall: Callable[[DataError], None] = abort, poll: float | None = None):
        self.limit, self.clock, self.on_stall = limit, clock, on_stall
        self.poll = poll if poll is not None else min(max(limit / 10, 0.05), 5.0)
        self.steps = 0                       # steps ended in this process
        self.since: float | None = None      # when the watched step started
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread: threading.Thread | None = None

    def started(self) -> None:
        with self.lock:
            self.since = self.clock()
        if self.thread is None:
            self.thread = threading.Thread(target=self._watch, name="tpuctl-step-watch", daemon=True)
            self.thread.start()

    def ended(self) -> None:
        with self.lock:
            self.steps += 1
            self.since = None

    def stop(self) -> None:
        self.done.set()

    def _watch(self) -> None:
        while not self.done.wait(self.poll):
            with self.lock:
                since, step = self.since, self.steps + 1
            limit = self.limit * (FIRST_STEP_FACTOR if step == 1 else 1)
            if since is not None and self.clock() - since > limit:
                self.on_stall(DataError(
                    f"training step {step} of this process has not ended {limit:g} s after it started: the input "
                    "waits on something that does not come (a dataset generator that blocks, a stalled read), or a "
                    "step is slower than --max_step_seconds allows (raise it for steps that slow); the checkpoints "
                    "and the backup are kept"))
                return


#: The watches of this process's training loop (one per ``fit``).
_WATCHES: list[StepWatch] = []


def step_watch(limit: float) -> StepWatch | None:
    """The run's watch of its steps (``--max_step_seconds``; None: 0, off)."""
    if limit <= 0:
        return None
    watch = StepWatch(limit)
    _WATCHES.append(watch)
    return watch


def stop_watches() -> None:
    """Every watch ends (the training loop ended, well or not: Keras calls no ``on_train_end`` after a step raised)."""
    while _WATCHES:
        _WATCHES.pop().stop()


def watch_callback(keras, watch: StepWatch):
    """The Keras callback (of ``keras``: tf_keras or Keras 3) that tells ``watch`` where each training step starts and
    ends; first in a run's callbacks, so a backup or a checkpoint written at a step's end is not counted in it."""

    class StepDeadline(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True     # reads no logs

        def on_train_batch_begin(self, batch, logs=None):
            watch.started()

        def on_train_batch_end(self, batch, logs=None):
            watch.ended()

        def on_train_end(self, logs=None):
            watch.stop()

    return StepDeadline()
