"""Shared setup for the trainer tests: the demo dataset (once per session) and a trainer runner."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from netfixtures import free_port
from procfixtures import Watched

# Fuzzing (tests/trainer/test_fuzz.py): few examples by default so the suite stays fast; run many with
# `pytest tests/trainer/test_fuzz.py --hypothesis-profile=long` (documented in docs/trainer.md).
settings.register_profile("trainer", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Before any test module imports TensorFlow: JAX stays out of this process, as out of every TensorFlow run
# (trainer.backends), so an in-process run sees what a --backend tensorflow trainer sees.
import trainer  # noqa: E402, F401

RESULT_PREFIX = "tpuctl-result: "


def pytest_configure(config):
    if not config.getoption("hypothesis_profile", default=None):
        settings.load_profile("trainer")


def trainer_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.pop("TPU_NAME", None)
    for key in ("TPU_CONFIG", "TPU_NODE_NAME", "AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"):
        env.pop(key, None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["TF_USE_LEGACY_KERAS"] = "1"
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    # Two cores shared by several processes (two xdist workers per suite, two suites side by side): keep each
    # TensorFlow process from oversubscribing. One thread within an op (its pool's threads spin while they wait,
    # CPU the other processes need); two for independent ops (a MirroredStrategy's replicas meet in collectives).
    env.setdefault("TF_NUM_INTEROP_THREADS", "2")
    env.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    if extra:
        env.update(extra)
    return env


class Run:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.proc = proc
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    @property
    def stdout_lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.strip()]

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]

    @property
    def result(self) -> dict:
        assert self.returncode == 0, f"exit {self.returncode}\nSTDOUT:\n{self.stdout[-3000:]}\nSTDERR:\n{self.stderr[-3000:]}"
        last = self.stdout_lines[-1]
        assert last.startswith(RESULT_PREFIX), last
        return json.loads(last[len(RESULT_PREFIX):])

    def error_line(self) -> str:
        lines = [l for l in self.stderr_lines if l.startswith("error: ")]
        assert len(lines) == 1, self.stderr[-3000:]
        return lines[0]


def run_module(module_args: list[str], *, env: dict | None = None, timeout: float = 180,
               python_args: list[str] | None = None) -> Run:
    cmd = [sys.executable, *(["-m"] if python_args is None else python_args), *module_args]
    proc = subprocess.run(cmd, cwd=REPO, env=trainer_env(env), capture_output=True, text=True, timeout=timeout)
    return Run(proc)


def run_in_process(module_args: list[str], monkeypatch, *, env: dict | None = None) -> Run:
    """``python -m MODULE ARGS`` as ``MODULE.main(ARGS)`` in this process, with ``trainer_env``'s view of the
    environment (``monkeypatch``: undone after the test). For error paths that end before any training: there a
    process adds nothing but TensorFlow's import (about 2 s each on this machine). Such a run must not seed
    (``--seed`` turns TensorFlow's op determinism on for the rest of the process): checked here."""
    from tensorflow.python.framework import config as tf_config

    module, *argv = module_args
    for key in ("TF_CONFIG", "TPU_NAME", "TPU_CONFIG", "TPU_NODE_NAME", "AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR",
                "AIP_TENSORBOARD_LOG_DIR"):
        monkeypatch.delenv(key, raising=False)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = importlib.import_module(module).main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    assert not tf_config.is_op_determinism_enabled(), f"{module} {argv} seeded TensorFlow: run it as a process"
    return Run(subprocess.CompletedProcess([module, *argv], code, out.getvalue(), err.getvalue()))


def killed_at_step(module_args: list[str], *, step: int, epoch: str, env: dict | None = None,
                   sig: int = signal.SIGKILL, stderr: bool = False) -> Watched:
    """``python -m MODULE ARGS`` sent ``sig`` once its progress line of ``step`` in epoch ``epoch`` ("2/3") is out
    (SIGKILL: a preemption without notice). Returns the ended process, its output collected whole. Each step is
    followed by a 50 ms pause (TPUCTL_TRAINER_TEST_STEP_PAUSE): on a busy machine the signal could otherwise land
    tens of steps after the line was printed, past the epoch's end."""
    env = {"TPUCTL_TRAINER_TEST_STEP_PAUSE": "0.05", **(env or {})}
    with Watched([sys.executable, "-m", *module_args], stderr=stderr, cwd=REPO, env=trainer_env(env)) as proc:
        proc.wait_line(f"progress: {step}/", f"step {step} of epoch {epoch}", after=f"epoch-start: {epoch}")
        os.kill(proc.pid, sig)
        proc.finish()
    return proc


def logged_batches(path) -> dict[int, int]:
    """A worker's batch log (TPUCTL_TRAINER_TEST_LOG_BATCHES): optimizer step -> fingerprint of the batch trained
    at that step (a line cut by a kill is left out)."""
    steps: dict[int, int] = {}
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            assert int(parts[0]) not in steps, f"step {parts[0]} logged twice in {path}"
            steps[int(parts[0])] = int(parts[1])
    return steps


def validation_jpegs(data_dir, count: int | None = None) -> list[bytes]:
    """The encoded images of ``data_dir``'s validation shards, in file order (the first ``count``)."""
    import tensorflow as tf

    files = sorted(str(p) for p in Path(data_dir).glob("*-validation-*.tfrecord*"))
    records = tf.data.TFRecordDataset(files)
    return [tf.train.Example.FromString(r.numpy()).features.feature["image/encoded"].bytes_list.value[0]
            for r in (records if count is None else records.take(count))]


def fast_flags(data_dir, model_dir, *extra: str) -> list[str]:
    return ["--data_dir", str(data_dir), "--model_dir", str(model_dir), "--train_epochs", "2",
            "--steps_per_epoch", "5", "--seed", "1", *extra]


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory) -> Path:
    """The embedded digits dataset, 2 shards per split, written once per session."""
    from trainer.sample_data import write_demo_dataset

    out = tmp_path_factory.mktemp("demo") / "digits"
    write_demo_dataset(out, shards=2, image_size=32)
    return out


@pytest.fixture(scope="session")
def one_shard_data(tmp_path_factory) -> Path:
    """The digits dataset with a single shard per split (fewer files than workers)."""
    from trainer.sample_data import write_demo_dataset

    out = tmp_path_factory.mktemp("demo1") / "digits"
    write_demo_dataset(out, shards=1, image_size=16)
    return out


@pytest.fixture(scope="session")
def default_run(demo_data, tmp_path_factory) -> Run:
    """``python -m trainer.task`` with no flag but the data and model folders (every default: 5 whole epochs, the
    best one exported), once per session and worker: the default run's own test and the export and HParams tests
    read it (``model_dir``: the run's model folder)."""
    model_dir = tmp_path_factory.mktemp("trained") / "model"
    run = run_module(["trainer.task", "--data_dir", str(demo_data), "--model_dir", str(model_dir)])
    run.model_dir = model_dir
    return run


@pytest.fixture
def in_process(monkeypatch):
    """``in_process([MODULE, *ARGS], env=...)``: see ``run_in_process``."""
    return lambda module_args, *, env=None: run_in_process(module_args, monkeypatch, env=env)


@pytest.fixture(scope="session")
def tools():
    """Helpers for tests (conftest modules are not importable under --import-mode=importlib)."""
    import types

    return types.SimpleNamespace(run_module=run_module, fast_flags=fast_flags, free_port=free_port,
                                 validation_jpegs=validation_jpegs,
                                 killed_at_step=killed_at_step, logged_batches=logged_batches,
                                 env=trainer_env, REPO=REPO, HERE=HERE, RESULT_PREFIX=RESULT_PREFIX)
