"""What the bundled trainer's loop costs a plug-in model (issue 41): examples/s of `python -m trainer.task --model
model.py:build` (default step backups every 10 minutes, progress lines, TensorBoard logs, exact validation) over a
bare `model.fit` of the same model on the same TFRecords (same batch, same steps, same process count: one), measured
side by side in one run, alternating, several pairs, at two epoch lengths. Target: the bundled loop within 5 %
(ratio >= 0.95). The bare fit trains what the trainer trains: the model compiled with the trainer's optimizer (Adam on
its warm-up + cosine learning-rate schedule, trainer.models.learning_rate_schedule), so the ratio is the loop's cost;
``--bare-optimizer constant`` compiles it with Adam at a constant 1e-3 instead, which adds the schedule's own cost
(~3 % of a step of this small model on CPU) to the bundled side.

    .venv-trainer/bin/python benchmarks/plugin_loop.py [--pairs 3] [--epochs 4] [--steps 200 2000] \
        [--bare-optimizer trainer|constant]

What the bundled loop adds is a cost per epoch, not per step (the epoch's checkpoint for --export best, the
preemption backup, TensorBoard scalars, validation weighted for exactness): the benchmark reports it in ms
(the bundled epoch's time minus the bare one's) beside the ratio, so the ratio at any epoch length follows.

The model and data are examples/tabular-plugin's (make_data.py, model.py). Epoch 1 is left out of both (tracing,
warm-up); the figure is the median over epochs 2..N of each run, then the median over the pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "tabular-plugin"

BARE = textwrap.dedent("""
    import json, os, sys, time
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf, tf_keras as keras
    sys.path.insert(0, sys.argv[1])
    import model as user
    data, batch, steps, epochs = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    manifest = json.load(open(os.path.join(data, "manifest.json")))
    spec = {"measurements": tf.io.FixedLenFeature([4], tf.float32), "colour": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}
    def split(parsed):
        label = parsed.pop("label")
        return parsed, tf.cast(label, tf.int32)
    def files(name):
        return [os.path.join(data, f) for f in manifest["splits"][name]["files"]]
    train = (tf.data.TFRecordDataset(files("train")).shuffle(2048).repeat().batch(batch, drop_remainder=True)
             .map(lambda r: split(tf.io.parse_example(r, spec)), num_parallel_calls=tf.data.AUTOTUNE)
             .prefetch(tf.data.AUTOTUNE))
    val = (tf.data.TFRecordDataset(files("validation")).batch(batch)
           .map(lambda r: split(tf.io.parse_example(r, spec))).cache())
    class Ctx:
        inputs = {"measurements": tf.TensorSpec([4], tf.float32), "colour": tf.TensorSpec([], tf.string)}
        num_classes = len(manifest["classes"]); hparams = {}
    m = user.build(Ctx())
    if sys.argv[6] == "trainer":   # the optimizer the trainer gives an uncompiled model: Adam on its schedule
        from trainer.config import TrainConfig
        from trainer.models import learning_rate_schedule
        rate = learning_rate_schedule(TrainConfig(model_dir="", data_dir=data, train_epochs=epochs,
                                                  train_batch_size=batch), steps)
    else:
        rate = 1e-3
    m.compile(optimizer=keras.optimizers.Adam(rate), metrics=["accuracy"],
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    class Rate(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.t = time.perf_counter()
        def on_epoch_end(self, epoch, logs=None):
            print(f"rate {epoch + 1} {batch * steps / (time.perf_counter() - self.t):.2f}", flush=True)
    m.fit(train, epochs=epochs, steps_per_epoch=steps, validation_data=val, verbose=0, callbacks=[Rate()])
""")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TF_USE_LEGACY_KERAS", "1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def bundled(data: Path, out: Path, batch: int, steps: int, epochs: int) -> list[float]:
    proc = subprocess.run([sys.executable, "-m", "trainer.task", "--code_dir", str(EXAMPLE), "--model",
                           "model.py:build", "--data_dir", str(data), "--model_dir", str(out), "--train_epochs",
                           str(epochs), "--steps_per_epoch", str(steps), "--train_batch_size", str(batch),
                           "--validation_batch_size", str(batch)], cwd=REPO, env=_env(), capture_output=True,
                          text=True, check=True)
    return [float(line.split("examples_per_second=")[1].split()[0])
            for line in proc.stdout.splitlines() if line.startswith("epoch-end:")]


def bare(data: Path, batch: int, steps: int, epochs: int, optimizer: str) -> list[float]:
    proc = subprocess.run([sys.executable, "-c", BARE, str(EXAMPLE), str(data), str(batch), str(steps), str(epochs),
                           optimizer],
                          cwd=REPO, env=_env(), capture_output=True, text=True, check=True)
    return [float(line.split()[2]) for line in proc.stdout.splitlines() if line.startswith("rate ")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--bare-optimizer", choices=["trainer", "constant"], default="trainer",
                        help="the bare fit's optimizer: the trainer's (Adam on its warm-up + cosine schedule, the "
                             "default: the same training, so the ratio is the loop's cost) or Adam at a constant 1e-3 "
                             "(adds the schedule's own per-step cost to the bundled side)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="plugin-loop-") as tmp:
        data = Path(tmp) / "data"
        subprocess.run([sys.executable, str(EXAMPLE / "make_data.py"), str(data)], check=True, capture_output=True)
        for steps in args.steps:
            rows = []
            examples = args.batch * steps
            for pair in range(args.pairs):
                ours = bundled(data, Path(tmp) / f"run-{steps}-{pair}", args.batch, steps, args.epochs)
                theirs = bare(data, args.batch, steps, args.epochs, args.bare_optimizer)
                a, b = statistics.median(ours[1:]), statistics.median(theirs[1:])
                rows.append({"steps": steps, "pair": pair + 1, "bundled": round(a, 1), "bare_fit": round(b, 1),
                             "ratio": round(a / b, 3), "epoch_cost_ms": round(1000 * (examples / a - examples / b), 1)})
                print(json.dumps(rows[-1]), flush=True)
            print(json.dumps({"steps": steps, "median_ratio": statistics.median(r["ratio"] for r in rows),
                              "median_epoch_cost_ms": statistics.median(r["epoch_cost_ms"] for r in rows),
                              "bare_epoch_s": round(examples / statistics.median(r["bare_fit"] for r in rows), 3),
                              "target": ">= 0.95", "pairs": len(rows), "epochs": args.epochs, "batch": args.batch,
                              "bare_optimizer": args.bare_optimizer}),
                  flush=True)

if __name__ == "__main__":
    main()
