"""A Keras 3 model's TF Serving export, from either backend, with today's serving signature (trainer.export): the same
``serving_default`` (``image_bytes`` or the model's own features in; ``probabilities``, ``class_id``, ``class_name``
out), so ``tpuctl serve``, ``predict`` and ``deploy`` read it as they read a tf_keras export.

Keras' own ``ExportArchive`` writes it (keras.io/api/models/model_saving_apis/export/, "Combining a model with some
TensorFlow preprocessing"): the model becomes one endpoint, ``logits`` (its raw outputs on its inputs; on JAX a
``jax2tf`` conversion of the model's function, which TensorFlow loads without JAX), and the trainer's serving function
(decoding, softmax, class names: trainer.export.serving_function) wraps that endpoint as ``serving_default``.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from trainer import export
from trainer.keras3.models import symbolic_batch

#: The endpoint of the model's own outputs, next to serving_default.
LOGITS_ENDPOINT = "logits"


def write_saved_model(model: keras.Model, export_dir: str, serving: export.Serving, *,
                      io_device: str | None = None) -> str:
    """The SavedModel of ``model`` with the serving signature ``serving`` describes (trainer.export.export_version's
    writer for Keras 3 models)."""
    if serving.image_size is not None:
        features, named = {"images": tf.TensorSpec([*serving.image_size, 3], tf.float32)}, False
    else:
        features, named = dict(serving.features), serving.named
    archive = keras.export.ExportArchive()
    archive.track(model)
    logits = archive.add_endpoint(LOGITS_ENDPOINT, lambda x: model(x, training=False),
                                  input_signature=[symbolic_batch(features, named)])
    serve = export.serving_function(lambda x, training=False: logits(x), serving)
    serve.get_concrete_function()     # traced once: ExportArchive takes a traced tf.function as it is
    archive.add_endpoint("serving_default", serve)
    archive.write_out(export_dir, options=tf.saved_model.SaveOptions(experimental_io_device=io_device),
                      verbose=False)
    return export_dir
