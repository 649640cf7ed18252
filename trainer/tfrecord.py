"""Writing TFRecord shards of tf.train.Example records without TensorFlow (the data tools' writer side).

The data tools (``make_tfrecords``, ``sample_data``) only write records, so they do not pay for
TensorFlow's start-up (several seconds, longer than converting hundreds of MB): the two formats are small
and fixed, and tests in the trainer environment check every byte against TensorFlow's own writer and
``tf.train.Example``.

- TFRecord framing (tensorflow/core/lib/io/record_writer.cc, read 2026-11-22): per record
  ``uint64 length (LE) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)``, with
  ``masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8`` (tensorflow/core/lib/hash/crc32c.h ``Mask``).
- tf.train.Example (tensorflow/core/example/example.proto, feature.proto, proto3): Example{features=1}
  Features{map<string, Feature> feature=1} Feature{oneof bytes_list=1 | float_list=2 | int64_list=3}
  BytesList{repeated bytes value=1} Int64List{repeated int64 value=1 [packed=true]}. Map entries are written
  in the order of protobuf's deterministic serialization (upb, python protobuf 7.36: UTF-8 bytes in order,
  the keys that extend a key before it; upb/message/internal/map_sorter.c ``_upb_mapsorter_cmpstr``
  sorts descending and the encoder writes backwards), so the same input gives identical shards.

google-crc32c (C, hardware CRC-32C) is in the trainer environment and every image lock; the training path
(``trainer.data``, ``trainer.records``) does not import this module.
"""

from __future__ import annotations

import functools
import os
import struct
from pathlib import Path

import google_crc32c

from trainer.records import TMP_SUFFIX, shard_name

_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


def _mask(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def frame(record: bytes | list[bytes], crc: int | None = None) -> list[bytes]:
    """One record (bytes, or the parts it is made of) as TFRecord pieces: header, the parts, footer.
    ``crc`` is the CRC-32C of the record's bytes if the caller has it already; by default it is computed here."""
    parts = [record] if isinstance(record, bytes) else record
    length = _U64.pack(sum(len(p) for p in parts))
    if crc is None:
        crc = 0
        for part in parts:
            crc = google_crc32c.extend(crc, part)
    return [length + _U32.pack(_mask(google_crc32c.value(length))), *parts, _U32.pack(_mask(crc))]


_ONE_BYTE = tuple(bytes([i]) for i in range(0x80))


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    value &= 0xFFFFFFFFFFFFFFFF  # int64: negative numbers are ten-byte two's complement varints
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# The headers most encoded: a one-byte tag (fields 1-15) and a one-byte length (payloads under 128 bytes).
_SHORT_HEADERS = tuple(tuple(bytes([number << 3 | 2, length]) for length in range(0x80)) for number in range(16))


def _header(number: int, length: int) -> bytes:
    """The tag and length of a length-delimited field (wire type 2) whose payload has ``length`` bytes."""
    if length < 0x80:
        return _SHORT_HEADERS[number][length]
    return _ONE_BYTE[number << 3 | 2] + _varint(length)


def _field(number: int, payload: bytes) -> bytes:
    return _header(number, len(payload)) + payload


# A feature is a list of byte strings (its serialization is their concatenation): large values such as the
# encoded image are never copied into a bigger string before they reach the file.
def bytes_feature(*values: bytes) -> list[bytes]:
    """Feature{bytes_list: BytesList{value: values}}. Each value is one part of the result, as it is: only
    its ``len`` is encoded (:func:`example_around` passes a :class:`_Hole` for an image not at hand)."""
    parts: list[bytes] = []
    for value in values:
        parts += [_header(1, len(value)), value]
    size = sum(len(p) for p in parts)
    return [_header(1, size), *parts]


def int64_feature(*values: int) -> list[bytes]:
    """Feature{int64_list: Int64List{value: values}} (packed)."""
    packed = b"".join([_varint(int(v)) for v in values])
    return [_field(3, _field(1, packed) if values else b"")]


@functools.lru_cache(maxsize=64)
def _key_field(key: str) -> bytes:
    return _field(1, key.encode("utf-8"))


def _entry(key: str, feature: list[bytes]) -> list[bytes]:
    """One ``feature`` map entry (Features field 1): entry header, key, value header, the feature's parts."""
    key_field = _key_field(key)
    feature_size = sum(map(len, feature))
    value_header = _header(2, feature_size)
    return [_header(1, len(key_field) + len(value_header) + feature_size), key_field, value_header, *feature]


def example(features: dict[str, list[bytes]]) -> list[bytes]:
    """A tf.train.Example (as parts) from ``{key: bytes_feature(...) | int64_feature(...)}``, keys in order."""
    return _coalesce(_example_parts({key: _entry(key, feature) for key, feature in features.items()}))


def _example_parts(entries: dict[str, list[bytes]]) -> list[bytes]:
    """The Example made of the map entries ``{key: _entry(key, feature)}``, written in key order."""
    parts = [part for key in sorted(entries, key=_order_key) for part in entries[key]]
    return [_header(1, sum(map(len, parts))), *parts]


@functools.lru_cache(maxsize=64)
def _order_key(key: str) -> bytes:
    # 0xff is in no UTF-8 string: after the last byte of a key, it puts the keys that extend it first.
    return key.encode("utf-8") + b"\xff"


def _coalesce(parts: list[bytes], large: int = 4096) -> list[bytes]:
    """Join runs of small parts (fewer, larger writes and checksum calls); large ones stay as they are."""
    out: list[bytes] = []
    small: list[bytes] = []
    for part in parts:
        if len(part) >= large:
            if small:
                out.append(b"".join(small))
                small = []
            out.append(part)
        else:
            small.append(part)
    if small:
        out.append(b"".join(small))
    return out


# The seed schema's constant features' map entries, serialized once.
_CONSTANT_ENTRIES = {key: [b"".join(_entry(key, feature))] for key, feature in (
    ("image/channels", int64_feature(3)), ("image/colorspace", bytes_feature(b"RGB")),
    ("image/format", bytes_feature(b"JPEG")))}


class _Hole:
    """Stands for a byte string of ``size`` bytes in an encoder's parts: its length is encoded, its bytes are
    not needed (they are put in its place later)."""

    __slots__ = ("size",)

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size


def make_example(*, encoded: bytes, label: int, text: str, height: int, width: int, filename: str) -> list[bytes]:
    """One tf.train.Example in the seed schema (JPEG, RGB, 3 channels; records.FEATURE_KEYS), as parts:
    ``b"".join(...)`` is its serialization, identical to :func:`example` with the same features."""
    head, tail = example_around(len(encoded), label=label, text=text, height=height, width=width, filename=filename)
    return [head, encoded, tail]


def example_around(encoded_size: int, *, label: int, text: str, height: int, width: int,
                   filename: str) -> tuple[bytes, bytes]:
    """The bytes before and after an ``encoded_size``-byte image in :func:`make_example`'s record, so the
    record can be built where the image is not (the converter's workers) and written where it is.

    The record is encoded as :func:`example` does, with a :class:`_Hole` of the image's size as its
    ``image/encoded`` value, and split around it."""
    image = _Hole(encoded_size)
    parts = _example_parts({**_CONSTANT_ENTRIES, **{key: _entry(key, feature) for key, feature in (
        ("image/encoded", bytes_feature(image)),  # type: ignore[arg-type]  # only its length is encoded
        ("image/class/label", int64_feature(label)),
        ("image/class/text", bytes_feature(text.encode("utf-8"))),
        ("image/height", int64_feature(height)),
        ("image/width", int64_feature(width)),
        ("image/filename", bytes_feature(filename.encode("utf-8"))))}})
    at = next(i for i, part in enumerate(parts) if part is image)
    return b"".join(parts[:at]), b"".join(parts[at + 1:])


class ShardWriter:
    """Writes one split's records into shards, rotating by record count or by size.

    ``records_per_shard`` fixes the count per shard; ``shard_bytes`` rotates once a shard reaches that
    size (~100 MB shards read well from GCS). Final names carry ``-of-N``, known only at the end, so
    shards are written as ``.partial`` files and renamed by :meth:`close`.
    """

    def __init__(self, dest: Path, prefix: str, split: str, *, shard_bytes: int | None = None,
                 records_per_shard: int | None = None):
        if (shard_bytes is None) == (records_per_shard is None):
            raise ValueError("give exactly one of shard_bytes, records_per_shard")
        self.dest, self.prefix, self.split = Path(dest), prefix, split
        self.shard_bytes, self.records_per_shard = shard_bytes, records_per_shard
        self._file = None
        self._partials: list[Path] = []
        self._counts: list[int] = []
        self._current_bytes = 0
        self.bytes_written = 0

    def _rotate_needed(self) -> bool:
        if self._file is None:
            return True
        if self.records_per_shard is not None:
            return self._counts[-1] >= self.records_per_shard
        return self._current_bytes >= self.shard_bytes

    def write(self, record: bytes | list[bytes], crc: int | None = None) -> None:
        """Append one record: its bytes, or the parts they are made of (as :func:`make_example` returns);
        ``crc``: their CRC-32C, if the caller computed it already (see :func:`frame`)."""
        if self._rotate_needed():
            self._close_file()
            path = self.dest / f".{self.prefix}-{self.split}-{len(self._partials):05d}{TMP_SUFFIX}"
            self._partials.append(path)
            self._file = open(path, "wb", buffering=1 << 20)
            self._counts.append(0)
            self._current_bytes = 0
        size = 0
        for piece in frame(record, crc):
            self._file.write(piece)
            size += len(piece)
        self._counts[-1] += 1
        self._current_bytes += size
        self.bytes_written += size

    def _close_file(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            file.close()

    def close(self) -> list[tuple[str, int]]:
        """Finish the shards; returns [(final file name, records)] in order."""
        self._close_file()
        total = len(self._partials)
        names = []
        for i, (path, count) in enumerate(zip(self._partials, self._counts)):
            name = shard_name(self.prefix, self.split, i, total)
            os.replace(path, self.dest / name)
            names.append((name, count))
        self._partials = []
        return names

