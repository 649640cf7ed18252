"""TF Serving export: ``<export_base>/<model name>/<integer version>/`` with a bytes-in signature.

``serving_default`` takes ``image_bytes: tf.string [None]`` (encoded JPEG/PNG; the ``_bytes`` suffix
lets TF Serving's REST API accept ``{"b64": …}``) and returns ``probabilities`` float32 [None, C],
``class_id`` int64 [None] and ``class_name`` string [None] (class names from the data manifest).
Images are decoded exactly as in training (:func:`trainer.data.decode_image`).
"""

from __future__ import annotations

import re

import tensorflow as tf

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer.data import decode_batch

SIGNATURE_INPUT = "image_bytes"


def next_version(model_base: str) -> int:
    """1 + the highest integer version already under ``model_base`` (TF Serving serves the highest)."""
    if not tf.io.gfile.isdir(model_base):
        return 1
    versions = [int(n.rstrip("/")) for n in tf.io.gfile.listdir(model_base) if re.fullmatch(r"\d+/?", n)]
    return max(versions, default=0) + 1


def serving_function(model, image_size, class_names):
    names = tf.constant(list(class_names), dtype=tf.string)
    size = (int(image_size[0]), int(image_size[1]))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=SIGNATURE_INPUT)])
    def serve(image_bytes):
        images = decode_batch(image_bytes, size)
        probabilities = tf.nn.softmax(model(images, training=False), axis=-1)
        class_id = tf.argmax(probabilities, axis=-1)
        return {
            "probabilities": probabilities,
            "class_id": class_id,
            "class_name": tf.gather(names, class_id),
        }

    return serve


def export_saved_model(model, export_dir: str, image_size, class_names, *, io_device: str | None = None) -> str:
    """Write the SavedModel (Keras model + serving signature) to ``export_dir``.

    ``io_device``: on TPUs "/job:localhost", so the host (not the TPU worker) writes to gs://.
    """
    serve = serving_function(model, image_size, class_names)
    options = tf.saved_model.SaveOptions(experimental_io_device=io_device)
    model.save(export_dir, save_format="tf", signatures={"serving_default": serve}, options=options,
               include_optimizer=False)
    return export_dir
