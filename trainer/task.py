"""Train an image classifier on TFRecord shards and export it for TF Serving.

    python -m trainer.task --model_dir DIR --data_dir DIR [--distribution_strategy auto] [--model small_cnn] ...

Three seams: where the data comes from (:func:`trainer.data.make_dataset`), which strategy runs
(:func:`trainer.strategy.resolve_strategy`), what is built in its scope (:func:`trainer.models.build_model`).
On success the chief writes ``<model_dir>/result.json`` and prints ``tpuctl-result: <json>`` as its last
stdout line. Errors: one ``error: …`` line on stderr, exit 2 (input) or 3 (hardware). See docs/trainer.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer import protocol, stdio
from trainer.backends import is_keras3_model, selected
from trainer.callbacks import (
    MONITOR,
    backed_up_steps,
    backup_written_at,
    callback_list,
    checkpoint_path,
    training_callbacks,
)
from trainer.cluster import validate_environment
from trainer.config import (
    OutputDirs,
    TrainConfig,
    parse_args,
)
from trainer.errors import (
    DataError,
    HardwareError,
    Preempted,
    TrainerError,
    UsageError,
    run_cli,
)
from trainer.paths import join_path
from trainer.profiling import not_profiled, profile_callback, worker_label
from trainer.rundir import (  # noqa: F401  (the run folder's lock and report, shared with trainer.keras3)
    LOCK_FILE,
    RESULT_FILE,
    TUNING_METRIC_TAG,
    check_read_back,
    claim_model_dir,
    claim_output,
    export_name,
    report,
    report_tuning_metric,
    result_of,
    resuming_line,
    training_line,
)
from trainer.stall import stop_watches
from trainer.timing import step_timer

# Test-only hooks (documented in docs/trainer.md): dump each worker's final weights so tests can compare replicas
# across processes; log a fingerprint of every batch each worker trains on, so tests can follow the data
# position over a preemption; pause after every step, so a test's signal sent at one step's progress line lands
# within the same epoch however busy the machine is; simulate a preemption after an epoch's backup.
_DUMP_WEIGHTS_ENV = "TPUCTL_TRAINER_TEST_DUMP_WEIGHTS"
_LOG_BATCHES_ENV = "TPUCTL_TRAINER_TEST_LOG_BATCHES"
_STEP_PAUSE_ENV = "TPUCTL_TRAINER_TEST_STEP_PAUSE"
_EXIT_AFTER_EPOCH_ENV = "TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH"
#: The longest pause after a step the hook accepts (seconds): a test's slow-down, not a hang.
MAX_STEP_PAUSE = 10.0


class TrainerTestHooks(NamedTuple):
    step_pause: float | None        # seconds after every step (None: no pause)
    exit_after_epoch: int | None    # the epoch after whose backup the process hard-exits (None: never)


def check_test_hooks(env: Mapping[str, str]) -> TrainerTestHooks:
    """The numeric test hooks, read and checked once, before TensorFlow loads (one line naming the variable, not a
    traceback at the first step or epoch)."""
    exit_after = env.get(_EXIT_AFTER_EPOCH_ENV) or None
    if exit_after is not None and not (exit_after.isascii() and exit_after.isdigit() and int(exit_after) >= 1):
        raise UsageError(f"{_EXIT_AFTER_EPOCH_ENV}={exit_after!r} must be an epoch number (1 or more)")
    pause = env.get(_STEP_PAUSE_ENV) or None
    seconds = None
    if pause is not None:
        try:
            seconds = float(pause)
        except ValueError:
            seconds = float("nan")
        if not 0 < seconds <= MAX_STEP_PAUSE:   # also refuses nan and inf
            raise UsageError(f"{_STEP_PAUSE_ENV}={pause!r} must be a number of seconds above 0 and at most "
                             f"{MAX_STEP_PAUSE:g}")
    return TrainerTestHooks(step_pause=seconds, exit_after_epoch=int(exit_after) if exit_after is not None else None)


def select_export(model, cfg: TrainConfig, dirs: OutputDirs, history, evaluate) -> dict:
    """Put the weights ``--export`` asks for into ``model``; what was chosen, for the result.

    ``best``: the epoch with the highest validation accuracy (``model.tpuctl_selection``, restored from
    the backup after a preemption), loaded from its ``ckpt-<epoch>`` unless it is the last epoch trained.
    ``last``: the weights as training left them. ``evaluate()`` measures the model when this process ran
    no epoch (every epoch was done before a restart) and the last epoch's accuracy is not known.
    """
    import tf_keras as keras

    ran = list(history.epoch)
    last_epoch = ran[-1] + 1 if ran else cfg.train_epochs
    values = history.history.get(MONITOR) or []
    last_value = float(values[-1]) if values else None
    best_epoch = int(keras.backend.get_value(model.tpuctl_selection.epoch))
    best_value = float(keras.backend.get_value(model.tpuctl_selection.value))
    if cfg.export == "best" and best_epoch >= 1:
        if best_epoch != last_epoch:
            model.load_weights(checkpoint_path(dirs, best_epoch))
        exported, value = best_epoch, best_value
    else:
        if last_value is None:
            last_value = float(evaluate())
        exported, value = last_epoch, last_value
    if best_epoch < 1:  # no finite validation accuracy was ever seen
        best_epoch, best_value = exported, value
    return {"val_accuracy": value, "exported_epoch": exported, "best_epoch": best_epoch,
            "best_val_accuracy": best_value, "last_val_accuracy": last_value if last_value is not None else value,
            "epochs": last_epoch, "stopped_early": last_epoch < cfg.train_epochs}


def seed_everything(seed: int) -> None:
    """``--seed``: Python, NumPy and TensorFlow seeded, and TensorFlow's ops made deterministic.

    ``tf.keras.utils.set_random_seed`` seeds ``random``, NumPy and TensorFlow;
    ``tf.config.experimental.enable_op_determinism`` makes every op either deterministic or an error
    (TensorFlow API docs, tf.config.experimental.enable_op_determinism); the input pipeline keeps its
    order when a seed is given (trainer.data.make_dataset). Same seed, same machine, same TensorFlow:
    the same metrics on CPU. Not promised on GPUs/TPUs (some kernels have no deterministic version and
    raise instead, XLA/TPU reductions may differ) nor across workers (docs/trainer.md, "Reproducibility").
    """
    import tensorflow as tf
    import tf_keras as keras

    keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()


def _log_batches(model, path: str) -> None:
    """Test hook: before every training step, append ``<optimizer step> <fingerprint of the batch>`` to ``path``
    (one line per replica; the fingerprint hashes the batch's images and labels)."""
    import tensorflow as tf

    train_step = model.train_step

    def logged(data):
        parts = [*tf.nest.flatten(data[0]), data[1]]
        serialized = tf.strings.join([tf.io.serialize_tensor(t) for t in parts])
        fingerprint = tf.strings.to_hash_bucket_fast(serialized, 2**62)
        tf.print(model.optimizer.iterations, fingerprint, output_stream=f"file://{path}")
        return train_step(data)

    model.train_step = logged


def _step_pause(keras, seconds: float):
    """Test hook: sleep ``seconds`` after every training step (a sleep, not work: the machine stays free)."""
    class StepPause(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            time.sleep(seconds)

    return StepPause()


def _peer_lost(err, own: str | None = None) -> HardwareError:
    """A multi-worker run whose collectives were aborted: a peer died (connection reset) or froze (the
    coordination service saw no heartbeat for ~10 s: it names the task, ``/job:worker/replica:0/task:0``, which the
    line names as TF_CONFIG does, ``worker 0``; ``own``: this process's, left out). One line; BackupAndRestore makes a
    restart resume."""
    text = " ".join((err.message or type(err).__name__).split())
    peers = dict.fromkeys(f"{job} {task}" for job, task in re.findall(r"/job:(\w+)/replica:\d+/task:(\d+)", text))
    peers.pop(own, None)
    marker = "Collective ops is aborted by:"
    if marker in text:
        text = text.split(marker, 1)[1]
    cause = text.strip().split(" The error could be from", 1)[0][:300].rstrip(" .")
    who = f": {', '.join(peers)} stopped answering" if peers else ""
    return HardwareError(f"a peer left the cluster during training{who} (TensorFlow: {cause}); restart every task "
                         "of the job: training resumes from the last backup")


def run(cfg: TrainConfig, environ: Mapping[str, str] | None = None) -> dict | None:
    """Train, export, report. Returns the result dict on the chief, None on other workers."""
    with contextlib.ExitStack() as held:
        return _run(cfg, os.environ if environ is None else environ, held)


def _run(cfg: TrainConfig, env: Mapping[str, str], held: contextlib.ExitStack) -> dict | None:
    validate_environment(env)  # TF_CONFIG, TPU_NAME: one line before TensorFlow even loads
    hooks = check_test_hooks(env)
    dirs = OutputDirs.resolve(cfg.model_dir, env)
    check_read_back(dirs.checkpoints)              # what a resume reads is files, and parses: before any is read
    held.enter_context(selected(cfg.backend))      # KERAS_BACKEND, before anything imports Keras
    if cfg.backend == "jax":                       # Keras 3 on JAX: keras.distribution instead of a tf.distribute strategy
        from trainer.keras3 import engine

        return engine.run_jax(cfg, env, hooks, dirs, held)

    # The strategy comes first: MultiWorkerMirrored must be created before any other TensorFlow op.
    from trainer.strategy import resolve_strategy

    info = resolve_strategy(cfg.distribution_strategy, num_gpus=cfg.num_gpus, environ=env,
                            timeout=cfg.cluster_timeout_seconds, gpu_memory=cfg.gpu_memory,
                            virtual_gpus=cfg.virtual_gpus)

    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    from trainer import data, export, inputs, models, plugin

    if cfg.seed is not None:
        seed_everything(cfg.seed)

    hparams = plugin.parse_hparams(dict(cfg.hparams))
    source = inputs.prepare(cfg, num_workers=info.num_workers, hparams=hparams,
                            on_workers=info.kind == "parameter_server")
    if cfg.resnet_weights and not tf.io.gfile.exists(cfg.resnet_weights):
        raise DataError(f"--resnet_weights {cfg.resnet_weights} does not exist")

    if info.kind == "parameter_server" and cfg.backup_every_steps:
        raise UsageError("--backup_every_steps does not work with parameter servers (tf_keras backs them up at "
                         "each epoch's end only); drop it or pick another --distribution_strategy")
    if info.kind == "tpu":
        # Static per-replica shapes: the global batch must split evenly across TPU cores.
        for flag, size in (("--train_batch_size", cfg.train_batch_size), ("--validation_batch_size", cfg.validation_batch_size)):
            if size % info.num_replicas:
                raise UsageError(f"{flag} {size} must be a multiple of the {info.num_replicas} TPU cores")

    train_examples, val_examples = source.train_examples, source.val_examples
    steps_per_epoch = cfg.steps_per_epoch or max(1, train_examples // cfg.train_batch_size)
    # every validation example once (the last batch padded, the padding weighted 0): data.exact_passes
    validation_steps = data.evaluation_steps(val_examples, cfg.validation_batch_size)
    # A run resumed from a step backup continues its input where the interrupted run's was: the records the
    # backed-up steps consumed (of this worker's stream) are passed over before decoding. Without --seed every
    # pass is shuffled afresh and no order can be repeated: only the place in the current pass is kept, so a
    # resume never reads more than one pass. Parameter servers: epoch backups, and workers take steps as they
    # come, so the input starts over (docs/trainer.md).
    input_steps = skip = None
    if info.kind != "parameter_server":
        input_steps = backed_up_steps(dirs, steps_per_epoch)
        skip = source.records_to_skip(input_steps, cfg.train_batch_size, info, seeded=cfg.seed is not None)
    if info.kind == "parameter_server":
        # Keras fit under ParameterServerStrategy: a DatasetCreator (a dataset function each worker runs
        # itself) and explicit steps (tf_keras data_adapter._ClusterCoordinatorDataHandler; TensorFlow's
        # "Parameter server training" tutorial, "Training with Model.fit"). No auto-sharding happens
        # here: each worker reads every file in its own shuffled order.
        def train_fn(input_context):
            return source.train(input_context.get_per_replica_batch_size(cfg.train_batch_size), workers=1)

        def eval_fn(input_context):     # read at each evaluation, as before validation was kept parsed (not
            # measured under parameter servers, whose workers take validation steps as they come)
            return source.validation(input_context.get_per_replica_batch_size(cfg.validation_batch_size),
                                     keep_parsed=False)

        train_ds = keras.utils.experimental.DatasetCreator(train_fn)
        val_ds = keras.utils.experimental.DatasetCreator(eval_fn)
    else:
        train_ds = source.train(cfg.train_batch_size, skip=skip)
        val_ds = source.validation(cfg.validation_batch_size)
    # Parameter servers: the coordinator hands validation steps to whichever worker is free, each reading its
    # own copy of the stream, so a record may be counted twice and another not at all.
    exact_validation = info.kind != "parameter_server"

    precision = models.set_precision(cfg.mixed_precision, cfg.model, info.kind)
    with info.strategy.scope():
        if cfg.plugin_model:
            model = models.build_plugin_model(cfg, source, hparams, steps_per_epoch=steps_per_epoch)
        else:
            if source.image_size is None:
                raise UsageError(f"--model {cfg.model} is an image model and --dataset {cfg.dataset} yields "
                                 f"features ({', '.join(source.features)}); name your model function too "
                                 "(--model file.py:NAME)")
            model = models.build_model(cfg, len(source.classes), source.image_size, steps_per_epoch=steps_per_epoch)
    if is_keras3_model(model):    # contract v2 on TensorFlow: the Keras 3 engine trains it on this strategy
        from trainer.keras3 import engine

        return engine.train(engine.Run(cfg, env, hooks, dirs, info, source, hparams, steps_per_epoch,
                                       validation_steps, precision), model, held)

    # Every input was checked (flags, data, model); only now is anything written.
    if info.is_chief:
        claim_output(cfg.model_dir, held)

    print(training_line(cfg, info, source, steps_per_epoch=steps_per_epoch, validation_steps=validation_steps,
                        precision=precision, exact=exact_validation, keras="tf_keras"), flush=True)
    if input_steps:
        print(resuming_line(cfg, input_steps, steps_per_epoch, skip), flush=True)
    log_batches = env.get(_LOG_BATCHES_ENV)
    if log_batches:
        os.makedirs(log_batches, exist_ok=True)
        _log_batches(model, os.path.join(log_batches, f"batches-{info.task_type or 'chief'}-{info.task_id}.txt"))
    callbacks = training_callbacks(keras, cfg, dirs, info, steps_per_epoch, input_steps,
                                   exit_after_epoch=hooks.exit_after_epoch)
    if hooks.step_pause:
        callbacks.append(_step_pause(keras, hooks.step_pause))
    timer = None
    if info.is_chief:
        timer = step_timer(keras, dirs.checkpoints, cfg.train_batch_size, input_steps or 0,
                           backup_at=backup_written_at(dirs) if input_steps else None)
    if cfg.profile_steps is not None:   # on every process that runs the training loop (a ps coordinator: its own)
        why_not = not_profiled(info)
        if why_not:
            print(f"warning: no profile from {worker_label(info, env)}: {why_not}", file=sys.stderr, flush=True)
        else:
            callbacks.append(profile_callback(keras, dirs.logs, worker_label(info, env), cfg.profile_steps))
    try:
        try:
            history = model.fit(train_ds, epochs=cfg.train_epochs, steps_per_epoch=steps_per_epoch,
                                validation_data=val_ds, validation_steps=validation_steps,
                                callbacks=callback_list(keras, [*callbacks, *([timer] if timer is not None else [])],
                                                        model=model, epochs=cfg.train_epochs, steps=steps_per_epoch),
                                verbose=0)   # the epoch lines are the trainer's own (EpochLog); Keras' logger cost a step
        finally:
            stop_watches()     # however the loop ended: no watch outlives it (trainer.stall)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
        if cfg.dataset is not None:   # the user's examples (a label out of range, a shape that changed): say so
            message = data.first_line(err.message)
            raise DataError(f"--dataset {cfg.dataset}: reading its examples failed during training: {message}") from None
        problem = None if cfg.skip_corrupt else source.corruption()
        if problem is not None:
            raise problem from None
        raise
    except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
            tf.errors.DeadlineExceededError) as err:
        if info.num_workers <= 1:
            raise
        raise _peer_lost(err, f"{info.task_type} {info.task_id}") from None

    if timer is not None:
        timer.require_training()
    chosen = select_export(model, cfg, dirs, history, lambda: model.evaluate(
        val_ds, steps=validation_steps, verbose=0, return_dict=True)["accuracy"])

    dump = env.get(_DUMP_WEIGHTS_ENV)
    if dump:
        os.makedirs(dump, exist_ok=True)
        name = f"weights-{info.task_type or 'chief'}-{info.task_id}.npz"
        np.savez(os.path.join(dump, name), *model.get_weights())

    name = export_name(cfg, model)
    model_base = join_path(dirs.export_base, name)
    io_device = "/job:localhost" if info.kind == "tpu" else None
    serving = export.Serving(source.classes, source.image_size, source.features, source.named)
    if info.is_chief:
        export_dir = export.export_version(model, model_base, serving, io_device=io_device)
    else:
        # Every worker takes part in saving (synchronised variables are read collectively);
        # only the chief's copy is kept.
        scratch = tempfile.mkdtemp(prefix=f"export-{info.task_type}-{info.task_id}-")
        try:
            export.export_saved_model(model, scratch, serving)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return None

    return report(cfg, env, dirs, result_of(cfg, export_dir=export_dir, export_name=name, chosen=chosen, info=info,
                                            source=source, precision=precision, exact=exact_validation,
                                            keras="tf_keras", timing=timer.timing() if timer is not None else None))


@contextlib.contextmanager
def _ctrl_c_recorded() -> Iterator[list[int]]:
    """Python's own Ctrl-C (KeyboardInterrupt), recording that the signal came: a KeyboardInterrupt without one was
    raised by code (trainer.plugin.failure)."""
    received: list[int] = []
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield received
        return

    def interrupted(signum, frame):
        received.append(signum)
        signal.default_int_handler(signum, frame)

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. The completion record (``result.json``, then the ``tpuctl-result:`` line, the last thing
    printed) exists only for a run that trained and exported: user code that exits, with status 0 too, or raises
    anything is one ``error:`` line naming its file, exit 2."""
    def go():
        cfg = parse_args(argv)
        with stdio.watched():      # standard output as the run found it: plug-in code must leave it so (trainer.stdio)
            return _go(cfg)

    def _go(cfg):
        with _ctrl_c_recorded() as received:
            try:
                result = run(cfg)
            except (TrainerError, Preempted):
                raise
            except BaseException as err:   # the user's code: one line (plugin.failure), else as it was
                from trainer import plugin

                failure = stdio.lost(err) or plugin.failure(err, signalled=bool(received))
                if failure is None:
                    raise
                raise failure from None
        if result is not None:
            stdio.check("your code (--model/--dataset)")     # the record goes where the run's lines went, or nowhere
            sys.stderr.flush()
            try:
                protocol.emit(protocol.RESULT, result)
            except (OSError, ValueError) as err:
                failure = stdio.lost(err)
                if failure is None:
                    raise
                raise failure from None

    return run_cli(go)


if __name__ == "__main__":
    sys.exit(main())
