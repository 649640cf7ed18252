"""Cut test images out of a data folder's validation shards and record what the SavedModel's serving signature,
called directly (no JSON, no HTTP), says of them. Run in the trainer environment.

    python make_reference.py EXPORT_DIR DATA_DIR OUT_DIR
writes OUT_DIR/img-<i>.jpg (the records' own JPEG bytes), OUT_DIR/img-<i>.png (PNG re-encodings of some) and
OUT_DIR/reference.json: {file name: {"class_id", "class_name", "probabilities"}}.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

COUNT = 6


def main(export_dir: str, data_dir: str, out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shards = sorted(str(p) for p in Path(data_dir).glob("*validation*.tfrecord"))
    files: dict[str, bytes] = {}
    for i, record in enumerate(tf.data.TFRecordDataset(shards).take(COUNT)):
        example = tf.train.Example.FromString(record.numpy())
        jpeg = example.features.feature["image/encoded"].bytes_list.value[0]
        files[f"img-{i}.jpg"] = jpeg
        if i % 2:
            files[f"img-{i}.png"] = tf.io.encode_png(tf.io.decode_jpeg(jpeg, channels=3)).numpy()
    for name, data in files.items():
        (out / name).write_bytes(data)
    signature = tf.saved_model.load(export_dir).signatures["serving_default"]
    outputs = signature(image_bytes=tf.constant(list(files.values())))
    reference = {}
    for i, name in enumerate(files):
        reference[name] = {
            "class_id": int(outputs["class_id"][i].numpy()),
            "class_name": outputs["class_name"][i].numpy().decode(),
            "probabilities": outputs["probabilities"][i].numpy().tolist(),
        }
    (out / "reference.json").write_text(json.dumps(reference, indent=2))


if __name__ == "__main__":
    main(*sys.argv[1:4])
