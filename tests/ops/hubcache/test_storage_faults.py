"""hub-cache add through storage that fails now and then as Google's does (issue 43, defect 3): every write it makes
carries a generation precondition, so google-cloud-storage retries it (the library retries a write only when it is
conditional), and a 503 or a lost answer does not fail the command nor leave a complete entry incomplete. Faults
come from tests/fixtures/faultfixtures.py, a front of the storage emulator."""

from __future__ import annotations

import hashlib

import pytest
from faultfixtures import Fault, FaultyFront

from clifixtures import invoke
from gcsfixtures import storage_emulator
from hubfixtures import make_fake_model

HANDLE = "https://tfhub.dev/example/tiny/1"
KEY = hashlib.sha1(HANDLE.encode()).hexdigest()
COPY = r"/rewriteTo/"                                     # the server-side copy into the cache folder


@pytest.fixture
def faulty(monkeypatch, tmp_path):
    with storage_emulator(default_bucket="hub-bkt") as upstream, FaultyFront(upstream) as front:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", front.url)
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "tpuctl-test")
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-credentials.json"))
        yield front


def _add(model):
    return invoke(["hub-cache", "add", HANDLE, "--from", str(model), "--bucket", "hub-bkt", "--prefix", "cache/hub"])


def _state() -> str:
    ls = invoke(["hub-cache", "ls", "--bucket", "hub-bkt", "--prefix", "cache/hub"])
    assert ls.exit_code == 0, ls.output
    [row] = [line for line in ls.stdout.splitlines() if line.startswith(KEY)]
    return row


@pytest.mark.parametrize("fault", [
    Fault("POST", COPY, status=503),                      # the copy refused once
    Fault("POST", COPY, status=503, committed=True),      # the copy done, its answer lost
    Fault("POST", COPY, reset=True),                      # the connection closed under it
    Fault("DELETE", r"\.tpuctl-manifest\.json", status=503),            # the old manifest's removal
    Fault("POST", r"^/upload/", body=r"tpuctl-manifest\.json", status=503),   # the new manifest, written last
    Fault("POST", r"^/upload/", body=r"tpuctl-manifest\.json", status=503, committed=True),
], ids=["copy-503", "copy-committed", "copy-reset", "manifest-delete-503", "manifest-write-503",
        "manifest-write-committed"])
def test_a_re_add_through_a_passing_fault_ends_complete(faulty, tmp_path, fault):
    model = make_fake_model(tmp_path / "m")
    assert _add(model).exit_code == 0
    (model / "variables" / "variables.data-00000-of-00001").write_bytes(b"v" * 5000)   # a new version of a file
    faulty.add(fault)
    r = _add(model)
    assert r.exit_code == 0, r.output
    assert fault.hits == 1                                 # the fault was met, and the request made again
    assert "complete" in _state() and "incomplete" not in _state()

