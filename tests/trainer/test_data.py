"""trainer.sample_data, the manifest, and trainer.data.make_dataset (in-process, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from trainer import data, records
from trainer.errors import DataError
from trainer.sample_data import write_demo_dataset


def test_demo_dataset_layout_and_manifest(demo_data):
    manifest = json.loads((demo_data / "manifest.json").read_text())
    assert manifest["prefix"] == "digits"
    assert manifest["classes"] == [str(d) for d in range(10)]
    assert manifest["image_size"] == [32, 32]
    files = sorted(p.name for p in demo_data.glob("*.tfrecord"))
    assert files == ["digits-train-00000-of-00002.tfrecord", "digits-train-00001-of-00002.tfrecord",
                     "digits-validation-00000-of-00002.tfrecord", "digits-validation-00001-of-00002.tfrecord"]
    assert manifest["splits"]["train"]["examples"] + manifest["splits"]["validation"]["examples"] == 1797
    # Counts in the manifest are the true record counts.
    for split in ("train", "validation"):
        entry = manifest["splits"][split]
        actual = [sum(1 for _ in tf.data.TFRecordDataset(str(demo_data / f))) for f in entry["files"]]
        assert actual == entry["shard_examples"] and sum(actual) == entry["examples"]


def test_records_use_the_seed_schema(demo_data):
    raw = next(iter(tf.data.TFRecordDataset(str(demo_data / "digits-train-00000-of-00002.tfrecord"))))
    example = tf.train.Example.FromString(raw.numpy())
    assert set(example.features.feature) == set(records.FEATURE_KEYS)
    f = example.features.feature
    label = f["image/class/label"].int64_list.value[0]
    assert f["image/class/text"].bytes_list.value[0].decode() == str(label)
    assert f["image/format"].bytes_list.value[0] == b"JPEG"
    assert (f["image/height"].int64_list.value[0], f["image/width"].int64_list.value[0]) == (32, 32)
    image = tf.io.decode_jpeg(f["image/encoded"].bytes_list.value[0])
    assert image.shape == (32, 32, 3)


def test_sample_data_is_deterministic_and_replaces_its_previous_output(tmp_path):
    out = tmp_path / "d"
    write_demo_dataset(out, shards=1, image_size=16)
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    write_demo_dataset(out, shards=1, image_size=16)  # a previous output: replaced, same bytes
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first
    write_demo_dataset(out, shards=3, image_size=16)  # different sharding: old shards gone
    assert len(list(out.glob("digits-train-*"))) == 3


def test_sample_data_refuses_a_foreign_folder(in_process, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    run = in_process(["trainer.sample_data", "--out", str(out)])
    assert run.returncode == 2
    assert "not empty" in run.error_line() and str(out) in run.error_line()
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_sample_data_cli_summary(tools, tmp_path):
    run = tools.run_module(["trainer.sample_data", "--out", str(tmp_path / "d"), "--validation-fraction", "0.5",
                            "--shards", "3", "--image-size", "12"], timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    last = run.stdout_lines[-1]
    assert last.startswith("summary: ")
    summary = json.loads(last[len("summary: "):])
    assert summary["train"] + summary["validation"] == 1797
    assert abs(summary["train"] - summary["validation"]) <= 1
    assert summary["classes"] == [str(d) for d in range(10)] and summary["shards"] == 6
    assert summary["bytes"] == sum(p.stat().st_size for p in (tmp_path / "d").glob("*.tfrecord"))


def test_make_dataset_batches(demo_data):
    ds = data.make_dataset(str(demo_data / "digits-train-*.tfrecord*"), 16, (24, 20), training=True, seed=3)
    images, labels = next(iter(ds))
    assert images.dtype == tf.float32 and images.shape == (16, 24, 20, 3)
    assert labels.dtype == tf.int32 and labels.shape == (16,)
    assert 0.0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 1.0
    assert float(tf.reduce_max(images)) > 0.5  # not the seed's [0.5, 1.5] range, not all black
    # Static shapes: batches are always full (drop_remainder) — what TPUs need.
    assert ds.element_spec[0].shape.as_list() == [16, 24, 20, 3]


def test_make_dataset_evaluation_is_one_pass_of_full_batches(demo_data):
    manifest = data.read_manifest(str(demo_data))
    val = manifest.splits["validation"]
    ds = data.make_dataset(list(val.files), 50, (32, 32), training=False)
    labels = np.concatenate([y.numpy() for _, y in ds])
    assert len(labels) == (val.examples // 50) * 50
    assert set(labels) <= set(range(10)) and len(set(labels)) == 10
    # With repeat=True it is endless (the trainer passes validation steps).
    assert len(list(data.make_dataset(list(val.files), 50, (32, 32), training=False, repeat=True).take(20))) == 20


def test_make_dataset_matches_the_records(demo_data):
    """Every (image, label) pair equals decoding the record directly: nothing mixed up by batch-then-parse."""
    files = sorted(str(p) for p in demo_data.glob("digits-validation-*"))
    expected = {}
    for raw in tf.data.TFRecordDataset(files):
        parsed = tf.io.parse_single_example(raw, {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                                                  "image/class/label": tf.io.FixedLenFeature([], tf.int64)})
        img = data.decode_image(parsed["image/encoded"], (32, 32)).numpy()
        expected[img.tobytes()] = int(parsed["image/class/label"])
    seen = 0
    for images, labels in data.make_dataset(files, 32, (32, 32), training=False):
        for img, label in zip(images.numpy(), labels.numpy()):
            assert expected[img.tobytes()] == label
            seen += 1
    assert seen == (len(expected) // 32) * 32


@pytest.mark.parametrize("files, workers, policy", [
    (4, 1, "AUTO"), (4, 2, "FILE"), (2, 2, "FILE"), (1, 2, "DATA"), (3, 4, "DATA"),
])
def test_shard_policy_file_vs_data(files, workers, policy):
    assert data.shard_policy(files, workers) == getattr(tf.data.experimental.AutoShardPolicy, policy)


def test_make_dataset_sets_the_shard_policy(demo_data, one_shard_data):
    two = data.make_dataset(str(demo_data / "digits-train-*"), 8, (32, 32), True, num_workers=2)
    one = data.make_dataset(str(one_shard_data / "digits-train-*"), 8, (16, 16), True, num_workers=2)
    assert two.options().experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.FILE
    assert one.options().experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.DATA
    assert two.options().deterministic is False  # order not enforced: parallel reads don't wait


def test_read_manifest_errors(tmp_path, demo_data):
    with pytest.raises(DataError, match="does not exist"):
        data.read_manifest(str(tmp_path / "missing"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        data.read_manifest(str(tmp_path / "bad"))
    (tmp_path / "bad" / "manifest.json").write_text(json.dumps({"prefix": "x"}))
    with pytest.raises(DataError, match=r"manifest\.json: .*\bclasses\b.*\blist\b"):
        data.read_manifest(str(tmp_path / "bad"))
    with pytest.raises(DataError, match="no TFRecord files match"):
        data.make_dataset(str(tmp_path / "*.tfrecord"), 8, (8, 8), True)
    manifest = data.read_manifest(str(demo_data))
    assert manifest.classes == tuple(str(d) for d in range(10)) and manifest.image_size == (32, 32)


def test_cached_dataset_yields_the_same_records_each_epoch(demo_data):
    files = sorted(str(p) for p in demo_data.glob("digits-validation-*"))
    ds = data.make_dataset(files, 40, (32, 32), training=False, cache=True)
    first = np.concatenate([y.numpy() for _, y in ds])
    second = np.concatenate([y.numpy() for _, y in ds])  # served from the cache
    assert len(first) == len(second) == (360 // 40) * 40
    assert sorted(first) == sorted(second)


@pytest.mark.parametrize("fixture, batch", [("demo_data", 15), ("one_shard_data", 16)])
def test_skipping_the_records_read_resumes_each_workers_stream(request, fixture, batch):
    """Two workers, one replica each, read as MultiWorkerMirrored reads (per worker: rebatch the global batch
    with tf.distribute's sizes, then auto-shard: FILE with two files, DATA with one): a stream built with
    ``skip=records_read(steps)`` continues, record for record, where the uninterrupted stream was after
    ``steps`` steps (batch for batch when every worker reads all; with FILE sharding and a global batch that
    does not split evenly, the sub-batches of the resumed stream are cut from the next record on)."""
    from tensorflow.python.data.experimental.ops import distribute as tf_distribute

    files = sorted(str(p) for p in request.getfixturevalue(fixture).glob("digits-train-*"))

    def stream(worker, skip, pieces):
        ds = data.make_dataset(files, batch, (8, 8), True, num_workers=2, seed=7, skip=skip)
        ds = ds.rebatch(tf_distribute.batch_sizes_for_worker(batch, 2, 1, worker))
        ds = tf_distribute._AutoShardDataset(ds, 2, worker, 2)
        return [[(int(y), hash(x.tobytes())) for x, y in zip(images.numpy(), labels.numpy())]
                for images, labels in ds.take(pieces)]

    seen = []
    for worker in (0, 1):
        full = stream(worker, 0, 110)
        seen.append({r for piece in full for r in piece})
        for steps in (7, 100):  # 100 steps: past the end of a pass (719 records a file) and into the next
            skip = data.records_read(steps, batch, num_files=len(files), input_pipelines=2, pipeline_id=worker)
            resumed = stream(worker, skip, 10)
            assert [r for piece in resumed for r in piece] == [r for piece in full[steps:] for r in piece][:sum(map(len, resumed))]
            if batch % 2 == 0 or len(files) == 1:
                assert resumed == full[steps:steps + 10]
    assert not seen[0] & seen[1] or len(files) == 1  # FILE: each worker its own records


def test_records_per_pass_of_each_input_pipeline(demo_data, one_shard_data):
    """Without --seed a resume keeps only its place in the current pass: the records one pass of a worker holds."""
    two = data.read_manifest(str(demo_data)).splits["train"]
    one = data.read_manifest(str(one_shard_data)).splits["train"]
    assert data.records_per_pass(two) == two.examples == 1437
    assert [data.records_per_pass(two, input_pipelines=2, pipeline_id=i) for i in (0, 1)] == list(two.shard_examples)
    assert data.records_per_pass(one, input_pipelines=2, pipeline_id=1) == one.examples   # DATA: the whole split
    assert data.records_per_pass(data.Split(two.files, two.examples, None), input_pipelines=2) is None
    assert data.records_read(0, 32, num_files=2, input_pipelines=2) == 0
    assert data.records_read(5, 32, num_files=2) == data.records_read(5, 32, num_files=1, input_pipelines=2) == 160
    assert data.records_read(5, 32, num_files=2, input_pipelines=2) == 80


@pytest.mark.parametrize("limit, cached", [(data.VALIDATION_CACHE_BYTES, True), (1000, False)])
def test_a_small_validation_pass_is_kept_parsed_in_memory(demo_data, tmp_path, limit, cached):
    """An evaluation pass within the cache limit is read and parsed once: the second pass is the same batches with
    its files gone; a pass over the limit reads its files again (and fails without them)."""
    import shutil

    for f in demo_data.glob("digits-validation-*"):
        shutil.copy(f, tmp_path / f.name)
    manifest = data.read_manifest(str(demo_data))
    files = sorted(str(p) for p in tmp_path.glob("digits-validation-*"))
    examples = manifest.splits["validation"].examples
    steps = data.evaluation_steps(examples, 64)
    ds = data.make_eval_dataset(files, 64, examples, data.manifest_format(manifest, (32, 32)), cache_limit=limit)
    batches = iter(ds)
    first = [next(batches) for _ in range(steps)]
    for f in files:
        Path(f).unlink()
    if not cached:
        with pytest.raises(tf.errors.NotFoundError):
            [next(batches) for _ in range(steps)]
        return
    second = [next(batches) for _ in range(steps)]
    for a, b in zip(first, second):
        assert all(np.array_equal(x, y) for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)))
    # the pass stays exact: every record once with weight 1, the padding with weight 0
    assert sum(float(tf.reduce_sum(w)) for *_, w in second) == examples
