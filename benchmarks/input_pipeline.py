"""Input-pipeline throughput: trainer.data.make_dataset vs the seed's chapter-5 pipeline vs decode-only.

    .venv-trainer/bin/python benchmarks/input_pipeline.py [--examples N] [--batch 64] [--image-size 64]

All three read the same generated JPEG shards (the embedded digits, written once into a temp folder)
in one run and produce batches of float32 images at the same size:

- make_dataset: the trainer's pipeline (parallel interleaved reads, batch-then-parse, parallel decode);
- seed ch.5:    the seed's ``decode_and_resize`` / ``normalize`` / ``prepare_for_training`` as written
                (list_files + TFRecordDataset(num_parallel_reads), parse_single_example of all nine
                features, one-hot labels, nearest resize, ``/255. + 0.5``, cache, shuffle(1000),
                repeat, batch, prefetch);
- decode-only:  a ceiling: the encoded JPEGs already in memory, only decoded, resized and batched.

Every pipeline is timed cold, from creating its iterator until ``--examples`` examples came out,
on a training set larger than that (the digits shards are copied as often as needed): each
pipeline reads and decodes every example once, as in a first epoch over a real dataset. (The
seed's ``cache()`` of decoded images only pays off from the second epoch, and only when the
decoded dataset fits in memory.)

Prints examples/s of each and the two ratios (make_dataset / seed, make_dataset / decode-only).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tensorflow as tf

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer import data
from trainer.sample_data import write_demo_dataset

AUTOTUNE = tf.data.AUTOTUNE


def seed_pipeline(data_dir: str, batch_size: int, image_size: int, num_classes: int) -> tf.data.Dataset:
    """The seed's chapter-5 pipeline, reimplemented as written (only the file prefix and sizes differ)."""
    train_file_pattern = f"{data_dir}/digits-train*.tfrecord*"
    train_all_files = tf.data.Dataset.list_files(tf.io.gfile.glob(train_file_pattern))
    train_all_ds = tf.data.TFRecordDataset(train_all_files, num_parallel_reads=AUTOTUNE)

    def decode_and_resize(serialized_example):
        parsed_features = tf.io.parse_single_example(
            serialized_example,
            features={
                "image/channels": tf.io.FixedLenFeature([], tf.int64),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64),
                "image/class/text": tf.io.FixedLenFeature([], tf.string),
                "image/colorspace": tf.io.FixedLenFeature([], tf.string),
                "image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/filename": tf.io.FixedLenFeature([], tf.string),
                "image/format": tf.io.FixedLenFeature([], tf.string),
                "image/height": tf.io.FixedLenFeature([], tf.int64),
                "image/width": tf.io.FixedLenFeature([], tf.int64),
            })
        image = tf.io.decode_jpeg(parsed_features["image/encoded"], channels=3)
        label = tf.cast(parsed_features["image/class/label"], tf.int32)
        label_one_hot = tf.one_hot(label, depth=num_classes)
        resized_image = tf.image.resize(image, [image_size, image_size], method="nearest")
        return resized_image, label_one_hot

    def normalize(image, label):
        image = tf.cast(image, tf.float32) / 255. + 0.5  # (sic)
        return image, label

    def prepare_for_training(ds, cache=True, shuffle_buffer_size=1000):
        if cache:
            ds = ds.cache()
        ds = ds.shuffle(buffer_size=shuffle_buffer_size)
        ds = ds.repeat()
        ds = ds.batch(batch_size)
        ds = ds.prefetch(buffer_size=AUTOTUNE)
        return ds

    dataset = train_all_ds.map(decode_and_resize)
    dataset = dataset.map(normalize, num_parallel_calls=AUTOTUNE)
    return prepare_for_training(dataset)


def decode_only(files: list[str], batch_size: int, image_size: int) -> tf.data.Dataset:
    """Ceiling: encoded JPEGs already in memory; nothing but decode + resize + batch."""
    encoded = []
    for raw in tf.data.TFRecordDataset(files):
        parsed = tf.io.parse_single_example(raw, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})
        encoded.append(parsed["image/encoded"].numpy())
    ds = tf.data.Dataset.from_tensor_slices(tf.constant(encoded)).repeat()
    ds = ds.batch(batch_size, drop_remainder=True)
    ds = ds.map(lambda e: data.decode_batch(e, (image_size, image_size)), num_parallel_calls=AUTOTUNE,
                deterministic=False)
    return ds.prefetch(AUTOTUNE)


def examples_per_second(ds: tf.data.Dataset, batch_size: int, examples: int) -> float:
    """Cold: from creating the iterator (buffers empty) to ``examples`` examples delivered."""
    batches = max(1, examples // batch_size)
    start = time.perf_counter()
    it = iter(ds)
    for _ in range(batches):
        next(it)
    return batches * batch_size / (time.perf_counter() - start)


def enlarge(data_dir: str, files: list[str], min_examples: int, per_copy: int) -> int:
    """Copy the training shards under new names until the training set holds > ``min_examples``."""
    copies = min_examples // per_copy + 1
    for c in range(1, copies):
        for f in files:
            name = os.path.basename(f).replace("digits-train-", f"digits-train-copy{c}-")
            tf.io.gfile.copy(f, os.path.join(data_dir, name), overwrite=True)
    return copies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=4000, help="examples timed per pipeline")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=64, help="stored and produced image side")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--data-dir", default=None, help="reuse a folder written by trainer.sample_data")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-input-") as tmp:
        data_dir = args.data_dir
        size = args.image_size
        if data_dir is None:
            data_dir = os.path.join(tmp, "digits")
            write_demo_dataset(data_dir, shards=args.shards, image_size=args.image_size, validation_fraction=0.2)
        else:
            data_dir = shutil.copytree(data_dir, os.path.join(tmp, "digits"))
        manifest = data.read_manifest(data_dir)
        copies = enlarge(data_dir, list(manifest.splits["train"].files), args.examples,
                         manifest.splits["train"].examples)
        files = sorted(tf.io.gfile.glob(os.path.join(data_dir, "digits-train*.tfrecord*")))
        print(f"data: {len(files)} shards, {copies * manifest.splits['train'].examples} JPEG examples "
              f"({size}x{size}), batch {args.batch}, timing {args.examples} examples per pipeline")
        pipelines = {
            "make_dataset": data.make_dataset(files, args.batch, (size, size), training=True),
            "seed ch.5": seed_pipeline(data_dir, args.batch, size, len(manifest.classes)),
            "decode-only": decode_only(files, args.batch, size),
        }
        rates = {}
        for name, ds in pipelines.items():
            rates[name] = examples_per_second(ds, args.batch, args.examples)
            print(f"{name:>13}: {rates[name]:10.0f} examples/s")
    print(f"make_dataset / seed ch.5    = {rates['make_dataset'] / rates['seed ch.5']:.2f}x")
    print(f"make_dataset / decode-only  = {rates['make_dataset'] / rates['decode-only']:.2f} of the ceiling")
    return 0


if __name__ == "__main__":
    sys.exit(main())
