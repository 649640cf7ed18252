"""The Keras callbacks of a training run: the line protocol per epoch and step, the epoch weights, the best epoch
(``--export best``, ``--early_stopping_patience``) and the preemption backup (``--backup_every_steps``,
``--backup_every_minutes``).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time

from trainer import protocol
from trainer.config import OutputDirs, TrainConfig
from trainer.errors import DataError, Diverged, Preempted
from trainer.flags import TASK_BOUNDS
from trainer.paths import join_path
from trainer.stall import step_watch, watch_callback

#: The validation metric that picks the exported epoch (--export best) and drives --early_stopping_patience.
MONITOR = "val_accuracy"


def progress_every(steps_per_epoch: int) -> int:
    """Emit a progress line every this many steps: about every 1 % of the epoch (<= ~100 lines)."""
    return max(1, -(-steps_per_epoch // 100))


def _current_learning_rate(optimizer) -> float:
    """The optimizer's learning rate now (a schedule is evaluated at the current step)."""
    import tf_keras as keras

    rate = optimizer.learning_rate
    if callable(rate):
        rate = rate(optimizer.iterations)
    return float(keras.backend.get_value(rate))


def training_callbacks(keras, cfg: TrainConfig, dirs: OutputDirs, info, steps_per_epoch: int,
                       input_steps: int | None = None, exit_after_epoch: int | None = None):
    """The run's callbacks. ``exit_after_epoch``: the test hook that simulates a preemption right after that epoch's
    backup (``TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH``, read and checked by :func:`trainer.task.check_test_hooks`)."""
    import tensorflow as tf

    from trainer.summaries import EpochScalars, hparams_of

    class EpochLog(keras.callbacks.Callback):
        """One parseable line per epoch boundary (the CLI and the resume test read them); epoch-end also
        carries ``examples_per_second`` = global batch x steps run / the epoch's wall time (an epoch resumed
        from a mid-epoch backup runs only its remaining steps)."""

        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True   # reads no batch logs (parameter servers pass RemoteValues)
            self._started = time.monotonic()
            self._first: int | None = None

        def on_epoch_begin(self, epoch, logs=None):
            self._started = time.monotonic()
            self._first = None
            protocol.emit(protocol.EPOCH_START, (epoch + 1, cfg.train_epochs, {}))

        def on_train_batch_end(self, batch, logs=None):
            # fit gives a step's end the batch index its beginning had (one step per execution)
            if self._first is None:
                self._first = batch

        def on_epoch_end(self, epoch, logs=None):
            seconds = max(time.monotonic() - self._started, 1e-9)
            steps = steps_per_epoch - (self._first or 0)
            # Into Keras' own logs, so the callbacks after this one (EpochScalars: TensorBoard) record them too.
            if logs is not None:
                logs["examples_per_second"] = cfg.train_batch_size * steps / seconds
                logs["learning_rate"] = _current_learning_rate(self.model.optimizer)
            protocol.emit(protocol.EPOCH_END, (epoch + 1, cfg.train_epochs, dict(logs or {})))

    class StepProgress(keras.callbacks.Callback):
        """``progress: <step>/<steps_per_epoch>`` about every 1 % of an epoch and at its last step (chief
        only), for the CLI's live display. With parameter servers, steps are counted when scheduled."""

        def __init__(self):
            super().__init__()
            # tf_keras refuses batch-level callbacks under ParameterServerStrategy unless they accept
            # RemoteValue logs (CallbackList._check_timing / _supports_tf_logs); this one reads no logs.
            self._supports_tf_logs = True
            self._every = progress_every(steps_per_epoch)

        def on_train_batch_end(self, batch, logs=None):
            step = batch + 1
            if step % self._every == 0 or step == steps_per_epoch:
                protocol.emit(protocol.PROGRESS, (step, steps_per_epoch))

    class BestEpoch(keras.callbacks.Callback):
        """Keep ``model.tpuctl_selection`` (trainer.models.Selection) at the epoch with the best validation
        accuracy; with ``--early_stopping_patience N`` stop once N epochs passed without a better one. Runs
        before the backup is written, so a resumed run knows the best epoch and its value (every worker
        sees the same all-reduced logs, so every worker decides the same)."""

        def on_epoch_end(self, epoch, logs=None):
            value = (logs or {}).get(MONITOR)
            if value is None or not math.isfinite(float(value)):
                return
            selection = self.model.tpuctl_selection
            if float(value) > float(keras.backend.get_value(selection.value)):
                selection.value.assign(float(value))
                selection.epoch.assign(epoch + 1)
            best = int(keras.backend.get_value(selection.epoch))
            patience = cfg.early_stopping_patience
            if patience and epoch + 1 - best >= patience and epoch + 1 < cfg.train_epochs:
                self.model.stop_training = True
                if info.is_chief:
                    print(f"early stopping: no better {MONITOR} for {patience} epoch(s) after epoch {best} "
                          f"({float(keras.backend.get_value(selection.value)):.4f})", flush=True)

    class Divergence(keras.callbacks.Callback):
        """A NaN or infinite loss ends the run (trainer.errors.Diverged, exit 4) at the step it shows in, before the
        epoch's checkpoint, the best epoch and the backup see it (first among the callbacks), so nothing diverged is
        exported or backed up. The loss is the epoch's running mean, read one step late: the device is never waited
        for (the step after it is already under way). At each epoch's end every metric, validation's too, is
        checked, and every weight (trainable or not); the trainable weights before each backup too (StepBackup).
        Parameter servers: at epoch ends only (their step logs are values on the workers)."""

        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True
            self._epoch = 0
            self._pending = None          # (epoch, step, the loss tensor) not read yet

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch = epoch

        def _check_pending(self):
            if self._pending is not None:
                epoch, step, loss = self._pending
                self._pending = None
                value = float(keras.backend.get_value(loss))
                if not math.isfinite(value):
                    raise Diverged(f"at epoch {epoch + 1} step {step}/{steps_per_epoch}", f"the loss is {value}")

        def on_train_batch_end(self, batch, logs=None):
            if info.kind == "parameter_server" or not logs or "loss" not in logs:
                return
            self._check_pending()
            self._pending = (self._epoch, batch + 1, logs["loss"])

        def on_epoch_end(self, epoch, logs=None):
            self._check_pending()
            for key, value in sorted((logs or {}).items()):
                number = float(keras.backend.get_value(value))
                if not math.isfinite(number):
                    where = "in validation" if key.startswith("val_") else f"in epoch {epoch + 1}'s training"
                    raise Diverged(f"at epoch {epoch + 1} ({where})", f"{key} is {number}")
            # every weight, the ones no optimizer trains too (a statistic used only when serving, which a loss that
            # masks NaN never shows: a sixth trial exported one whose answers were all NaN as the best epoch)
            import tensorflow as tf

            # the layers' weights (the model also tracks the trainer's own variables: the best epoch's value)
            weights = list({id(w): w for layer in self.model.layers for w in layer.weights
                            if w.dtype.is_floating}.values())
            if weights and not bool(tf.reduce_all([tf.reduce_all(tf.math.is_finite(w)) for w in weights])):
                bad = next(w.name for w in weights if not bool(tf.reduce_all(tf.math.is_finite(w))))
                raise Diverged(f"at epoch {epoch + 1}", f"the model's weight {bad} is no longer finite")

    backup = backup_callback(keras, cfg, dirs, info, steps_per_epoch, input_steps)
    if info.kind == "central_storage":
        # tf_keras lists the strategies it has tested BackupAndRestore with (Mirrored, MultiWorkerMirrored,
        # TPU, ParameterServer); CentralStorage saves through the same tf.train.Checkpoint. Backups are
        # written in tests/trainer/test_strategies.py; a resume under CentralStorage is not tested.
        backup._supported_strategies = (*backup._supported_strategies,
                                        tf.distribute.experimental.CentralStorageStrategy)
    callbacks = [
        # Order at each epoch's end: a diverged epoch stops the run before anything keeps it, then the epoch's
        # weights (ckpt-<epoch>: what --export best loads), the best epoch so far, then the backup that carries both
        # the weights and the best epoch over a preemption.
        Divergence(),
        keras.callbacks.ModelCheckpoint(filepath=checkpoint_path(dirs, "{epoch:04d}"), save_weights_only=True),
        BestEpoch(),
        # All workers pass the same folder: tf_keras keeps the chief's state in backup/chief and gives
        # every other worker its own write folder (backup/workertemp_<id>), all restore from the chief's.
        backup,
        EpochLog(),
    ]
    watch = step_watch(cfg.max_step_seconds) if info.kind != "parameter_server" else None
    if watch is not None:       # (parameter servers: steps are scheduled, not run, where the callbacks are)
        callbacks.insert(0, watch_callback(keras, watch))
    if info.is_chief:
        callbacks.append(StepProgress())
        callbacks.append(EpochScalars(dirs.logs, hparams_of(cfg)))
    if hasattr(backup, "epoch_done"):
        class EpochDone(keras.callbacks.Callback):
            """Last at each epoch's end: a stop asked for during the epoch's last step (StepBackup.epoch_done)."""

            def on_epoch_end(self, epoch, logs=None):
                backup.epoch_done(epoch)

        callbacks.append(EpochDone())
    if exit_after_epoch:
        class ExitAfterEpoch(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                if epoch + 1 == exit_after_epoch:
                    print(f"test hook: exiting after epoch {epoch + 1}", flush=True)
                    sys.stderr.flush()
                    os._exit(75)

        callbacks.append(ExitAfterEpoch())
    return callbacks


#: The counters tf_keras' BackupAndRestore keeps in its checkpoint (WorkerTrainingState: the epoch and the last
#: batch backed up, -1 when unused), as tf.train.Checkpoint names them.
_SAVED_EPOCH = "ckpt_saved_epoch/.ATTRIBUTES/VARIABLE_VALUE"
_SAVED_BATCH = "ckpt_saved_batch/.ATTRIBUTES/VARIABLE_VALUE"


def callback_list(keras, callbacks, *, model, epochs: int, steps: int):
    """The run's callbacks for ``fit`` as a tf_keras CallbackList (with Keras' History, no progress bar: ``fit`` with
    ``verbose=0`` builds the same) whose per-step hooks call only the callbacks that implement them.

    tf_keras calls every callback's ``on_train_batch_begin`` and ``on_train_batch_end`` at every step once any one of
    them implements either, each no-op included, through its timing checks: ~13 us a step for a run's eight
    callbacks (measured 2026-11-27 on benchmarks/plugin_loop.py's model, ~480 us steps: 2.7 % of a step, 26 ms of a
    2,000-step epoch). Here a step costs one call per hook that does something (5 us for the run's four). Epoch, test
    and predict hooks, and the logs each hook receives, are tf_keras' own.
    """
    # tf_keras' own test for a hook left as its no-op (what Callback._implements_train_batch_hooks asks)
    from tf_keras.src.utils.generic_utils import is_default

    class StepHooks(keras.callbacks.CallbackList):
        def __init__(self):
            super().__init__(callbacks, add_history=True, add_progbar=False, model=model, verbose=0, epochs=epochs,
                             steps=steps)
            # A callback that says it has no train-batch hooks (ModelCheckpoint saving per epoch) is not called per
            # step, as in tf_keras; of the others, only the hooks they override (a hook that only forwards to the
            # legacy on_batch_* counts as overridden when that one is).
            takes = [cb for cb in self.callbacks if cb._implements_train_batch_hooks()]
            self._begin = [cb.on_train_batch_begin for cb in takes
                           if not (is_default(cb.on_train_batch_begin) and is_default(cb.on_batch_begin))]
            self._end = [cb.on_train_batch_end for cb in takes
                         if not (is_default(cb.on_train_batch_end) and is_default(cb.on_batch_end))]

        def _call(self, hooks, batch, logs):
            if hooks:
                logs = self._process_logs(logs, is_batch_hook=True)
                for hook in hooks:
                    hook(batch, logs)

        def on_train_batch_begin(self, batch, logs=None):
            self._call(self._begin, batch, logs)

        def on_train_batch_end(self, batch, logs=None):
            self._call(self._end, batch, logs)

    return StepHooks()


def backup_dir(dirs: OutputDirs) -> str:
    return join_path(dirs.checkpoints, "backup")


def steps_done(epoch: int, batch: int, steps_per_epoch: int) -> int:
    """Training steps a backup's counters stand for: ``fit`` resumes at step ``batch + 1`` of ``epoch``
    (0-based), or at the next epoch after its last batch; a backup written in epoch mode (batch -1) ends
    its epoch; none (epoch -1): no step."""
    if epoch < 0:
        return 0
    if batch < 0:
        return (epoch + 1) * steps_per_epoch
    return epoch * steps_per_epoch + batch + 1


def backup_written_at(dirs: OutputDirs) -> float | None:
    """When the preemption backup a resumed run starts from was written (seconds since 1970: its index file's
    modification time, a gs:// object's update time), or None when that cannot be read: what
    trainer.timing measures the time a preemption cost from."""
    import tensorflow as tf

    try:
        path = tf.train.latest_checkpoint(join_path(backup_dir(dirs), "chief"))
        if path is None:
            return None
        if "://" in path:
            when = tf.io.gfile.stat(path + ".index").mtime_nsec / 1e9
        else:      # TensorFlow's local file system gives whole seconds
            when = os.stat(path + ".index").st_mtime
    except (tf.errors.OpError, OSError):
        return None
    return when if when > 0 else None


def backed_up_steps(dirs: OutputDirs, steps_per_epoch: int) -> int:
    """The training steps the preemption backup holds (0 without one), read before anything is built so the
    input can resume where the interrupted run's was. Every worker reads the chief's backup
    (``backup/chief``, the one BackupAndRestore restores on every worker), so all agree."""
    import tensorflow as tf

    from trainer.errors import unreachable_storage

    folder = join_path(backup_dir(dirs), "chief")
    try:
        path = tf.train.latest_checkpoint(folder)
        if path is None:
            return 0
        reader = tf.train.load_checkpoint(path)
        epoch, batch = (reader.get_tensor(_SAVED_EPOCH), reader.get_tensor(_SAVED_BATCH))
    except tf.errors.OpError as err:
        unreachable = unreachable_storage(err.message, f"read the preemption backup in {folder}")
        if unreachable is not None:
            raise unreachable from None
        raise DataError(f"cannot read the preemption backup in {folder} ({err.message.strip().splitlines()[0]}); "
                        "remove that folder to train from the start") from None
    except (ValueError, IndexError, TypeError) as err:   # a truncated data file: the reader's own Python errors
        raise DataError(f"cannot read the preemption backup in {folder} (truncated or damaged: {err}); remove that "
                        "folder to train from the start") from None
    # Read back with the bounds they were written with: whole numbers, -1 (none) up to the epochs a run may have
    # and the steps of this run's epoch (a NaN was a ValueError traceback, 2**62 epochs a resume past the end).
    counters = []
    for name, value, high in (("epoch", epoch, TASK_BOUNDS["train_epochs"].high - 1),
                              ("batch", batch, steps_per_epoch - 1)):
        number = value.item() if hasattr(value, "item") and getattr(value, "ndim", 0) == 0 else value
        if isinstance(number, bool) or not isinstance(number, int) or not -1 <= number <= high:
            raise DataError(f"the preemption backup in {folder} holds {name} {str(value)[:40]}, not a whole number "
                            f"from -1 to {high:g} (another run's, or damaged); remove that folder to train from the "
                            "start")
        counters.append(number)
    return steps_done(counters[0], counters[1], steps_per_epoch)


def backup_callback(keras, cfg: TrainConfig, dirs: OutputDirs, info, steps_per_epoch: int,
                    input_steps: int | None = None):
    """The preemption backup (tf_keras BackupAndRestore) in ``<checkpoints>/backup``: at every epoch's end,
    with ``--backup_every_steps N`` after every N training steps too, and in a one-worker run once
    ``--backup_every_minutes`` (default 10) passed since the last backup.

    BackupAndRestore keeps two counters in its checkpoint, the epoch and the last batch begun, and with an
    integer ``save_freq`` ``fit`` resumes at (epoch, batch + 1): the optimizer's step counter (and so the
    learning-rate schedule) comes back from the same checkpoint, no step is trained twice in the count.
    Step mode is used even without ``--backup_every_steps`` (an epoch-end backup records the epoch's last
    batch), so a backup written either way resumes right under the other setting; a backup from a trainer
    that wrote epoch mode only (batch counter -1) resumes at the next epoch, as it did then. Under
    parameter servers tf_keras counts no batches (steps are scheduled, not run): epoch mode there.

    ``input_steps``: the steps the training input was positioned after (:func:`backed_up_steps`, read before
    the input was built); a restore that disagrees is reported on stderr.

    SIGTERM during fit (a preemption or maintenance notice, a VM's shutdown, tpuctl's stop): the step is backed up
    and training ends with :class:`trainer.errors.Preempted` (exit 143); a run in the same folder continues after
    that step. One process decides alone; MultiWorkerMirrored workers agree on the step through TensorFlow's
    PreemptionCheckpointHandler. Parameter servers and multi-host TPU slices keep SIGTERM's default.
    """
    import tensorflow as tf

    folder = backup_dir(dirs)
    if info.kind == "parameter_server":
        return keras.callbacks.BackupAndRestore(backup_dir=folder)
    every = cfg.backup_every_steps
    # Every worker must back up at the same step (reading synchronised variables is collective), and clocks
    # differ between processes: a time-based backup only where one process decides alone.
    seconds = cfg.backup_every_minutes * 60 if info.num_workers == 1 else 0
    # SIGTERM (a preemption, a maintenance event, the VM's or the supervisor's stop): the step is backed up, then the
    # process ends with EXIT_PREEMPTED. Several workers must agree on the step: TensorFlow's
    # PreemptionCheckpointHandler (through tf_keras' save_before_preemption) does that over the cluster's
    # coordination service; one process decides alone, here. Hosts of a multi-host TPU slice (not testable here) and
    # parameter-server clusters keep SIGTERM's default: the last backup is where they resume.
    agreed = info.kind == "multi_worker" and info.num_workers > 1
    alone = info.num_workers == 1

    class StepBackup(keras.callbacks.BackupAndRestore):
        def __init__(self):
            # save_freq only selects step mode here: the counting is this class's own.
            super().__init__(backup_dir=folder, save_freq=every or steps_per_epoch)
            self._last = time.monotonic()
            self._sigterm = threading.Event()
            self._previous_handler = None

        def _backup(self, epoch, batch):
            # A backup of weights that are no longer finite would be resumed from: the run stops instead, and the last
            # backup, from before, stays.
            weights = [w for w in self.model.trainable_weights if w.dtype.is_floating]
            if weights and not bool(tf.reduce_all([tf.reduce_all(tf.math.is_finite(w)) for w in weights])):
                raise Diverged(f"at epoch {epoch + 1} step {batch + 1}/{steps_per_epoch}",
                               "the model's weights are no longer finite")
            # tf_keras assigns the batch counter at every step's start (a variable write per step); here it is
            # kept in Python and written only into the backup it belongs to.
            self._training_state._ckpt_saved_batch.assign(batch)
            super()._backup(epoch=epoch, batch=batch)
            self._last = time.monotonic()

        if not agreed:
            # tf_keras writes the batch counter at every step's start; here it is written with the backup
            # (_backup). Where TensorFlow's handler saves the checkpoint itself, its counter must be current: the
            # base class's hook stays.
            on_train_batch_begin = keras.callbacks.Callback.on_train_batch_begin

        def _restore(self, logs):
            """tf_keras' restore of the backup, if there is one; a backup another model wrote (another --model, other
            classes or inputs) or one cut short is one line naming the folder, not a traceback after a page of
            TensorFlow's warnings about each value that did not fit."""
            import gc

            import tensorflow as tf

            logger = tf.get_logger()
            level = logger.level
            cause = None
            logger.setLevel("ERROR")
            try:
                try:
                    super().on_train_begin(logs)
                except (ValueError, IndexError, TypeError, KeyError, AssertionError, tf.errors.OpError) as err:
                    text = getattr(err, "message", None) or str(err) or type(err).__name__
                    cause = " ".join(text.split())[:200]
            finally:
                if cause is None:
                    logger.setLevel(level)
            if cause is not None:
                # the failed restore's objects warn about every value they did not use when they are deleted, as late
                # as the process's exit: the run ends on this error, TensorFlow's warnings stay off
                gc.collect()
                raise DataError(f"the preemption backup in {join_path(folder, 'chief')} does not fit this model "
                                f"({cause}): another model's, or cut short; remove that folder to train from the start, "
                                "or train into another --model_dir")

        def _stop(self, epoch: int, batch: int):
            raise Preempted(epoch + 1, batch + 1, steps_per_epoch)

        def on_train_begin(self, logs=None):
            self._restore(logs)
            state = self._training_state
            if agreed:
                # What tf_keras' save_before_preemption sets up (it does only where it finds GCE's metadata server),
                # with the exit this trainer takes: called on every worker once the agreed step is saved (the
                # default exits with 42), it ends fit() and becomes EXIT_PREEMPTED (trainer.errors.run_cli).
                import tensorflow as tf

                def stop():
                    self._stop(self._current_epoch, int(keras.backend.get_value(state._ckpt_saved_batch)))

                handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                    self.model.distribute_strategy.cluster_resolver, state.write_checkpoint_manager,
                    termination_config=tf.distribute.experimental.TerminationConfig(exit_fn=stop))
                handler._read_checkpoint_manager = state.read_checkpoint_manager
                state._enable_save_before_preemption = True
                state.preemption_handler = self.model._preemption_handler = handler
            elif alone and threading.current_thread() is threading.main_thread():
                self._previous_handler = signal.signal(signal.SIGTERM, lambda _signum, _frame: self._sigterm.set())
            if (int(keras.backend.get_value(state._ckpt_saved_batch)) < 0
                    and int(keras.backend.get_value(state._ckpt_saved_epoch)) >= 0):
                # An epoch-mode backup: its epoch was complete.
                state._ckpt_saved_batch.assign(steps_per_epoch - 1)
            restored = steps_done(int(keras.backend.get_value(state._ckpt_saved_epoch)),
                                  int(keras.backend.get_value(state._ckpt_saved_batch)), steps_per_epoch)
            if input_steps is not None and restored != input_steps:
                # The input was positioned from the backup read before fit; a backup that changed since then
                # (another run writing into the same folder) leaves training right but the data position off.
                print(f"warning: the backup restored {restored} training step(s) but the input was positioned "
                      f"after {input_steps}; the data order differs from an uninterrupted run's",
                      file=sys.stderr, flush=True)

        def on_train_end(self, logs=None):
            if self._previous_handler is not None:
                signal.signal(signal.SIGTERM, self._previous_handler)
                self._previous_handler = None
            super().on_train_end(logs)

        def on_train_batch_end(self, batch, logs=None):
            # Keras' own count runs across epochs and restarts at 0 after a resume; the step within the
            # epoch is what a restart resumes from, so count that (a backup at the epoch's last step is
            # left to on_epoch_end, after the epoch's checkpoint and best-epoch bookkeeping).
            if batch + 1 >= steps_per_epoch:
                return      # the epoch's end: backed up in on_epoch_end, stopped (if asked) in epoch_done
            self._agreed_backup()
            if self._sigterm.is_set():
                self._backup(epoch=self._current_epoch, batch=batch)
                self._stop(self._current_epoch, batch)
            due = (every and (batch + 1) % every == 0) or (seconds and time.monotonic() - self._last >= seconds)
            if due:
                self._backup(epoch=self._current_epoch, batch=batch)

        def on_epoch_end(self, epoch, logs=None):
            self._backup(epoch=epoch, batch=steps_per_epoch - 1)

        def epoch_done(self, epoch: int) -> None:
            """After every callback had the epoch's end (its line, its TensorBoard scalars; trainer.callbacks'
            EpochDone): a SIGTERM during the epoch's last step or its validation stops the run here, and the backup
            holds the whole epoch, validated and recorded (it stopped before them, and the resumed run went on at the
            next epoch: that epoch was never validated, logged or a candidate for best). The last step's agreed save
            of a cluster is made here too, for the same reason."""
            self._agreed_backup()
            if self._sigterm.is_set():
                self._stop(epoch, steps_per_epoch - 1)

        def _agreed_backup(self):
            """A MultiWorkerMirrored cluster's step, counted by TensorFlow's PreemptionCheckpointHandler (once per step
            on every worker): at the step the workers agreed on after a SIGTERM, the backup and the stop (exit_fn).
            TensorFlow's save reads a property it deprecated itself: its three-line warning, twice on each worker,
            said nothing to the user."""
            from tensorflow.python.util import deprecation

            with deprecation.silence():
                self._training_state.backup_if_preempted()

    return StepBackup()


def checkpoint_path(dirs: OutputDirs, epoch: int | str) -> str:
    """The weights saved at the end of ``epoch`` (an int, or the ModelCheckpoint pattern)."""
    return join_path(dirs.checkpoints, f"ckpt-{epoch:04d}" if isinstance(epoch, int) else f"ckpt-{epoch}")
