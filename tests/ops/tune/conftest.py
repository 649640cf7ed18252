"""Fixtures for `tpuctl tune`: a stand-in for Vertex AI's hyperparameterTuningJobs REST API (tests/fixtures/
vertexfakes.py), the GCS emulator for the staging upload, and the tune command registered on the CLI (the lead
wires it into tpuctl/cli.py; registering here is idempotent)."""

from __future__ import annotations

import pytest

from gcsfixtures import emulated_buckets
from httpfakes import fake_factory
from stackfixtures import SAMPLE_OUTPUTS, write_outputs
from vertexfakes import FakeTuningJobs


@pytest.fixture
def fake_tuning(monkeypatch):
    with fake_factory(FakeTuningJobs, monkeypatch, ["TPUCTL_VERTEX_ENDPOINT"]) as make:
        yield make


@pytest.fixture
def gcs(monkeypatch):
    """gcp-storage-emulator (in memory) as STORAGE_EMULATOR_HOST, with the staging bucket; yields the client."""
    with emulated_buckets(monkeypatch, [SAMPLE_OUTPUTS["buckets"]["staging"]]) as client:
        yield client


@pytest.fixture
def outputs_file(tmp_path):
    return write_outputs(tmp_path / "outputs.json")


@pytest.fixture(autouse=True)
def tune_registered():
    """`tpuctl tune` on the CLI app for in-process `invoke` (a no-op once tpuctl/cli.py registers it)."""
    from tpuctl import cli
    from tpuctl.commands import tune

    if not any(getattr(g, "name", None) == "tune" for g in cli.app.registered_groups):
        tune.register(cli.app)
    yield


@pytest.fixture
def trainer_env(tmp_path_factory, monkeypatch):
    from ground.envs import trainer_python

    if not trainer_python().exists():
        pytest.skip("trainer environment .venv-trainer is missing (scripts/setup.sh)")
    cache = str(tmp_path_factory.mktemp("tpuctl-cache"))
    monkeypatch.setenv("TPUCTL_CACHE_DIR", cache)
    return cache
