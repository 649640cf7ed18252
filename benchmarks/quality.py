"""Training quality: N unseeded default demo runs -> min / median / max exported val_accuracy and time.

    .venv-trainer/bin/python benchmarks/quality.py [--runs 10] [--seeded-runs 3] [--folder-runs 3]
                                                   [--folder-copies 3]

Every run is a fresh ``python -m trainer.task`` process with the default flags (what ``tpuctl train``
runs on the demo data: 5 epochs, batch 32, warm-up + cosine schedule, --export best), timed from process
start to exit, and read from its ``tpuctl-result:`` line. Three groups, one table each:

- demo:     the embedded digits (1,437 train / 360 validation, 32x32), ``--runs`` unseeded runs;
- seeded:   the same with ``--seed 1`` (op determinism + an ordered input pipeline): what determinism
            costs in time, and that every seeded run reports the same accuracy;
- folder:   a bigger local image folder the script makes itself (the digits at 64x64, each written
            ``--folder-copies`` times with a random shift, rotation and noise into <class>/<n>.jpg),
            converted by ``python -m trainer.make_tfrecords`` and trained ``--folder-runs`` times.

A regression in training quality shows up as a lower minimum; the README's "Training quality" section
has the latest figures. Nothing is downloaded (scikit-learn ships the digits).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RESULT = "tpuctl-result: "


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TF_USE_LEGACY_KERAS", "1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for key in ("TF_CONFIG", "TPU_NAME", "AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"):
        env.pop(key, None)
    return env


def train_once(data_dir: Path, model_dir: Path, *flags: str) -> tuple[float, float, int]:
    """(exported val_accuracy, seconds, exported epoch) of one trainer process."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "trainer.task", "--data_dir", str(data_dir), "--model_dir",
                           str(model_dir), *flags], cwd=REPO, env=_env(), capture_output=True, text=True)
    seconds = time.monotonic() - start
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        sys.exit(f"error: the trainer failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    result = json.loads(lines[-1][len(RESULT):])
    return float(result["val_accuracy"]), seconds, int(result.get("exported_epoch", result["epochs"]))


def make_folder(out: Path, copies: int, size: int = 64, seed: int = 0) -> int:
    """The digits as a folder of class sub-folders of JPEGs, each digit ``copies`` times, varied."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    rng = np.random.default_rng(seed)
    digits = load_digits()
    count = 0
    for i, (pixels, label) in enumerate(zip(digits.images, digits.target)):
        folder = out / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        base = Image.fromarray((pixels * (255.0 / 16.0)).astype("uint8"), mode="L").resize(
            (size - 16, size - 16), Image.Resampling.BILINEAR)
        for c in range(copies):
            canvas = Image.new("L", (size, size))
            dx, dy = rng.integers(0, 17, size=2)
            canvas.paste(base.rotate(float(rng.uniform(-12, 12)), resample=Image.Resampling.BILINEAR), (dx, dy))
            noisy = np.asarray(canvas, dtype=np.float32) + rng.normal(0, 12, (size, size))
            Image.fromarray(noisy.clip(0, 255).astype("uint8")).convert("RGB").save(
                folder / f"{i:04d}-{c}.jpg", quality=90)
            count += 1
    return count


def report(name: str, runs: list[tuple[float, float, int]]) -> dict:
    acc = [a for a, _, _ in runs]
    secs = [s for _, s, _ in runs]
    row = {"group": name, "runs": len(runs),
           "accuracy": {"min": min(acc), "median": statistics.median(acc), "max": max(acc)},
           "seconds": {"min": min(secs), "median": statistics.median(secs), "max": max(secs)},
           "exported_epochs": sorted({e for _, _, e in runs})}
    print(f"{name:>8}: {len(runs)} runs, val_accuracy min {row['accuracy']['min']:.4f} / median "
          f"{row['accuracy']['median']:.4f} / max {row['accuracy']['max']:.4f}; seconds min {min(secs):.1f} / "
          f"median {statistics.median(secs):.1f} / max {max(secs):.1f}; exported epochs {row['exported_epochs']}",
          flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="unseeded default demo runs")
    parser.add_argument("--seeded-runs", type=int, default=3, help="demo runs with --seed 1 (0 = skip)")
    parser.add_argument("--folder-runs", type=int, default=3, help="runs on the generated image folder (0 = skip)")
    parser.add_argument("--folder-copies", type=int, default=3, help="varied copies of each digit in the folder")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = parser.parse_args()
    from trainer.sample_data import write_demo_dataset

    rows = []
    with tempfile.TemporaryDirectory(prefix="tpuctl-quality-") as tmp:
        tmp = Path(tmp)
        demo = tmp / "digits"
        write_demo_dataset(demo)
        rows.append(report("demo", [train_once(demo, tmp / f"demo-{i}") for i in range(args.runs)]))
        if args.seeded_runs:
            seeded = [train_once(demo, tmp / f"seeded-{i}", "--seed", "1") for i in range(args.seeded_runs)]
            rows.append(report("seeded", seeded))
            if len({a for a, _, _ in seeded}) != 1:
                print("warning: seeded runs differ: --seed is not reproducible on this machine", flush=True)
        if args.folder_runs:
            images = make_folder(tmp / "images", args.folder_copies)
            subprocess.run([sys.executable, "-m", "trainer.make_tfrecords", str(tmp / "images"), str(tmp / "records"),
                            "--validation-fraction", "0.2"], cwd=REPO, env=_env(), check=True,
                           stdout=subprocess.DEVNULL)
            print(f"  folder: {images} JPEGs 64x64 in 10 classes -> {tmp / 'records'}", flush=True)
            rows.append(report("folder", [train_once(tmp / "records", tmp / f"folder-{i}")
                                          for i in range(args.folder_runs)]))
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
