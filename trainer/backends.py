"""What runs the model's steps (``--backend``): TensorFlow or JAX, chosen before anything imports Keras and checked
before TensorFlow loads.

- ``tensorflow`` (the default): tf_keras models (plug-in contract v1, the built-in models) and Keras 3 models (contract
  v2) on the trainer's tf.distribute strategies. JAX stays out of the process: TensorFlow 2.21 imports ``jax`` when it
  is installed (``tensorflow/lite/python/util.py``: ``from jax import jit``; ~0.5 CPU-s of every TensorFlow start
  here) and a plug-in that imports it would have two frameworks claim one accelerator, so an import of ``jax`` fails
  with :data:`JAX_KEPT_OUT` (a plug-in's is one ``error:`` line naming its file and line, trainer.plugin).
- ``jax``: Keras 3 models on ``keras.distribution`` (trainer.keras3); tf.data still feeds them.

Standard library only (and trainer.flags): ``trainer/__init__`` and ``trainer.config`` import it.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import sys
from collections.abc import Iterator
from typing import Any

from trainer.errors import UsageError
from trainer.flags import TF_KERAS_ONLY

#: Keras 3 reads its backend from this variable when it is first imported (keras/src/backend/config.py).
KERAS_BACKEND = "KERAS_BACKEND"
JAX_KEPT_OUT = ("jax is not loaded when --backend tensorflow trains (two frameworks would claim one accelerator); "
                "pass --backend jax to train a Keras 3 model on JAX, or drop the import")


class _KeepJaxOut(importlib.abc.MetaPathFinder):
    """Fails every import of jax/jaxlib not already done (a module imported before stays importable)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname.partition(".")[0] in ("jax", "jaxlib"):
            raise ImportError(JAX_KEPT_OUT, name=fullname)
        return None


_GUARD = _KeepJaxOut()


def keep_jax_out() -> None:
    if _GUARD not in sys.meta_path:
        sys.meta_path.insert(0, _GUARD)


def let_jax_in() -> None:
    while _GUARD in sys.meta_path:
        sys.meta_path.remove(_GUARD)


@contextlib.contextmanager
def selected(backend: str) -> Iterator[None]:
    """``KERAS_BACKEND`` set to ``backend`` and JAX kept out of a TensorFlow run, for as long as the run lasts (both
    restored afterwards: a run inside a test's process). Keras 3 fixes its backend at its first import: in a process
    that already imported it with another backend, this is a UsageError."""
    loaded = sys.modules.get("keras")
    if loaded is not None and hasattr(loaded, "backend") and loaded.backend.backend() != backend:
        raise UsageError(f"Keras is loaded with the {loaded.backend.backend()} backend in this process already; run "
                         f"python -m trainer.task --backend {backend} as a process of its own")
    previous, guarded = os.environ.get(KERAS_BACKEND), _GUARD in sys.meta_path
    os.environ[KERAS_BACKEND] = backend
    (let_jax_in if backend == "jax" else keep_jax_out)()
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(KERAS_BACKEND, None)
        else:
            os.environ[KERAS_BACKEND] = previous
        (keep_jax_out if guarded else let_jax_in)()


# ---------------------------------------------------------------------------------------------- Keras 3, unloaded
# The tf_keras path asks these whether a plug-in brought Keras 3 along, without loading Keras 3 itself.


def keras3_loaded() -> Any:
    """The Keras 3 module when something in this process imported it (a plug-in, or this package), else None."""
    module = sys.modules.get("keras")
    return module if module is not None and hasattr(module, "Model") else None


def is_keras3_model(obj: Any) -> bool:
    """A Keras 3 model (not a tf_keras one), told without importing Keras 3."""
    keras = keras3_loaded()
    return keras is not None and isinstance(obj, keras.Model)


def prepare_keras3_build(seed: int | None, dtype_policy: str) -> None:
    """Before a plug-in's model function runs: when its module imported Keras 3, Keras 3 gets the run's seed and
    dtype policy as tf_keras has them (``mixed_bfloat16`` …), so a contract-v2 model is built as a v1 one."""
    keras = keras3_loaded()
    if keras is None:
        return
    if seed is not None:
        keras.utils.set_random_seed(seed)
    keras.config.set_dtype_policy(dtype_policy)


def check_backend(cfg: Any) -> None:
    """The combinations ``--backend jax`` cannot train, refused before anything loads (one line each). A tf_keras
    model function is refused once it returned its model (trainer.plugin.check_model)."""
    if cfg.backend != "jax":
        return
    if cfg.model in TF_KERAS_ONLY:
        raise UsageError(f"--model {cfg.model} trains on --backend tensorflow only ({TF_KERAS_ONLY[cfg.model]}); "
                         "drop --backend jax")
    for flag in ("num_gpus", "gpu_memory", "virtual_gpus"):
        if getattr(cfg, flag):
            raise UsageError(f"--{flag} configures TensorFlow's GPUs; --backend jax trains on every device JAX sees "
                             "(choose them with CUDA_VISIBLE_DEVICES, their memory with XLA_PYTHON_CLIENT_MEM_FRACTION)")
    if cfg.distribution_strategy in TF_KERAS_ONLY:
        raise UsageError(f"--distribution_strategy {cfg.distribution_strategy} trains tf_keras models only "
                         f"({TF_KERAS_ONLY[cfg.distribution_strategy]}); --backend jax trains data-parallel over "
                         "every device of every host: drop --distribution_strategy")
