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
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer.errors import DataError, unreachable_storage
from trainer.localfiles import is_local, read_small, regular_size
from trainer.paths import join_path
from trainer.records import FORMAT_VERSION, MANIFEST, PREFIX_RE, SPLITS

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
class Feature:
    """One feature of a record that is not an image (the manifest's ``features``): its dtype and fixed shape."""
    dtype: str                 # one of FEATURE_DTYPES
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Manifest:
    data_dir: str
    prefix: str
    classes: tuple[str, ...]
    image_size: tuple[int, int] | None
    splits: dict[str, Split]
    #: records of named features instead of images (tabular, text): name -> Feature; None for image records
    features: dict[str, Feature] | None = None
    #: the int64 feature holding the class id, with ``features``
    label: str = "label"


#: The dtypes a manifest's ``features`` may declare (tf.train.Example's three lists).
FEATURE_DTYPES = {"float32": "float32", "int64": "int64", "string": "string"}
_FEATURE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_FEATURES = 1000
MAX_FEATURE_VALUES = 1_000_000     # values of one feature in one example


#: Limits of a manifest (far above anything the data tools write; a manifest is read whole into memory).
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MAX_CLASSES = 100_000
MAX_IMAGE_SIDE = 65_535  # JPEG's limit
MAX_EXAMPLES = 2**53  # exact in JSON numbers everywhere
#: A TFRecord holds 16 bytes of framing per record (length, its CRC, the data's CRC): the least a record takes.
RECORD_FRAMING_BYTES = 16
REWRITE = "rewrite the data folder with python -m trainer.make_tfrecords or python -m trainer.sample_data"


class _Fields:
    """Typed access to a decoded manifest; every failure names the file and the field."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, field: str, expected: str, value: Any = None, *, show: bool = True) -> DataError:
        got = ""
        if show:
            text = repr(value)
            got = f", got {text if len(text) <= 60 else text[:57] + '...'}"
        return DataError(f"{self.path}: field {field} must be {expected}{got}; rewrite the data folder with "
                         "python -m trainer.make_tfrecords or python -m trainer.sample_data")

    def int_(self, value: Any, field: str, low: int, high: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise self.fail(field, f"an integer from {low} to {high}", value)
        return value

    def list_(self, value: Any, field: str, limit: int) -> list:
        if not isinstance(value, list) or len(value) > limit:
            raise self.fail(field, f"a list (at most {limit} items)", value)
        return value


def parse_manifest(raw: bytes, path: str, data_dir: str) -> Manifest:
    """Validate the bytes of ``manifest.json`` at the edge into a :class:`Manifest` (no I/O).

    Checked: UTF-8 JSON object of sane size and depth; ``format_version`` 1 when given; ``prefix`` a
    shard-name prefix; ``classes`` 2+ unique non-empty strings; ``image_size`` null or ``[h, w]``
    (1..65535); ``splits`` exactly ``train`` and ``validation``, each with ``files`` (unique plain
    file names ``<prefix>-<split>-…``), ``examples`` (0 exactly when there are no files) and optional
    ``shard_examples`` (one count per file, summing to ``examples``).
    """
    f = _Fields(path)
    if len(raw) > MAX_MANIFEST_BYTES:
        raise DataError(f"{path} is {len(raw)} bytes; a manifest is at most {MAX_MANIFEST_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path} is not UTF-8 text (byte {err.start}: {err.reason}); rewrite the data folder") from None
    try:
        doc = json.loads(text)
    except RecursionError:
        raise DataError(f"{path} is nested too deeply to be a manifest; rewrite the data folder") from None
    except ValueError as err:
        raise DataError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise f.fail("(top level)", "a JSON object", type(doc).__name__, show=True)
    if "format_version" in doc and (doc["format_version"] != FORMAT_VERSION or isinstance(doc["format_version"], bool)):
        raise f.fail("format_version", f"{FORMAT_VERSION} (this trainer's data format)", doc["format_version"])
    prefix = doc.get("prefix")
    if not isinstance(prefix, str) or not PREFIX_RE.fullmatch(prefix):
        raise f.fail("prefix", "1-100 letters, digits, '_', '.', '-'", prefix)
    classes = f.list_(doc.get("classes"), "classes", MAX_CLASSES)
    for i, name in enumerate(classes):
        if not isinstance(name, str) or not name.strip() or len(name) > 1000:
            raise f.fail(f"classes[{i}]", "a non-empty class name (at most 1000 characters)", name)
    if len(set(classes)) != len(classes):
        dup = next(c for i, c in enumerate(classes) if c in classes[:i])
        raise f.fail("classes", "unique names", dup)
    if len(classes) < 2:
        raise DataError(f"{path} lists {len(classes)} class(es); a classifier needs at least 2")
    size = doc.get("image_size")
    image_size = None
    if size is not None:
        if not isinstance(size, list) or len(size) != 2:
            raise f.fail("image_size", "null or [height, width]", size)
        image_size = (f.int_(size[0], "image_size[0]", 1, MAX_IMAGE_SIDE),
                      f.int_(size[1], "image_size[1]", 1, MAX_IMAGE_SIDE))
    raw_splits = doc.get("splits")
    if not isinstance(raw_splits, dict):
        raise f.fail("splits", 'an object {"train": {...}, "validation": {...}}', raw_splits)
    unknown = sorted(repr(k)[:40] for k in raw_splits if k not in SPLITS)
    if unknown:
        raise f.fail(f"splits[{unknown[0]}]", f"absent (the splits are {', '.join(SPLITS)})", show=False)
    splits, seen = {}, set()
    for name in SPLITS:
        entry = raw_splits.get(name)
        if not isinstance(entry, dict):
            raise f.fail(f"splits.{name}", 'an object {"files", "examples", "shard_examples"}', entry)
        files = f.list_(entry.get("files"), f"splits.{name}.files", 100_000)
        for i, fname in enumerate(files):
            if (not isinstance(fname, str) or not fname.startswith(f"{prefix}-{name}-") or "/" in fname
                    or "\\" in fname or len(fname) > 255 or not fname.isprintable()):
                raise f.fail(f"splits.{name}.files[{i}]", f"a file name {prefix}-{name}-… in the data folder", fname)
            if fname in seen:
                raise f.fail(f"splits.{name}.files[{i}]", "listed once", fname)
            seen.add(fname)
        examples = f.int_(entry.get("examples"), f"splits.{name}.examples", 0, MAX_EXAMPLES)
        if (examples == 0) != (not files):
            raise f.fail(f"splits.{name}.examples", f"0 exactly when files is empty ({len(files)} file(s))", examples)
        shard_examples = entry.get("shard_examples")
        if shard_examples is not None:
            counts = f.list_(shard_examples, f"splits.{name}.shard_examples", len(files))
            if len(counts) != len(files):
                raise f.fail(f"splits.{name}.shard_examples", f"one count per file ({len(files)})", counts)
            counts = [f.int_(n, f"splits.{name}.shard_examples[{i}]", 0, MAX_EXAMPLES) for i, n in enumerate(counts)]
            if sum(counts) != examples:
                raise f.fail(f"splits.{name}.shard_examples", f"counts that sum to examples ({examples})", counts)
            shard_examples = tuple(counts)
        splits[name] = Split(files=tuple(join_path(data_dir, fn) for fn in files), examples=examples,
                             shard_examples=shard_examples)
    features, label = _features(f, doc)
    if features is not None and image_size is not None:
        raise f.fail("image_size", "null when the records hold features", size)
    return Manifest(data_dir=data_dir, prefix=prefix, classes=tuple(classes), image_size=image_size, splits=splits,
                    features=features, label=label)


def _features(f: _Fields, doc: dict) -> tuple[dict[str, Feature] | None, str]:
    """The optional ``features`` (``{name: {"dtype": float32|int64|string, "shape": [..]}}``) and ``label`` (the
    int64 feature with the class id, default "label") of a manifest of records that are not images."""
    raw = doc.get("features")
    label = doc.get("label", "label")
    if raw is None:
        if "label" in doc:
            raise f.fail("label", "given only with features", label)
        return None, "label"
    if not isinstance(raw, dict) or not 1 <= len(raw) <= MAX_FEATURES:
        raise f.fail("features", f"an object of 1 to {MAX_FEATURES} named features", raw)
    if not isinstance(label, str) or not _FEATURE_NAME.match(label):
        raise f.fail("label", "the name of the int64 feature that holds the class id", label)
    out: dict[str, Feature] = {}
    for name, spec in raw.items():
        where = f"features[{name!r}]"[:80]
        if not _FEATURE_NAME.match(name) or name == label:
            raise f.fail(where, f"a feature name (letters, digits, '_'; not the label {label!r})", name)
        if not isinstance(spec, dict) or spec.get("dtype") not in FEATURE_DTYPES:
            raise f.fail(f"{where}.dtype", f"one of {', '.join(FEATURE_DTYPES)}", (spec or {}).get("dtype")
                         if isinstance(spec, dict) else spec)
        shape = f.list_(spec.get("shape", []), f"{where}.shape", 8)
        dims = tuple(f.int_(d, f"{where}.shape", 1, MAX_FEATURE_VALUES) for d in shape)
        if math.prod(dims) > MAX_FEATURE_VALUES:
            raise f.fail(f"{where}.shape", f"at most {MAX_FEATURE_VALUES} values", list(dims))
        out[name] = Feature(spec["dtype"], dims)
    return out, label


def read_manifest(data_dir: str) -> Manifest:
    """Read and check ``<data_dir>/manifest.json``; every listed shard must exist, and hold data if counted."""
    path = join_path(data_dir, MANIFEST)
    try:
        # exists first: it raises when storage cannot be reached, where isdir says False
        if not tf.io.gfile.exists(data_dir) or not tf.io.gfile.isdir(data_dir):
            raise DataError(f"--data_dir {data_dir} does not exist or is not a folder")
        if not tf.io.gfile.exists(path):
            raise DataError(
                f"no {MANIFEST} in --data_dir {data_dir}: write the data with python -m trainer.sample_data "
                "or python -m trainer.make_tfrecords")
        local = is_local(path)
        if local:  # a FIFO, device or huge file in a local folder is refused before TensorFlow would block on it
            raw = read_small(path, "data manifest", MAX_MANIFEST_BYTES, hint=REWRITE)
        else:
            size = tf.io.gfile.stat(path).length
            if size > MAX_MANIFEST_BYTES:
                raise DataError(f"{path} is {size} bytes; a manifest is at most {MAX_MANIFEST_BYTES} bytes")
            with tf.io.gfile.GFile(path, "rb") as fh:
                raw = fh.read()
        manifest = parse_manifest(raw, path, data_dir)
        present = set(tf.io.gfile.glob(join_path(data_dir, f"{manifest.prefix}-*")))
        for name, split in manifest.splits.items():
            for k, shard in enumerate(split.files):
                if shard not in present:
                    raise DataError(f"shard {shard} listed in {path} (splits.{name}.files[{k}]) is missing")
            # A TFRecord holds 16 bytes of framing per record: a shard with counted examples is not empty.
            sizes = [regular_size(shard, "shard", hint=REWRITE) if local else tf.io.gfile.stat(shard).length
                     for shard in split.files]
            counts = split.shard_examples
            if counts is None:  # no count per shard: only a split whose every shard is empty is wrong
                counts = (split.examples if max(sizes, default=16) < 16 else 0,) + (0,) * (len(sizes) - 1)
            for shard, size, counted in zip(split.files, sizes, counts):
                if counted and size < RECORD_FRAMING_BYTES:
                    raise DataError(f"shard {shard} is empty but {path} counts {counted} example(s) in it "
                                    f"(splits.{name}); rewrite the data folder")
                if counted > size // RECORD_FRAMING_BYTES:
                    raise DataError(f"{path} counts {counted} example(s) in shard {shard} (splits.{name}) but its "
                                    f"{size} bytes hold at most {size // RECORD_FRAMING_BYTES}; {REWRITE}")
            # A record takes 16 bytes at least: a count its shards cannot hold (a manifest claiming 2**50 examples
            # made one epoch endless) is refused, naming the file and the split.
            if split.examples > sum(sizes) // RECORD_FRAMING_BYTES:
                raise DataError(f"{path} counts {split.examples} example(s) in splits.{name} but its "
                                f"{len(sizes)} shard(s) of {sum(sizes)} bytes hold at most "
                                f"{sum(sizes) // RECORD_FRAMING_BYTES} (16 bytes a record at least); {REWRITE}")
    except tf.errors.OpError as err:
        unreachable = unreachable_storage(err.message, f"read --data_dir {data_dir}")
        if unreachable is not None:
            raise unreachable from None
        raise DataError(f"cannot read {path}: {err.message.strip().splitlines()[0]}") from None
    return manifest


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


def _checked_labels(labels: tf.Tensor, num_classes: int | None) -> tf.Tensor:
    """int64 labels -> int32; with ``num_classes`` a label outside 0..num_classes-1 is an InvalidArgumentError
    here (named by :func:`scan_shards`), not deep inside the loss."""
    if num_classes is not None:
        ok = tf.reduce_all((labels >= 0) & (labels < num_classes))
        message = f"label outside the {num_classes} classes listed in {MANIFEST} (0..{num_classes - 1})"
        with tf.control_dependencies([tf.debugging.Assert(ok, [message, labels], summarize=3)]):
            labels = tf.identity(labels)
    return tf.cast(labels, tf.int32)


def _parse_batch(serialized: tf.Tensor, image_size: Sequence[int], num_classes: int | None = None):
    parsed = tf.io.parse_example(serialized, _PARSE_SPEC)
    labels = _checked_labels(parsed["image/class/label"], num_classes)
    return decode_batch(parsed["image/encoded"], image_size), labels


def _parse_one(serialized: tf.Tensor, image_size: Sequence[int], num_classes: int | None = None):
    parsed = tf.io.parse_single_example(serialized, _PARSE_SPEC)
    return decode_image(parsed["image/encoded"], image_size), _checked_labels(parsed["image/class/label"], num_classes)


@dataclasses.dataclass(frozen=True)
class RecordFormat:
    """How a data folder's records parse: ``one(serialized) -> (features, label)`` and ``batch(serialized[B]) ->
    (features [B, ...], labels [B])``."""
    one: Any
    batch: Any


def image_format(image_size: Sequence[int], num_classes: int | None = None) -> RecordFormat:
    """Image records (the schema of trainer.tfrecord): images float32 [H, W, 3] in [0, 1], decoded and resized."""
    size = (int(image_size[0]), int(image_size[1]))

    def one(serialized):
        return _parse_one(serialized, size, num_classes)

    def batch(serialized):
        return _parse_batch(serialized, size, num_classes)

    return RecordFormat(one, batch)


def feature_format(features: dict[str, Feature], label: str, num_classes: int | None = None) -> RecordFormat:
    """Records of named features (a manifest's ``features``): a dict of tensors of the declared dtypes and shapes."""
    dtypes = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}
    spec = {name: tf.io.FixedLenFeature(list(f.shape), dtypes[f.dtype]) for name, f in features.items()}
    spec[label] = tf.io.FixedLenFeature([], tf.int64)

    def split(parsed):
        labels = _checked_labels(parsed.pop(label), num_classes)
        return parsed, labels

    def one(serialized):
        return split(tf.io.parse_single_example(serialized, spec))

    def batch(serialized):
        return split(tf.io.parse_example(serialized, spec))

    return RecordFormat(one, batch)


def manifest_format(manifest: Manifest, image_size: Sequence[int] | None) -> RecordFormat:
    """The format of ``manifest``'s records (``image_size``: what images are resized to)."""
    if manifest.features is not None:
        return feature_format(manifest.features, manifest.label, len(manifest.classes))
    return image_format(image_size, len(manifest.classes))


def record_parser(image_size: Sequence[int], num_classes: int | None = None):
    """The one-record parser of image data: ``serialized -> (images, label)``."""
    return image_format(image_size, num_classes).one


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
                 skip_corrupt: bool = False, num_classes: int | None = None,
                 seed: int | None = None, repeat: bool | None = None, skip: int = 0,
                 fmt: RecordFormat | None = None) -> tf.data.Dataset:
    """Dataset of ``(images float32 [B,H,W,3] in [0,1], labels int32 [B])`` batches.

    ``file_pattern``: glob (local or gs://) or a list of files. ``batch_size`` is the global batch
    (a distribution strategy splits it across replicas); the last partial batch is dropped.
    ``training`` shuffles files and records and repeats endlessly (pass explicit steps to ``fit``);
    ``repeat`` overrides that (the trainer repeats validation data too and passes validation steps,
    so every replica sees the same number of full batches). One pass: ``training=False``.
    ``skip_corrupt`` stops reading a file at a truncated or corrupted record and drops records whose
    image does not decode (parsed record by record); :func:`scan_shards` counts what that skips.
    ``num_classes`` (the manifest's): a record whose label is not a listed class is an error (or, with
    ``skip_corrupt``, skipped like an undecodable one).
    ``seed``: shuffles are seeded and every stage keeps its order (``deterministic=True``), so the same seed
    gives the same batches; without one, parallel stages may reorder elements for speed.
    ``skip``: records of the (endless) record stream to pass over before batching, read but not decoded:
    a run resumed from a backup continues where the interrupted run's stream was (:func:`records_read`
    counts them; with several workers, each worker's own stream after sharding).
    ``fmt``: how the records parse (:func:`feature_format` for records of features); default image records.
    """
    files = list_files(file_pattern)
    fmt = fmt or image_format(image_size, num_classes)
    if skip_corrupt:
        # A file's reader stops at its first truncated/corrupted record (ignore_errors ends that file).
        read = lambda f: tf.data.TFRecordDataset(f).ignore_errors()  # noqa: E731
    else:
        read = tf.data.TFRecordDataset
    # The source stays a dataset of file names, so FILE auto-sharding can split it between workers.
    ds = tf.data.Dataset.from_tensor_slices(files)
    if training:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    ordered = seed is not None
    ds = ds.interleave(read, cycle_length=min(len(files), 8), num_parallel_calls=AUTOTUNE, deterministic=ordered)
    if cache:
        ds = ds.cache()  # serialized records: small, and decoding stays in the parallel map
    if training:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    endless = training if repeat is None else repeat
    if endless:
        ds = ds.repeat()
    if skip:
        # After the shuffles and repeat (so the records after them are the ones an uninterrupted run reads
        # next) and before any decoding. FILE auto-sharding puts each worker's shard below this point, so
        # the count is per worker; DATA sharding splits batches after it, so the count is the whole stream.
        ds = ds.skip(skip)
    if skip_corrupt:
        ds = ds.map(fmt.one, num_parallel_calls=AUTOTUNE, deterministic=ordered)
        ds = ds.ignore_errors()
        ds = ds.batch(batch_size, drop_remainder=True)
    else:
        ds = ds.batch(batch_size, drop_remainder=True)
        ds = ds.map(fmt.batch, num_parallel_calls=AUTOTUNE, deterministic=ordered)
    ds = ds.prefetch(AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = ordered
    options.experimental_distribute.auto_shard_policy = shard_policy(len(files), num_workers)
    return ds.with_options(options)


def evaluation_steps(examples: int, global_batch: int) -> int:
    """Global batches one exact pass over ``examples`` takes (the last one padded: :func:`make_eval_dataset`)."""
    return max(1, -(-examples // global_batch))


#: One evaluation pass's parsed batches stay in memory after the first evaluation when they hold at most this many
#: bytes (each worker its own copy): validation is then not read and parsed again at every epoch's end
#: (benchmarks/plugin_loop.py: ~40 ms of a 1 s epoch on the tabular example). A larger pass is read each time.
VALIDATION_CACHE_BYTES = 256 * 2**20


def _pass_bytes(ds: tf.data.Dataset, steps: int, files: Sequence[str]) -> int | None:
    """The bytes ``steps`` batches of ``ds`` hold in memory: fixed-shape tensors exactly; string tensors (text
    features) at most twice the split's serialized bytes (its records, and copies of one as padding). None when a
    shape is not known."""
    total, strings = 0, False
    for spec in tf.nest.flatten(ds.element_spec):
        if spec.dtype == tf.string:
            strings = True
        elif spec.shape.is_fully_defined():
            total += spec.shape.num_elements() * spec.dtype.size * steps
        else:
            return None
    if strings:
        try:
            total += 2 * sum(tf.io.gfile.stat(f).length for f in files)
        except tf.errors.OpError:
            return None
    return total


def make_eval_dataset(file_pattern: str | Sequence[str], batch_size: int, examples: int, fmt: RecordFormat, *,
                      skip_corrupt: bool = False, cache: bool = False,
                      cache_limit: int = VALIDATION_CACHE_BYTES) -> tf.data.Dataset:
    """Every record of a split exactly once per pass, as ``(features, labels, weights)`` batches of ``batch_size``.

    Validation used to repeat its records with ``drop_remainder``: with 22 images and batch 32 ten were counted
    twice, and with larger sets up to ``batch_size - 1`` were never seen. Here one pass is the records in file
    order with weight 1, then copies of the first with weight 0 up to :func:`evaluation_steps` full batches
    (static shapes for TPUs, equal batches for every replica); the pass repeats, so each evaluation of that many
    steps reads exactly one pass. Metrics compiled as ``weighted_metrics`` count the real records only. Every
    worker reads the whole stream (DATA auto-sharding): tf.distribute splits each global batch among the replicas,
    so each record is evaluated once across the cluster. Records are padded while still serialized and parsed a
    batch at a time (``fmt.batch``: a third of the per-record cost at every evaluation, benchmarks/plugin_loop.py);
    with ``skip_corrupt`` they are parsed one by one (``fmt.one``) so a record that does not parse is dropped, and
    ``examples`` must be the count left (the trainer's scan). A pass of at most ``cache_limit`` bytes, parsed, is
    kept in memory after the first evaluation (``VALIDATION_CACHE_BYTES``).
    """
    files = list_files(file_pattern)
    read = (lambda f: tf.data.TFRecordDataset(f).ignore_errors()) if skip_corrupt else tf.data.TFRecordDataset
    records = tf.data.Dataset.from_tensor_slices(files).flat_map(read)
    if cache:
        records = records.cache()
    if skip_corrupt:
        parsed = records.map(fmt.one, num_parallel_calls=AUTOTUNE, deterministic=True).ignore_errors()
        return exact_passes(parsed, batch_size, examples)
    steps = evaluation_steps(examples, batch_size)
    padding = steps * batch_size - examples
    padded = records.take(examples).concatenate(records.take(1).repeat(padding))
    weights = tf.data.Dataset.from_tensor_slices(tf.concat([tf.ones([examples]), tf.zeros([padding])], axis=0))
    ds = (tf.data.Dataset.zip((padded, weights)).batch(batch_size, drop_remainder=True)
          .map(lambda serialized, weight: (*fmt.batch(serialized), weight), num_parallel_calls=AUTOTUNE,
               deterministic=True))
    size = _pass_bytes(ds, steps, files)
    if size is not None and size <= cache_limit:
        ds = ds.take(steps).cache()      # exactly one pass: the same batches at every evaluation
    return _evaluation_options(ds.repeat().prefetch(AUTOTUNE))


def exact_passes(examples_ds: tf.data.Dataset, batch_size: int, examples: int) -> tf.data.Dataset:
    """``(features, label)`` examples -> endless passes of :func:`evaluation_steps` batches ``(features, labels,
    weights)``: the first ``examples`` with weight 1, then the first one again with weight 0 (see
    :func:`make_eval_dataset`)."""
    steps = evaluation_steps(examples, batch_size)
    real = examples_ds.take(examples).map(lambda x, y: (x, y, tf.constant(1.0)))
    padding = examples_ds.take(1).repeat(steps * batch_size - examples).map(lambda x, y: (x, y, tf.constant(0.0)))
    return _evaluation_options(real.concatenate(padding).repeat().batch(batch_size, drop_remainder=True)
                               .prefetch(AUTOTUNE))


def _evaluation_options(ds: tf.data.Dataset) -> tf.data.Dataset:
    options = tf.data.Options()
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def example_stream(examples_ds: tf.data.Dataset, batch_size: int, training: bool = True, *,
                   shuffle_buffer: int = 2048, seed: int | None = None, skip: int = 0) -> tf.data.Dataset:
    """A plug-in's one pass of single ``(features, label)`` examples -> training batches, as :func:`make_dataset`
    treats records: shuffled (seeded by ``seed``), repeated, ``skip`` examples passed over (a resume), batched with
    ``drop_remainder``. Every worker reads the whole stream and keeps its part of each global batch (DATA
    auto-sharding: a plug-in's dataset has no files to share out), so the examples a step consumes are one global
    batch of the stream (:func:`records_read` with ``num_files=0``)."""
    ds = examples_ds
    if training:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    ds = ds.repeat()
    if skip:
        ds = ds.skip(skip)
    ds = ds.batch(batch_size, drop_remainder=True).prefetch(AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = seed is not None
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


#: A dataset of unknown length is counted in chunks of this many examples (the clock is read between chunks).
COUNT_CHUNK = 8192
#: After this many seconds of counting, a note says so (and how to skip the count); then one every NOTE_EVERY s.
COUNT_NOTE_SECONDS = 10.0
COUNT_NOTE_EVERY = 60.0
#: How a dataset function tells the trainer its length (tf.data's own way), so nothing is counted.
GIVE_LENGTH = "return dataset.apply(tf.data.experimental.assert_cardinality(N)) with N its number of examples"


def declared_examples(ds: tf.data.Dataset, what: str) -> int | None:
    """The examples of one pass of ``ds`` as tf.data knows them without reading it (its cardinality), or None when it
    does not know; an endless dataset is an error (the trainer repeats the pass itself)."""
    n = int(ds.cardinality())
    if n == tf.data.INFINITE_CARDINALITY:
        raise DataError(f"{what} is endless; return ONE pass of the examples (the trainer repeats it)")
    return n if n >= 0 else None


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()``, run in a thread of its own and waited for at most ``seconds``: its value (or what it raised), or
    TimeoutError. A read blocked inside TensorFlow cannot be cancelled: its thread is left to end with the process."""
    import threading

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = err

    thread = threading.Thread(target=work, name="tpuctl-within", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"not done within {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def count_examples(ds: tf.data.Dataset, limit: int, what: str, *, seconds: float = math.inf) -> int:
    """The examples of one pass of ``ds``: its cardinality when tf.data knows it, else counted: at most ``limit``
    examples and ``seconds`` (a note on stderr once counting takes a while, and now and then after), each bound one
    line saying how to give the dataset its length instead. An endless dataset is an error: the trainer repeats the
    pass itself."""
    import sys
    import time

    n = declared_examples(ds, what)
    if n is not None:
        return n
    chunks = ds.take(limit + 1).map(lambda *_: tf.constant(0, tf.int8)).batch(COUNT_CHUNK).map(tf.size)
    count, started = 0, time.monotonic()
    next_note = started + COUNT_NOTE_SECONDS
    try:
        for size in chunks:
            count += int(size)
            now = time.monotonic()
            if now >= next_note:
                print(f"note: counting the examples of {what}: {count:,} so far (tf.data does not know how many "
                      f"there are; to skip this, {GIVE_LENGTH})", file=sys.stderr, flush=True)
                next_note = now + COUNT_NOTE_EVERY
            if count > limit or now - started > seconds:
                bound = f"{limit:,} examples" if count > limit else f"{seconds:g} s ({count:,} examples so far)"
                raise DataError(f"{what} does not say how many examples it has, and counting them passed {bound}; "
                                f"{GIVE_LENGTH}")
    except tf.errors.OpError as err:
        raise DataError(f"{what}: reading it failed: {first_line(err.message)}") from None
    return count


#: Ops that call back into the Python process that built the dataset (tf.data.Dataset.from_generator,
#: tf.numpy_function, tf.py_function): a dataset holding one runs only in that process.
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})


def python_ops(ds: tf.data.Dataset) -> set[str]:
    """The ops of ``ds``'s graph (its functions included) that run Python code of this process."""
    from tensorflow.core.framework import graph_pb2

    serialized = ds._as_serialized_graph(external_state_policy=tf.data.experimental.ExternalStatePolicy.WARN)
    graph = graph_pb2.GraphDef.FromString(serialized.numpy())
    ops = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
    return ops & PYTHON_OPS


def _file_sharded(num_files: int, input_pipelines: int) -> bool:
    """Whether each of ``input_pipelines`` pipelines reads files of its own (FILE auto-sharding)."""
    return input_pipelines > 1 and shard_policy(num_files, input_pipelines) == tf.data.experimental.AutoShardPolicy.FILE


def records_read(steps: int, global_batch: int, *, num_files: int, input_pipelines: int = 1,
                 pipeline_id: int = 0, replicas_per_pipeline: int = 1) -> int:
    """How many records of one input pipeline's training stream ``steps`` training steps consumed: what
    ``make_dataset(skip=...)`` passes over so a resumed run reads next what an uninterrupted one would.

    One pipeline (one worker, any number of local replicas): a step takes one global batch. Several
    (MultiWorkerMirrored workers, the hosts of a TPU slice), tf.distribute splits every global batch of a
    pipeline's stream into ``input_pipelines x replicas_per_pipeline`` sub-batches
    (tf.data.experimental.rebatch with ``batch_sizes_for_worker``: sizes differ by at most one, rotated
    by the pipeline's index) and a step takes ``replicas_per_pipeline`` of them: with FILE sharding
    (:func:`shard_policy`) each pipeline reads its own files, so a step takes about ``global_batch /
    input_pipelines`` records of its stream; with DATA sharding every pipeline reads the whole stream and
    keeps its sub-batches of each global batch, one global batch a step.
    """
    if steps <= 0:
        return 0
    if not _file_sharded(num_files, input_pipelines):
        return steps * global_batch
    pieces = input_pipelines * replicas_per_pipeline
    floor, ceil_count = divmod(global_batch, pieces)
    sizes = [floor + 1] * ceil_count + [floor] * (pieces - ceil_count)
    offset = pipeline_id * replicas_per_pipeline
    sizes = sizes[offset:] + sizes[:offset]
    taken = steps * replicas_per_pipeline
    return taken // pieces * global_batch + sum(sizes[:taken % pieces])


def records_per_pass(split: Split, *, input_pipelines: int = 1, pipeline_id: int = 0) -> int | None:
    """Records in one pass of an input pipeline's training stream (every record of the files it reads: the
    whole split, or with FILE sharding files ``pipeline_id::input_pipelines`` as auto-sharding deals them);
    None when the manifest has no per-file counts to tell."""
    if not _file_sharded(len(split.files), input_pipelines):
        return split.examples
    if split.shard_examples is None:
        return None
    return sum(split.shard_examples[pipeline_id::input_pipelines])


# ---------------------------------------------------------------------------------------------- corruption
def _usable(record: tf.Tensor, parse_one) -> tf.Tensor:
    # Every parsed value and the label feed the output so no check is pruned from the graph.
    features, label = parse_one(record)
    touched = [tf.cast(tf.size(t), tf.float32) for t in tf.nest.flatten(features)]
    numeric = [tf.cast(tf.reduce_max(t), tf.float32) for t in tf.nest.flatten(features) if t.dtype != tf.string]
    return tf.add_n(touched + numeric) + tf.cast(label, tf.float32) * 0.0


def first_line(message: str) -> str:
    """The line of a TensorFlow error message that says what went wrong: a failed assertion's message (it may
    follow a "Graph execution error:" preamble), else the first line."""
    # a function's errors start with the node they came from ({{function_node __wrapped__…}} SystemExit: 0)
    lines = [re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", line.strip()) for line in (message or "").splitlines()]
    lines = [line for line in lines if line]
    for line in lines:
        at = line.find("assertion failed: [")
        if at >= 0:
            return line[at:].replace("assertion failed: [", "").split("] [")[0].rstrip("]")
    useful = [line for line in lines if not line.startswith(("Graph execution error", "Detected at node"))]
    return (useful or lines or ["unknown error"])[0]


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


def scan_shards(files: Sequence[str], image_size: Sequence[int] | None,
                shard_examples: Sequence[int] | None = None, num_classes: int | None = None,
                fmt: RecordFormat | None = None) -> ScanResult:
    """Read every record of ``files`` once and find the ones that cannot be used.

    Only run on request (``--skip_corrupt``) or after the pipeline failed, to name the bad file.
    A file is read until its first framing error (truncated or corrupted record); every readable
    record's image is decoded (and, with ``num_classes``, its label checked) in a parallel map.
    """
    parse_one = (fmt or image_format(image_size, num_classes)).one
    readable: dict[str, int] = {}
    problems: list[ShardProblem] = []
    for k, f in enumerate(files):
        n, framing_error = 0, None
        try:
            for _ in tf.data.TFRecordDataset(f, buffer_size=1 << 20):
                n += 1
        except tf.errors.OpError as err:
            framing_error = f"{type(err).__name__}: {first_line(err.message)}"
        readable[f] = n
        expected = shard_examples[k] if shard_examples is not None and k < len(shard_examples) else None
        indexed = tf.data.TFRecordDataset(f).take(n).enumerate()
        good = indexed.map(lambda i, r: (i, _usable(r, parse_one)), num_parallel_calls=AUTOTUNE)
        good_ids = set(int(i) for i, _ in good.ignore_errors())
        bad_ids = sorted(set(range(n)) - good_ids)
        lost_tail = 0
        if framing_error is not None:
            lost_tail = max(1, (expected - n) if expected is not None else 1)
        if bad_ids:
            reason = "image or record does not decode"
            try:
                record = next(iter(tf.data.TFRecordDataset(f).skip(bad_ids[0]).take(1)))
                _usable(record, parse_one)
            except tf.errors.OpError as err:
                reason = f"{type(err).__name__}: {first_line(err.message)}"
            problems.append(ShardProblem(f, bad_ids[0], reason, len(bad_ids) + lost_tail))
        elif framing_error is not None:
            problems.append(ShardProblem(f, n, framing_error, lost_tail))
    return ScanResult(readable, problems)
