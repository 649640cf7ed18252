"""The TFRecord layout the trainer reads: shards in the seed's schema plus ``manifest.json``.

Shared by the trainer (reading, no extra dependency) and the data tools (writing: ``trainer.tfrecord``).

Layout of a data folder::

    <prefix>-train-00000-of-00004.tfrecord        tf.train.Example records, seed schema (see FEATURE_KEYS)
    <prefix>-validation-00000-of-00001.tfrecord
    manifest.json   {"prefix", "classes", "image_size", "max_side", "splits": {"train": {"files", "examples",
                    "shard_examples"}, "validation": {...}}, "source", "format_version"}

``max_side``: the longer side images over it were downsized to (``make_tfrecords --max-side``), null when they
kept their size. Readers ignore it (it only records how the data was made), so ``FORMAT_VERSION`` stays 1.

Example counts live in the manifest so the trainer never reads every record just to count them.
Shards are written under temporary names and renamed when complete; the manifest is written last,
so a folder with a manifest is a complete dataset.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from trainer.errors import DataError
from trainer.localfiles import read_small

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

TMP_SUFFIX = ".tfrecord.partial"
#: Shard name prefixes: what both data tools accept and the trainer's manifest check requires.
PREFIX_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
#: Files a run of these tools writes before its manifest exists (left behind only by a hard kill).
_LEFTOVER_RE = re.compile(r"\.[A-Za-z0-9][A-Za-z0-9_.-]*-(?:train|validation)-\d{5}\.tfrecord\.partial"
                          r"|manifest\.json\.partial")
#: A shard these tools write (:func:`shard_name`): the only names besides the manifest a previous output may own.
_SHARD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}-(?:train|validation)-\d{5}-of-\d{5}\.tfrecord")


def shard_name(prefix: str, split: str, index: int, count: int) -> str:
    return f"{prefix}-{split}-{index:05d}-of-{count:05d}.tfrecord"


def build_manifest(*, prefix: str, classes: list[str], image_size: tuple[int, int] | None,
                   shards: dict[str, list[tuple[str, int]]], source: str, max_side: int | None = None) -> dict:
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
        "max_side": max_side,
        "splits": splits,
    }


def write_manifest(dest: Path, manifest: dict) -> Path:
    path = Path(dest) / MANIFEST
    tmp = path.with_suffix(".json.partial")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, path)
    return path


#: A URL such as gs://bucket/x; also as Path() leaves it (gs:/bucket/x), which would be a local folder "gs:".
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")


#: A manifest these tools write names its shards: a few KB (the trainer's reader allows 64 MiB, trainer.data).
_MAX_PREVIOUS_MANIFEST_BYTES = 64 * 1024 * 1024


def check_output_dir(dest: str | Path, tool: str) -> list[Path]:
    """Validate DEST before anything is written; returns the files of a previous output there (to remove).

    DEST may be missing, empty, or hold a previous output of these tools (its manifest lists every
    other file there), which is then replaced (``trainer.atomicdir``: only once the new output is
    complete). Anything else is refused so no user file is lost.
    DEST may also hold only the temporary files of an interrupted run (``.…tfrecord.partial``), which
    are ours and removed too.
    """
    if _URL_RE.match(str(dest)):
        raise DataError(f"{tool}: destination {dest} must be a local folder (upload it afterwards)")
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise DataError(f"{tool}: destination {dest} exists and is not a folder")
    if not dest.exists():
        return []
    present = list(dest.iterdir())
    if not present:
        return []
    manifest_path = dest / MANIFEST
    refuse = DataError(
        f"{tool}: destination {dest} is not empty and is not a previous output of this tool; "
        "choose an empty or new folder"
    )
    if not manifest_path.is_file():
        if all(p.is_file() and _LEFTOVER_RE.fullmatch(p.name) for p in present):
            return present  # an interrupted run's temporary files
        raise refuse
    try:
        # Bounded, and never blocking: DEST/manifest.json may be anything (a FIFO, a link to a device).
        raw = read_small(str(manifest_path), "manifest", _MAX_PREVIOUS_MANIFEST_BYTES, hint="")
        manifest = json.loads(raw.decode("utf-8"))
        listed = {MANIFEST} | {name for split in manifest["splits"].values() for name in split["files"]}
    except (DataError, ValueError, KeyError, TypeError, AttributeError, RecursionError, OSError):
        raise refuse from None
    # Ours, and so replaced: the manifest, the shards it lists that have a shard's name, and the tools' own temporary
    # files: regular files only. A manifest naming a user's folder or file (hand-edited, or another tool's) does
    # not make it ours: it is refused, and nothing is removed.
    ours = [p for p in present if p.is_file() and not p.is_symlink()
            and (p.name == MANIFEST or _LEFTOVER_RE.fullmatch(p.name)
                 or (p.name in listed and _SHARD_RE.fullmatch(p.name)))]
    if len(ours) != len(present):
        raise refuse
    return ours
