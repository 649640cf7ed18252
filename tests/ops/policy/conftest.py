"""Fixtures for policy tests: stack config values with a tiny hub cache folder, and resource builders."""

from __future__ import annotations

from pathlib import Path

import pytest

from ground import domain

HUB_HANDLE = "https://tfhub.dev/google/imagenet/mobilenet_v2_100_224/feature_vector/5"
PROJECT = "my-tpu-project"


def make_hub_cache(root: Path, handle: str = HUB_HANDLE) -> Path:
    """A folder in tensorflow_hub cache layout: <root>/<sha1(handle)>/saved_model.pb + variables."""
    folder = root / domain.hub_cache_key(handle)
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"\x08\x01")
    (folder / "variables" / "variables.index").write_bytes(b"idx")
    return root


@pytest.fixture
def stack_values(tmp_path):
    """Config of the example stack (read from Pulumi.example.yaml) with its commented-out hub model
    switched on and served from a temp cache."""
    from ground.stackfile import read_stack_config

    values = read_stack_config("example")
    values["tpuctl:hubCacheSource"] = str(make_hub_cache(tmp_path / "hub"))
    values["tpuctl:hubModels"] = [HUB_HANDLE]
    return values
