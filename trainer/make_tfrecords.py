"""Convert a folder of class sub-folders of images into TFRecord shards + manifest.json.

    python -m trainer.make_tfrecords SRC DEST [--shard-mb 100] [--validation-fraction 0.1] [--max-side N]
                                     [--prefix images] [--workers N] [--seed 0] [--full-decode]

SRC/<class name>/**/<image>  (jpg, jpeg, png, gif, bmp, webp, tif, tiff: trainer.flags.IMAGE_FORMATS). Classes
are the sub-folder names in sorted order (label = position). Images are checked in parallel worker processes:
RGB/greyscale JPEGs are kept as they are after a check of their whole stream and tables (trainer.jpegcheck;
--full-decode decodes them as well, about twice as slow), everything else is decoded and re-encoded to JPEG.
With --max-side N, an image whose longer side is over N pixels (a JPEG too) is downsized to N (aspect ratio
kept) and re-encoded to JPEG. An image that fails is reported on stderr (``skipped: <path>: <reason>``, the
reason saying why: empty, not an image, unsupported format, truncated, too large, corrupt, …) and left out.
No TensorFlow is loaded (trainer.tfrecord writes the shards). The validation split is drawn per class
(deterministic for a given --seed), and records are shuffled across shards of ~--shard-mb each.
DEST must be a local folder that is missing, empty, or a previous output of this tool. The new output is
written next to it (``.DEST.writing``) and swapped in only when complete (trainer.atomicdir): a run that fails
(no readable image, a full disk) or is stopped by Ctrl-C or SIGTERM (``error: interrupted``, exit 130) removes
what it wrote and leaves an earlier output in DEST as it was. A second run into the same DEST while one is
writing it is refused in one line.

stdout: ``progress: <done>/<total>`` lines while converting, then ``summary: <json>`` with
train, validation, classes, skipped, skipped_files, skipped_reasons ([{file, kind, reason}]), max_side,
resized, shards, bytes, prefix, image_size.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import random
import signal
import stat
import sys
import threading
import time
from pathlib import Path

import google_crc32c

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer import atomicdir, protocol, records, tfrecord
from trainer.errors import ArgumentParser, DataError, UsageError, run_cli
from trainer.flags import IMAGE_EXTENSIONS
from trainer.flags import MAKE_TFRECORDS_BOUNDS as BOUNDS
from trainer.imaging import Skip, check_image, describe


def _link_out(src: Path, root: Path, link: Path) -> DataError | None:
    """The refusal for a symbolic link the walk must not follow: any link to a folder (a class folder or one
    inside it: following it would pack files from elsewhere, or the same files twice), and a link to a file
    outside SRC (a dataset must not carry, and then upload, files that are not in the folder named)."""
    name = link.relative_to(src).as_posix()
    target = os.path.realpath(link)
    if link.is_dir():
        return DataError(f"source folder {src}: {name} is a symbolic link to a folder ({target}); links to "
                         "folders are not followed: copy or move the folder into the source, or remove the link")
    if os.path.commonpath([root, target]) != str(root):
        return DataError(f"source folder {src}: {name} is a symbolic link to {target}, outside the source; "
                         "copy the file into the source, or remove the link")
    return None


def _class_images(src: Path, root: Path, folder: Path) -> list[Path]:
    """The images under one class folder, walked without following links (see :func:`_link_out`)."""
    files = []
    for top, dirs, names in os.walk(folder, onerror=_raise):
        top_path = Path(top)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in dirs:
            if (top_path / d).is_symlink():
                raise _link_out(src, root, top_path / d)
        for name in names:
            path = top_path / name
            if name.startswith(".") or path.suffix.lower() not in IMAGE_EXTENSIONS:
                continue
            if path.is_symlink() and (refusal := _link_out(src, root, path)):
                raise refusal
            if path.is_file():  # not a FIFO, device or dangling link: those are never opened
                files.append(path)
    return sorted(files)


def _raise(err: OSError) -> None:
    raise DataError(f"cannot read {err.filename}: {err.strerror or err}")


def find_images(src: Path) -> tuple[list[str], list[list[Path]]]:
    """Class names and their images. Symbolic links are never followed out of ``src`` (one line naming the
    link, see :func:`_link_out`); ``src`` itself may be a link (it is the folder the user named)."""
    if not src.exists():
        raise DataError(f"source folder {src} does not exist")
    if not src.is_dir():
        raise DataError(f"source {src} is not a folder")
    root = Path(os.path.realpath(src))
    try:
        entries = sorted(p for p in src.iterdir() if not p.name.startswith("."))
    except OSError as err:
        raise DataError(f"cannot read source folder {src}: {err.strerror or err}") from None
    class_dirs = []
    for path in entries:
        if path.is_symlink() and path.is_dir():
            raise _link_out(src, root, path)
        if path.is_dir():
            class_dirs.append(path)
    if not class_dirs:
        raise DataError(f"source folder {src} has no class sub-folders (expected SRC/<class>/<image files>)")
    classes, images = [], []
    for folder in class_dirs:
        files = _class_images(src, root, folder)
        if not files:
            raise DataError(f"class folder {folder} has no images ({', '.join(IMAGE_EXTENSIONS)}); "
                            "add images or remove the folder")
        classes.append(folder.name)
        images.append(files)
    if len(classes) < 2:
        raise DataError(f"source folder {src} has {len(classes)} class sub-folder; a classifier needs at least 2")
    return classes, images


def check_dest_outside(src: Path, dest: str | Path) -> None:
    """Refuse a DEST inside SRC (or SRC itself), symbolic links resolved, before anything is written: its folder
    would become a class of the next run (or its shards images of one), and the walk would meet what is being
    written."""
    if not src.is_dir():
        return  # find_images says what is wrong with SRC
    root, out = Path(os.path.realpath(src)), Path(os.path.realpath(dest))
    if out == root or root in out.parents:
        resolved = "" if (str(out), str(root)) == (str(dest), str(src)) else f" ({out} is in {root})"
        raise DataError(f"make_tfrecords: destination {dest} is inside the source folder {src}{resolved}; "
                        "choose a destination outside it")


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


#: The largest image file read (1 GiB): a record must stay well under protobuf's 2 GiB message limit
#: (tf.train.Example cannot hold more), and each worker holds a file in memory. An image file this big is
#: reported as skipped, unread.
MAX_IMAGE_BYTES = 1 << 30


class _Refused(OSError):
    """A file :func:`_open_image` does not read; ``skip`` says why."""

    def __init__(self, skip: Skip):
        super().__init__(skip.reason)
        self.skip = skip


def _open_image(path: str | Path):
    """``path`` opened for reading if it is a regular file of at most ``MAX_IMAGE_BYTES``: a FIFO put in place of
    an image never blocks (opened non-blocking, then refused), a device is never read. OSError saying what is
    wrong otherwise."""
    handle = os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb")
    try:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _Refused(Skip("unreadable", "not a regular file (a FIFO or device is never read)"))
        if info.st_size > MAX_IMAGE_BYTES:
            raise _Refused(Skip("too-large", f"{info.st_size} bytes, over the {MAX_IMAGE_BYTES}-byte limit "
                                             "for one image"))
    except BaseException:
        handle.close()
        raise
    return handle


def _unreadable(err: OSError) -> Skip:
    return err.skip if isinstance(err, _Refused) else Skip("unreadable", f"cannot read it: {describe(err)}")


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _ignore_stop_signals() -> None:
    """In a worker: Ctrl-C and the supervisor's SIGTERM reach the whole process group; only the parent reacts (it
    cancels what was not started and waits for the chunks in progress). A worker killed by the signal could die
    while writing its result to the executor's pipe, and the executor's manager thread then waits for the rest of
    that message forever (seen: 3 of 40 group SIGTERMs beside three CPU-bound processes, Python 3.11.7)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)   # blocked from the start (:func:`_decoded`)


def _prepare(task: tuple[str, int, str, str], full_decode: bool = False,
             max_side: int | None = None) -> tuple[bool, object]:
    """In a worker: check one image and build its record around it.

    ``(True, (head, image, tail, height, width, resized))``: the record is ``head + image + tail``. For a JPEG kept
    as it is, ``image`` is ``(size, start, crc)`` of the checked file instead of its bytes (``start``: the
    CRC-32C of ``head``; ``crc``: continued over the file, ``google_crc32c.extend(start, file bytes)``): the
    writing process reads the file itself (no image bytes through the pool) and writes it only if it is still
    the same. ``resized``: downsized to ``max_side``. ``(False, Skip)`` for an image that fails the check.
    """
    path, label, text, filename = task
    try:  # before the decoder reads it: a regular file of bounded size
        _open_image(path).close()
    except OSError as err:
        return False, _unreadable(err)
    ok, payload = check_image(path, full_decode, max_side)
    if not ok:
        return ok, payload
    encoded, height, width, kept, resized = payload
    head, tail = tfrecord.example_around(len(encoded), label=label, text=text, height=height, width=width,
                                         filename=filename)
    if kept:
        start = google_crc32c.value(head)
        checked = (len(encoded), start, google_crc32c.extend(start, encoded))
        return True, (head, checked, tail, height, width, resized)
    return True, (head, encoded, tail, height, width, resized)


@contextlib.contextmanager
def _decoded(tasks: list[tuple[str, int, str, str]], workers: int, full_decode: bool = False,
             max_side: int | None = None):
    """Yields an iterator of :func:`_prepare` over ``tasks``, in order, computed in ``workers`` processes (spawned:
    safe even when the caller has TensorFlow loaded, as the trainer's tests do).

    The pool is shut down when the block ends, however it ends (Ctrl-C, SIGTERM via run_cli): what was not started
    is cancelled and this process waits for the chunks in progress (at most 64 images each), so no worker is left
    decoding (or blocked reading a file) after this process exits. An interrupt that arrives while the consumer
    waits for a result leaves the iterator at once; the pool is stopped only when this block is left, so a block
    opened inside this one (the output folder) is cleaned up first.

    ``concurrent.futures.ProcessPoolExecutor``, not ``multiprocessing.Pool``: a Pool whose worker died holding its
    result queue's lock deadlocks in ``terminate()`` (seen on a loaded machine: the tool then outlived the SIGTERM
    grace and was SIGKILLed, leaving its output folder's lock behind); the executor notices a worker that dies
    between results (killed, out of memory) and shuts down without it. The workers ignore the stop signals the
    process group gets (:func:`_ignore_stop_signals`): one killed while sending a result hung the executor too.
    """
    from concurrent.futures import ProcessPoolExecutor

    prepare = functools.partial(_prepare, full_decode=full_decode, max_side=max_side)
    if workers <= 1 or len(tasks) < 2:
        yield (prepare(task) for task in tasks)
        return
    pool = ProcessPoolExecutor(min(workers, len(tasks)), mp_context=multiprocessing.get_context("spawn"),
                               initializer=_ignore_stop_signals)
    previous_hook = threading.excepthook
    threading.excepthook = functools.partial(_quiet_cancelled_race, previous_hook)
    try:
        chunk = max(1, min(64, len(tasks) // (workers * 8)))
        # map() submits every chunk and so starts the workers now: with the stop signals blocked meanwhile, a worker
        # starts with them blocked (the mask survives exec) and a signal in its first moments, before its
        # initializer ran, cannot kill it; this process gets a signal that came meanwhile when they are unblocked.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            results = pool.map(prepare, tasks, chunksize=chunk)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        yield results
    finally:
        pool.shutdown(wait=True, cancel_futures=True)     # joins the executor's manager thread
        threading.excepthook = previous_hook


def _quiet_cancelled_race(previous, args) -> None:
    """``threading.excepthook`` while the pool lives: a SIGTERM to the process group kills the workers while
    ``shutdown(cancel_futures=True)`` cancels the queued chunks, and the executor's manager thread then fails to set
    "broken pool" on a future already cancelled (InvalidStateError, a traceback on stderr after the one error line;
    seen on a loaded machine). CPython fixed the race in 3.12 (python/cpython gh-107219, PR 108974: the manager
    ignores it); on 3.11 it is ignored here, and every other thread exception goes to the previous hook."""
    from concurrent.futures import InvalidStateError

    if args.exc_type is InvalidStateError and type(args.thread).__name__ == "_ExecutorManagerThread":
        return
    previous(args)


def _read_unchanged(path: Path, checked: tuple[int, int, int]) -> tuple[bool, bytes | Skip]:
    """The file's bytes, if they are still those that were checked (:func:`_prepare`'s ``(size, start, crc)``).

    Its one checksum pass runs on from the head's CRC: when it matches, ``crc`` is also the record's CRC-32C
    up to the end of the image, so writing the record costs no second pass. (For bytes of the same size,
    CRCs continued from the same start are equal exactly when their own CRC-32Cs are: the check is as strong
    as comparing those.)
    """
    size, start, crc = checked
    try:
        with _open_image(path) as handle:
            raw = handle.read(size + 1)
    except OSError as err:
        return False, _unreadable(err)
    if len(raw) != size or google_crc32c.extend(start, raw) != crc:
        return False, Skip("changed", "changed while converting (it differs from the bytes that were checked)")
    return True, raw


def convert(src: str | Path, dest: str | Path, *, shard_mb: float = 100.0, validation_fraction: float = 0.1,
            prefix: str = "images", workers: int | None = None, seed: int = 0, full_decode: bool = False,
            max_side: int | None = None, progress=print) -> dict:
    BOUNDS["shard_mb"].check("--shard-mb", shard_mb)
    BOUNDS["validation_fraction"].check("--validation-fraction", validation_fraction)
    if not isinstance(prefix, str) or not records.PREFIX_RE.fullmatch(prefix):
        raise UsageError(f"--prefix {prefix!r} must be 1-100 letters, digits, '_', '.', '-' "
                         "(starting with a letter or digit)")
    workers = workers if workers is not None else min(os.cpu_count() or 1, int(BOUNDS["workers"].high))
    BOUNDS["workers"].check("--workers", workers)
    BOUNDS["seed"].check("--seed", seed)
    if max_side is not None:
        BOUNDS["max_side"].check("--max-side", max_side)
    records.check_output_dir(dest, "make_tfrecords")  # before the source is read: a wrong DEST fails at once
    src = Path(src)
    check_dest_outside(src, dest)
    classes, images = find_images(src)
    items = plan_splits(images, validation_fraction, seed)
    total = len(items)

    shard_bytes = max(1, int(shard_mb * 1_000_000))
    skipped: list[tuple[Path, Skip]] = []
    resized = 0
    sizes: set[tuple[int, int]] = set()
    done, last_report, last_time = 0, -1, 0.0
    tasks = [(str(p), label, classes[label], p.relative_to(src).as_posix()) for p, label, _ in items]
    # Written next to DEST and swapped in only when complete (an earlier output survives any failure). On the
    # way out, the new folder is swapped in or, if this failed, removed together with its lock FIRST, and the
    # decoder pool is stopped after: the workers only hand records to this process, and stopping spawned workers
    # can outlast the supervisor's SIGTERM grace on a loaded machine, whose SIGKILL would otherwise leave
    # .<name>.writing and .<name>.lock behind.
    with _decoded(tasks, workers, full_decode, max_side) as results, \
            atomicdir.replacing(dest, "make_tfrecords: destination",
                                check=lambda folder: records.check_output_dir(folder, "make_tfrecords")) as out:
        writers = {split: tfrecord.ShardWriter(out, prefix, split, shard_bytes=shard_bytes)
                   for split in records.SPLITS}
        for (path, _, split), (ok, payload) in zip(items, results):
            done += 1
            if ok:
                head, encoded, tail, height, width, downsized = payload
                crc = None  # the writer computes it
                if isinstance(encoded, tuple):  # a JPEG kept as it is: read here, not copied through the pool
                    ok, payload = _read_unchanged(path, encoded)
                    if ok:  # the check's CRC pass gives the record's CRC-32C: no second pass in the writer
                        encoded, crc = payload, google_crc32c.extend(encoded[2], tail)
            if ok:
                sizes.add((height, width))
                resized += downsized
                writers[split].write([head, encoded, tail], crc)
            else:
                skipped.append((path, payload))
                print(f"skipped: {path}: {payload.reason}", file=sys.stderr, flush=True)
            now = time.monotonic()
            if done == total or (done - last_report >= max(1, total // 200) and now - last_time >= 0.1):
                progress(done, total)
                last_report, last_time = done, now
        written = {split: w.close() for split, w in writers.items()}
        counts = {split: sum(n for _, n in written[split]) for split in records.SPLITS}
        if counts["train"] == 0:
            raise DataError(f"no readable images in {src} ({len(skipped)} skipped); nothing written")
        manifest = records.build_manifest(prefix=prefix, classes=classes,
                                          image_size=next(iter(sizes)) if len(sizes) == 1 else None,
                                          shards=written, source="make_tfrecords", max_side=max_side)
        records.write_manifest(out, manifest)
    return {
        "train": counts["train"],
        "validation": counts["validation"],
        "classes": classes,
        "skipped": len(skipped),
        "skipped_files": [str(path) for path, _ in skipped],
        "skipped_reasons": [{"file": str(path), "kind": skip.kind, "reason": skip.reason} for path, skip in skipped],
        "max_side": max_side,
        "resized": resized,
        "shards": sum(len(v) for v in written.values()),
        "bytes": sum(w.bytes_written for w in writers.values()),
        "prefix": prefix,
        "image_size": manifest["image_size"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m trainer.make_tfrecords",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("src", help="folder of class sub-folders of images")
    parser.add_argument("dest", help="local output folder (missing, empty, or a previous output)")
    parser.add_argument("--shard-mb", type=BOUNDS["shard_mb"].parse, default=100.0,
                        help=f"target shard size in MB, default 100 ({BOUNDS['shard_mb'].describe()})")
    parser.add_argument("--validation-fraction", type=BOUNDS["validation_fraction"].parse, default=0.1,
                        help=f"share of each class for validation, default 0.1 "
                             f"({BOUNDS['validation_fraction'].describe()})")
    parser.add_argument("--prefix", default="images", help="shard name prefix: <prefix>-train-00000-of-0000N.tfrecord")
    parser.add_argument("--workers", type=BOUNDS["workers"].parse, default=None,
                        help=f"decoder processes, default: CPU count ({BOUNDS['workers'].describe()})")
    parser.add_argument("--full-decode", action="store_true",
                        help="also decode every JPEG that is kept as it is (Pillow, 1/8 scale; about twice as "
                             "slow), a decoder's second opinion after the stream and table check")
    parser.add_argument("--max-side", type=BOUNDS["max_side"].parse, default=None,
                        help="downsize images whose longer side is over this many pixels to it (aspect ratio "
                             "kept; re-encoded as JPEG); default: images keep their size "
                             f"({BOUNDS['max_side'].describe()})")
    parser.add_argument("--seed", type=BOUNDS["seed"].parse, default=0,
                        help=f"seed of the validation split and shard order ({BOUNDS['seed'].describe()})")

    def run():
        args = parser.parse_args(argv)
        summary = convert(args.src, args.dest, shard_mb=args.shard_mb, validation_fraction=args.validation_fraction,
                          prefix=args.prefix, workers=args.workers, seed=args.seed, full_decode=args.full_decode,
                          max_side=args.max_side,
                          progress=lambda done, total: protocol.emit(protocol.PROGRESS, (done, total)))
        protocol.emit(protocol.SUMMARY, summary)

    return run_cli(run, handle_signals=True)


if __name__ == "__main__":
    sys.exit(main())
