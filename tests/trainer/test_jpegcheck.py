"""trainer.jpegcheck against TensorFlow's decoder: what the check accepts, TensorFlow decodes.

make_tfrecords keeps JPEGs that pass the check without decoding them, so a file that passes and then fails
``tf.io.decode_image`` would break training. Checked on every kind of JPEG Pillow writes, on every
truncation, and on random corruptions (hypothesis; ``--hypothesis-profile=long`` for many more).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from trainer import jpegcheck
from trainer.imaging import check_image


def _jpeg(mode: str = "RGB", size=(40, 24), **options) -> bytes:
    rng = np.random.default_rng(len(options) + size[0])
    pixels = rng.integers(0, 255, size=(size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(out, format="JPEG", quality=90, **options)
    return out.getvalue()


def _without_huffman_tables(raw: bytes) -> bytes:
    """The stream with every DHT segment removed (as motion-JPEG frames are stored)."""
    out, pos = bytearray(raw[:2]), 2
    while True:
        marker, length = raw[pos + 1], int.from_bytes(raw[pos + 2:pos + 4], "big")
        if marker == 0xDA:
            return bytes(out + raw[pos:])
        if marker != 0xC4:
            out += raw[pos:pos + 2 + length]
        pos += 2 + length


VARIANTS = {
    "baseline-420": _jpeg(),
    "baseline-444": _jpeg(subsampling=0),
    "progressive": _jpeg(progressive=True),
    "greyscale": _jpeg("L"),
    "restart-intervals": _jpeg(restart_marker_blocks=1),
    "optimized-tables": _jpeg(optimize=True),
    "one-pixel": _jpeg(size=(1, 1)),
    "trailing-bytes": _jpeg() + b"\x00garbage after the end-of-image marker",
    "no-huffman-tables": _without_huffman_tables(_jpeg()),
}


def tf_decodes(raw: bytes) -> bool:
    try:
        tf.io.decode_image(raw, channels=3, expand_animations=False).numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError):
        return False
    return True


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_kind_of_jpeg_passes_with_its_frame(name):
    raw = VARIANTS[name]
    frame = jpegcheck.check(raw)
    decoded = tf.io.decode_image(raw, expand_animations=False).numpy()
    assert frame == (decoded.shape[0], decoded.shape[1], decoded.shape[2])


@pytest.mark.parametrize("name", ["baseline-420", "progressive", "greyscale", "restart-intervals"])
def test_every_truncation_is_refused_as_tensorflow_refuses_it(name):
    raw = VARIANTS[name]
    for cut in range(len(raw)):
        with pytest.raises(jpegcheck.Invalid):
            jpegcheck.check(raw[:cut])
        assert not tf_decodes(raw[:cut])


def test_progressive_without_huffman_tables_is_refused_like_tensorflow():
    raw = _without_huffman_tables(VARIANTS["progressive"])
    assert not tf_decodes(raw)
    with pytest.raises(jpegcheck.Invalid, match="Huffman table"):
        jpegcheck.check(raw)


@pytest.mark.parametrize(("raw", "reason"), [
    (b"", "no start-of-image"),
    (b"<html><body>404 Not Found</body></html>", "no start-of-image"),
    (b"\xff\xd8\xff\xe0 this is not really a jpeg", "truncated"),
    (b"\xff\xd8\xff\xd9", "no image data"),
    (VARIANTS["baseline-420"].replace(b"\xff\xc4", b"\xff\x46", 1), "unexpected marker 0xff46"),
])
def test_broken_streams_say_why(raw, reason):
    with pytest.raises(jpegcheck.Invalid, match=reason):
        jpegcheck.check(raw)


def test_frame_types_not_judged_here_are_left_to_a_full_decode(tmp_path):
    arithmetic = VARIANTS["baseline-420"].replace(b"\xff\xc0", b"\xff\xc9", 1)  # SOF9: arithmetic coding
    assert jpegcheck.check(arithmetic) is None
    (tmp_path / "a.jpg").write_bytes(arithmetic)
    for full in (False, True):
        ok, (encoded, height, width, kept, _) = check_image(str(tmp_path / "a.jpg"), full)
        # decoded by Pillow and re-encoded as a baseline JPEG, never stored unchecked
        assert ok and not kept and jpegcheck.check(encoded) == (height, width, 3) == (24, 40, 3)


@given(name=st.sampled_from(sorted(VARIANTS)),
       edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=3),
       cut=st.none() | st.floats(0, 1))
def test_what_the_check_accepts_tensorflow_decodes(name, edits, cut):
    raw = bytearray(VARIANTS[name])
    for where, value in edits:
        raw[int(where * len(raw))] = value
    if cut is not None:
        raw = raw[:int(cut * len(raw))]
    raw = bytes(raw)
    try:
        frame = jpegcheck.check(raw)
    except jpegcheck.Invalid:
        return
    if frame is not None:
        assert tf_decodes(raw), f"{name}: the check accepted a stream TensorFlow cannot decode: edits {edits}"


def test_check_image_keeps_jpegs_and_reencodes_the_rest(tmp_path):
    (tmp_path / "k.jpg").write_bytes(VARIANTS["progressive"])
    ok, (encoded, height, width, kept, _) = check_image(str(tmp_path / "k.jpg"))
    assert ok and kept and encoded == VARIANTS["progressive"] and (height, width) == (24, 40)
    for full in (False, True):
        cmyk = tmp_path / "cmyk.jpg"
        Image.new("CMYK", (8, 6), (0, 50, 100, 0)).save(cmyk, format="JPEG")
        ok, (encoded, height, width, kept, _) = check_image(str(cmyk), full)
        assert ok and not kept and encoded[:2] == b"\xff\xd8" and (height, width) == (6, 8)
        assert tf.io.decode_image(encoded).shape == (6, 8, 3)
    (tmp_path / "t.jpg").write_bytes(VARIANTS["baseline-420"][:-40])
    ok, skip = check_image(str(tmp_path / "t.jpg"))     # how, where, the marker that is missing
    assert not ok and skip.kind == "truncated" and f"{len(VARIANTS['baseline-420']) - 40} bytes" in skip.reason
    assert "end-of-image marker" in skip.reason, skip
    ok, skip = check_image(str(tmp_path / "t.jpg"), full_decode=True)
    assert not ok and skip.kind == "truncated"
