import pytest

from gcsfixtures import storage_emulator
from hubfixtures import ModelServer


@pytest.fixture
def gcs(monkeypatch, tmp_path):
    """gcp-storage-emulator on 127.0.0.1 (in memory); the real client reaches it via STORAGE_EMULATOR_HOST."""
    with storage_emulator(default_bucket="hub-bkt") as url:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "tpuctl-test")
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-credentials.json"))
        from google.cloud import storage

        yield storage.Client()


@pytest.fixture
def model_server():
    s = ModelServer()
    yield s
    s.stop()
