"""Fixtures for `tpuctl train`: a fake trainer interpreter, the GCS emulator, a stand-in Vertex AI API
(tests/fixtures/vertexfakes.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ground.envs import ops_python, trainer_python

from clifixtures import run_process
from gcsfixtures import emulated_buckets
from httpfakes import fake_factory
from procfixtures import alive, wait_for
from vertexfakes import FakeCustomJobs

REPO = Path(__file__).resolve().parents[3]
FAKE_TRAINER = Path(__file__).with_name("fake_trainer.py")


def run_cli(args, env=None, cwd=None, timeout=120, **kw):
    """`tpuctl ARGS` in a subprocess of the ops interpreter."""
    return run_process(args, env=env, cwd=cwd, timeout=timeout, **kw)


@pytest.fixture
def fake_trainer(tmp_path):
    """Env that makes tpuctl launch fake_trainer.py instead of the real trainer; logs in env['FAKE_LOG_DIR']."""
    wrapper = tmp_path / "fake-python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_TRAINER} \"$@\"\n")
    wrapper.chmod(0o755)
    log_dir = tmp_path / "fake-log"
    return {
        "TPUCTL_TRAINER_PYTHON": str(wrapper),
        "FAKE_LOG_DIR": str(log_dir),
        "TPUCTL_CACHE_DIR": str(tmp_path / "cache"),
    }


@pytest.fixture
def gcs(monkeypatch):
    """gcp-storage-emulator on 127.0.0.1 (in memory), also as STORAGE_EMULATOR_HOST; yields (url, client)."""
    with emulated_buckets(monkeypatch) as client:
        yield os.environ["STORAGE_EMULATOR_HOST"], client


@pytest.fixture
def fake_vertex():
    with fake_factory(FakeCustomJobs) as make:
        yield make


@pytest.fixture
def tools():
    """Helpers for the tests (conftest modules are not importable under --import-mode=importlib)."""
    from types import SimpleNamespace

    return SimpleNamespace(run_cli=run_cli, wait_for=wait_for, pid_alive=alive, repo=REPO,
                           ops_python=ops_python(), trainer_python=trainer_python())
