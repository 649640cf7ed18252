"""trainer.tfrecord writes what TensorFlow writes: tf.train.Example bytes and TFRecord files, byte for byte."""

from __future__ import annotations

import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from trainer import tfrecord

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text(max_size=40)


def tf_example(*, encoded: bytes, label: int, text: str, height: int, width: int, filename: str) -> bytes:
    def b(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def i(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    feature = {"image/encoded": b(encoded), "image/class/label": i(label), "image/class/text": b(text.encode()),
               "image/height": i(height), "image/width": i(width), "image/channels": i(3),
               "image/format": b(b"JPEG"), "image/colorspace": b(b"RGB"), "image/filename": b(filename.encode())}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)


@given(encoded=st.binary(max_size=300) | st.sampled_from([b"\xff" * 5000, bytes(range(256)) * 40]),
       label=INT64, text=TEXT, height=INT64, width=INT64, filename=TEXT)
def test_make_example_is_tensorflows_deterministic_serialization(encoded, label, text, height, width, filename):
    fields = dict(encoded=encoded, label=label, text=text, height=height, width=width, filename=filename)
    ours = b"".join(tfrecord.make_example(**fields))
    assert ours == tf_example(**fields)
    head, tail = tfrecord.example_around(len(encoded), label=label, text=text, height=height, width=width,
                                         filename=filename)
    assert head + encoded + tail == ours


@given(features=st.dictionaries(
    st.text(min_size=1, max_size=20),
    st.one_of(st.lists(st.binary(max_size=50), max_size=4).map(lambda v: ("b", v)),
              st.lists(INT64, max_size=6).map(lambda v: ("i", v))),
    max_size=6))
def test_generic_example_matches_tensorflow(features):
    ours = tfrecord.example({k: tfrecord.bytes_feature(*v) if kind == "b" else tfrecord.int64_feature(*v)
                             for k, (kind, v) in features.items()})
    theirs = tf.train.Example(features=tf.train.Features(feature={
        k: tf.train.Feature(bytes_list=tf.train.BytesList(value=v)) if kind == "b"
        else tf.train.Feature(int64_list=tf.train.Int64List(value=v))
        for k, (kind, v) in features.items()})).SerializeToString(deterministic=True)
    assert b"".join(ours) == theirs


def test_shard_files_equal_tensorflows_writer_and_read_back_with_checksums(tmp_path):
    records = [tfrecord.make_example(encoded=bytes([i % 256]) * (i * 997 % 20000), label=i, text=f"c{i}",
                                     height=i, width=2 * i, filename=f"f/{i}.jpg") for i in range(40)]
    writer = tfrecord.ShardWriter(tmp_path, "imgs", "train", records_per_shard=15)
    for record in records:
        writer.write(record)
    names = writer.close()
    assert [n for _, n in names] == [15, 15, 10]
    assert writer.bytes_written == sum((tmp_path / name).stat().st_size for name, _ in names)
    flat = [b"".join(r) for r in records]
    for k, (name, _) in enumerate(names):
        expected = tmp_path / f"tf-{k}.tfrecord"
        with tf.io.TFRecordWriter(str(expected)) as w:
            for record in flat[15 * k:15 * (k + 1)]:
                w.write(record)
        assert (tmp_path / name).read_bytes() == expected.read_bytes()
    # tf.data verifies both CRCs of every record; parsing gives back the fields
    read = [r.numpy() for r in tf.data.TFRecordDataset([str(tmp_path / n) for n, _ in names])]
    assert read == flat
    parsed = tf.train.Example.FromString(read[7]).features.feature
    assert parsed["image/class/label"].int64_list.value == [7]
    assert parsed["image/filename"].bytes_list.value == [b"f/7.jpg"]


def test_a_flipped_byte_fails_tensorflows_checksum(tmp_path):
    writer = tfrecord.ShardWriter(tmp_path, "imgs", "train", records_per_shard=10)
    writer.write(tfrecord.make_example(encoded=b"\xff\xd8" + b"x" * 100, label=1, text="a", height=1, width=1,
                                       filename="a.jpg"))
    (name, _), = writer.close()
    data = bytearray((tmp_path / name).read_bytes())
    data[60] ^= 0x01
    (tmp_path / name).write_bytes(bytes(data))
    dataset = tf.data.TFRecordDataset(str(tmp_path / name))
    try:
        list(dataset)
    except tf.errors.DataLossError as err:
        assert "corrupted record" in str(err)
    else:
        raise AssertionError("a corrupted record was read without a checksum error")

