"""Write a small set of sensor traces as TFRecords the bundled trainer reads without code of yours: 64 readings per
trace from three kinds of machines (steady, drifting, bursting), generated offline (no download).

    python make_data.py data        # then: tpuctl train --data-dir data --model model.py:build --backend jax

The records are tf.train.Examples with one float feature "trace" (64 values) and an int64 "label"; manifest.json
names the classes and declares the feature's dtype and shape (docs/your-code.md, "Records of features").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

CLASSES = ["steady", "drift", "burst"]
LENGTH = 64


def trace(kind: int, rng: np.random.Generator) -> np.ndarray:
    """One trace: noise around a level, plus a slow drift (drift) or a few short spikes (burst)."""
    t = np.arange(LENGTH, dtype=np.float32)
    values = rng.normal(0.0, 0.3, LENGTH).astype(np.float32) + rng.uniform(-1, 1)
    if kind == 1:
        values += rng.choice([-1.0, 1.0]) * rng.uniform(1.0, 2.0) * t / LENGTH
    elif kind == 2:
        for start in rng.integers(0, LENGTH - 3, size=rng.integers(2, 4)):
            values[start:start + 3] += rng.uniform(1.5, 2.5)
    return values


def example(values: np.ndarray, label: int) -> bytes:
    feature = {"trace": tf.train.Feature(float_list=tf.train.FloatList(value=values.tolist())),
               "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def main(out: str, per_class: int = 400, seed: int = 5) -> None:
    rng = np.random.default_rng(seed)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=False)
    rows = [(trace(label, rng), label) for label in range(len(CLASSES)) for _ in range(per_class)]
    order = rng.permutation(len(rows))
    split_at = int(len(rows) * 0.8)
    splits = {"train": [rows[i] for i in order[:split_at]], "validation": [rows[i] for i in order[split_at:]]}
    manifest = {"format_version": 1, "prefix": "sensors", "classes": CLASSES, "image_size": None,
                "features": {"trace": {"dtype": "float32", "shape": [LENGTH]}}, "label": "label", "splits": {}}
    for split, items in splits.items():
        name = f"sensors-{split}-00000-of-00001.tfrecord"
        with tf.io.TFRecordWriter(str(folder / name)) as writer:
            for values, label in items:
                writer.write(example(values, label))
        manifest["splits"][split] = {"files": [name], "examples": len(items), "shard_examples": [len(items)]}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {len(splits['train'])} train and {len(splits['validation'])} validation examples to {folder}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data")
