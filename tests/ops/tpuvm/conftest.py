"""A local stand-in for the Cloud TPU v2 queued-resources REST API, a storage emulator, and a stack's outputs.

The fake walks each queued resource it created through ``states`` (one entry per GET), like the real
service moves one from WAITING_FOR_RESOURCES to ACTIVE; ``on_get(fake, state, n)`` lets a test act as the
TPU hosts (write result.json into the emulator bucket when the slice is ACTIVE, say). ``plans``: one list of
states per create, in order (the k-th queued resource created walks ``plans[k]``, then ``states``), so a
test can preempt a slice mid-run (SUSPENDED), refuse its re-creation in one zone (FAILED) and take it in
another; ``fake.zones_created`` lists the zone of each create. The node of a queued resource reads as READY and
HEALTHY unless a test sets ``fake.nodes[<node name>]`` (its state and health: a host gone while the queued resource
stays ACTIVE); a node without its queued resource is NOT_FOUND. ``refuse``: ``{zone: CreateRefusal}``, the answer
to every create in that zone (a test may set or drop an entry while the run goes): Google's error body with its
HTTP status, which the real client turns into its own exception (429: ``TooManyRequests``); nothing is created.
"""

from __future__ import annotations

import json
import os
import re
import threading
from urllib.parse import parse_qs, urlsplit

import pytest

from gcsfixtures import emulated_buckets
from httpfakes import FakeServer, JsonHandler, fake_factory
from stackfixtures import write_outputs
from tpufakes import CreateRefusal

PROJECT, REGION, ZONE = "my-tpu-project", "us-central1", "us-central1-a"
ARTIFACTS, DATA, STAGING = "tpuctl-my-tpu-project-artifacts", "tpuctl-my-tpu-project-data", "tpuctl-my-tpu-project-staging"
SA = "tpuctl-trainer@my-tpu-project.iam.gserviceaccount.com"
#: v2, and v2alpha1 for a create only v2alpha1 can express (flex-start); one queued resource either way
_QR = re.compile(r"/v2(?:alpha1)?/projects/([^/]+)/locations/([^/]+)/queuedResources(?:/([^/:]+))?")
_NODE = re.compile(r"/v2/(projects/[^/]+/locations/[^/]+)/nodes/([^/:]+)")


def _public(resource: dict) -> dict:
    return {k: v for k, v in resource.items() if not k.startswith("_")}


class FakeTpuCloud(FakeServer):
    def __init__(self, states=("WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"), on_get=None, existing=(),
                 plans=(), refuse=None):
        self.states = list(states)
        self.refuse: dict[str, CreateRefusal] = dict(refuse or {})
        self.plans = [list(p) for p in plans]
        self.zones_created: list[str] = []
        self.on_get = on_get
        self.requests: list[tuple[str, str, dict | None]] = []
        self.resources: dict[str, dict] = {r["name"]: dict(r, _existing=True) for r in existing}
        self.gets: dict[str, int] = {}
        self.deleted: list[tuple[str, dict]] = []
        self.nodes: dict[str, dict] = {}
        self.lock = threading.Lock()
        fake = self

        class Handler(JsonHandler):

            def _error(self, code, status, message):
                self._send(code, {"error": {"code": code, "message": message, "status": status}})

            def _operation(self, project, zone):
                return {"name": f"projects/{project}/locations/{zone}/operations/op-{len(fake.requests)}", "done": False}

            def do_POST(self):
                parts = urlsplit(self.path)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                query = parse_qs(parts.query)
                with fake.lock:
                    fake.requests.append(("POST", self.path, body))
                m = _QR.fullmatch(parts.path)
                if not m or m.group(3):
                    return self._error(404, "NOT_FOUND", parts.path)
                project, zone, _ = m.groups()
                rid = (query.get("queuedResourceId") or [""])[0]
                name = f"projects/{project}/locations/{zone}/queuedResources/{rid}"
                if name in fake.resources:
                    return self._error(409, "ALREADY_EXISTS", f"{name} already exists")
                refusal = fake.refuse.get(zone)
                if refusal is not None:
                    return self._error(refusal.code, refusal.status, refusal.message)
                fake.resources[name] = dict(body, name=name, createTime="2026-11-22T10:00:00Z",
                                            state={"state": "CREATING"})
                if fake.plans:
                    fake.resources[name]["_plan"] = fake.plans.pop(0)
                fake.gets[name] = 0
                fake.zones_created.append(zone)
                self._send(200, self._operation(project, zone))

            def do_GET(self):
                parts = urlsplit(self.path)
                with fake.lock:
                    fake.requests.append(("GET", parts.path, None))
                node = _NODE.fullmatch(parts.path)
                if node:
                    parent, nid = node.groups()
                    name = f"{parent}/nodes/{nid}"
                    if f"{parent}/queuedResources/{nid}" not in fake.resources:
                        return self._error(404, "NOT_FOUND", f"{name} not found")
                    return self._send(200, {"name": name, "state": "READY", "health": "HEALTHY",
                                            **fake.nodes.get(name, {})})
                m = _QR.fullmatch(parts.path)
                if not m:
                    return self._error(404, "NOT_FOUND", parts.path)
                project, zone, rid = m.groups()
                if rid is None:
                    prefix = f"projects/{project}/locations/{zone}/"
                    items = [_public(r) for n, r in fake.resources.items() if n.startswith(prefix)]
                    return self._send(200, {"queuedResources": items})
                name = f"projects/{project}/locations/{zone}/queuedResources/{rid}"
                if name not in fake.resources:
                    return self._error(404, "NOT_FOUND", f"{name} not found")
                if fake.resources[name].get("_existing"):
                    return self._send(200, _public(fake.resources[name]))
                n = fake.gets.get(name, 0)
                fake.gets[name] = n + 1
                states = fake.resources[name].get("_plan") or fake.states
                step = states[min(n, len(states) - 1)]
                state = {"state": step} if isinstance(step, str) else dict(step)
                fake.resources[name]["state"] = state
                if fake.on_get:
                    fake.on_get(fake, state["state"], n)
                self._send(200, _public(fake.resources[name]))

            def do_DELETE(self):
                parts = urlsplit(self.path)
                with fake.lock:
                    fake.requests.append(("DELETE", self.path, None))
                m = _QR.fullmatch(parts.path)
                if not m or not m.group(3):
                    return self._error(404, "NOT_FOUND", parts.path)
                project, zone, rid = m.groups()
                name = f"projects/{project}/locations/{zone}/queuedResources/{rid}"
                if name not in fake.resources:
                    return self._error(404, "NOT_FOUND", f"{name} not found")
                fake.deleted.append((name, {"force": parse_qs(parts.query).get("force", [])}))
                fake.resources.pop(name)
                fake.nodes.pop(f"projects/{project}/locations/{zone}/nodes/{rid}", None)   # its node goes too
                self._send(200, self._operation(project, zone))

        self.serve(Handler)

    def env(self) -> dict[str, str]:
        """Environment of a `tpuctl` subprocess that talks to this fake and the current storage emulator."""
        return {"TPUCTL_TPU_ENDPOINT": self.url, "STORAGE_EMULATOR_HOST": os.environ["STORAGE_EMULATOR_HOST"],
                "GOOGLE_CLOUD_PROJECT": PROJECT, "GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/credentials.json"}

    def creates(self):
        return [r for r in self.requests if r[0] == "POST"]


@pytest.fixture(scope="session", autouse=True)
def tpu_group():
    """`tpuctl tpu` on the CLI app (until tpuctl/cli.py registers it itself)."""
    from tpuctl import cli
    from tpuctl.commands import tpu

    if not any(group.name == "tpu" for group in cli.app.registered_groups):
        tpu.register(cli.app)


@pytest.fixture
def gcs(monkeypatch):
    """The storage emulator as STORAGE_EMULATOR_HOST, with the stack's artifacts and data buckets."""
    with emulated_buckets(monkeypatch, (ARTIFACTS, DATA), PROJECT) as client:
        yield client


@pytest.fixture
def tpu_cloud(monkeypatch, tmp_path):
    with fake_factory(FakeTpuCloud, monkeypatch, ["TPUCTL_TPU_ENDPOINT"], project=PROJECT,
                      credentials=tmp_path / "no-credentials.json") as make:
        yield make


@pytest.fixture
def outputs_file(tmp_path):
    return write_outputs(tmp_path / "outputs.json", {
        "project": PROJECT, "region": REGION, "zone": ZONE,
        "buckets": {"staging": STAGING, "artifacts": ARTIFACTS, "data": DATA},
        "principals": {"training-sa": SA}, "training_service_account": SA,
        "labels": {"stack": "dev"},
    })


