"""The Keras 3 callbacks of a run: the line protocol per epoch and step, the epoch weights, the best epoch (``--export
best``, ``--early_stopping_patience``), the preemption backup (``--backup_every_steps``, ``--backup_every_minutes``,
SIGTERM) and a loss that is no longer a number. The same lines and files as the tf_keras path's (trainer.callbacks),
on either backend.

A run resumed from a backup written at step ``s`` of epoch ``e`` starts ``fit`` at epoch ``e`` (``initial_epoch``) and
cuts that epoch short after its remaining steps: :class:`TrainingLoop` sets ``stop_training`` at the epoch's last step
(``fit`` ends the epoch: validation, ``on_epoch_end``) and clears it again at the epoch's end, so ``fit`` goes on
with the next epoch, on the same input iterator. Keras' loop checks ``stop_training`` after each step and after each
``on_epoch_end`` (keras/src/backend/{jax,tensorflow}/trainer.py, ``fit``).

On JAX, reading ``self.model`` in a callback copies the training state back into the model's variables
(``Callback.model`` calls ``jax_state_sync``): the per-step hooks here read it only when they back up.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import keras

from trainer import protocol
from trainer.callbacks import MONITOR, checkpoint_path, progress_every
from trainer.errors import Diverged, Preempted
from trainer.keras3 import backup
from trainer.summaries import ScalarsLogic


def epoch_weights(dirs, epoch: int) -> str:
    """The weights saved at the end of ``epoch`` (Keras 3 names weights files ``*.weights.h5``)."""
    return checkpoint_path(dirs, epoch) + ".weights.h5"


class TrainingLoop(keras.callbacks.Callback):
    """Everything a run does at its steps' and epochs' ends, in the tf_keras path's order: at an epoch's end the
    epoch's weights (``ckpt-<epoch>.weights.h5``, what ``--export best`` loads), the best epoch so far, the backup
    (which carries both over a preemption), then the ``epoch-end`` line."""

    def __init__(self, run, state: backup.State, *, start_epoch: int, offset: int, preemption: str,
                 save_scratch: bool, reached_sync_point: Callable[[int], bool] | None = None):
        super().__init__()
        self.run, self.state = run, state
        self.cfg, self.spe = run.cfg, run.steps_per_epoch
        self.start_epoch, self.offset = start_epoch, offset
        self.preemption = preemption            # "alone" (SIGTERM handled here) | "cluster" (JAX's sync point) | ""
        self.reached_sync_point = reached_sync_point
        self.save_scratch = save_scratch        # other processes write their copies aside (the reads are collective)
        self.every = progress_every(self.spe)
        self.epoch, self.skipped, self.total = start_epoch, offset, start_epoch * self.spe + offset
        self.cut = False
        self.sigterm = threading.Event()
        self.previous_handler: Any = None
        self.last_backup = time.monotonic()
        self.started = time.monotonic()
        self.best_epoch, self.best_value = state.best_epoch, state.best_value

    # ---------------------------------------------------------------------------------------------- training
    def on_train_begin(self, logs=None):
        if self.preemption == "alone" and threading.current_thread() is threading.main_thread():
            self.previous_handler = signal.signal(signal.SIGTERM, lambda _signum, _frame: self.sigterm.set())

    def on_train_end(self, logs=None):
        self._restore_handler()

    def _restore_handler(self) -> None:
        if self.previous_handler is not None:
            signal.signal(signal.SIGTERM, self.previous_handler)
            self.previous_handler = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.started, self.cut = epoch, time.monotonic(), False
        self.skipped = self.offset if epoch == self.start_epoch else 0
        protocol.emit(protocol.EPOCH_START, (epoch + 1, self.cfg.train_epochs, {}))

    def on_train_batch_end(self, batch, logs=None):
        step = self.skipped + batch            # within the epoch, 0-based
        self.total += 1
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            self._diverged(f"at epoch {self.epoch + 1} step {step + 1}/{self.spe}", f"the loss is {float(loss)}")
        if self.run.info.is_chief and ((step + 1) % self.every == 0 or step + 1 == self.spe):
            protocol.emit(protocol.PROGRESS, (step + 1, self.spe))
        if step + 1 >= self.spe:
            if self.skipped:                    # a resumed epoch: its remaining steps are done
                self._model.stop_training = self.cut = True
            return                              # the epoch's last step: backed up at its end
        if self.sigterm.is_set() or (self.preemption == "cluster" and self.reached_sync_point(self.total)):
            self._backup(self.epoch, step)
            self._restore_handler()
            raise Preempted(self.epoch + 1, step + 1, self.spe)
        every = self.cfg.backup_every_steps
        minutes = self.cfg.backup_every_minutes if self.run.info.num_workers == 1 else 0
        if (every and (step + 1) % every == 0) or (minutes and time.monotonic() - self.last_backup >= minutes * 60):
            self._backup(self.epoch, step)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        if self.cut:                            # the resumed epoch ended: fit goes on with the next one
            self._model.stop_training = False
        for key, value in sorted(logs.items()):
            number = float(value)
            if not math.isfinite(number):
                where = "in validation" if key.startswith("val_") else f"in epoch {epoch + 1}'s training"
                self._diverged(f"at epoch {epoch + 1} ({where})", f"{key} is {number}")
        # every weight, the ones no optimizer trains too (as on the tf_keras path, trainer.callbacks.Divergence)
        for weight in {id(w): w for layer in self._model.layers for w in layer.weights}.values():
            if "float" in str(weight.dtype) and not bool(keras.ops.all(keras.ops.isfinite(weight.value))):
                self._diverged(f"at epoch {epoch + 1}", f"the model's weight {weight.path} is no longer finite")
        self._save(epoch_weights(self.run.dirs, epoch + 1))
        value = logs.get(MONITOR)
        if value is not None and math.isfinite(float(value)) and float(value) > self.best_value:
            self.best_epoch, self.best_value = epoch + 1, float(value)
        patience = self.cfg.early_stopping_patience
        if patience and epoch + 1 - self.best_epoch >= patience and epoch + 1 < self.cfg.train_epochs:
            self._model.stop_training = True
            if self.run.info.is_chief:
                print(f"early stopping: no better {MONITOR} for {patience} epoch(s) after epoch {self.best_epoch} "
                      f"({self.best_value:.4f})", flush=True)
        self._backup(epoch, self.spe - 1)
        seconds = max(time.monotonic() - self.started, 1e-9)
        logs["examples_per_second"] = self.cfg.train_batch_size * (self.spe - self.skipped) / seconds
        logs["learning_rate"] = float(keras.ops.convert_to_numpy(self._model.optimizer.learning_rate))
        protocol.emit(protocol.EPOCH_END, (epoch + 1, self.cfg.train_epochs, dict(logs)))
        if self.sigterm.is_set():
            self._restore_handler()
            raise Preempted(epoch + 1, self.spe, self.spe)

    # ---------------------------------------------------------------------------------------------- writes
    def _save(self, path: str) -> None:
        if self.run.info.is_chief:
            self.model.save_weights(path)
        elif self.save_scratch:
            import shutil
            import tempfile

            scratch = tempfile.mkdtemp(prefix="tpuctl-epoch-")
            try:
                self.model.save_weights(os.path.join(scratch, os.path.basename(path)))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)

    def _backup(self, epoch: int, batch: int) -> None:
        self.state = backup.State(epoch, batch, self.best_epoch, self.best_value)
        if self.run.info.is_chief or self.save_scratch:
            backup.write(self.model, self.run.dirs, self.state, self.spe, keep=self.run.info.is_chief)
        self.last_backup = time.monotonic()

    def _diverged(self, where: str, what: str) -> None:
        """trainer.errors.Diverged (exit 4), as on the tf_keras path: before the epoch's weights or a backup."""
        self._restore_handler()
        raise Diverged(where, what)


class EpochScalars(ScalarsLogic, keras.callbacks.Callback):
    """TensorBoard's epoch scalars and the run's hyperparameters (trainer.summaries), from a Keras 3 run. The
    conceptual graph is left out: TensorBoard's graph plugin reads tf_keras model configs."""

    def _write_graph(self) -> None:
        pass


class StepPause(keras.callbacks.Callback):
    """Test hook (TPUCTL_TRAINER_TEST_STEP_PAUSE): sleep after every training step."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)


class ExitAfterEpoch(keras.callbacks.Callback):
    """Test hook (TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH): a preemption right after that epoch's backup."""

    def __init__(self, epoch: int):
        super().__init__()
        self.exit_epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.exit_epoch:
            print(f"test hook: exiting after epoch {epoch + 1}", flush=True)
            sys.stderr.flush()
            os._exit(75)


def log_batches(model, path: str, first_step: int) -> None:
    """Test hook (TPUCTL_TRAINER_TEST_LOG_BATCHES): before every training step, append ``<step> <fingerprint of the
    batch>`` to ``path`` (the step counted from the backup's; the fingerprint hashes the batch's features and labels,
    as the tf_keras path's hook does, through a host callback from inside the compiled step)."""
    import hashlib

    import numpy as np

    counter = [first_step]

    def write(*arrays) -> None:
        digest = hashlib.blake2b(digest_size=7)
        for array in arrays:
            digest.update(np.ascontiguousarray(np.asarray(array)).tobytes())
        with open(path, "a") as f:
            f.write(f"{counter[0]} {int.from_bytes(digest.digest(), 'big')}\n")
        counter[0] += 1

    train_step = model.train_step
    if keras.backend.backend() == "jax":
        import jax

        def logged(state, data):
            # unordered (ordered effects need one device): the next step waits for this one's logs anyway
            jax.debug.callback(write, *jax.tree_util.tree_leaves((data[0], data[1])))
            return train_step(state, data)
    else:
        import tensorflow as tf

        def logged(data):
            parts = [*tf.nest.flatten(data[0]), data[1]]
            with tf.control_dependencies([tf.py_function(lambda *a: write(*a) or 0, parts, tf.int32)]):
                return train_step(data)

    model.train_step = logged
