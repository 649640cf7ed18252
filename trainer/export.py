"""TF Serving export: ``<export_base>/<model name>/<integer version>/`` with a ``serving_default`` signature.

Image models: it takes ``image_bytes: tf.string [None]`` (encoded JPEG/PNG; the ``_bytes`` suffix lets TF
Serving's REST API accept ``{"b64": …}``), decoded exactly as in training (:func:`trainer.data.decode_image`).
Models of other data (features from a manifest or a plug-in dataset): it takes the model's own inputs, one
tensor per feature named after it with a batch dimension (JSON instances ``{"feature": value, …}`` through TF
Serving's REST API), or ``features`` when the data yields one unnamed tensor. Both return ``probabilities``
float32 [None, C], ``class_id`` int64 [None] and ``class_name`` string [None] (the data's class names).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer.data import decode_batch
from trainer.paths import join_path

SIGNATURE_INPUT = "image_bytes"


#: A version being written: ``.<version>.writing`` next to the versions (TF Serving only loads integer names).
_STAGING = re.compile(r"\.\d+\.writing/?")


def next_version(model_base: str) -> int:
    """1 + the highest integer version already under ``model_base`` (TF Serving serves the highest)."""
    if not tf.io.gfile.isdir(model_base):
        return 1
    versions = [int(n.rstrip("/")) for n in tf.io.gfile.listdir(model_base) if re.fullmatch(r"\d+/?", n)]
    return max(versions, default=0) + 1


@dataclasses.dataclass(frozen=True)
class Serving:
    """What the serving signature takes: images of ``image_size``, else ``features`` (name -> one example's
    tf.TensorSpec; ``named``: the model takes them as a dict)."""
    class_names: Sequence[str]
    image_size: tuple[int, int] | None = None
    features: Mapping[str, Any] | None = None
    named: bool = False

    @classmethod
    def images(cls, image_size, class_names) -> Serving:
        return cls(tuple(class_names), (int(image_size[0]), int(image_size[1])))


def serving_function(model, serving: Serving):
    names = tf.constant(list(serving.class_names), dtype=tf.string)

    def answer(logits):
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
        class_id = tf.argmax(probabilities, axis=-1)
        return {"probabilities": probabilities, "class_id": class_id, "class_name": tf.gather(names, class_id)}

    if serving.image_size is not None:
        size = serving.image_size

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=SIGNATURE_INPUT)])
        def serve(image_bytes):
            return answer(model(decode_batch(image_bytes, size), training=False))

        return serve
    inputs = list(serving.features)
    specs = [tf.TensorSpec([None, *serving.features[n].shape], serving.features[n].dtype, name=n) for n in inputs]

    # positional arguments named by their specs: the signature's inputs are the feature names
    @tf.function(input_signature=specs)
    def serve_features(*tensors):
        features = dict(zip(inputs, tensors)) if serving.named else tensors[0]
        return answer(model(features, training=False))

    return serve_features


def export_saved_model(model, export_dir: str, serving: Serving, *, io_device: str | None = None) -> str:
    """Write the SavedModel (Keras model + serving signature) to ``export_dir``.

    ``io_device``: on TPUs "/job:localhost", so the host (not the TPU worker) writes to gs://.
    """
    serve = serving_function(model, serving)
    options = tf.saved_model.SaveOptions(experimental_io_device=io_device)
    model.save(export_dir, save_format="tf", signatures={"serving_default": serve}, options=options,
               include_optimizer=False)
    return export_dir


def export_version(model, model_base: str, serving: Serving, *, io_device: str | None = None, write=None) -> str:
    """Export into ``<model_base>/<next version>`` so that the version folder appears only when complete.

    The SavedModel is written to ``<model_base>/.<version>.writing`` and renamed to ``<version>`` at the end;
    on any failure or Ctrl-C the staging folder is removed and the earlier versions stay as they were (a
    half-written version would be the highest, the one TF Serving loads). Staging folders a killed run left
    are removed first (the caller holds the model folder, trainer.task.claim_model_dir). Local folders:
    one ``rename``. gs://: TensorFlow renames a folder object by object, so the version folder fills within
    seconds after the SavedModel is complete (no partial SavedModel is ever written under it directly).
    ``write``: what writes the SavedModel (default :func:`export_saved_model`; a Keras 3 model's is
    trainer.keras3.export.write_saved_model).
    """
    if tf.io.gfile.isdir(model_base):
        for name in tf.io.gfile.listdir(model_base):
            if _STAGING.fullmatch(name):
                tf.io.gfile.rmtree(join_path(model_base, name.rstrip("/")))
    version = next_version(model_base)
    staging, final = join_path(model_base, f".{version}.writing"), join_path(model_base, str(version))
    try:
        (write or export_saved_model)(model, staging, serving, io_device=io_device)
        tf.io.gfile.rename(staging, final)
    except BaseException:
        try:
            if tf.io.gfile.exists(staging):
                tf.io.gfile.rmtree(staging)
        except tf.errors.OpError:
            pass  # removed on the next export into this folder
        raise
    return final


def write_atomically(path: str, text: str) -> None:
    """Write ``path`` through ``<path>.writing`` + rename: a reader sees the old file or the whole new one."""
    staging = f"{path}.writing-{os.getpid()}"
    try:
        with tf.io.gfile.GFile(staging, "w") as f:
            f.write(text)
        tf.io.gfile.rename(staging, path, overwrite=True)
    except BaseException:
        try:
            if tf.io.gfile.exists(staging):
                tf.io.gfile.remove(staging)
        except tf.errors.OpError:
            pass
        raise
