"""Keras 3 on TensorFlow and on JAX, side by side (issue 55): the same model (examples/keras3-sensors' model.py), data
(its make_data.py), seed, batch and steps through the bundled trainer (`python -m trainer.task --backend B`), on one
process and on two local processes (a chief and a worker on 127.0.0.1, as `tpuctl train -w 2` starts them). Per
backend and process count: the final training loss and validation accuracy (the same training, so they should agree
within the noise of different kernels), examples/s at the steady step (result.json's timing: the mean time between
two steps' ends, no first step, no validation), and the time to first step (from the process's start to its first
step's end: imports, the cluster, the input, the model, and on JAX the compilation of the step). The ratios JAX /
TensorFlow are the figures; runs alternate between the backends, ``--repeat`` times, medians reported.

    .venv-trainer/bin/python benchmarks/keras3_parity.py [--repeat 3] [--epochs 4] [--steps 200] [--batch 32] \
        [--processes 1 2]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "keras3-sensors"
BACKENDS = ("tensorflow", "jax")


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra or {})
    return env


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(backend: str, processes: int, data: Path, out: Path, args) -> dict:
    """One training run; the chief's figures."""
    flags = ["--code_dir", str(EXAMPLE), "--model", "model.py:build", "--data_dir", str(data), "--model_dir", str(out),
             "--backend", backend, "--seed", "1", "--train_epochs", str(args.epochs), "--steps_per_epoch",
             str(args.steps), "--train_batch_size", str(args.batch), "--validation_batch_size", str(args.batch)]
    tasks = [("chief", 0)] if processes == 1 else [("chief", 0), ("worker", 0)]
    ports = [_port() for _ in tasks]
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
    started = time.time()
    procs = []
    for task_type, index in tasks:
        extra = {} if processes == 1 else {"TF_CONFIG": json.dumps({"cluster": cluster,
                                                                    "task": {"type": task_type, "index": index}})}
        procs.append(subprocess.Popen([sys.executable, "-m", "trainer.task", *flags], cwd=REPO, env=_env(extra),
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    outputs = [p.communicate()[0] for p in procs]
    wall = time.time() - started
    for p, text in zip(procs, outputs):
        if p.returncode != 0:
            raise SystemExit(f"{backend} x{processes}: exit {p.returncode}\n{text[-2000:]}")
    lines = outputs[0].splitlines()
    result = json.loads(lines[-1].split(": ", 1)[1])
    last = [line for line in lines if line.startswith("epoch-end:")][-1]
    loss = float(last.split(" loss=")[1].split()[0])
    timing = result["timing"]
    return {"backend": backend, "processes": processes, "loss": loss, "val_accuracy": round(result["val_accuracy"], 4),
            "examples_per_second": timing["examples_per_second"],
            "first_step_s": round(timing["process_first_step_at"] - started, 2), "wall_s": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="keras3-parity-") as tmp:
        data = Path(tmp) / "data"
        subprocess.run([sys.executable, str(EXAMPLE / "make_data.py"), str(data)], check=True, capture_output=True,
                       env=_env())
        for processes in args.processes:
            rows: dict[str, list[dict]] = {b: [] for b in BACKENDS}
            for i in range(args.repeat):
                order = BACKENDS if i % 2 == 0 else BACKENDS[::-1]     # alternate: the machine's drift cancels
                for backend in order:
                    row = run(backend, processes, data, Path(tmp) / f"{backend}-{processes}-{i}", args)
                    rows[backend].append(row)
                    print(json.dumps(row), flush=True)

            summary = {"processes": processes, "repeat": args.repeat, "epochs": args.epochs, "steps": args.steps,
                       "batch": args.batch}
            for key in ("loss", "val_accuracy", "examples_per_second", "first_step_s"):
                tf_value, jax_value = (statistics.median(r[key] for r in rows[b]) for b in BACKENDS)
                summary[key] = {"tensorflow": tf_value, "jax": jax_value,
                                "jax/tensorflow": round(jax_value / tf_value, 3) if tf_value else None}
            print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
