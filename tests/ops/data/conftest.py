"""Fixtures for `tpuctl data`: the CLI in a subprocess, the trainer interpreter, gcp-storage-emulator."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from gcsfixtures import anonymous_client, storage_emulator

REPO = Path(__file__).resolve().parents[3]
OPS_PYTHON = REPO / ".venv" / "bin" / "python"
TRAINER_PYTHON = REPO / ".venv-trainer" / "bin" / "python"


@pytest.fixture
def cli():
    def run(args, env=None, cwd=None, timeout=300):
        return subprocess.run([str(OPS_PYTHON), "-m", "tpuctl.cli", *args], env={**os.environ, **(env or {})},
                              cwd=cwd, capture_output=True, text=True, timeout=timeout)

    return run


@pytest.fixture
def trainer_python():
    if not TRAINER_PYTHON.exists():
        pytest.skip("trainer environment .venv-trainer is missing (scripts/setup.sh)")
    return TRAINER_PYTHON


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
