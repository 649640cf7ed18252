"""For every suite (ops, trainer, e2e): each test owns the processes it starts (tests/fixtures/procfixtures.py).

Standard library and pytest only: both test environments load this file.
"""

from __future__ import annotations

import os

import pytest

from procfixtures import OWNER_VAR, new_token, stop_owned


@pytest.fixture(autouse=True)
def _owns_its_processes():
    """The test's owner token in the environment every process it starts inherits; at its end, on any outcome,
    whatever still carries the token is killed, and a process still running after a short grace is an error of
    the test naming it (fixtures of a wider scope start their processes before this and are not counted)."""
    token = new_token()
    previous = os.environ.get(OWNER_VAR)
    os.environ[OWNER_VAR] = token
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(OWNER_VAR, None)
        else:
            os.environ[OWNER_VAR] = previous
        left = stop_owned(OWNER_VAR, token)
        if left:
            pytest.fail("the test left processes running (killed now): " + "; ".join(left), pytrace=False)
