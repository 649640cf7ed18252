"""A Keras 3 run, from its model to its result: on TensorFlow (``train``, called by trainer.task once a plug-in's
function returned a Keras 3 model, on the strategy trainer.strategy chose) or on JAX (``run_jax``: the cluster,
keras.distribution, the input and the model, then ``train``).

The same run as the tf_keras path's (trainer.task), step for step: every input checked before anything is written,
tf.data input positioned after the backed-up steps, the ``training:``/``resuming:`` lines, the line protocol, step
backups and SIGTERM (trainer.keras3.callbacks, trainer.keras3.backup), ``--export best|last`` with today's serving
signature (trainer.keras3.export), TensorBoard scalars and HParams, timing, profiles, the tuning metric and
``result.json`` (trainer.rundir) with ``"backend"`` and ``"keras": "keras3"``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from trainer import data, export, inputs, plugin, rundir
from trainer import models as tf_keras_models
from trainer.callbacks import MONITOR
from trainer.config import OutputDirs, TrainConfig
from trainer.errors import DataError, UsageError
from trainer.flags import TF_KERAS_ONLY
from trainer.keras3 import backup, callbacks, distribution, models, tfcompat
from trainer.keras3.export import write_saved_model
from trainer.paths import join_path
from trainer.profiling import not_profiled, profile_callback, worker_label
from trainer.stall import step_watch, stop_watches, watch_callback
from trainer.timing import step_timer

#: The test hooks trainer.task documents (their names; the numeric ones are read once, trainer.task.check_test_hooks).
DUMP_WEIGHTS_ENV = "TPUCTL_TRAINER_TEST_DUMP_WEIGHTS"
LOG_BATCHES_ENV = "TPUCTL_TRAINER_TEST_LOG_BATCHES"


@dataclasses.dataclass
class Run:
    """What a Keras 3 run has settled before its model trains (every input checked, nothing written yet)."""
    cfg: TrainConfig
    env: Mapping[str, str]
    hooks: Any                      # trainer.task.TrainerTestHooks
    dirs: OutputDirs
    info: Any                       # trainer.strategy.StrategyInfo, or trainer.keras3.distribution.JaxInfo
    source: inputs.Inputs
    hparams: Mapping[str, Any]
    steps_per_epoch: int
    validation_steps: int
    precision: str                  # bfloat16 | float16 | off


def run_jax(cfg: TrainConfig, env: Mapping[str, str], hooks, dirs: OutputDirs,
            held: contextlib.ExitStack) -> dict | None:
    """``--backend jax``: the cluster and its devices first (before any JAX computation), then the input, the
    distribution and the model; the chief's result, None on the other processes."""
    info, _ = distribution.start(cfg.distribution_strategy, env, cfg.cluster_timeout_seconds)
    distribution.accelerators_for_jax()
    hparams = plugin.parse_hparams(dict(cfg.hparams))
    source = inputs.prepare(cfg, num_workers=info.num_workers, hparams=hparams)
    for flag, size in (("--train_batch_size", cfg.train_batch_size),
                       ("--validation_batch_size", cfg.validation_batch_size)):
        if size % info.num_replicas:    # each device takes an equal part of every global batch
            raise UsageError(f"{flag} {size} must be a multiple of the {info.num_replicas} JAX devices "
                             f"({info.platform.upper()})")
    steps_per_epoch = cfg.steps_per_epoch or max(1, source.train_examples // cfg.train_batch_size)
    validation_steps = data.evaluation_steps(source.val_examples, cfg.validation_batch_size)
    # auto: bfloat16 on TPUs (trainer.models.set_precision decides, for tf_keras and here alike)
    precision = tf_keras_models.set_precision(cfg.mixed_precision, cfg.model, info.platform)
    models.set_precision("float32" if precision == "off" else f"mixed_{precision}")
    if cfg.seed is not None:
        keras.utils.set_random_seed(cfg.seed)   # without one, keras.distribution gave every process one seed
    fn = plugin.load(cfg.model, cfg.code_dir, "--model") if cfg.plugin_model else None
    layout = plugin.module_attribute(fn, distribution.LAYOUT_FUNCTION) if fn is not None else None
    layout_fn = (plugin.Plugin(f"{fn.ref.rsplit(':', 1)[0]}:{distribution.LAYOUT_FUNCTION}", layout, fn.file)
                 if callable(layout) else None)
    distribution.distribute(info, layout_fn, hparams, fn.file if fn is not None else "--model")
    if fn is not None:
        model = tf_keras_models.build_plugin_model(cfg, source, hparams, steps_per_epoch=steps_per_epoch, fn=fn)
    elif source.image_size is None:
        raise UsageError(f"--model {cfg.model} is an image model and --dataset {cfg.dataset} yields features "
                         f"({', '.join(source.features)}); name your model function too (--model file.py:NAME)")
    else:
        model = tf_keras_models.small_cnn(source.image_size, len(source.classes), keras_api=keras)
    return train(Run(cfg, env, hooks, dirs, info, source, hparams, steps_per_epoch, validation_steps, precision),
                 model, held)


def train(run: Run, model: keras.Model, held: contextlib.ExitStack) -> dict | None:
    """Compile, position the input after the backup, train, export, report (see the module docstring)."""
    cfg, info, source, dirs, spe = run.cfg, run.info, run.source, run.dirs, run.steps_per_epoch
    where = (os.path.join(cfg.code_dir or os.getcwd(), cfg.model.rsplit(":", 1)[0]) if cfg.plugin_model
             else f"--model {cfg.model}")
    if info.kind in TF_KERAS_ONLY:
        raise UsageError(f"--model {cfg.model} is a Keras 3 model and --distribution_strategy {info.kind} trains tf_keras "
                         f"models only ({TF_KERAS_ONLY[info.kind]}); pick another strategy, or --backend jax")
    cluster = info.num_workers > 1
    scope = info.strategy.scope() if info.strategy is not None else contextlib.nullcontext()
    with scope:
        models.ensure_built(model, source.features, source.named, where)
        models.compile_model(model, cfg, spe)
        model.optimizer.build(model.trainable_variables)
        tfcompat.build_from_shapes(model, source.features, source.named)
        if cluster and cfg.backend == "tensorflow":
            tfcompat.multi_worker_logs()
        state, weights = backup.read(dirs, spe)
        if weights is not None:
            backup.restore(model, weights)

    input_steps = state.steps(spe)
    skip = source.records_to_skip(input_steps, cfg.train_batch_size, info, seeded=cfg.seed is not None)
    train_ds, val_ds = source.train(cfg.train_batch_size, skip=skip), source.validation(cfg.validation_batch_size)

    # Every input was checked (flags, data, model); only now is anything written.
    if info.is_chief:
        rundir.claim_output(cfg.model_dir, held)
    on_jax = cfg.backend == "jax"
    print(rundir.training_line(cfg, info, source, steps_per_epoch=spe, validation_steps=run.validation_steps,
                               precision=run.precision, exact=True, keras="keras3",
                               sharding=("DATA" if cluster else "AUTO") if on_jax else None), flush=True)
    if input_steps:
        print(rundir.resuming_line(cfg, input_steps, spe, skip), flush=True)

    start_epoch, offset = divmod(input_steps, spe)
    preemption = "alone" if not cluster else ("cluster" if on_jax else "")
    loop = callbacks.TrainingLoop(run, state, start_epoch=start_epoch, offset=offset, preemption=preemption,
                                  save_scratch=cluster,
                                  reached_sync_point=_sync_point() if preemption == "cluster" else None)
    watch = step_watch(cfg.max_step_seconds)
    keras_callbacks = [*([watch_callback(keras, watch)] if watch is not None else []), loop]
    if info.is_chief:
        from trainer.summaries import hparams_of

        keras_callbacks.append(callbacks.EpochScalars(dirs.logs, hparams_of(cfg)))
    if run.hooks.exit_after_epoch:
        keras_callbacks.append(callbacks.ExitAfterEpoch(run.hooks.exit_after_epoch))
    if run.hooks.step_pause:
        keras_callbacks.append(callbacks.StepPause(run.hooks.step_pause))
    timer = None
    if info.is_chief:
        timer = step_timer(keras, dirs.checkpoints, cfg.train_batch_size, input_steps,
                           backup_at=backup.written_at(dirs) if input_steps else None)
        keras_callbacks.append(timer)
    if cfg.profile_steps is not None:
        why_not = not_profiled(info)
        label = worker_label(info, run.env)
        if why_not:
            print(f"warning: no profile from {label}: {why_not}", file=sys.stderr, flush=True)
        else:
            profiler = None
            if on_jax:
                import jax

                profiler = (jax.profiler.start_trace, jax.profiler.stop_trace)
            keras_callbacks.append(profile_callback(keras, dirs.logs, label, cfg.profile_steps, profiler=profiler))
    log = run.env.get(LOG_BATCHES_ENV)
    if log:
        os.makedirs(log, exist_ok=True)
        callbacks.log_batches(model, os.path.join(log, f"batches-{info.task_type or 'chief'}-{info.task_id}.txt"),
                              input_steps)

    try:
        try:
            history = model.fit(train_ds, epochs=cfg.train_epochs, initial_epoch=start_epoch, steps_per_epoch=spe,
                                validation_data=val_ds, validation_steps=run.validation_steps, callbacks=keras_callbacks,
                                shuffle=False, verbose=0)      # the input is shuffled by the pipeline (seeded)
        finally:
            stop_watches()     # however the loop ended: no watch outlives it (trainer.stall)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
        if cfg.dataset is not None:
            raise DataError(f"--dataset {cfg.dataset}: reading its examples failed during training: "
                            f"{data.first_line(err.message)}") from None
        problem = None if cfg.skip_corrupt else source.corruption()
        if problem is not None:
            raise problem from None
        raise

    if timer is not None:
        timer.require_training()
    chosen = _select(model, cfg, dirs, history, loop, lambda: model.evaluate(
        val_ds, steps=run.validation_steps, verbose=0, return_dict=True)["accuracy"])
    if info.is_chief:
        backup.remove(dirs)
    dump = run.env.get(DUMP_WEIGHTS_ENV)
    if dump:
        os.makedirs(dump, exist_ok=True)
        np.savez(os.path.join(dump, f"weights-{info.task_type or 'chief'}-{info.task_id}.npz"),
                 *[np.asarray(w) for w in model.get_weights()])

    serving = export.Serving(source.classes, source.image_size, source.features, source.named)
    io_device = "/job:localhost" if info.kind == "tpu" else None
    if info.is_chief:
        name = rundir.export_name(cfg, model)
        export_dir = export.export_version(model, join_path(dirs.export_base, name), serving,
                                           io_device=io_device, write=write_saved_model)
    else:
        # Every process takes part in saving (TensorFlow's synchronised variables, JAX's arrays spread over processes
        # are read collectively); only the chief's copy is kept.
        scratch = tempfile.mkdtemp(prefix=f"export-{info.task_type}-{info.task_id}-")
        try:
            write_saved_model(model, scratch, serving)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return None
    return rundir.report(cfg, run.env, dirs, rundir.result_of(
        cfg, export_dir=export_dir, export_name=name, chosen=chosen, info=info, source=source,
        precision=run.precision, exact=True,
        keras="keras3", timing=timer.timing() if timer is not None else None))


def _sync_point():
    """JAX's agreement on the step a preempted cluster backs up at (``multihost_utils.reached_preemption_sync_point``:
    a SIGTERM to any process is propagated to all of them, which agree on the next step; jax.distributed starts its
    preemption service, the SIGTERM notifier, with the cluster)."""
    from jax.experimental import multihost_utils

    return multihost_utils.reached_preemption_sync_point


def _select(model, cfg: TrainConfig, dirs: OutputDirs, history, loop, evaluate) -> dict:
    """Put the weights ``--export`` asks for into ``model`` (as trainer.task.select_export: ``best`` loads the best
    epoch's ``ckpt-<epoch>.weights.h5`` unless it is the last one trained; ``evaluate()`` when this process ran no
    epoch); what was chosen, for the result."""
    ran = list(history.epoch)
    last_epoch = ran[-1] + 1 if ran else cfg.train_epochs
    values = history.history.get(MONITOR) or []
    last_value = float(values[-1]) if values else None
    best_epoch, best_value = loop.best_epoch, loop.best_value
    if cfg.export == "best" and best_epoch >= 1:
        if best_epoch != last_epoch:
            model.load_weights(callbacks.epoch_weights(dirs, best_epoch))
        exported, value = best_epoch, best_value
    else:
        if last_value is None:
            last_value = float(evaluate())
        exported, value = last_epoch, last_value
    if best_epoch < 1:
        best_epoch, best_value = exported, value
    return {"val_accuracy": value, "exported_epoch": exported, "best_epoch": best_epoch,
            "best_val_accuracy": best_value, "last_val_accuracy": last_value if last_value is not None else value,
            "epochs": last_epoch, "stopped_early": last_epoch < cfg.train_epochs}
