"""Throughput of `tpuctl data make-tfrecords` as a ratio to copying the same bytes, in one run.

    .venv/bin/python benchmarks/make_tfrecords.py [--images 8500] [--size 256] [--classes 5] [--rounds 3] [--full-decode]

Generates a folder of random JPEGs (class sub-folders) with the trainer environment's Pillow, then times
  copy         shutil.copytree of the folder (read + write the same bytes, file by file)
  concatenate  read every file and write them all into one file (the I/O floor of writing shards)
  convert      tpuctl's make-tfrecords (trainer.make_tfrecords in the trainer env: decode check of every
               image, encode tf.train.Example, write ~--shard-mb shards), end to end including the interpreter
               start, and from its first progress line on (steady state)
each step from nothing dirty in the page cache to its bytes on disk (os.sync), interleaved over --rounds rounds, and
prints the medians' MB/s and the ratios convert/copy. The defaults make ~505 MB of images.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MAKE_JPEGS = r"""
import sys
from pathlib import Path
import numpy as np
from PIL import Image
root, n, size, classes = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
base = rng.integers(0, 255, size=(size, size, 3), dtype=np.uint8)
for i in range(n):
    folder = root / f"class{i % classes}"
    folder.mkdir(parents=True, exist_ok=True)
    noise = rng.integers(-20, 20, size=base.shape)
    Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8)).save(folder / f"img{i:06d}.jpg", quality=90)
"""


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def concatenate(src: Path, dest: Path) -> None:
    """Read every image and write them all into one file: the I/O a converter cannot avoid."""
    with open(dest, "wb") as out:
        for path in sorted(src.rglob("*")):
            if path.is_file():
                out.write(path.read_bytes())


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8500)
    parser.add_argument("--size", type=int, default=256, help="side of the generated square JPEGs")
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--shard-mb", type=float, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="copy and convert, interleaved; medians reported")
    parser.add_argument("--full-decode", action="store_true", help="convert with --full-decode")
    args = parser.parse_args()

    from ground.envs import trainer_env, trainer_python
    from tpuctl.services import data as datatools

    copy_times, cat_times, convert_times, steady_times = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-tfrecords-") as tmp:
        tmp_path = Path(tmp)
        src = tmp_path / "images"
        subprocess.run([str(trainer_python()), "-c", MAKE_JPEGS, str(src), str(args.images), str(args.size),
                        str(args.classes)], env=trainer_env(), check=True)
        size = folder_bytes(src)
        mb = size / 1e6

        for _ in range(args.rounds):
            # Each step starts with nothing dirty in the page cache and ends when its bytes are on disk.
            os.sync()
            t0 = time.perf_counter()
            shutil.copytree(src, tmp_path / "copy")
            os.sync()
            copy_times.append(time.perf_counter() - t0)
            shutil.rmtree(tmp_path / "copy")

            os.sync()
            t0 = time.perf_counter()
            concatenate(src, tmp_path / "all.bin")
            os.sync()
            cat_times.append(time.perf_counter() - t0)
            (tmp_path / "all.bin").unlink()

            first_progress: list[float] = []

            def on_progress(done: int, total: int, first_progress=first_progress) -> None:
                if not first_progress:
                    first_progress.append(time.perf_counter())

            os.sync()
            t0 = time.perf_counter()
            summary = datatools.make_tfrecords(str(src), str(tmp_path / "records"), shard_mb=args.shard_mb,
                                               full_decode=args.full_decode, on_progress=on_progress)
            os.sync()
            end = time.perf_counter()
            convert_times.append(end - t0)
            steady_times.append(end - (first_progress[0] if first_progress else t0))
            shutil.rmtree(tmp_path / "records")

    copy_s, cat_s = median(copy_times), median(cat_times)
    convert_s, steady_s = median(convert_times), median(steady_times)
    print(f"images: {args.images} JPEGs {args.size}x{args.size}, {mb:.1f} MB in {args.classes} classes; "
          f"shards: {summary.get('shards')}, examples: {summary.get('train', 0) + summary.get('validation', 0)}, "
          f"skipped: {summary.get('skipped')}; median of {args.rounds} rounds"
          + ("; --full-decode" if args.full_decode else ""))
    print("rounds (s): copy " + " ".join(f"{t:.2f}" for t in copy_times)
          + " | concatenate " + " ".join(f"{t:.2f}" for t in cat_times)
          + " | convert " + " ".join(f"{t:.2f}" for t in convert_times))
    print(f"copy:                {copy_s:8.3f} s  {mb / copy_s:9.1f} MB/s")
    print(f"concatenate:         {cat_s:8.3f} s  {mb / cat_s:9.1f} MB/s  (read every file, write one file)")
    print(f"convert end-to-end:  {convert_s:8.3f} s  {mb / convert_s:9.1f} MB/s")
    print(f"convert steady:      {steady_s:8.3f} s  {mb / steady_s:9.1f} MB/s  (from the first progress line)")
    print(f"ratio convert/copy (end-to-end): {copy_s / convert_s:.3f}")
    print(f"ratio convert/copy (steady):     {copy_s / steady_s:.3f}")
    print(f"ratio convert/concatenate (end-to-end): {cat_s / convert_s:.3f}")
    print(f"ratio convert/concatenate (steady):     {cat_s / steady_s:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
