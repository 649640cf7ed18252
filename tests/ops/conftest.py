"""Fixtures shared by the ops suite's folders."""

from __future__ import annotations

import pytest


@pytest.fixture
def logging_api(monkeypatch):
    """``logging_api(**kw)``: a stand-in Cloud Logging API (tests/fixtures/loggingfakes.py) that tpuctl talks to
    (TPUCTL_LOGGING_ENDPOINT); stopped after the test."""
    from loggingfakes import FakeLogging

    fakes = []

    def make(**kw):
        fake = FakeLogging(**kw)
        fakes.append(fake)
        monkeypatch.setenv("TPUCTL_LOGGING_ENDPOINT", fake.url)
        return fake

    yield make
    for fake in fakes:
        fake.stop()
