"""Fixtures for `tpuctl data`: the CLI in a subprocess, the trainer interpreter, gcp-storage-emulator."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ground import envs

from clifixtures import run_process
from gcsfixtures import anonymous_client, storage_emulator

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def cli():
    def run(args, env=None, cwd=None, timeout=300):
        return run_process(args, env=env, cwd=cwd, timeout=timeout)

    return run


@pytest.fixture
def trainer_python():
    python = envs.trainer_python()
    if not python.exists():
        pytest.skip(f"trainer environment {python} is missing (scripts/setup.sh)")
    return python


@pytest.fixture
def trainer_run(trainer_python):
    """Run a Python snippet in the trainer environment (source tree on PYTHONPATH, tf_keras)."""
    def run(code: str, *args: str, timeout=300):
        env = {**os.environ, "PYTHONPATH": str(REPO), "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
        proc = subprocess.run([str(trainer_python), "-c", code, *args], env=env, capture_output=True, text=True,
                              timeout=timeout)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    return run


@pytest.fixture
def gcs():
    """gcp-storage-emulator on 127.0.0.1 (in memory); yields (url, storage client)."""
    with storage_emulator() as url:
        yield url, anonymous_client(url)
