"""Fixtures for the Pulumi program tests: stack config values and hub cache folders in tmp."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tpuctl import domain

PROJECT = "my-tpu-project"


def make_hub_folder(root: Path, handles: list[str], extra: bool = True) -> Path:
    """A hub cache folder in tensorflow_hub's layout: <root>/<sha1(handle)>/saved_model.pb (+ variables)."""
    for handle in handles:
        folder = root / domain.hub_cache_key(handle)
        (folder / "variables").mkdir(parents=True, exist_ok=True)
        (folder / "saved_model.pb").write_bytes(b"saved-model:" + handle.encode())
        if extra:
            (folder / "variables" / "variables.index").write_bytes(b"index")
            (folder / "variables" / "variables.data-00000-of-00001").write_bytes(b"data" * 8)
    return root


@pytest.fixture
def base_values() -> dict[str, Any]:
    return {"tpuctl:project": PROJECT}
