"""The pinned libtpu exports every function tensorflow-tpu's TPU loader needs (else `import tensorflow` aborts).

Both lists come from the pinned wheels themselves (tests/fixtures/libtpu_contract.py): a lock update that would
crash every TPU job fails here, offline once the wheels are cached, in seconds.
"""

from __future__ import annotations

import pytest

import libtpu_contract as contract


@pytest.fixture(scope="module")
def loader():
    pinned = contract.pins()
    required = contract.required_symbols(contract.wheel("tensorflow-tpu", pinned["tensorflow-tpu"]))
    return pinned, required


def test_the_loader_list_is_read_from_tensorflow_not_empty(loader):
    _, required = loader
    # The message the crash printed is one of them; an empty scan would make the contract vacuous.
    assert "ConfigureDistributedTpuOp_DoWork" in required and len(required) > 100


def test_the_pinned_libtpu_exports_every_function_the_loader_needs(loader):
    pinned, required = loader
    absent = required - contract.exported_symbols(contract.wheel("libtpu", pinned["libtpu"]))
    assert not absent, f"libtpu {pinned['libtpu']} lacks {sorted(absent)[:5]} (and {max(0, len(absent) - 5)} more)"


def test_the_contract_fails_on_the_libtpu_that_crashed_the_image(loader):
    # libtpu 0.0.52 was the pin when `import tensorflow` aborted in the tpu image (exit 139).
    _, required = loader
    absent = required - contract.exported_symbols(contract.wheel("libtpu", "0.0.52"))
    assert "ConfigureDistributedTpuOp_DoWork" in absent
