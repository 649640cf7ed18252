"""Fixtures for `tpuctl train`: a fake trainer interpreter, the GCS emulator, a stand-in Vertex AI API."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tpuctl.ground.envs import ops_python, trainer_python

from clifixtures import run_process
from gcsfixtures import anonymous_client, storage_emulator
from httpfakes import JsonHandler

REPO = Path(__file__).resolve().parents[3]
FAKE_TRAINER = Path(__file__).with_name("fake_trainer.py")


def run_cli(args, env=None, cwd=None, timeout=120, **kw):
    """`tpuctl ARGS` in a subprocess of the ops interpreter."""
    return run_process(args, env=env, cwd=cwd, timeout=timeout, **kw)


@pytest.fixture
def fake_trainer(tmp_path):
    """Env that makes tpuctl launch fake_trainer.py instead of the real trainer; logs in env['FAKE_LOG_DIR']."""
    wrapper = tmp_path / "fake-python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_TRAINER} \"$@\"\n")
    wrapper.chmod(0o755)
    log_dir = tmp_path / "fake-log"
    return {
        "TPUCTL_TRAINER_PYTHON": str(wrapper),
        "FAKE_LOG_DIR": str(log_dir),
        "TPUCTL_CACHE_DIR": str(tmp_path / "cache"),
    }


@pytest.fixture
def gcs():
    """gcp-storage-emulator on 127.0.0.1 (in memory), also as STORAGE_EMULATOR_HOST; yields (url, client)."""
    with storage_emulator() as url:
        old = os.environ.get("STORAGE_EMULATOR_HOST")
        os.environ["STORAGE_EMULATOR_HOST"] = url
        try:
            yield url, anonymous_client(url)
        finally:
            if old is None:
                os.environ.pop("STORAGE_EMULATOR_HOST", None)
            else:
                os.environ["STORAGE_EMULATOR_HOST"] = old


class FakeVertex:
    """Answers CustomJob create/get like Vertex AI's REST API and records every request."""

    def __init__(self, states=("JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"), error=None,
                 unavailable_gets=0):
        self.states = list(states)
        self.error = error
        self.unavailable_gets = unavailable_gets  # answer this many GETs with 503 first
        self.requests: list[tuple[str, str, dict | None]] = []
        self.jobs: dict[str, dict] = {}
        self.gets: dict[str, int] = {}
        self.lock = threading.Lock()
        fake = self

        class Handler(JsonHandler):

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?")[0]
                with fake.lock:
                    fake.requests.append(("POST", path, body))
                m = re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+)/customJobs", path)
                if not m:
                    return self._send(404, {"error": {"code": 404, "message": f"no route {path}", "status": "NOT_FOUND"}})
                name = f"{m.group(1)}/customJobs/{1000 + len(fake.jobs)}"
                job = dict(body, name=name, state="JOB_STATE_QUEUED", createTime="2026-11-22T03:00:00Z")
                fake.jobs[name] = job
                self._send(200, job)

            def do_GET(self):
                path = self.path.split("?")[0]
                with fake.lock:
                    fake.requests.append(("GET", path, None))
                name = path[len("/v1/"):]
                if fake.unavailable_gets > 0:
                    fake.unavailable_gets -= 1
                    return self._send(503, {"error": {"code": 503, "message": "try again", "status": "UNAVAILABLE"}})
                if name not in fake.jobs:
                    return self._send(404, {"error": {"code": 404, "message": f"{name} not found", "status": "NOT_FOUND"}})
                i = fake.gets.get(name, 0)
                fake.gets[name] = i + 1
                job = dict(fake.jobs[name], state=fake.states[min(i, len(fake.states) - 1)])
                if job["state"] == "JOB_STATE_FAILED" and fake.error:
                    job["error"] = {"code": 3, "message": fake.error}
                self._send(200, job)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def posts(self):
        return [r for r in self.requests if r[0] == "POST"]


@pytest.fixture
def fake_vertex():
    servers = []

    def make(**kw) -> FakeVertex:
        fake = FakeVertex(**kw)
        fake.thread.start()
        servers.append(fake)
        return fake

    yield make
    for fake in servers:
        fake.server.shutdown()
        fake.server.server_close()


def wait_for(predicate, timeout=30.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (psutil-free: os.kill(pid, 0) + /proc state)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def tools():
    """Helpers for the tests (conftest modules are not importable under --import-mode=importlib)."""
    from types import SimpleNamespace

    return SimpleNamespace(run_cli=run_cli, wait_for=wait_for, pid_alive=pid_alive, repo=REPO,
                           ops_python=ops_python(), trainer_python=trainer_python())
