"""Preflight for ``--model hub``: is ``<TFHUB_CACHE_DIR>/<sha1(handle)>/`` complete before ``hub.load``?

tensorflow_hub uses a cache folder as soon as it exists and is non-empty (resolver.py ``atomic_download``:
``gfile.Exists(module_dir) and gfile.ListDirectory(module_dir)``); it never checks the files and never
downloads again. An interrupted ``tpuctl hub-cache add`` or a ``pulumi up`` that failed half-way would
therefore be "loaded" and crash deep inside TensorFlow. tpuctl writes ``<sha1>/.tpuctl-manifest.json``
LAST (handle, every file with size and crc32c); this module reads it with ``tf.io.gfile`` (a local folder
or gs://) and checks that every listed file is there with its size. CRC32C is checked where the
objects are written and by ``tpuctl doctor``; here only sizes (reading every byte would cost a download).

Standard library and TensorFlow only: the trainer ships alone. The manifest format is
``ground.domain.hub`` (``HUB_MANIFEST``, ``HUB_MANIFEST_FORMAT``, ``HUB_STAGING``); tests check
the two agree. ``python -m trainer.hubcheck HANDLE [--cache_dir DIR]`` runs the same check.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Sequence

from trainer.errors import DataError, run_cli
from trainer.localfiles import is_local, read_small
from trainer.paths import join_path

MANIFEST = ".tpuctl-manifest.json"
MANIFEST_FORMAT = "tpuctl-hub-manifest/1"
STAGING = ".staging"
#: A manifest names every file of one model with its size and checksum: a few KB; read whole, so bounded.
MAX_MANIFEST_BYTES = 16 * 1024 * 1024


def cache_key(handle: str) -> str:
    return hashlib.sha1(handle.encode("utf8")).hexdigest()


def repair_command(handle: str, cache_dir: str) -> str:
    """The tpuctl command that rebuilds the folder (run where tpuctl is installed)."""
    if cache_dir.startswith("gs://"):
        bucket, _, prefix = cache_dir[len("gs://"):].rstrip("/").partition("/")
        return f"tpuctl hub-cache add {handle} --bucket {bucket} --prefix {prefix or 'model-cache'}"
    return f"tpuctl hub-cache fetch {handle} --dest {cache_dir}"


def _problem(folder: str, handle: str, gfile) -> str | None:
    """Why the (non-empty) folder is not a complete copy of ``handle``, or None."""
    manifest = join_path(folder, MANIFEST)
    if not gfile.exists(manifest):
        return f"no {MANIFEST} (an upload was interrupted, or the folder was not written by tpuctl)"
    try:
        if is_local(manifest):  # a FIFO or device in a local cache is refused, never read
            body = json.loads(read_small(manifest, "the hub cache's manifest", MAX_MANIFEST_BYTES,
                                         hint="tpuctl hub-cache writes it"))
        else:
            with gfile.GFile(manifest, "rb") as fh:
                body = json.loads(fh.read(MAX_MANIFEST_BYTES + 1))
        if body.get("format") != MANIFEST_FORMAT:
            return f"{MANIFEST} has an unknown format {body.get('format')!r}"
        files = {f["path"]: int(f["size"]) for f in body["files"]}
    except DataError as err:
        return str(err)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as err:
        return f"{MANIFEST} is unreadable ({type(err).__name__})"
    if body.get("handle") != handle:
        return f"{MANIFEST} is for {body.get('handle')!r}, not this handle"
    if "saved_model.pb" not in files:
        return f"{MANIFEST} lists no saved_model.pb"
    for rel, size in sorted(files.items()):
        path = join_path(folder, *rel.split("/"))
        if not gfile.exists(path):
            return f"{rel} is missing"
        actual = gfile.stat(path).length
        if actual != size:
            return f"{rel} has {actual} bytes, the manifest says {size}"
    return None


def check(handle: str, cache_dir: str | None = None, gfile=None) -> str | None:
    """Raise ``DataError`` (exit 2, one line naming the repair command) if the cache holds an incomplete
    copy of ``handle``. Returns the folder when it is complete, None when the cache has no copy at all
    (tensorflow_hub then resolves the handle itself). ``cache_dir`` default: $TFHUB_CACHE_DIR."""
    cache_dir = cache_dir if cache_dir is not None else os.environ.get("TFHUB_CACHE_DIR")
    if not cache_dir or not handle.startswith(("http://", "https://")):
        return None           # no cache, or a path / gs:// handle tensorflow_hub reads directly
    if gfile is None:
        import tensorflow as tf

        gfile = tf.io.gfile
    key = cache_key(handle)
    folder = join_path(cache_dir, key)
    repair = repair_command(handle, cache_dir)
    try:
        present = gfile.exists(folder) and bool(gfile.listdir(folder))
        if not present:
            staging = join_path(cache_dir, STAGING)
            staged = [n for n in (gfile.listdir(staging) if gfile.isdir(staging) else [])
                      if n.rstrip("/").startswith(key + "-")]
            if staged:
                raise DataError(f"TFHUB_CACHE_DIR={cache_dir} has only an interrupted upload of --hub_handle "
                                f"{handle} ({STAGING}/{staged[0].rstrip('/')}); repair: {repair}")
            return None
        problem = _problem(folder, handle, gfile)
    except DataError:
        raise
    except Exception as err:  # noqa: BLE001 - tf.errors.OpError and friends: cannot read the cache
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"cannot read TFHUB_CACHE_DIR={cache_dir} for --hub_handle {handle}: {first}") from None
    if problem:
        raise DataError(f"TFHUB_CACHE_DIR={cache_dir} holds an INCOMPLETE copy of --hub_handle {handle} "
                        f"({key}/: {problem}); tensorflow_hub would load it as is; repair: {repair}")
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("handles", nargs="+")
    parser.add_argument("--cache_dir", default=None, help="default: $TFHUB_CACHE_DIR")

    def go():
        args = parser.parse_args(argv)
        for handle in args.handles:
            folder = check(handle, args.cache_dir)
            print(f"{handle}: {'complete ' + folder if folder else 'not in the cache'}", flush=True)

    return run_cli(go)


if __name__ == "__main__":
    sys.exit(main())
