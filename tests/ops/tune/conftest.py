"""Fixtures for `tpuctl tune`: a stand-in for Vertex AI's hyperparameterTuningJobs REST API, the GCS emulator
for the staging upload, and the tune command registered on the CLI (the lead wires it into tpuctl/cli.py;
registering here is idempotent)."""

from __future__ import annotations

import json
import re
import threading
from http.server import ThreadingHTTPServer

import pytest

from gcsfixtures import anonymous_client, storage_emulator
from httpfakes import JsonHandler

OUTPUTS = {
    "project": "my-project-1", "project_number": "123456789012", "region": "us-central1",
    "buckets": {"data": "tpuctl-my-project-1-data", "staging": "tpuctl-my-project-1-staging",
                "artifacts": "tpuctl-my-project-1-artifacts"},
    "training_service_account": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
    "labels": {"app": "tpuctl"},
}


class FakeTuning:
    """Answers hyperparameterTuningJobs create/get like Vertex AI's REST API; records every request.

    ``trials``: the ``trials`` list (REST JSON) a GET returns, as Vertex AI fills it in while the study runs.
    """

    def __init__(self, trials=None, state="JOB_STATE_RUNNING"):
        self.trials = list(trials or [])
        self.state = state
        self.requests: list[tuple[str, str, dict | None]] = []
        self.jobs: dict[str, dict] = {}
        self.lock = threading.Lock()
        fake = self

        class Handler(JsonHandler):

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?")[0]
                with fake.lock:
                    fake.requests.append(("POST", path, body))
                m = re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+)/hyperparameterTuningJobs", path)
                if not m:
                    return self._send(404, {"error": {"code": 404, "message": f"no route {path}", "status": "NOT_FOUND"}})
                name = f"{m.group(1)}/hyperparameterTuningJobs/{7000 + len(fake.jobs)}"
                job = dict(body, name=name, state="JOB_STATE_PENDING", createTime="2026-11-22T03:00:00Z")
                fake.jobs[name] = job
                self._send(200, job)

            def do_GET(self):
                path = self.path.split("?")[0]
                with fake.lock:
                    fake.requests.append(("GET", path, None))
                name = path[len("/v1/"):]
                if name not in fake.jobs:
                    return self._send(404, {"error": {"code": 404, "message": f"{name} not found", "status": "NOT_FOUND"}})
                self._send(200, dict(fake.jobs[name], state=fake.state, trials=fake.trials))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def posts(self):
        return [r for r in self.requests if r[0] == "POST"]


@pytest.fixture
def fake_tuning(monkeypatch):
    servers = []

    def make(**kw) -> FakeTuning:
        fake = FakeTuning(**kw)
        fake.thread.start()
        servers.append(fake)
        monkeypatch.setenv("TPUCTL_VERTEX_ENDPOINT", fake.url)
        return fake

    yield make
    for fake in servers:
        fake.server.shutdown()
        fake.server.server_close()


@pytest.fixture
def gcs(monkeypatch):
    """gcp-storage-emulator (in memory) as STORAGE_EMULATOR_HOST, with the staging bucket; yields the client."""
    with storage_emulator() as url:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        client = anonymous_client(url)
        client.create_bucket(OUTPUTS["buckets"]["staging"])
        yield client


@pytest.fixture
def outputs_file(tmp_path):
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(OUTPUTS))
    return path


@pytest.fixture(autouse=True)
def tune_registered():
    """`tpuctl tune` on the CLI app for in-process `invoke` (a no-op once tpuctl/cli.py registers it)."""
    from tpuctl import cli
    from tpuctl.commands import tune

    if not any(getattr(g, "name", None) == "tune" for g in cli.app.registered_groups):
        tune.register(cli.app)
    yield


@pytest.fixture
def trainer_env(tmp_path_factory, monkeypatch):
    from tpuctl.ground.envs import trainer_python

    if not trainer_python().exists():
        pytest.skip("trainer environment .venv-trainer is missing (scripts/setup.sh)")
    cache = str(tmp_path_factory.mktemp("tpuctl-cache"))
    monkeypatch.setenv("TPUCTL_CACHE_DIR", cache)
    return cache
