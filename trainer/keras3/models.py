"""Keras 3 models as the trainer compiles them: the trainer's optimizer on its learning-rate schedule, and what a
contract-v2 plug-in's model must be before it trains (built, its inputs named). (The built-in ``small_cnn`` for
``--backend jax`` is trainer.models.small_cnn built with Keras 3.)
"""

from __future__ import annotations

from typing import Any

import keras

from trainer import models as tf_keras_models
from trainer.config import TrainConfig
from trainer.errors import UsageError
from trainer.plugin import keras3_input_names


class StepDecay(keras.optimizers.schedules.LearningRateSchedule):
    """trainer.models' step schedule in keras.ops (it runs inside a JAX-compiled step too)."""

    def __init__(self, peak: float, warmup_steps: int, decay_steps: int):
        self.peak, self.warmup_steps, self.decay_steps = float(peak), int(warmup_steps), int(decay_steps)

    def __call__(self, step):
        ops = keras.ops
        step = ops.cast(step, "float32")
        warm = float(self.warmup_steps)
        after = (step - warm) / float(max(1, self.decay_steps))
        factor = ops.where(after < 0.5, 1.0, ops.where(after < 0.75, 0.1, 0.01))
        ramp = ops.minimum(1.0, (step + 1.0) / max(warm, 1.0))
        return self.peak * ops.where(step < warm, ramp, factor)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "decay_steps": self.decay_steps}


def compile_model(model: keras.Model, cfg: TrainConfig, steps_per_epoch: int) -> keras.Model:
    """As trainer.models compiles: Adam on ``--learning_rate``/``--lr_schedule`` (the same curve), sparse categorical
    cross-entropy on logits, weighted accuracy (validation's padding weighs 0). A model the user compiled keeps its
    optimizer and loss and gets the accuracy ``--export best``, early stopping and tuning read."""
    accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    if getattr(model, "optimizer", None) is not None:      # compiled by the user
        model.compile(optimizer=model.optimizer, loss=model.loss, weighted_metrics=[accuracy])
        return model
    schedule = tf_keras_models.learning_rate_schedule(cfg, steps_per_epoch, schedules=keras.optimizers.schedules,
                                                      step_decay=StepDecay)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=schedule),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), weighted_metrics=[accuracy])
    return model


def symbolic_batch(features, named: bool) -> Any:
    """One global batch of the data's features as Keras' symbolic tensors (what a model is built and exported on)."""
    specs = {name: keras.KerasTensor((None, *spec.shape), spec.dtype.name) for name, spec in features.items()}
    return specs if named else next(iter(specs.values()))


def ensure_built(model: keras.Model, features, named: bool, where: str) -> None:
    """A model that has not created its weights yet (a Sequential without an Input, a subclassed model) is called
    once on the data's symbolic features; one line naming the user's file when that fails."""
    if model.built and keras3_input_names(model):
        return
    try:
        model(symbolic_batch(features, named))
    except Exception as err:  # noqa: BLE001 - user code: one line
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        raise UsageError(f"{where}: the model cannot be built on the data's features ({type(err).__name__}: "
                         f"{first})") from None


def set_precision(policy: str) -> None:
    """Keras 3's global dtype policy: ``float32``, ``mixed_bfloat16`` or ``mixed_float16`` (trainer.models.set_precision
    decides, with the same names)."""
    keras.config.set_dtype_policy(policy)
