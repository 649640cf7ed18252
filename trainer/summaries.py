"""TensorBoard summaries: scalars and the model graph with TensorFlow's core ops, the run's hyperparameters with
tensorboard's own hparams API (every trainer environment and image installs tensorboard; without it, only the
hyperparameters are left out).

``tf.summary.scalar`` lives in the tensorboard package; the core op ``tf.summary.write`` with the
scalars plugin's metadata writes the same event records, so TensorBoard and tuning services read
them as ordinary scalars. Layout follows Keras' TensorBoard callback: ``<logs>/train`` and
``<logs>/validation`` with tags ``epoch_loss`` / ``epoch_accuracy``, and the model graph once under
``<logs>/train`` (Keras conceptual graph tag ``keras`` and the op graph of the training step).
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras
from tensorflow.core.framework import summary_pb2

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)

_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
# TensorBoard's graphs plugin reads a Keras model config (JSON) under this plugin name, version "1", as the
# "conceptual graph" (the same record tf_keras.callbacks.TensorBoard writes with write_graph=True).
_KERAS_MODEL_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="graph_keras_model", content=b"1"))


def write_scalar(tag: str, value: float, step: int) -> None:
    """Write one scalar with the default summary writer (inside ``writer.as_default()``)."""
    tf.summary.write(tag, tf.constant(float(value), tf.float32), step=int(step), metadata=_SCALAR_METADATA)


def write_scalars(log_dir: str, values: dict[str, float], step: int) -> None:
    writer = tf.summary.create_file_writer(log_dir)
    with writer.as_default():
        for tag, value in values.items():
            write_scalar(tag, value, step)
    writer.close()


#: The hyperparameters a run records for TensorBoard's HParams dashboard (TrainConfig field names).
HPARAMS = ("learning_rate", "train_batch_size", "lr_schedule", "warmup_epochs", "train_epochs", "model",
           "image_size", "mixed_precision", "seed")


def hparams_of(cfg) -> dict[str, bool | int | float | str]:
    """The run's hyperparameters as the HParams plugin takes them (bool, number or string; None left out)."""
    out: dict[str, bool | int | float | str] = {}
    for name in HPARAMS:
        value = getattr(cfg, name, None)
        if value is None:
            continue
        out[name] = value if isinstance(value, (bool, int, float, str)) else "x".join(map(str, value))
    return out


def write_hparams(log_dir: str, hparams: dict[str, bool | int | float | str]) -> bool:
    """Record the run's hyperparameters at ``<logs>`` so TensorBoard's HParams dashboard lists the run (a tune's
    trials side by side) with the scalars under it (``validation/epoch_accuracy``, ``final/val_accuracy``).

    Written with TensorBoard's own API (``tensorboard.plugins.hparams.api.hparams``); where the tensorboard package
    is not installed nothing is written and False is returned.
    """
    try:
        from tensorboard.plugins.hparams import api as hp
    except ImportError:
        return False
    writer = tf.summary.create_file_writer(log_dir.rstrip("/"))
    with writer.as_default():
        hp.hparams(hparams)
    writer.close()
    return True


class ScalarsLogic:
    """Per-epoch ``epoch_<metric>`` scalars under ``<logs>/train`` and ``<logs>/validation`` (and, given
    ``hparams``, the run's hyperparameters at ``<logs>`` once training starts): the callback's body, for a tf_keras
    (:class:`EpochScalars`) or a Keras 3 callback (trainer.keras3.callbacks)."""

    def __init__(self, log_dir: str, hparams: dict | None = None):
        super().__init__()
        self.log_dir = log_dir.rstrip("/")
        self.hparams = hparams
        self._writers: dict[str, tf.summary.SummaryWriter] = {}

    def _writer(self, run: str) -> tf.summary.SummaryWriter:
        if run not in self._writers:
            self._writers[run] = tf.summary.create_file_writer(f"{self.log_dir}/{run}")
        return self._writers[run]

    def on_train_begin(self, logs=None):
        self._graph_written = False
        if self.hparams:
            write_hparams(self.log_dir, self.hparams)

    def _write_graph(self) -> None:
        """The model graph, once: Keras' config (conceptual graph) and the traced training step (op graph)."""
        with self._writer("train").as_default(), tf.summary.record_if(True):
            try:
                config = self.model.to_json()
            except (TypeError, ValueError, NotImplementedError):
                config = None      # a subclassed model has no config: only the op graph below
            if config is not None:
                with tf.device("cpu:0"):
                    tensor = tf.constant(config, dtype=tf.string)
                tf.summary.write("keras", tensor, step=0, metadata=_KERAS_MODEL_METADATA)
            # The traced train step; tf_keras' own TensorBoard callback reads the same attribute.
            traced = getattr(getattr(self.model, "train_tf_function", None), "_concrete_variable_creation_fn", None)
            if traced is not None:
                tf.summary.graph(traced.graph)

    def on_epoch_end(self, epoch, logs=None):
        if not getattr(self, "_graph_written", True):
            self._graph_written = True
            self._write_graph()
        # logs: Keras' metrics plus the trainer's learning_rate and examples_per_second (task.py EpochLog)
        for key, value in (logs or {}).items():
            run, name = ("validation", key[4:]) if key.startswith("val_") else ("train", key)
            with self._writer(run).as_default():
                write_scalar(f"epoch_{name}", value, epoch + 1)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


class EpochScalars(ScalarsLogic, keras.callbacks.Callback):
    """The tf_keras run's TensorBoard scalars (:class:`ScalarsLogic`)."""
