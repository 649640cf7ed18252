"""When a run took its first training step and how fast its steps were: the ``timing`` of ``result.json``, from which
`tpuctl runs show` works out the time to first step, the steady step time and the goodput the same way for every
target (local processes, a Vertex AI job, a TPU VM slice).

    "timing": {"first_step_at": 1764213120.5,    the run's first training step ended (seconds since 1970; a run
                                                resumed from its backup keeps its first process's, from
                                                <checkpoints>/first-step)
               "process_first_step_at": ...,    this trainer process's first step (after a resume: its own)
               "step_seconds": 0.0123,          steady step time: the mean time between two consecutive steps'
                                                ends within an epoch (no first step, no validation)
               "examples_per_second": 5203.2,   global batch / step_seconds
               "steps": 120,                    steps this process trained
               "total_steps": 225}              steps the exported model has had in all (the backup's included)

Measured on the chief. Wall-clock times come from the host's clock (NTP-synchronised on Google's VMs).
"""

from __future__ import annotations

import json
import time
from typing import Any

from trainer.paths import join_path

#: Under the checkpoints folder (Vertex AI's AIP_CHECKPOINT_DIR when set), next to the preemption backup: they
#: survive a preemption as the backup does.
FIRST_STEP_FILE = "first-step"
RESUMES_FILE = "resumes.json"
#: The resumes a run keeps (the newest), and the bytes of the file read back.
MAX_RESUMES = 1000
_MAX_RESUMES_BYTES = 256 * 1024


def _read_courtesy(path: str, limit: int) -> str | None:
    """A courtesy file's text (the first step's time, the resumes), None when it is missing or unreadable: these
    records help the run's report and are never a failure."""
    import tensorflow as tf

    try:
        if not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path, "r") as f:
            return f.read(limit)
    except tf.errors.OpError:
        return None


def _write_courtesy(folder: str, path: str, text: str | None) -> None:
    """Write a courtesy file (None: remove it, a fresh run's start); a failure is ignored (this process' own
    figures are still in its result)."""
    import tensorflow as tf

    try:
        if text is None:
            if tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)
            return
        tf.io.gfile.makedirs(folder)   # before the first checkpoint the folder may not exist yet
        with tf.io.gfile.GFile(path, "w") as f:
            f.write(text)
    except tf.errors.OpError:
        pass


def _read_first_step(path: str) -> float | None:
    try:
        value = float((_read_courtesy(path, 64) or "").strip())
    except ValueError:
        return None
    return value if value > 0 else None


def _read_resumes(path: str) -> list[dict[str, Any]]:
    """The run's earlier resumes (``resumes.json``); [] when there is none or it is not a list of them."""
    try:
        data = json.loads(_read_courtesy(path, _MAX_RESUMES_BYTES) or "[]")
    except ValueError:
        return []
    keys = {"from_step": int, "backup_at": (float, type(None)), "resumed_at": float, "seconds_lost": (float, type(None))}
    if not isinstance(data, list):
        return []
    return [e for e in data[-MAX_RESUMES:] if isinstance(e, dict) and set(e) == set(keys)
            and all(isinstance(e[k], t) and not isinstance(e[k], bool) for k, t in keys.items())]


def step_timer(keras, checkpoints: str, global_batch: int, restored_steps: int = 0, backup_at: float | None = None):
    """A Keras callback that times the steps (the chief's); ``timer.timing()`` is the result's ``timing``.
    ``restored_steps``: the steps the preemption backup held (0: a fresh start); ``backup_at``: when that backup was
    written (trainer.callbacks.backup_written_at)."""

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True   # reads no logs (so parameter servers' RemoteValues are fine)
            self.file = join_path(checkpoints, FIRST_STEP_FILE)
            self.resumes_file = join_path(checkpoints, RESUMES_FILE)
            self.resumes: list[dict[str, Any]] = []
            self.first_step_at: float | None = None
            self.run_first_step_at: float | None = None
            self.steps = 0
            self._last: float | None = None
            self._span = 0.0        # seconds between consecutive step ends within epochs
            self._intervals = 0

        def on_epoch_begin(self, epoch, logs=None):
            self._last = None       # the first step of an epoch follows validation and set-up: not steady

        def on_train_batch_end(self, batch, logs=None):
            now = time.time()
            self.steps += 1
            if self.first_step_at is None:
                self.first_step_at = now
                # A run resumed from its backup keeps the first step of its first process; a fresh one (nothing
                # restored: a new run, or a second run in a finished run's folder) starts the record anew.
                earlier = _read_first_step(self.file) if restored_steps else None
                self.run_first_step_at = earlier if earlier is not None and earlier <= now else now
                if earlier is None:
                    _write_courtesy(checkpoints, self.file, f"{now:.3f}\n")
                self._record_resume(now)
            if self._last is not None:
                self._span += now - self._last
                self._intervals += 1
            self._last = now

        def _record_resume(self, now: float) -> None:
            """A resumed process adds its resume to the run's; a fresh start begins the list anew."""
            if not restored_steps:
                _write_courtesy(checkpoints, self.resumes_file, None)
                return
            known = backup_at is not None and backup_at <= now
            self.resumes = [*_read_resumes(self.resumes_file), {
                "from_step": restored_steps, "backup_at": round(backup_at, 3) if known else None,
                "resumed_at": round(now, 3), "seconds_lost": round(now - backup_at, 1) if known else None}]
            _write_courtesy(checkpoints, self.resumes_file, json.dumps(self.resumes[-MAX_RESUMES:]) + "\n")

        def require_training(self) -> None:
            """The run trained: a step ran in this process or before its backup (issue 56, a fresh trial: a plug-in
            that replaced Model.fit with a function returning a made-up history had its model exported as the best
            at 0.99, with 0 steps recorded). One line, exit 2, nothing exported."""
            if restored_steps + self.steps == 0:
                from trainer.errors import UsageError

                raise UsageError("the model trained no step: Model.fit returned without running a single batch (a "
                                 "plug-in that replaces fit or its loop?); nothing is exported")

        def timing(self) -> dict[str, Any]:
            step = self._span / self._intervals if self._intervals else None
            return {
                "first_step_at": round(self.run_first_step_at, 3) if self.run_first_step_at else None,
                "process_first_step_at": round(self.first_step_at, 3) if self.first_step_at else None,
                "step_seconds": round(step, 6) if step else None,
                "examples_per_second": round(global_batch / step, 3) if step else None,
                "steps": self.steps,
                "total_steps": restored_steps + self.steps,
                "resumes": self.resumes[-MAX_RESUMES:],
            }

    return StepTimer()
