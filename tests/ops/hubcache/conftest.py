import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))

from hubfixtures import ModelServer  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
TRAINER_PY = REPO / ".venv-trainer" / "bin" / "python"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gcs(monkeypatch, tmp_path):
    """gcp-storage-emulator on 127.0.0.1 (in memory); the real client reaches it via STORAGE_EMULATOR_HOST."""
    from gcp_storage_emulator.server import create_server

    port = _free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="hub-bkt")
    server.start()
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "tpuctl-test")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-credentials.json"))
    from google.cloud import storage

    yield storage.Client()
    server.stop()


@pytest.fixture
def model_server():
    s = ModelServer()
    yield s
    s.stop()
