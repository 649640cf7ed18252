"""Writing the TFRecord layout the trainer reads: shards in the seed's schema plus ``manifest.json``.

Layout of a data folder::

    <prefix>-train-00000-of-00004.tfrecord        tf.train.Example records, seed schema (see FEATURE_KEYS)
    <prefix>-validation-00000-of-00001.tfrecord
    manifest.json   {"prefix", "classes", "image_size", "splits": {"train": {"files", "examples",
                    "shard_examples"}, "validation": {...}}, "source", "format_version"}

Example counts live in the manifest so the trainer never reads every record just to count them.
Shards are written under temporary names and renamed when complete; the manifest is written last,
so a folder with a manifest is a complete dataset.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import tensorflow as tf

from trainer.errors import DataError

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
SPLITS = ("train", "validation")

#: The seed's record schema (all keys present in every record we write).
FEATURE_KEYS = (
    "image/encoded",
    "image/class/label",
    "image/class/text",
    "image/height",
    "image/width",
    "image/channels",
    "image/format",
    "image/colorspace",
    "image/filename",
)

_TMP_SUFFIX = ".tfrecord.partial"
#: Shard name prefixes: what both data tools accept and the trainer's manifest check requires.
PREFIX_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
#: Files a run of these tools writes before its manifest exists (left behind only by a hard kill).
_LEFTOVER_RE = re.compile(r"\.[A-Za-z0-9][A-Za-z0-9_.-]*-(?:train|validation)-\d{5}\.tfrecord\.partial"
                          r"|manifest\.json\.partial")


def _bytes(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))


def make_example(*, encoded: bytes, label: int, text: str, height: int, width: int, filename: str) -> bytes:
    """One serialized tf.train.Example in the seed schema (JPEG, RGB, 3 channels)."""
    features = {
        "image/encoded": _bytes(encoded),
        "image/class/label": _int(label),
        "image/class/text": _bytes(text.encode("utf8")),
        "image/height": _int(height),
        "image/width": _int(width),
        "image/channels": _int(3),
        "image/format": _bytes(b"JPEG"),
        "image/colorspace": _bytes(b"RGB"),
        "image/filename": _bytes(filename.encode("utf8")),
    }
    # deterministic: map fields in key order, so the same input gives byte-identical shards
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString(deterministic=True)


def shard_name(prefix: str, split: str, index: int, count: int) -> str:
    return f"{prefix}-{split}-{index:05d}-of-{count:05d}.tfrecord"


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
        self._writer: tf.io.TFRecordWriter | None = None
        self._partials: list[Path] = []
        self._finished: list[Path] = []  # renamed by close(); abort() removes them too
        self._counts: list[int] = []
        self._current_bytes = 0
        self.bytes_written = 0

    def _rotate_needed(self) -> bool:
        if self._writer is None:
            return True
        if self.records_per_shard is not None:
            return self._counts[-1] >= self.records_per_shard
        return self._current_bytes >= self.shard_bytes

    def write(self, record: bytes) -> None:
        if self._rotate_needed():
            if self._writer is not None:
                self._writer.close()
            path = self.dest / f".{self.prefix}-{self.split}-{len(self._partials):05d}{_TMP_SUFFIX}"
            self._writer = tf.io.TFRecordWriter(str(path))
            self._partials.append(path)
            self._counts.append(0)
            self._current_bytes = 0
        self._writer.write(record)
        self._counts[-1] += 1
        size = len(record) + 16  # TFRecord framing: length, crc, data, crc
        self._current_bytes += size
        self.bytes_written += size

    def close(self) -> list[tuple[str, int]]:
        """Finish the shards; returns [(final file name, records)] in order."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        total = len(self._partials)
        names = []
        for i, (path, count) in enumerate(zip(self._partials, self._counts)):
            name = shard_name(self.prefix, self.split, i, total)
            os.replace(path, self.dest / name)
            self._finished.append(self.dest / name)
            names.append((name, count))
        self._partials = []
        return names

    def abort(self) -> None:
        """Remove everything this writer created (temporary and already renamed shards)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        for path in [*self._partials, *self._finished]:
            path.unlink(missing_ok=True)
        self._partials, self._finished = [], []


def build_manifest(*, prefix: str, classes: list[str], image_size: tuple[int, int] | None,
                   shards: dict[str, list[tuple[str, int]]], source: str) -> dict:
    splits = {}
    for split in SPLITS:
        entries = shards.get(split, [])
        splits[split] = {
            "files": [name for name, _ in entries],
            "examples": sum(n for _, n in entries),
            "shard_examples": [n for _, n in entries],
        }
    return {
        "format_version": FORMAT_VERSION,
        "source": source,
        "prefix": prefix,
        "classes": list(classes),
        "image_size": list(image_size) if image_size else None,
        "splits": splits,
    }


def write_manifest(dest: Path, manifest: dict) -> Path:
    path = Path(dest) / MANIFEST
    tmp = path.with_suffix(".json.partial")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, path)
    return path


@dataclasses.dataclass
class PreviousOutput:
    files: list[Path]


def check_output_dir(dest: Path, tool: str) -> PreviousOutput | None:
    """Validate DEST before anything is written.

    DEST may be missing, empty, or hold a previous output of these tools (its manifest lists every
    other file there), which is then replaced. Anything else is refused so no user file is lost.
    DEST may also hold only the temporary files of an interrupted run (``.…tfrecord.partial``), which
    are ours and removed too.
    """
    dest = Path(dest)
    if str(dest).startswith("gs://"):
        raise DataError(f"{tool}: destination {dest} must be a local folder (upload it afterwards)")
    if dest.exists() and not dest.is_dir():
        raise DataError(f"{tool}: destination {dest} exists and is not a folder")
    if not dest.exists():
        return None
    present = [p for p in dest.iterdir()]
    if not present:
        return None
    manifest_path = dest / MANIFEST
    refuse = DataError(
        f"{tool}: destination {dest} is not empty and is not a previous output of this tool; "
        "choose an empty or new folder"
    )
    if not manifest_path.is_file():
        if all(p.is_file() and _LEFTOVER_RE.fullmatch(p.name) for p in present):
            return PreviousOutput(files=present)  # an interrupted run's temporary files
        raise refuse
    try:
        manifest = json.loads(manifest_path.read_bytes().decode("utf-8"))
        listed = {MANIFEST} | {name for split in manifest["splits"].values() for name in split["files"]}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OSError):
        raise refuse from None
    ours = [p for p in present if p.name in listed or p.name.endswith((_TMP_SUFFIX, ".json.partial"))]
    if len(ours) != len(present):
        raise refuse
    return PreviousOutput(files=ours)


def remove_previous(previous: PreviousOutput | None) -> None:
    if previous is None:
        return
    # The manifest goes first: a folder without one is never mistaken for a complete dataset.
    for path in sorted(previous.files, key=lambda p: p.name != MANIFEST):
        path.unlink(missing_ok=True)
