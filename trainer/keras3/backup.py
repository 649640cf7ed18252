"""A Keras 3 run's preemption backup: the model's and the optimizer's state (``model.save_weights``: Keras' own
``.weights.h5``, which holds the optimizer's variables and its step counter, so the learning-rate schedule goes on
where it was) and where training stood (``state.json``: the epoch and step backed up, the best epoch so far).

    <checkpoints>/backup/keras3/state.json                 {"epoch", "batch", "best_epoch", "best_value", "weights"}
    <checkpoints>/backup/keras3/weights-<steps>.weights.h5

Keras 3's own ``BackupAndRestore`` resumes at an epoch's start only (it restores ``model._initial_epoch``), which
would train the steps after the backup twice and read the input from the wrong place; this one resumes at the step
(trainer.keras3.callbacks cuts the resumed epoch short). The weights are written first and ``state.json`` replaces
the previous one whole (written aside, then renamed), naming the weights it goes with: a kill in between leaves the
previous backup whole. Only the chief's files are kept; every process writes at the same step (TensorFlow's
synchronised variables are read collectively), the others into a scratch folder.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import tempfile

import tensorflow as tf

from trainer.callbacks import steps_done
from trainer.config import OutputDirs
from trainer.errors import DataError, unreachable_storage
from trainer.export import write_atomically
from trainer.flags import TASK_BOUNDS
from trainer.paths import join_path

STATE_FILE = "state.json"
_MAX_STATE_BYTES = 64 * 1024


def folder(dirs: OutputDirs) -> str:
    return join_path(dirs.checkpoints, "backup", "keras3")


@dataclasses.dataclass
class State:
    """Where training stands: the last epoch and step backed up (0-based; -1: none) and the best epoch so far
    (1-based; 0: none yet) with its validation accuracy."""
    epoch: int = -1
    batch: int = -1
    best_epoch: int = 0
    best_value: float = float("-inf")

    def steps(self, steps_per_epoch: int) -> int:
        return steps_done(self.epoch, self.batch, steps_per_epoch)


def read(dirs: OutputDirs, steps_per_epoch: int) -> tuple[State, str | None]:
    """The backup's state and weights file (``State()``, None without one); one line for a damaged or foreign one,
    its numbers read back within the bounds they were written with."""
    where = folder(dirs)
    path = join_path(where, STATE_FILE)
    fix = "remove that folder to train from the start"
    try:
        if not tf.io.gfile.exists(path):
            return State(), None
        with tf.io.gfile.GFile(path, "r") as f:
            text = f.read(_MAX_STATE_BYTES + 1)
    except tf.errors.OpError as err:
        unreachable = unreachable_storage(err.message, f"read the preemption backup in {where}")
        if unreachable is not None:
            raise unreachable from None
        raise DataError(f"cannot read the preemption backup in {where} ({err.message.strip().splitlines()[0]}); "
                        f"{fix}") from None
    try:
        doc = json.loads(text) if len(text) <= _MAX_STATE_BYTES else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise DataError(f"the preemption backup's {path} is not the trainer's state (damaged, or another tool's); {fix}")
    bounds = {"epoch": TASK_BOUNDS["train_epochs"].high - 1, "batch": steps_per_epoch - 1,
              "best_epoch": TASK_BOUNDS["train_epochs"].high}
    values = {}
    for key, high in bounds.items():
        value = doc.get(key)
        low = 0 if key == "best_epoch" else -1
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise DataError(f"the preemption backup in {where} holds {key} {str(value)[:40]}, not a whole number from "
                            f"{low} to {high:g} (another run's, or damaged); {fix}")
        values[key] = value
    best = doc.get("best_value")
    weights = doc.get("weights")
    if best is not None and (isinstance(best, bool) or not isinstance(best, (int, float)) or not math.isfinite(best)):
        raise DataError(f"the preemption backup in {where} holds best_value {str(best)[:40]}; {fix}")
    if not isinstance(weights, str) or "/" in weights or not weights.endswith(".weights.h5"):
        raise DataError(f"the preemption backup in {where} names no weights file; {fix}")
    if not tf.io.gfile.exists(join_path(where, weights)):
        raise DataError(f"the preemption backup in {where} has no {weights}; {fix}")
    return State(values["epoch"], values["batch"], values["best_epoch"],
                 float("-inf") if best is None else float(best)), join_path(where, weights)


def restore(model, weights: str) -> None:
    """The backed-up weights and optimizer state into ``model`` (its optimizer built first, so its variables exist)."""
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    model.load_weights(weights)


def write(model, dirs: OutputDirs, state: State, steps_per_epoch: int, *, keep: bool) -> None:
    """Back up ``model`` at ``state`` (``keep``: the chief, whose files are the backup; any other process writes at
    the same step into a scratch folder it removes)."""
    name = f"weights-{state.steps(steps_per_epoch)}.weights.h5"
    if not keep:
        scratch = tempfile.mkdtemp(prefix="tpuctl-backup-")
        try:
            model.save_weights(join_path(scratch, name))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    where = folder(dirs)
    tf.io.gfile.makedirs(where)
    model.save_weights(join_path(where, name))
    best = state.best_value if math.isfinite(state.best_value) else None
    write_atomically(join_path(where, STATE_FILE), json.dumps(
        {"epoch": state.epoch, "batch": state.batch, "best_epoch": state.best_epoch, "best_value": best,
         "weights": name}) + "\n")
    for old in tf.io.gfile.glob(join_path(where, "weights-*.weights.h5")):
        if not old.endswith("/" + name):
            tf.io.gfile.remove(old)


def written_at(dirs: OutputDirs) -> float | None:
    """When the backup a resumed run starts from was written (its state file's modification time; None when that
    cannot be read): what trainer.timing measures the time a preemption cost from."""
    path = join_path(folder(dirs), STATE_FILE)
    try:    # TensorFlow's local file system gives whole seconds
        when = tf.io.gfile.stat(path).mtime_nsec / 1e9 if "://" in path else os.stat(path).st_mtime
    except (tf.errors.OpError, OSError):
        return None
    return when if when > 0 else None


def remove(dirs: OutputDirs) -> None:
    """Training completed: the backup goes (as Keras' and tf_keras' BackupAndRestore delete theirs)."""
    where = folder(dirs)
    if tf.io.gfile.exists(where):
        tf.io.gfile.rmtree(where)
