"""Write a small tabular dataset as TFRecords the bundled trainer reads without code of yours: numeric
measurements and a text column of three kinds of flowers, generated offline (no download).

    python make_data.py data        # then: tpuctl train --data-dir data --model model.py:build

The records are tf.train.Examples with one feature per column and an int64 "label"; manifest.json names the
classes and declares each feature's dtype and shape (docs/your-code.md, "Records of features").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

CLASSES = ["setosa", "versicolor", "virginica"]
#: per class: mean sepal length, sepal width, petal length, petal width (cm), and the colours seen
MEANS = np.array([[5.0, 3.4, 1.5, 0.2], [5.9, 2.8, 4.3, 1.3], [6.6, 3.0, 5.6, 2.0]], dtype=np.float32)
COLOURS = [["white", "violet"], ["violet", "blue"], ["blue", "purple"]]


def example(measurements: np.ndarray, colour: str, label: int) -> bytes:
    feature = {
        "measurements": tf.train.Feature(float_list=tf.train.FloatList(value=measurements.tolist())),
        "colour": tf.train.Feature(bytes_list=tf.train.BytesList(value=[colour.encode()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def main(out: str, per_class: int = 200, seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=False)
    rows = []
    for label, mean in enumerate(MEANS):
        for _ in range(per_class):
            rows.append((mean + rng.normal(0, 0.35, 4).astype(np.float32), str(rng.choice(COLOURS[label])), label))
    order = rng.permutation(len(rows))
    split_at = int(len(rows) * 0.8)
    splits = {"train": [rows[i] for i in order[:split_at]], "validation": [rows[i] for i in order[split_at:]]}
    manifest = {"format_version": 1, "prefix": "flowers", "classes": CLASSES, "image_size": None,
                "features": {"measurements": {"dtype": "float32", "shape": [4]},
                             "colour": {"dtype": "string", "shape": []}},
                "label": "label", "splits": {}}
    for split, items in splits.items():
        name = f"flowers-{split}-00000-of-00001.tfrecord"
        with tf.io.TFRecordWriter(str(folder / name)) as writer:
            for measurements, colour, label in items:
                writer.write(example(measurements, colour, label))
        manifest["splits"][split] = {"files": [name], "examples": len(items), "shard_examples": [len(items)]}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {len(splits['train'])} train and {len(splits['validation'])} validation examples to {folder}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data")
