"""A training script of your own, run by `tpuctl train --command "python train.py --epochs 3"` on every target.

It uses tf.distribute itself: MultiWorkerMirroredStrategy reads TF_CONFIG, which tpuctl sets on each local process,
Vertex AI sets on each replica (and TPU VM hosts run it with the TPU's own runtime); it writes where Vertex AI's
variables say, which tpuctl sets the same way on every target: the model to AIP_MODEL_DIR, checkpoints to
AIP_CHECKPOINT_DIR, TensorBoard logs to AIP_TENSORBOARD_LOG_DIR. Resuming after a preemption is this script's job:
it restores the backup BackupAndRestore keeps in AIP_CHECKPOINT_DIR. The data is generated in memory (no download).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf
import tf_keras as keras


def data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")
    y = (x[:, :4].sum(axis=1) > x[:, 4:].sum(axis=1)).astype("int64")
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    cluster = json.loads(os.environ.get("TF_CONFIG", "{}"))
    strategy = (tf.distribute.MultiWorkerMirroredStrategy() if len(cluster.get("cluster", {}).get("worker", [])) +
                len(cluster.get("cluster", {}).get("chief", [])) > 1 else tf.distribute.get_strategy())
    task = cluster.get("task", {})
    chief = task.get("type", "chief") == "chief" or (task.get("type") == "worker" and task.get("index") == 0
                                                     and "chief" not in cluster.get("cluster", {}))
    model_dir = os.environ.get("AIP_MODEL_DIR", "model")
    checkpoints = os.environ.get("AIP_CHECKPOINT_DIR", "checkpoints")
    logs = os.environ.get("AIP_TENSORBOARD_LOG_DIR", "logs")

    x, y = data(2048, 1)
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=1).repeat().batch(global_batch)
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(16, activation="relu", input_shape=(8,)), keras.layers.Dense(2)])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=len(x) // global_batch, verbose=2,
                        callbacks=[keras.callbacks.BackupAndRestore(os.path.join(checkpoints, "backup")),
                                   keras.callbacks.TensorBoard(logs)])
    # every worker saves (variables are read collectively); only the chief's copy is kept
    target = model_dir if chief else tempfile.mkdtemp(prefix="not-chief-")
    model.save(target, save_format="tf")
    if chief:
        print(f"accuracy={history.history['accuracy'][-1]:.4f} saved to {model_dir}", flush=True)


if __name__ == "__main__":
    main()
