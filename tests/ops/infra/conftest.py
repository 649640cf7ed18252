"""Fixtures for the Pulumi program tests: stack config values, hub cache folders in tmp, and a
record of every resource the mocks were asked to register."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ground import domain
from infra import mocks as infra_mocks

PROJECT = "my-tpu-project"
HANDLE_A = "https://tfhub.dev/google/imagenet/mobilenet_v2_100_224/feature_vector/5"
HANDLE_B = "https://www.kaggle.com/models/google/bert/TensorFlow2/en-uncased-l-2-h-128-a-2/2"


def make_hub_folder(root: Path, handles: list[str], extra: bool = True) -> Path:
    """A hub cache folder in tensorflow_hub's layout: <root>/<sha1(handle)>/saved_model.pb (+ variables)."""
    for handle in handles:
        folder = root / domain.hub_cache_key(handle)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "saved_model.pb").write_bytes(b"saved-model:" + handle.encode())
        if extra:
            (folder / "variables").mkdir(exist_ok=True)
            (folder / "variables" / "variables.index").write_bytes(b"index")
            (folder / "variables" / "variables.data-00000-of-00001").write_bytes(b"data" * 8)
    return root


@pytest.fixture
def hub_folder(tmp_path):
    """make(handles, extra=True) -> a hub cache folder under tmp in tensorflow_hub's layout."""
    def make(handles: list[str], extra: bool = True, root: Path | None = None) -> Path:
        return make_hub_folder(root or tmp_path / "hub", handles, extra)
    return make


@pytest.fixture
def handles() -> tuple[str, str]:
    return HANDLE_A, HANDLE_B


@pytest.fixture
def base_values() -> dict[str, Any]:
    return {"tpuctl:project": PROJECT}


@pytest.fixture
def registrations(monkeypatch) -> list[tuple[str, str]]:
    """(type, name) of every resource registered with the mocks in this test, components included."""
    seen: list[tuple[str, str]] = []
    original = infra_mocks.GcpMocks.new_resource

    def recording(self, args):
        seen.append((args.typ, args.name))
        return original(self, args)

    monkeypatch.setattr(infra_mocks.GcpMocks, "new_resource", recording)
    return seen


def pytest_configure(config):
    # pulumi_gcp warns about one of its own misspelled functions on import; not ours to fix.
    config.addinivalue_line("filterwarnings", "ignore:gcp.storage.getTransferProjectServieAccount:DeprecationWarning")
