"""Where a run's examples come from, one shape for the three sources the trainer reads:

- the image TFRecords of ``--data_dir`` (trainer.make_tfrecords, trainer.sample_data),
- TFRecords of named features that ``--data_dir``'s manifest declares (tabular or text data, no code),
- a plug-in dataset function (``--dataset``, trainer.plugin).

:func:`prepare` checks the source and returns :class:`Inputs`: the classes, the model's inputs, the example
counts, and the builders of the training and validation datasets every strategy calls (the parameter-server
path calls them inside each worker's dataset function). Training batches repeat endlessly and are consumed with
explicit steps; validation is exact (trainer.data.exact_passes).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer import data, plugin, protocol
from trainer.config import DEFAULT_IMAGE_SIZE, IMAGE_SIDE, TrainConfig, check_batch_memory
from trainer.errors import DataError, UsageError


@dataclasses.dataclass
class Inputs:
    """A checked source of examples (see the module docstring)."""
    classes: tuple[str, ...]
    #: one example's features as the model receives them: name -> tf.TensorSpec (image data: {"images": …})
    features: dict[str, Any]
    #: the features are a dict (a model's keras.Input layers are named after them); else one tensor
    named: bool
    image_size: tuple[int, int] | None      # image data: what images are resized to
    train_examples: int
    val_examples: int
    skipped: int
    #: train(global_or_worker_batch, skip=records, shuffle_buffer=…) -> the training batches
    train: Callable[..., tf.data.Dataset]
    #: validation(batch) -> exact passes of (features, labels, weights)
    validation: Callable[..., tf.data.Dataset]     # (global batch, *, keep_parsed=True)
    #: files of the training split (0: a stream with no files, DATA-sharded) and their per-file counts
    train_files: int
    train_split: data.Split | None
    #: what names the source in the "training:" line and the result
    source: str
    #: the error to report when reading failed (a corrupt shard named), or None
    corruption: Callable[[], DataError | None] = lambda: None

    def per_pass(self, pipelines: int, pipeline_id: int) -> int | None:
        """Examples in one pass of a pipeline's training stream (for a resume without --seed)."""
        if self.train_split is None:
            return self.train_examples
        return data.records_per_pass(self.train_split, input_pipelines=pipelines, pipeline_id=pipeline_id)

    def records_to_skip(self, steps: int, global_batch: int, info, *, seeded: bool) -> int:
        """The records of this worker's training stream that ``steps`` backed-up steps consumed
        (trainer.data.records_read, for the strategy's input pipelines: ``info.input_pipelines()``); without a seed
        every pass is shuffled afresh and no order can be repeated, so only the place in the current pass is kept."""
        pipelines, pipeline_id = info.input_pipelines()
        skip = data.records_read(steps, global_batch, num_files=self.train_files, input_pipelines=pipelines,
                                 pipeline_id=pipeline_id, replicas_per_pipeline=max(1, info.num_replicas // pipelines))
        per_pass = self.per_pass(pipelines, pipeline_id)
        return skip % per_pass if not seeded and per_pass else skip


def prepare(cfg: TrainConfig, *, num_workers: int, hparams: Mapping[str, Any], on_workers: bool = False) -> Inputs:
    """The run's source of examples, every input checked before anything is written. ``on_workers``: the datasets are
    built on other processes (parameter servers' workers), so a plug-in dataset that runs Python code is refused."""
    manifest = data.read_manifest(cfg.data_dir) if cfg.data_dir is not None else None
    if cfg.dataset is not None:
        return _plugin_inputs(cfg, manifest, hparams, on_workers)
    assert manifest is not None
    if manifest.features is not None:
        return _record_inputs(cfg, manifest, None, num_workers)
    image_size = cfg.image_size or manifest.image_size or (DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE)
    if cfg.image_size is None and not all(IMAGE_SIDE.low <= side <= IMAGE_SIDE.high for side in image_size):
        raise UsageError(f"the data's images are {image_size[0]}x{image_size[1]} (image_size in {cfg.data_dir}/"
                         f"manifest.json); pass --image_size to train at a size with each side "
                         f"{IMAGE_SIDE.describe()}")
    if cfg.model == "resnet50" and min(image_size) < 32:
        raise UsageError(f"--model resnet50 needs images of at least 32x32 (data is {image_size[0]}x{image_size[1]}); "
                         "pass --image_size 32 or larger")
    check_batch_memory(cfg, image_size)
    return _record_inputs(cfg, manifest, image_size, num_workers)


def _record_inputs(cfg: TrainConfig, manifest: data.Manifest, image_size, num_workers: int) -> Inputs:
    """The TFRecords of --data_dir: images (``image_size``) or the features the manifest declares."""
    if manifest.features is not None and not cfg.plugin_model:
        raise UsageError(f"{cfg.data_dir} holds records of features ({', '.join(manifest.features)}), not images: "
                         f"--model {cfg.model} is an image model; name your model function (--model "
                         "file.py:NAME, docs/your-code.md)")
    train, val = manifest.splits["train"], manifest.splits["validation"]
    if train.examples < 1 or not train.files:
        raise DataError(f"{cfg.data_dir} has no training examples (manifest lists none)")
    if val.examples < 1 or not val.files:
        raise DataError(f"{cfg.data_dir} has no validation examples; write the data with a validation fraction > 0")
    fmt = data.manifest_format(manifest, image_size)
    train_examples, val_examples, skipped = train.examples, val.examples, 0
    if cfg.skip_corrupt:
        for split, split_info in (("train", train), ("validation", val)):
            scan = data.scan_shards(split_info.files, image_size, split_info.shard_examples,
                                    num_classes=len(manifest.classes), fmt=fmt)
            for p in scan.problems:
                print(f"warning: skipping {p.bad_records} corrupt record(s) in {p.file} "
                      f"(first at record {p.record}: {p.reason})", file=sys.stderr, flush=True)
            skipped += scan.bad_records
            if split == "train":
                train_examples -= scan.bad_records
            else:
                val_examples -= scan.bad_records
        if train_examples < 1 or val_examples < 1:
            raise DataError(f"nothing left to train on after skipping {skipped} corrupt record(s)")
        protocol.emit(protocol.SKIPPED_RECORDS, skipped)
    common = dict(cache=cfg.cache, skip_corrupt=cfg.skip_corrupt, seed=cfg.seed, num_classes=len(manifest.classes),
                  fmt=fmt)

    def train_ds(batch: int, *, skip: int = 0, workers: int = num_workers) -> tf.data.Dataset:
        return data.make_dataset(list(train.files), batch, image_size or (1, 1), True, num_workers=workers,
                                 shuffle_buffer=cfg.shuffle_buffer, skip=skip, **common)

    def val_ds(batch: int, *, keep_parsed: bool = True) -> tf.data.Dataset:
        return data.make_eval_dataset(list(val.files), batch, val_examples, fmt, skip_corrupt=cfg.skip_corrupt,
                                      cache=cfg.cache, cache_limit=data.VALIDATION_CACHE_BYTES if keep_parsed else 0)

    def corruption() -> DataError | None:
        for split in ("train", "validation"):
            info = manifest.splits[split]
            scan = data.scan_shards(info.files, image_size, info.shard_examples, num_classes=len(manifest.classes),
                                    fmt=fmt)
            if scan.problems:
                p = scan.problems[0]
                return DataError(f"corrupt data in {p.file} (record {p.record}: {p.reason}); rewrite or remove "
                                 "that shard, or pass --skip_corrupt to skip bad records")
        return None

    if manifest.features is not None:
        dtypes = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}
        features = {name: tf.TensorSpec(f.shape, dtypes[f.dtype]) for name, f in manifest.features.items()}
        named, source = True, "features"
    else:
        features = {"images": tf.TensorSpec([image_size[0], image_size[1], 3], tf.float32)}
        named, source = False, "images"
    return Inputs(manifest.classes, features, named, image_size, train_examples, val_examples, skipped, train_ds,
                  val_ds, len(train.files), train, source, corruption)


def _plugin_inputs(cfg: TrainConfig, manifest: data.Manifest | None, hparams: Mapping[str, Any],
                   on_workers: bool = False) -> Inputs:
    """A plug-in dataset function: one pass of single examples per split (trainer.plugin)."""
    fn = plugin.load(cfg.dataset, cfg.code_dir, "--dataset")
    if manifest is not None:
        classes = manifest.classes
    else:
        declared = plugin.module_attribute(fn, "CLASSES")
        if (not isinstance(declared, (list, tuple)) or len(declared) < 2
                or not all(isinstance(c, str) and c.strip() for c in declared) or len(set(declared)) != len(declared)):
            raise UsageError(f"{fn.file}: --dataset {fn.ref} needs its classes: give --data_dir (its manifest's "
                             "classes) or set CLASSES = [\"name\", …] (2 or more unique names) in its module")
        classes = tuple(declared)

    def split_examples(split: str, pipelines: int = 1, pipeline_id: int = 0, inputs=None,
                       checked: bool = True) -> tf.data.Dataset:
        ctx = plugin.DatasetContext(split=split, data_dir=cfg.data_dir, seed=cfg.seed, hparams=dict(hparams),
                                    num_input_pipelines=pipelines, input_pipeline_id=pipeline_id)
        ds = plugin.check_examples(fn, fn.call(f"the {split} split of --dataset", ctx), split, inputs)
        if not checked:
            return ds
        label = ds.element_spec[1]
        limit = len(classes)
        ok_labels = ds.map(lambda x, y: (x, _checked(tf.cast(y, tf.int64), limit, fn.ref)))
        return ok_labels.map(lambda x, y: (x, tf.cast(y, tf.int32))) if label.dtype != tf.int32 else ok_labels

    def first_labels(ds: tf.data.Dataset, split: str) -> None:
        """The labels of the first examples, read before anything is written (the rest are checked as read), within
        MAX_FIRST_EXAMPLES_SECONDS: a dataset that never gives its first example (a generator that blocks) waited
        the run for good (issue 56, a trial). The read is the one the check always made, waited for in a thread."""
        labels = ds.take(PRECHECKED_EXAMPLES).map(lambda x, y: tf.cast(y, tf.int64))
        seconds = plugin.MAX_FIRST_EXAMPLES_SECONDS
        try:
            # (an empty split leaves both where they start: low above any label, high below any)
            low, high = data.within(seconds, lambda: labels.reduce(
                (tf.constant(2**62, tf.int64), tf.constant(-2**62, tf.int64)),
                lambda acc, y: (tf.minimum(acc[0], y), tf.maximum(acc[1], y))))
        except TimeoutError:
            raise DataError(f"{fn.file}: the {split} split of --dataset {fn.ref} gave not even its first examples "
                            f"(up to {PRECHECKED_EXAMPLES:,}, checked before training) within {seconds:g} s: it waits "
                            "on something that does not come (a generator that blocks, a stalled download); prepare "
                            "slow inputs in the dataset function, before it returns the dataset") from None
        except tf.errors.OpError as err:
            raise DataError(f"{fn.file}: reading the {split} split of --dataset {fn.ref} failed: "
                            f"{data.first_line(err.message)}") from None
        if int(high) >= len(classes) or int(low) < 0:      # every label -1 passed (issue 56, a fresh trial)
            bad = int(high) if int(high) >= len(classes) else int(low)
            raise DataError(f"{fn.file}: --dataset {fn.ref} ({split}) yields label {bad}, outside the "
                            f"{len(classes)} classes (0..{len(classes) - 1})")

    train_pass = split_examples("train")
    features = plugin.feature_specs(train_pass.element_spec[0])
    named = isinstance(train_pass.element_spec[0], dict)
    val_pass = split_examples("validation", inputs=features)
    for split, examples in (("train", train_pass), ("validation", val_pass)) if on_workers else ():
        # Such an op calls back into the process that built the dataset: the workers' steps all waited on this one,
        # and its first checkpoint deadlocked (the run hung at an epoch's end for good). Refused before anything.
        if data.python_ops(examples):
            raise UsageError(f"{fn.file}: the {split} split of --dataset {fn.ref} runs Python code in its pipeline "
                             "(Dataset.from_generator, tf.py_function or tf.numpy_function), which parameter servers' "
                             "workers cannot run (each builds the dataset itself); build it from tf.data operations "
                             "(from_tensor_slices, TFRecordDataset, map…) or train without parameter servers")
    # What a split says of its length first (nothing read): an endless one, or more examples than the trainer takes in
    # a pass, is refused by its cardinality alone; then the first examples (labels, a deadline); then the count.
    limit = plugin.MAX_COUNTED_EXAMPLES
    for split, examples in (("train", train_pass), ("validation", val_pass)):
        declared = data.declared_examples(examples, f"{fn.file}: the {split} split of --dataset {fn.ref}")
        if declared is not None and declared > limit and split == "validation":
            # every validation example is read at every epoch's end (exact validation): a split that says it has
            # 10**15 of them never ended its first epoch and printed nothing (issue 56, a fresh trial)
            raise DataError(f"{fn.file}: the validation split of --dataset {fn.ref} has {declared:,} examples, more "
                            f"than the {limit:,} the trainer reads at every epoch's end; validate on a part of it "
                            "(examples.take(N) for the validation split)")
        if declared is not None and declared > limit:
            # an epoch is one pass: a split that says it has 6.4e13 examples made one epoch take years, and a resume
            # reads up to a pass to find its place (issue 56, a trial)
            raise DataError(f"{fn.file}: the train split of --dataset {fn.ref} says it has {declared:,} examples, more "
                            f"than the {limit:,} the trainer takes as one pass (an epoch); return a part of it "
                            "(examples.take(N))")
    first_labels(split_examples("train", checked=False), "train")
    first_labels(split_examples("validation", inputs=features, checked=False), "validation")
    train_examples, val_examples = (
        data.count_examples(examples, limit, f"{fn.file}: the {split} split of --dataset {fn.ref}",
                            seconds=plugin.MAX_COUNTING_SECONDS)
        for split, examples in (("train", train_pass), ("validation", val_pass)))
    if train_examples < 1 or val_examples < 1:
        empty = "train" if train_examples < 1 else "validation"
        raise DataError(f"{fn.file}: the {empty} split of --dataset {fn.ref} has no examples")

    def train_ds(batch: int, *, skip: int = 0, workers: int = 1) -> tf.data.Dataset:
        return data.example_stream(split_examples("train"), batch, True, shuffle_buffer=cfg.shuffle_buffer,
                                   seed=cfg.seed, skip=skip)

    def val_ds(batch: int, *, keep_parsed: bool = True) -> tf.data.Dataset:
        return data.exact_passes(split_examples("validation"), batch, val_examples)

    return Inputs(classes, features, named, None, train_examples, val_examples, 0, train_ds, val_ds, 0, None,
                  f"dataset {fn.ref}")


#: Examples of each split of a plug-in dataset whose labels are read before anything is written.
PRECHECKED_EXAMPLES = 1000


def _checked(label: tf.Tensor, num_classes: int, ref: str) -> tf.Tensor:
    ok = (label >= 0) & (label < num_classes)
    message = f"--dataset {ref}: a label outside the {num_classes} classes (0..{num_classes - 1})"
    with tf.control_dependencies([tf.debugging.Assert(ok, [message, label])]):
        return tf.identity(label)
