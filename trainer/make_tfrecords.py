"""Convert a folder of class sub-folders of images into TFRecord shards + manifest.json.

    python -m trainer.make_tfrecords SRC DEST [--shard-mb 100] [--validation-fraction 0.1]
                                     [--prefix images] [--workers N] [--seed 0]

SRC/<class name>/**/<image>  (jpg, png, gif, bmp, webp, tif). Classes are the sub-folder names in
sorted order (label = position). Images are decoded in parallel worker processes; JPEGs are kept
as they are, other formats re-encoded to JPEG; an image that does not decode is reported on stderr
(``skipped: <path>: <reason>``) and left out. The validation split is drawn per class
(deterministic for a given --seed), and records are shuffled across shards of ~--shard-mb each.
DEST must be a local folder that is missing, empty, or a previous output of this tool.

stdout: ``progress: <done>/<total>`` lines while converting, then ``summary: <json>`` with
train, validation, classes, skipped, skipped_files, shards, bytes.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import random
import re
import sys
import time
from pathlib import Path

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer import protocol
from trainer.errors import DataError, UsageError, run_cli
from trainer.imaging import IMAGE_EXTENSIONS, load_as_jpeg

_PREFIX_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def find_images(src: Path) -> tuple[list[str], list[list[Path]]]:
    if not src.exists():
        raise DataError(f"source folder {src} does not exist")
    if not src.is_dir():
        raise DataError(f"source {src} is not a folder")
    class_dirs = sorted(p for p in src.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not class_dirs:
        raise DataError(f"source folder {src} has no class sub-folders (expected SRC/<class>/<image files>)")
    classes, images = [], []
    for folder in class_dirs:
        files = sorted(p for p in folder.rglob("*")
                       if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
                       and not any(part.startswith(".") for part in p.relative_to(folder).parts))
        if not files:
            raise DataError(f"class folder {folder} has no images ({', '.join(IMAGE_EXTENSIONS)}); "
                            "add images or remove the folder")
        classes.append(folder.name)
        images.append(files)
    if len(classes) < 2:
        raise DataError(f"source folder {src} has {len(classes)} class sub-folder; a classifier needs at least 2")
    return classes, images


def plan_splits(images: list[list[Path]], validation_fraction: float, seed: int) -> list[tuple[Path, int, str]]:
    """[(path, label, split)] with a per-class validation share, shuffled across classes."""
    rng = random.Random(seed)
    items: list[tuple[Path, int, str]] = []
    for label, files in enumerate(images):
        files = list(files)
        rng.shuffle(files)
        n_val = int(round(len(files) * validation_fraction))
        if validation_fraction > 0 and n_val == 0 and len(files) >= 2:
            n_val = 1
        n_val = min(n_val, len(files) - 1)  # every class keeps a training example
        items += [(p, label, "validation") for p in files[:n_val]]
        items += [(p, label, "train") for p in files[n_val:]]
    rng.shuffle(items)
    return items


def _results(paths: list[str], workers: int):
    """load_as_jpeg over ``paths`` in order, in ``workers`` processes (spawned: no TensorFlow in them)."""
    if workers <= 1 or len(paths) < 2:
        for p in paths:
            yield load_as_jpeg(p)
        return
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        chunk = max(1, min(64, len(paths) // (workers * 8)))
        yield from pool.map(load_as_jpeg, paths, chunksize=chunk)


def convert(src: str | Path, dest: str | Path, *, shard_mb: float = 100.0, validation_fraction: float = 0.1,
            prefix: str = "images", workers: int | None = None, seed: int = 0, progress=print) -> dict:
    if not shard_mb > 0:
        raise UsageError(f"--shard-mb must be positive, got {shard_mb}")
    if not 0 <= validation_fraction < 1:
        raise UsageError(f"--validation-fraction must be between 0 and 1, got {validation_fraction}")
    if not _PREFIX_RE.fullmatch(prefix):
        raise UsageError(f"--prefix {prefix!r} must be letters, digits, '_', '.', '-' (starting with a letter or digit)")
    workers = workers if workers is not None else (os.cpu_count() or 1)
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    src, dest = Path(src), Path(dest)
    from trainer import records

    previous = records.check_output_dir(dest, "make_tfrecords")
    classes, images = find_images(src)
    items = plan_splits(images, validation_fraction, seed)
    total = len(items)

    created = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    records.remove_previous(previous)
    shard_bytes = max(1, int(shard_mb * 1_000_000))
    writers = {split: records.ShardWriter(dest, prefix, split, shard_bytes=shard_bytes) for split in records.SPLITS}
    skipped: list[str] = []
    sizes: set[tuple[int, int]] = set()
    done, last_report, last_time = 0, -1, 0.0
    try:
        for (path, label, split), (ok, payload) in zip(items, _results([str(p) for p, _, _ in items], workers)):
            done += 1
            if ok:
                encoded, height, width = payload
                sizes.add((height, width))
                writers[split].write(records.make_example(
                    encoded=encoded, label=label, text=classes[label], height=height, width=width,
                    filename=path.relative_to(src).as_posix()))
            else:
                skipped.append(str(path))
                print(f"skipped: {path}: {payload}", file=sys.stderr, flush=True)
            now = time.monotonic()
            if done == total or (done - last_report >= max(1, total // 200) and now - last_time >= 0.1):
                progress(done, total)
                last_report, last_time = done, now
        written = {split: w.close() for split, w in writers.items()}
        counts = {split: sum(n for _, n in written[split]) for split in records.SPLITS}
        if counts["train"] == 0:
            for names in written.values():
                for name, _ in names:
                    (dest / name).unlink(missing_ok=True)
            raise DataError(f"no readable images in {src} ({len(skipped)} skipped); nothing written")
    except BaseException:
        for w in writers.values():
            w.abort()
        if created and dest.exists() and not any(dest.iterdir()):
            dest.rmdir()
        raise
    manifest = records.build_manifest(prefix=prefix, classes=classes,
                                      image_size=next(iter(sizes)) if len(sizes) == 1 else None,
                                      shards=written, source="make_tfrecords")
    records.write_manifest(dest, manifest)
    return {
        "train": counts["train"],
        "validation": counts["validation"],
        "classes": classes,
        "skipped": len(skipped),
        "skipped_files": skipped,
        "shards": sum(len(v) for v in written.values()),
        "bytes": sum(w.bytes_written for w in writers.values()),
        "prefix": prefix,
        "image_size": manifest["image_size"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.make_tfrecords",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("src", help="folder of class sub-folders of images")
    parser.add_argument("dest", help="local output folder (missing, empty, or a previous output)")
    parser.add_argument("--shard-mb", type=float, default=100.0, help="target shard size in MB (default 100)")
    parser.add_argument("--validation-fraction", type=float, default=0.1)
    parser.add_argument("--prefix", default="images", help="shard name prefix: <prefix>-train-00000-of-0000N.tfrecord")
    parser.add_argument("--workers", type=int, default=None, help="decoder processes (default: CPU count)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the validation split and shard order")

    def parse_error(message):
        raise UsageError(message)

    parser.error = parse_error

    def run():
        args = parser.parse_args(argv)
        summary = convert(args.src, args.dest, shard_mb=args.shard_mb, validation_fraction=args.validation_fraction,
                          prefix=args.prefix, workers=args.workers, seed=args.seed,
                          progress=lambda done, total: protocol.emit(protocol.PROGRESS, (done, total)))
        protocol.emit(protocol.SUMMARY, summary)

    return run_cli(run)


if __name__ == "__main__":
    sys.exit(main())
