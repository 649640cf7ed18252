"""Two things Keras 3.15's ``fit`` does that the trainer cannot leave to it.

1. **It reads a first batch to build the model's metrics** (``Trainer._symbolic_build`` on JAX;
   ``TensorFlowTrainer._maybe_symbolic_build`` under a tf.distribute strategy) from an iterator of its own, then starts
   training on a new one. A shuffled dataset's seeded order depends on how many passes were begun before
   (``shuffle(seed=…, reshuffle_each_iteration=True)`` keeps its seed state in the dataset): a resumed run, whose first
   batch lies past the records it skips, would begin more passes in that extra iterator than an uninterrupted run and
   train on other batches. So the model is built from the data's shapes instead (:func:`build_from_shapes`: what Keras
   builds from that batch, symbolic tensors of its shape), and ``fit`` reads from one iterator only.
   Under MultiWorkerMirroredStrategy that first batch was all-reduced eagerly as well, which the collective strategy
   cannot convert ("Attempt to convert a value (PerReplica…) with an unsupported type"; keras-team/keras#20585, open
   since 2024-12: "Does Keras 3 work with tf.distribute.MultiWorkerMirroredStrategy?").
2. **Under MultiWorkerMirroredStrategy, each step's logs are reduced with** ``strategy.reduce("MEAN", value, axis=0)``
   (``reduce_per_replica``), which fails on the scalars a step returns ("Invalid reduction dimension 0 for input with
   0 dimensions"). :func:`multi_worker_logs` reduces them with ``axis=None``, the mean over the replicas, as Keras
   reduces a step's scalars over one worker's replicas (``fit`` and ``evaluate`` reduce nothing else this way).

Measured here (2026-12-07, two CPU workers on 127.0.0.1): with both, the workers train in lockstep with the same weights
and logs; the epoch metrics are Keras' own (read from the metrics' variables, summed across workers).
"""

from __future__ import annotations

import types

import keras

from trainer.keras3.models import symbolic_batch


def build_from_shapes(model: keras.Model, features, named: bool) -> None:
    """Build ``model``'s metrics and loss from the data's shapes, so ``fit`` reads no batch before training (call after
    ``compile``, inside the strategy's scope on TensorFlow)."""
    batch = (symbolic_batch(features, named), keras.KerasTensor((None,), "int32"))   # a training batch's shapes
    if keras.backend.backend() != "tensorflow":
        model._symbolic_build(data_batch=batch)
        return

    def build(self, iterator=None, data_batch=None):
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=batch)

    model._maybe_symbolic_build = types.MethodType(build, model)


def multi_worker_logs() -> None:
    """Reduce a step's scalar logs across a MultiWorkerMirrored cluster's workers with ``axis=None`` (see above)."""
    from keras.src.backend.tensorflow import trainer as tensorflow_trainer

    reduce = tensorflow_trainer.reduce_per_replica
    if getattr(reduce, "tpuctl", False):
        return

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and tensorflow_trainer._collective_all_reduce_multi_worker(strategy):
            return keras.tree.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return reduce(values, strategy, reduction)

    reduce_per_replica.tpuctl = True
    tensorflow_trainer.reduce_per_replica = reduce_per_replica
