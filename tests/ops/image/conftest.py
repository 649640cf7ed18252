"""The Cloud Build / Artifact Registry fake (tests/fixtures/buildfakes.py), pointed at by the endpoint variables."""

from __future__ import annotations

import pytest

from buildfakes import FakeBuildCloud


@pytest.fixture
def build_cloud(monkeypatch, tmp_path):
    servers = []

    def make(**kw) -> FakeBuildCloud:
        fake = FakeBuildCloud(**kw)
        servers.append(fake)
        monkeypatch.setenv("TPUCTL_CLOUDBUILD_ENDPOINT", fake.url)
        monkeypatch.setenv("TPUCTL_ARTIFACTREGISTRY_ENDPOINT", fake.url)
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "my-tpu-project")
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-credentials.json"))
        return fake

    yield make
    for fake in servers:
        fake.stop()
