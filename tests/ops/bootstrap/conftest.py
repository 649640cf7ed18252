import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fakegoogle import FakeGoogle
from gcsfixtures import storage_emulator

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def fake():
    server = FakeGoogle().start()
    yield server
    server.stop()


@pytest.fixture
def google_env(fake, monkeypatch, tmp_path):
    """Point every client (in this process and in subprocesses) at the fake."""
    env = {
        "STORAGE_EMULATOR_HOST": fake.url,
        "TPUCTL_CRM_ENDPOINT": fake.url,
        "TPUCTL_SERVICEUSAGE_ENDPOINT": fake.url,
        "TPUCTL_CLOUDQUOTAS_ENDPOINT": fake.url,
        "TPUCTL_TPU_ENDPOINT": fake.url,
        "GOOGLE_CLOUD_PROJECT": "tpuctl-test",
        # no ambient credentials can leak into the tests
        "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "no-credentials.json"),
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
        "NO_PROXY": "127.0.0.1,localhost",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    full = dict(os.environ)
    full.update(env)
    return full


@pytest.fixture
def iam_admin(google_env, monkeypatch):
    from fakegoogle import FakeIamAdmin

    server = FakeIamAdmin().start()
    monkeypatch.setenv("TPUCTL_IAM_ENDPOINT", server.url)
    google_env["TPUCTL_IAM_ENDPOINT"] = server.url
    yield server
    server.stop()


@pytest.fixture
def emulator(google_env, monkeypatch):
    """gcp-storage-emulator; the real client (and the CLI) reach it through STORAGE_EMULATOR_HOST."""
    with storage_emulator() as url:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        from google.cloud import storage

        yield storage.Client()
