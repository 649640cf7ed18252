"""The Cloud Build / Artifact Registry fake (tests/fixtures/buildfakes.py), pointed at by the endpoint variables."""

from __future__ import annotations

import pytest

from buildfakes import FakeBuildCloud
from httpfakes import fake_factory


@pytest.fixture
def build_cloud(monkeypatch, tmp_path):
    with fake_factory(FakeBuildCloud, monkeypatch, ["TPUCTL_CLOUDBUILD_ENDPOINT", "TPUCTL_ARTIFACTREGISTRY_ENDPOINT"],
                      project="my-tpu-project", credentials=tmp_path / "no-credentials.json") as make:
        yield make
