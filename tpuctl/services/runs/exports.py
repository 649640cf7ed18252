"""Whether an export the trainer's completion record names has the shape of one, from its bytes: the same check for
a local run's folder and a cloud run's ``gs://`` folder (each target reads the bytes its own way).

A record stands only with an export a launcher can serve (issue 56: a plug-in that printed a copied record and left
an empty export folder, or a one-byte file, was a finished run). The ops side has no TensorFlow: the SavedModel
message is walked by protobuf's wire format, the variables' index by its table footer. Code running inside the
trainer has the trainer's powers, so this proves what was recorded exists and has the shape of what the trainer
writes, not how it was made (docs/your-code.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from ground import domain

#: The largest saved_model.pb read back (protobuf's own limit for one message is 2 GiB).
MAX_SAVED_MODEL_BYTES = 2**31
#: The signature every export serves by (trainer/export.py; TF Serving's default).
SERVING_SIGNATURE = domain.SERVING_SIGNATURE.encode()
#: The last 8 bytes of a TensorFlow table file (a checkpoint's or a SavedModel's variables index): its magic number,
#: little-endian (tensorflow/core/lib/table/format.h, kTableMagicNumber, github.com/tensorflow/tensorflow, read
#: 2026-12-07).
TABLE_MAGIC = (0xDB4775248B80FB57).to_bytes(8, "little")
#: A variables data shard's file name (``variables.data-00000-of-00001``).
DATA_SHARD = re.compile(r"variables\.data-(\d{5})-of-(\d{5})")


def saved_model_problem(data: bytes, where: str) -> str | None:
    """Whether ``data`` (the bytes of ``where``, a saved_model.pb) is a servable SavedModel message by its wire format
    (None: it is): its fields are ``saved_model_schema_version`` (1, a varint) and ``meta_graphs`` (2,
    length-delimited), every length inside the file, and a meta graph holds a graph (MetaGraphDef field 2,
    ``graph_def``) and the ``serving_default`` signature (field 5, ``signature_def``, a map: entries of key 1 and
    value 2) that ``serve`` and ``deploy`` call (tensorflow/core/protobuf/saved_model.proto and meta_graph.proto,
    github.com/tensorflow/tensorflow, read 2026-12-07; the wire format: protobuf.dev/programming-guides/encoding)."""
    if not data:
        return f"{where} is empty"
    try:
        graphs = [body for number, body in _fields(data, 0, len(data), {1: 0, 2: 2}) if number == 2]
        for start, end in graphs:
            fields = list(_fields(data, start, end, None))
            signatures = {bytes(data[k[0]:k[1]]) for number, (s, e) in fields if number == 5
                          for n, k in _fields(data, s, e, {1: 2, 2: 2}) if n == 1}
            if any(number == 2 for number, _ in fields) and SERVING_SIGNATURE in signatures:
                return None
    except ValueError as err:
        return f"{where} is not a SavedModel ({err})"
    if not graphs:
        return f"{where} is not a SavedModel (it holds no meta graph)"
    return f"{where} holds no graph with the {SERVING_SIGNATURE.decode()} signature"


def variables_problem(where: str, index_tail: bytes, shards: Mapping[str, int]) -> str | None:
    """Whether the export's ``variables/`` folder (``where``) holds what TensorFlow restores its weights from (None: it
    does): an index that is a table by its footer (``index_tail``: its last bytes, empty when there is none), and
    every data shard its names count (``-NNNNN-of-MMMMM``; ``shards``: each data shard's file name and size),
    holding bytes."""
    if len(index_tail) < len(TABLE_MAGIC):
        return f"{where}/variables.index is missing or empty"
    if index_tail[-len(TABLE_MAGIC):] != TABLE_MAGIC:
        return f"{where}/variables.index is not a variables index (no table footer)"
    numbered = {m.groups() for m in map(DATA_SHARD.fullmatch, shards) if m}
    counts = {total for _, total in numbered}
    if len(counts) != 1 or len(numbered) != int(next(iter(counts))):
        return f"{where} does not hold its variables' data shards"
    if not sum(size for name, size in shards.items() if DATA_SHARD.fullmatch(name)):
        return f"{where}: its data shards are empty"
    return None


def _fields(data: bytes, at: int, end: int, allowed: dict[int, int] | None) -> Iterator[tuple[int, tuple[int, int]]]:
    """The fields of the message in ``data[at:end]``: (field number, (start, end) of a length-delimited value's bytes;
    a varint's or a fixed value's span). ``allowed``: field number -> wire type, when only those may appear."""
    def varint(at: int) -> tuple[int, int]:
        value = shift = 0
        while at < end and shift < 64:
            byte = data[at]
            value |= (byte & 0x7F) << shift
            at, shift = at + 1, shift + 7
            if not byte & 0x80:
                return value, at
        raise ValueError("a varint runs past the end")

    while at < end:
        key, at = varint(at)
        number, kind = key >> 3, key & 7
        if allowed is not None and allowed.get(number) != kind:
            raise ValueError(f"field {number} (wire type {kind}) is not a SavedModel's")
        if kind == 0:
            start = at
            _, at = varint(at)
        elif kind == 2:
            length, start = varint(at)
            at = start + length
        elif kind in (1, 5):
            start, at = at, at + (8 if kind == 1 else 4)
        else:
            raise ValueError(f"field {number} has wire type {kind}, which no SavedModel field has")
        if at > end:
            raise ValueError(f"field {number} runs past the end")
        yield number, (start, at)
