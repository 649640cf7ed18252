"""A local stand-in for Cloud Build v1 and Artifact Registry v1 that answers the real clients' REST calls."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class FakeBuildCloud:
    """Cloud Build: create (an Operation naming the build), get (walks ``statuses``).
    Artifact Registry: get tag (404 until a build of that image succeeded, or ``existing`` tags)."""

    def __init__(self, statuses=("QUEUED", "WORKING", "SUCCESS"), failure=None):
        self.statuses = list(statuses)
        self.failure = failure
        self.requests: list[tuple[str, str, dict | None]] = []
        self.builds: dict[str, dict] = {}
        self.gets: dict[str, int] = {}
        self.tags: set[str] = set()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, payload):
                body = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _not_found(self, what):
                self._send(404, {"error": {"code": 404, "message": f"{what} not found", "status": "NOT_FOUND"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                path = self.path.split("?")[0]
                with fake.lock:
                    fake.requests.append(("POST", self.path, body))
                m = re.fullmatch(r"/v1/projects/([^/]+)(?:/locations/([^/]+))?/builds", path)
                if not m:
                    return self._not_found(path)
                build_id = f"b{len(fake.builds) + 1}"
                build = dict(body, id=build_id, projectId=m.group(1), status="QUEUED",
                             logUrl=f"https://console.cloud.google.com/cloud-build/builds/{build_id}")
                fake.builds[build_id] = build
                self._send(200, {"name": f"operations/build/{m.group(1)}/{build_id}",
                                 "metadata": {"@type": "type.googleapis.com/google.devtools.cloudbuild.v1."
                                                       "BuildOperationMetadata", "build": build}})

            def do_GET(self):
                path = self.path.split("?")[0]
                with fake.lock:
                    fake.requests.append(("GET", path, None))
                m = re.fullmatch(r"/v1/projects/[^/]+/locations/[^/]+/builds/([^/]+)", path)
                if m:
                    build_id = m.group(1)
                    if build_id not in fake.builds:
                        return self._not_found(build_id)
                    i = fake.gets.get(build_id, 0)
                    fake.gets[build_id] = i + 1
                    status = fake.statuses[min(i, len(fake.statuses) - 1)]
                    build = dict(fake.builds[build_id], status=status)
                    if status == "SUCCESS":
                        for image in build.get("images", []):
                            fake.tags.add(image)
                    elif status == "FAILURE" and fake.failure:
                        build["failureInfo"] = {"type": "USER_BUILD_STEP", "detail": fake.failure}
                    return self._send(200, build)
                m = re.fullmatch(r"/v1/projects/([^/]+)/locations/([^/]+)/repositories/([^/]+)/packages/([^/]+)"
                                 r"/tags/([^/]+)", path)
                if m:
                    project, region, repo, package, tag = m.groups()
                    uri = f"{region}-docker.pkg.dev/{project}/{repo}/{package}:{tag}"
                    if uri in fake.tags:
                        return self._send(200, {"name": path[len("/v1/"):], "version": "sha256:0"})
                    return self._not_found(path)
                self._not_found(path)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def creates(self):
        return [r for r in self.requests if r[0] == "POST"]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def build_cloud(monkeypatch, tmp_path):
    servers = []

    def make(**kw) -> FakeBuildCloud:
        fake = FakeBuildCloud(**kw)
        servers.append(fake)
        monkeypatch.setenv("TPUCTL_CLOUDBUILD_ENDPOINT", fake.url)
        monkeypatch.setenv("TPUCTL_ARTIFACTREGISTRY_ENDPOINT", fake.url)
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "my-tpu-project")
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-credentials.json"))
        return fake

    yield make
    for fake in servers:
        fake.stop()
