"""Input pipeline: TFRecord shards in the seed's schema -> (images float32 [B,H,W,3] in [0,1], labels int32).

Differences from the seed's chapter-5 pipeline, and why:
- records are read from several files at once (``interleave``, order not enforced) -> GCS latency hidden;
- records are batched first and parsed per batch (``parse_example``): one op per batch, not per record;
- no one-hot labels (sparse labels + a logits loss), pixels in [0, 1] (the seed's ``/255 + 0.5`` was off);
- ``repeat()`` with explicit steps and ``drop_remainder=True``: static shapes for TPUs, and every
  replica gets the same number of full batches, which distributed evaluation needs;
- auto-sharding by FILE when every worker gets at least one file, else by DATA (FILE would leave a
  worker without input);
- example counts come from ``manifest.json``, never from a pass over the records.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from typing import Sequence

import tensorflow as tf

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer.errors import DataError
from trainer.records import MANIFEST, SPLITS

AUTOTUNE = tf.data.AUTOTUNE

#: Only what training needs is parsed; the other schema keys stay in the records for other tools.
_PARSE_SPEC = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


# ---------------------------------------------------------------------------------------------- manifest
@dataclasses.dataclass(frozen=True)
class Split:
    files: tuple[str, ...]  # full paths
    examples: int
    shard_examples: tuple[int, ...] | None


@dataclasses.dataclass(frozen=True)
class Manifest:
    data_dir: str
    prefix: str
    classes: tuple[str, ...]
    image_size: tuple[int, int] | None
    splits: dict[str, Split]

    def file_pattern(self, split: str) -> str:
        return _join(self.data_dir, f"{self.prefix}-{split}-*.tfrecord*")


def _join(base: str, name: str) -> str:
    return posixpath.join(base.rstrip("/"), name) if "://" in base else tf.io.gfile.join(base, name)


def read_manifest(data_dir: str) -> Manifest:
    """Read and check ``<data_dir>/manifest.json``; every listed shard must exist."""
    path = _join(data_dir, MANIFEST)
    try:
        if not tf.io.gfile.isdir(data_dir):
            raise DataError(f"--data_dir {data_dir} does not exist or is not a folder")
        if not tf.io.gfile.exists(path):
            raise DataError(
                f"no {MANIFEST} in --data_dir {data_dir}: write the data with python -m trainer.sample_data "
                "or python -m trainer.make_tfrecords")
        raw = json.loads(tf.io.gfile.GFile(path, "r").read())
    except tf.errors.OpError as err:
        raise DataError(f"cannot read {path}: {err.message}") from None
    except ValueError as err:
        raise DataError(f"{path} is not valid JSON: {err}") from None
    try:
        prefix = str(raw["prefix"])
        classes = tuple(str(c) for c in raw["classes"])
        size = raw.get("image_size")
        image_size = (int(size[0]), int(size[1])) if size else None
        splits = {}
        for name in SPLITS:
            entry = raw["splits"].get(name) or {"files": [], "examples": 0}
            shard_examples = entry.get("shard_examples")
            splits[name] = Split(
                files=tuple(_join(data_dir, f) for f in entry["files"]),
                examples=int(entry["examples"]),
                shard_examples=tuple(int(n) for n in shard_examples) if shard_examples is not None else None,
            )
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise DataError(f"{path} is malformed ({type(err).__name__}: {err}); rewrite the data folder") from None
    if len(classes) < 2:
        raise DataError(f"{path} lists {len(classes)} class(es); a classifier needs at least 2")
    present = set(tf.io.gfile.glob(_join(data_dir, f"{prefix}-*")))
    for split in splits.values():
        for f in split.files:
            if f not in present:
                raise DataError(f"shard {f} listed in {path} is missing")
    return Manifest(data_dir=data_dir, prefix=prefix, classes=classes, image_size=image_size, splits=splits)


# ---------------------------------------------------------------------------------------------- decoding
def decode_image(encoded: tf.Tensor, image_size: Sequence[int]) -> tf.Tensor:
    """Encoded JPEG/PNG/GIF/BMP bytes -> float32 [H, W, 3] in [0, 1]. Shared by training and serving."""
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    image = tf.image.resize(image, list(image_size), method="bilinear")  # float32, 0..255
    image = tf.ensure_shape(image, [image_size[0], image_size[1], 3])
    return image / 255.0


def decode_batch(encoded: tf.Tensor, image_size: Sequence[int]) -> tf.Tensor:
    spec = tf.TensorSpec([image_size[0], image_size[1], 3], tf.float32)
    return tf.map_fn(lambda e: decode_image(e, image_size), encoded, fn_output_signature=spec,
                     parallel_iterations=16)


def _parse_batch(serialized: tf.Tensor, image_size: Sequence[int]):
    parsed = tf.io.parse_example(serialized, _PARSE_SPEC)
    labels = tf.cast(parsed["image/class/label"], tf.int32)
    return decode_batch(parsed["image/encoded"], image_size), labels


def _parse_one(serialized: tf.Tensor, image_size: Sequence[int]):
    parsed = tf.io.parse_single_example(serialized, _PARSE_SPEC)
    return decode_image(parsed["image/encoded"], image_size), tf.cast(parsed["image/class/label"], tf.int32)


# ---------------------------------------------------------------------------------------------- pipeline
def list_files(file_pattern: str | Sequence[str]) -> list[str]:
    if isinstance(file_pattern, str):
        files = sorted(tf.io.gfile.glob(file_pattern))
        if not files:
            raise DataError(f"no TFRecord files match {file_pattern}")
        return files
    files = list(file_pattern)
    if not files:
        raise DataError("no TFRecord files given")
    return files


def shard_policy(num_files: int, num_workers: int) -> tf.data.experimental.AutoShardPolicy:
    """FILE sharding when every worker gets at least one file, else DATA (each worker skips others' records)."""
    if num_workers <= 1:
        return tf.data.experimental.AutoShardPolicy.AUTO
    if num_files >= num_workers:
        return tf.data.experimental.AutoShardPolicy.FILE
    return tf.data.experimental.AutoShardPolicy.DATA


def make_dataset(file_pattern: str | Sequence[str], batch_size: int, image_size: Sequence[int], training: bool, *,
                 num_workers: int = 1, cache: bool = False, shuffle_buffer: int = 2048,
                 skip_corrupt: bool = False,
                 seed: int | None = None, repeat: bool | None = None) -> tf.data.Dataset:
    """Dataset of ``(images float32 [B,H,W,3] in [0,1], labels int32 [B])`` batches.

    ``file_pattern``: glob (local or gs://) or a list of files. ``batch_size`` is the global batch
    (a distribution strategy splits it across replicas); the last partial batch is dropped.
    ``training`` shuffles files and records and repeats endlessly (pass explicit steps to ``fit``);
    ``repeat`` overrides that (the trainer repeats validation data too and passes validation steps,
    so every replica sees the same number of full batches). One pass: ``training=False``.
    ``skip_corrupt`` stops reading a file at a truncated or corrupted record and drops records whose
    image does not decode (parsed record by record); :func:`scan_shards` counts what that skips.
    """
    files = list_files(file_pattern)
    image_size = (int(image_size[0]), int(image_size[1]))
    if skip_corrupt:
        # A file's reader stops at its first truncated/corrupted record (ignore_errors ends that file).
        read = lambda f: tf.data.TFRecordDataset(f).ignore_errors()  # noqa: E731
    else:
        read = tf.data.TFRecordDataset
    # The source stays a dataset of file names, so FILE auto-sharding can split it between workers.
    ds = tf.data.Dataset.from_tensor_slices(files)
    if training:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    ds = ds.interleave(read, cycle_length=min(len(files), 8), num_parallel_calls=AUTOTUNE, deterministic=False)
    if cache:
        ds = ds.cache()  # serialized records: small, and decoding stays in the parallel map
    if training:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    endless = training if repeat is None else repeat
    if endless:
        ds = ds.repeat()
    if skip_corrupt:
        ds = ds.map(lambda r: _parse_one(r, image_size), num_parallel_calls=AUTOTUNE, deterministic=False)
        ds = ds.ignore_errors()
        ds = ds.batch(batch_size, drop_remainder=True)
    else:
        ds = ds.batch(batch_size, drop_remainder=True)
        ds = ds.map(lambda r: _parse_batch(r, image_size), num_parallel_calls=AUTOTUNE, deterministic=False)
    ds = ds.prefetch(AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = False
    options.experimental_distribute.auto_shard_policy = shard_policy(len(files), num_workers)
    return ds.with_options(options)


# ---------------------------------------------------------------------------------------------- corruption
@dataclasses.dataclass(frozen=True)
class ShardProblem:
    file: str
    record: int  # index of the first bad record (0-based)
    reason: str
    bad_records: int  # records lost in this file


@dataclasses.dataclass(frozen=True)
class ScanResult:
    readable_records: dict[str, int]  # file -> records readable before a corrupt/truncated tail
    problems: list[ShardProblem]

    @property
    def bad_records(self) -> int:
        return sum(p.bad_records for p in self.problems)


def scan_shards(files: Sequence[str], image_size: Sequence[int],
                shard_examples: Sequence[int] | None = None) -> ScanResult:
    """Read every record of ``files`` once and find the ones that cannot be used.

    Only run on request (``--skip_corrupt``) or after the pipeline failed, to name the bad file.
    A file is read until its first framing error (truncated or corrupted record); every readable
    record's image is decoded in a parallel map.
    """
    image_size = (int(image_size[0]), int(image_size[1]))
    readable: dict[str, int] = {}
    problems: list[ShardProblem] = []
    for k, f in enumerate(files):
        n, framing_error = 0, None
        try:
            for _ in tf.data.TFRecordDataset(f, buffer_size=1 << 20):
                n += 1
        except tf.errors.OpError as err:
            framing_error = f"{type(err).__name__}: {err.message.splitlines()[0]}"
        readable[f] = n
        expected = shard_examples[k] if shard_examples is not None and k < len(shard_examples) else None
        indexed = tf.data.TFRecordDataset(f).take(n).enumerate()
        # The pixels feed the output so the decode is not pruned from the graph.
        good = indexed.map(lambda i, r: (i, tf.reduce_max(_parse_one(r, image_size)[0])), num_parallel_calls=AUTOTUNE)
        good_ids = set(int(i) for i, _ in good.ignore_errors())
        bad_ids = sorted(set(range(n)) - good_ids)
        lost_tail = 0
        if framing_error is not None:
            lost_tail = max(1, (expected - n) if expected is not None else 1)
        if bad_ids:
            reason = "image or record does not decode"
            try:
                record = next(iter(tf.data.TFRecordDataset(f).skip(bad_ids[0]).take(1)))
                _parse_one(record, image_size)
            except tf.errors.OpError as err:
                reason = f"{type(err).__name__}: {err.message.splitlines()[0]}"
            problems.append(ShardProblem(f, bad_ids[0], reason, len(bad_ids) + lost_tail))
        elif framing_error is not None:
            problems.append(ShardProblem(f, n, framing_error, lost_tail))
    return ScanResult(readable, problems)
