"""Issue 28: with no network, every Google-backed command fails within seconds, in one line naming the
endpoint (before: storage-backed commands retried an offline token refresh for 88-108 s), and doctor says
"cannot reach" instead of suggesting permission and API fixes."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))

from clifixtures import error_line, invoke
from netfixtures import offline

#: The endpoint variables cloud/clients.py honours: none may point at a local server here.
_REDIRECTS = ("STORAGE_EMULATOR_HOST", "TPUCTL_CRM_ENDPOINT", "TPUCTL_IAM_ENDPOINT", "TPUCTL_SERVICEUSAGE_ENDPOINT",
              "TPUCTL_CLOUDQUOTAS_ENDPOINT", "TPUCTL_VERTEX_ENDPOINT", "TPUCTL_TPU_ENDPOINT",
              "TPUCTL_CLOUDBUILD_ENDPOINT", "TPUCTL_ARTIFACTREGISTRY_ENDPOINT", "TPUCTL_CLOUDBILLING_ENDPOINT",
              "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT")


@pytest.fixture
def user_credentials(tmp_path, monkeypatch):
    """What `gcloud auth application-default login` leaves: user credentials whose token must be refreshed
    at oauth2.googleapis.com (no project in them)."""
    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "id.apps.googleusercontent.com",
                               "client_secret": "secret", "refresh_token": "token"}))
    for name in _REDIRECTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("TPUCTL_CACHE_DIR", str(tmp_path / "cache"))
    return adc


@pytest.mark.parametrize("args", [
    ["runs", "ls", "--dir", "gs://tpuctl-offline/runs"],
    ["hub-cache", "ls", "--bucket", "tpuctl-offline"],
    ["grant-access", "--project", "my-proj-1", "--read-bucket", "tpuctl-offline", "--principal", "training-sa",
     "--yes"],
    ["tpu", "list", "--project", "my-proj-1", "--zone", "us-central1-a"],
    ["tune", "status", "projects/my-proj-1/locations/us-central1/hyperparameterTuningJobs/123"],
    ["prices", "refresh"],
], ids=["runs-ls", "hub-cache-ls", "grant-access", "tpu-list", "tune-status", "prices-refresh"])
def test_google_backed_commands_fail_fast_offline_naming_the_endpoint(user_credentials, args):
    start = time.monotonic()
    with offline():
        r = invoke(args)
    took = time.monotonic() - start
    assert took < 30, f"took {took:.0f} s"   # the client's own retries would take minutes
    line = error_line(r, 1, alone=True)
    assert "cannot reach oauth2.googleapis.com" in line and "DNS lookup failed" in line, line


def test_doctor_offline_says_cannot_reach_once_and_suggests_no_permission_fix(user_credentials):
    start = time.monotonic()
    with offline():
        r = invoke(["doctor", "--project", "my-proj-1"])
    assert time.monotonic() - start < 30   # not the client's minutes of retries (generous: a loaded machine)
    line = error_line(r, 1, alone=True)   # docs/doctor.md: 1 when a check fails or Google cannot be reached
    assert "cannot reach oauth2.googleapis.com" in line and "DNS lookup failed" in line, line
    assert "grant yourself" not in r.stdout and "services enable" not in r.stdout
    assert r.stdout.splitlines()[0].startswith("PASS  credentials")


def test_doctor_without_credentials_fails_that_check_and_exits_1(tmp_path, monkeypatch):
    for name in _REDIRECTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    with offline():
        r = invoke(["doctor", "--project", "my-proj-1"])
    assert r.exit_code == 1, r.output
    [check] = r.stdout.splitlines()        # doctor's line: STATUS  name: detail  -> fix: command
    assert check.startswith("FAIL  credentials: ") and "Application Default Credentials" in check, check
    assert check.endswith("  -> fix: gcloud auth application-default login"), check
    assert r.stderr.strip().splitlines() == ["error: 1 check(s) failed"]
