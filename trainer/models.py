"""Models, built and compiled inside the strategy scope by :func:`build_model`.

Every model takes images float32 [B, H, W, 3] in [0, 1] and returns logits; the loss is
SparseCategoricalCrossentropy(from_logits=True) (the seed paired a softmax layer with
``from_logits=True``, which trains on the wrong loss). Probabilities are computed at serving time.
"""

from __future__ import annotations

import math
import os
import tempfile

import tensorflow as tf
import tf_keras as keras

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer.config import REFERENCE_BATCH, TrainConfig
from trainer.errors import DataError, UsageError


def small_cnn(image_size, num_classes: int, keras_api=None) -> keras.Model:
    """A few conv blocks: trains on the demo digits in seconds on a laptop CPU. ``keras_api``: Keras 3 for a
    ``--backend jax`` run (trainer.keras3.engine: the same layers); default tf_keras."""
    api = keras_api or keras
    inputs = api.Input(shape=(image_size[0], image_size[1], 3), name="images")
    x = inputs
    for i, filters in enumerate((16, 32, 64)):
        x = api.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = api.layers.BatchNormalization(momentum=0.9)(x)  # few steps: stats must settle fast
        x = api.layers.ReLU()(x)
        if i < 2:
            x = api.layers.MaxPooling2D()(x)
    x = api.layers.GlobalAveragePooling2D()(x)
    x = api.layers.Dropout(0.2)(x)
    outputs = api.layers.Dense(num_classes, name="logits", dtype="float32")(x)
    return api.Model(inputs, outputs, name="small_cnn")


def _local_weights(path: str) -> str:
    """Keras reads .h5 weights from local files only; copy a gs:// file to a temp file first (the task
    checked that it exists)."""
    if "://" not in path:
        return path
    local = os.path.join(tempfile.mkdtemp(prefix="resnet-weights-"), os.path.basename(path))
    tf.io.gfile.copy(path, local, overwrite=True)
    return local


def resnet50(image_size, num_classes: int, *, weights_path: str | None, fine_tune: bool) -> keras.Model:
    """ResNet50 base (random init, or no-top weights from a local/gs:// file: never downloaded)."""
    weights = _local_weights(weights_path) if weights_path else None
    try:
        base = keras.applications.ResNet50(include_top=False, weights=weights,
                                           input_shape=(image_size[0], image_size[1], 3))
    except (ValueError, OSError) as err:
        raise DataError(f"--resnet_weights {weights_path}: not ResNet50 no-top weights ({err})") from None
    # Random init has nothing to keep frozen.
    base.trainable = fine_tune or weights is None
    inputs = keras.Input(shape=(image_size[0], image_size[1], 3), name="images")
    # ResNet50 expects caffe-style inputs (BGR, mean-subtracted 0..255).
    x = keras.layers.Lambda(lambda t: keras.applications.resnet50.preprocess_input(t * 255.0),
                            name="resnet_preprocess")(inputs)
    x = base(x, training=False if weights is not None and not fine_tune else None)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes, name="logits", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="resnet50")


def hub_classifier(image_size, num_classes: int, *, handle: str, fine_tune: bool) -> keras.Model:
    """A TF-Hub image feature vector (resolved through TFHUB_CACHE_DIR first) + a linear head."""
    import tensorflow_hub as hub

    from trainer import hubcheck

    # tensorflow_hub takes any non-empty <cache>/<sha1>/ as the model: refuse an incomplete one first
    hubcheck.check(handle)
    try:
        features = hub.KerasLayer(handle, trainable=fine_tune, name="hub_features")
    except Exception as err:  # noqa: BLE001 - resolver/network/format errors all mean: not loadable
        cache = os.environ.get("TFHUB_CACHE_DIR")
        hint = (f"TFHUB_CACHE_DIR={cache} has no usable model for it" if cache
                else "set TFHUB_CACHE_DIR to a folder holding <sha1(handle)>/saved_model.pb")
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"cannot load --hub_handle {handle}: {hint} ({type(err).__name__}: {first})") from None
    inputs = keras.Input(shape=(image_size[0], image_size[1], 3), name="images")
    x = features(inputs)
    outputs = keras.layers.Dense(num_classes, name="logits", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="hub")


def set_precision(choice: str, model: str, strategy_kind: str) -> str:
    """Apply ``--mixed_precision`` as Keras' global dtype policy (before the model is built); returns
    what is used: ``bfloat16``, ``float16`` or ``off``.

    ``auto``: bfloat16 on TPUs (their native matmul type), off elsewhere and with ``--model hub``.
    ``tf.keras.mixed_precision.set_global_policy("mixed_bfloat16" | "mixed_float16")``: layers compute in
    that dtype and keep float32 variables; the logits layer is float32 (``dtype="float32"`` above), so the
    loss and the exported probabilities stay float32. With ``mixed_float16``, tf_keras' ``Model.compile``
    wraps the optimizer in a LossScaleOptimizer itself (tf_keras/src/engine/training.py ``_get_optimizer``:
    ``if self.dtype_policy.name == "mixed_float16"`` ...), so loss scaling is automatic.
    """
    if choice == "auto":
        choice = "bfloat16" if strategy_kind == "tpu" and model != "hub" else "off"
    if choice == "float16" and strategy_kind == "tpu":
        raise UsageError("--mixed_precision float16 is not supported on TPUs; use bfloat16")
    keras.mixed_precision.set_global_policy("float32" if choice == "off" else f"mixed_{choice}")
    return choice


def peak_learning_rate(cfg: TrainConfig) -> float:
    """``--learning_rate`` scaled to the global batch: x sqrt(batch / REFERENCE_BATCH).

    A bigger global batch (more replicas, workers or TPU cores) takes fewer, less noisy steps; for Adam the
    square-root rule keeps the update noise comparable (Malladi et al., "On the SDEs and Scaling Rules for
    Adaptive Gradient Algorithms", NeurIPS 2022), where the linear rule of SGD (Goyal et al. 2017) overshoots.
    """
    return cfg.learning_rate * math.sqrt(cfg.train_batch_size / REFERENCE_BATCH)


class _StepDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to ``peak``, then x0.1 at 50 % and again at 75 % of the decay steps."""

    def __init__(self, peak: float, warmup_steps: int, decay_steps: int):
        self.peak, self.warmup_steps, self.decay_steps = float(peak), int(warmup_steps), int(decay_steps)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warm = tf.cast(self.warmup_steps, tf.float32)
        after = (step - warm) / float(max(1, self.decay_steps))
        factor = tf.where(after < 0.5, 1.0, tf.where(after < 0.75, 0.1, 0.01))
        ramp = tf.minimum(1.0, (step + 1.0) / tf.maximum(warm, 1.0))
        return self.peak * tf.where(step < warm, ramp, factor)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "decay_steps": self.decay_steps}


def learning_rate_schedule(cfg: TrainConfig, steps_per_epoch: int, *, schedules=None, step_decay=None):
    """``--lr_schedule`` over the whole run (``train_epochs`` x ``steps_per_epoch`` optimizer steps).

    A linear warm-up of ``--warmup_epochs`` (at most half of training) from 0 to the batch-scaled peak rate
    (:func:`peak_learning_rate`), then cosine decay to 0 (default), two x0.1 steps, or a constant rate.
    The schedule is a function of the optimizer's step counter, which the preemption backup restores, so a
    resumed run continues on the same curve. ``constant`` without warm-up is the plain peak rate.
    ``schedules``, ``step_decay``: Keras 3's schedules module and step schedule (trainer.keras3.models); default
    tf_keras'.
    """
    schedules = schedules or keras.optimizers.schedules
    step_decay = step_decay or _StepDecay
    peak = peak_learning_rate(cfg)
    total = max(1, cfg.train_epochs * steps_per_epoch)
    warmup = min(int(round(cfg.warmup_epochs * steps_per_epoch)), total // 2)
    if cfg.lr_schedule == "cosine":
        # warm-up from 0 to warmup_target, then cosine from warmup_target to alpha x warmup_target
        return schedules.CosineDecay(0.0, decay_steps=max(1, total - warmup), alpha=0.0, warmup_target=peak,
                                     warmup_steps=warmup)
    if cfg.lr_schedule == "step":
        return step_decay(peak, warmup, total - warmup)
    if warmup:
        return schedules.CosineDecay(0.0, decay_steps=1, alpha=1.0, warmup_target=peak, warmup_steps=warmup)
    return peak


class Selection(tf.Module):
    """The best epoch so far by validation accuracy (0 = none yet), as variables on the model.

    Attached as ``model.tpuctl_selection`` inside the strategy scope: two non-trainable scalars that a
    functional model lists among its weights, so the preemption backup (BackupAndRestore's
    ``tf.train.Checkpoint(model=...)``) and every ``ckpt-<epoch>`` save and restore them with the layers'
    weights (the export carries them too; serving does not read them).
    """

    def __init__(self):
        super().__init__(name="tpuctl_selection")
        sync = dict(trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.epoch = tf.Variable(0, dtype=tf.int64, name="best_epoch", **sync)
        self.value = tf.Variable(float("-inf"), dtype=tf.float32, name="best_val_accuracy", **sync)


def build_plugin_model(cfg: TrainConfig, source, hparams, *, steps_per_epoch: int = 1, fn=None) -> keras.Model:
    """The user's model function (``--model file.py:NAME``, trainer.plugin) built, checked and compiled; call inside
    ``strategy.scope()``. ``source``: the run's trainer.inputs.Inputs (its features, classes, image size). A Keras 3
    model (contract v2) is returned as the function returned it: trainer.keras3.engine trains it. ``fn``: the model
    function when it is loaded already (trainer.plugin.load)."""
    from trainer import plugin
    from trainer.backends import is_keras3_model, prepare_keras3_build

    if cfg.seed is not None:
        keras.utils.set_random_seed(cfg.seed)
    fn = fn or plugin.load(cfg.model, cfg.code_dir, "--model")
    prepare_keras3_build(cfg.seed, keras.mixed_precision.global_policy().name)   # a contract-v2 module's Keras 3
    ctx = plugin.ModelContext(inputs=dict(source.features), num_classes=len(source.classes),
                              class_names=tuple(source.classes), hparams=dict(hparams), image_size=source.image_size)
    model = plugin.check_model(fn, fn.call("--model", ctx), ctx, named=source.named, backend=cfg.backend)
    if is_keras3_model(model):            # contract v2: trainer.keras3.engine compiles and trains it
        return model
    if model.optimizer is None:            # uncompiled: the trainer's optimizer, schedule and loss
        return _compile(model, cfg, steps_per_epoch)
    # compiled by the user: their optimizer and loss, and the accuracy --export best and tuning read
    model.compile(optimizer=model.optimizer, loss=model.loss,
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    model.tpuctl_selection = Selection()
    return model


def build_model(cfg: TrainConfig, num_classes: int, image_size, *, steps_per_epoch: int = 1) -> keras.Model:
    """Build and compile; call inside ``strategy.scope()`` so every variable is distributed.

    ``steps_per_epoch``: optimizer steps per epoch, which the learning-rate schedule is laid out over.
    """
    if cfg.seed is not None:
        keras.utils.set_random_seed(cfg.seed)  # again: the same initial weights however the caller got here
    if cfg.model == "small_cnn":
        model = small_cnn(image_size, num_classes)
    elif cfg.model == "resnet50":
        model = resnet50(image_size, num_classes, weights_path=cfg.resnet_weights, fine_tune=cfg.fine_tuning_choice)
    elif cfg.model == "hub":
        model = hub_classifier(image_size, num_classes, handle=cfg.hub_handle, fine_tune=cfg.fine_tuning_choice)
    else:
        raise UsageError(f"unknown --model {cfg.model!r}")
    return _compile(model, cfg, steps_per_epoch)


def _compile(model: keras.Model, cfg: TrainConfig, steps_per_epoch: int) -> keras.Model:
    """Adam on the run's learning-rate schedule, sparse categorical cross-entropy on logits, weighted accuracy."""
    schedule = learning_rate_schedule(cfg, steps_per_epoch)
    if isinstance(tf.distribute.get_strategy(), tf.distribute.experimental.CentralStorageStrategy):
        # tf_keras' optimizer assigns its current learning rate (a variable) in replica context, which a
        # CentralStorage (aggregating) variable refuses ("You must specify an aggregation method to update a
        # AggregatingVariable in Replica Context"); the legacy Adam evaluates the schedule without one.
        optimizer = keras.optimizers.legacy.Adam(learning_rate=schedule)
    else:
        optimizer = keras.optimizers.Adam(learning_rate=schedule)
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        # weighted: validation batches are padded with records of weight 0 (data.make_eval_dataset)
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    model.tpuctl_selection = Selection()
    return model
