"""Fixtures for `tpuctl prices` and the estimates: an isolated cache and no credentials (offline unless a test
starts the stand-in Cloud Billing Catalog of tests/fixtures/billingfakes.py), and a stack outputs file."""

from __future__ import annotations

import pytest

from billingfakes import FakeCatalog
from httpfakes import fake_factory
from stackfixtures import write_outputs


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("TPUCTL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    for name in ("TPUCTL_CLOUDBILLING_ENDPOINT", "TPUCTL_CLOUDQUOTAS_ENDPOINT", "TPUCTL_TPU_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def catalog(monkeypatch):
    """``catalog(**kw)`` starts a FakeCatalog and points TPUCTL_CLOUDBILLING_ENDPOINT at it."""
    with fake_factory(FakeCatalog, monkeypatch, ["TPUCTL_CLOUDBILLING_ENDPOINT"]) as make:
        yield make


@pytest.fixture(scope="session")
def shared_catalog():
    """One stand-in with the default SKUs for the tests that only read it (a server's shutdown takes 0.5 s)."""
    fake = FakeCatalog()
    yield fake
    fake.stop()


@pytest.fixture
def default_catalog(shared_catalog, monkeypatch):
    monkeypatch.setenv("TPUCTL_CLOUDBILLING_ENDPOINT", shared_catalog.url)
    return shared_catalog


@pytest.fixture
def outputs_file(tmp_path):
    return write_outputs(tmp_path / "outputs.json")
