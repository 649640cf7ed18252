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

import time
from typing import Any

from trainer.paths import join_path

#: Under the checkpoints folder (Vertex AI's AIP_CHECKPOINT_DIR when set), next to the preemption backup: it
#: survives a preemption as the backup does.
FIRST_STEP_FILE = "first-step"


def _read_first_step(path: str) -> float | None:
    import tensorflow as tf

    try:
        if not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path, "r") as f:
            value = float(f.read(64).strip())
    except (tf.errors.OpError, ValueError):
        return None
    return value if value > 0 else None


def _write_first_step(folder: str, path: str, when: float) -> None:
    import tensorflow as tf

    try:
        tf.io.gfile.makedirs(folder)   # the epoch's checkpoint makes it later
        with tf.io.gfile.GFile(path, "w") as f:
            f.write(f"{when:.3f}\n")
    except tf.errors.OpError:
        pass   # the run's own first step is still in this process' result; a courtesy, never a failure


def step_timer(keras, checkpoints: str, global_batch: int, restored_steps: int = 0):
    """A Keras callback that times the steps (the chief's); ``timer.timing()`` is the result's ``timing``."""

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True   # reads no logs (so parameter servers' RemoteValues are fine)
            self.file = join_path(checkpoints, FIRST_STEP_FILE)
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
                    _write_first_step(checkpoints, self.file, now)
            if self._last is not None:
                self._span += now - self._last
                self._intervals += 1
            self._last = now

        def timing(self) -> dict[str, Any]:
            step = self._span / self._intervals if self._intervals else None
            return {
                "first_step_at": round(self.run_first_step_at, 3) if self.run_first_step_at else None,
                "process_first_step_at": round(self.first_step_at, 3) if self.first_step_at else None,
                "step_seconds": round(step, 6) if step else None,
                "examples_per_second": round(global_batch / step, 3) if step else None,
                "steps": self.steps,
                "total_steps": restored_steps + self.steps,
            }

    return StepTimer()
