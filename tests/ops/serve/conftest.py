"""Fixtures for `tpuctl serve|predict|deploy`: a stand-in for Vertex AI's model / endpoint / prediction / job REST
API (the real aiplatform_v1 clients talk to it), a TF-Serving-shaped REST stand-in recording what it was sent,
the GCS emulator, a stack's outputs, and a real export trained by the trainer (slow)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import pytest

from ground.envs import trainer_env, trainer_python

from gcsfixtures import emulated_buckets
from httpfakes import FakeServer, JsonHandler, fake_factory
from procfixtures import Watched
from stackfixtures import write_outputs

HERE = Path(__file__).resolve().parent
PROJECT, REGION = "my-serve-project", "us-central1"
ARTIFACTS, DATA = "tpuctl-my-serve-project-artifacts", "tpuctl-my-serve-project-data"
OUTPUTS = {"project": PROJECT, "region": REGION, "buckets": {"artifacts": ARTIFACTS, "data": DATA},
           "labels": {"stack": "dev"}}
_TYPES = "type.googleapis.com/google.cloud.aiplatform.v1."


class _Handler(JsonHandler):
    fake = None


class FakeVertexServing(FakeServer):
    """Answers Vertex AI's upload_model / create_endpoint / deploy_model (LROs, done on the first GET),
    list_endpoints, predict, create_batch_prediction_job and get, like its v1 REST API; records every request.

    ``predictor(instances) -> predictions`` answers ``:predict``; ``endpoints``: display names that exist."""

    def __init__(self, predictor=None, endpoints=()):
        self.predictor = predictor
        self.requests: list[tuple[str, str, dict | None]] = []
        self.operations: dict[str, dict] = {}
        self.endpoints: dict[str, dict] = {}
        self.jobs: dict[str, dict] = {}
        self.models: dict[str, dict] = {}
        self.lock = threading.Lock()
        for i, display in enumerate(endpoints):
            name = f"projects/{PROJECT}/locations/{REGION}/endpoints/{500 + i}"
            self.endpoints[name] = {"name": name, "displayName": display}
        fake = self

        class Handler(_Handler):
            def do_GET(self):
                parts = urlsplit(self.path)
                with fake.lock:
                    fake.requests.append(("GET", self.path, None))
                name = parts.path[len("/v1/"):]
                if name in fake.operations:
                    return self.send(200, dict(fake.operations[name], done=True))
                if name in fake.jobs:
                    return self.send(200, dict(fake.jobs[name], state="JOB_STATE_RUNNING"))
                m = re.fullmatch(r"(projects/[^/]+/locations/[^/]+)/endpoints", name)
                if m:
                    wanted = re.fullmatch(r'display_name="(.*)"', parse_qs(parts.query).get("filter", [""])[0])
                    found = [e for e in fake.endpoints.values()
                             if wanted is None or e["displayName"] == wanted.group(1)]
                    return self.send(200, {"endpoints": found})
                self.send(404, {"error": {"code": 404, "message": f"{name} not found", "status": "NOT_FOUND"}})

            def do_POST(self):
                path = urlsplit(self.path).path
                body = self.body()
                with fake.lock:
                    fake.requests.append(("POST", path, body))
                name = path[len("/v1/"):]
                if m := re.fullmatch(r"(projects/[^/]+/locations/[^/]+)/models:upload", name):
                    model = f"{m.group(1)}/models/{700 + len(fake.models)}"
                    fake.models[model] = body.get("model", {})
                    return self.send(200, fake.operation(m.group(1), {"@type": _TYPES + "UploadModelResponse",
                                                                       "model": model}))
                if m := re.fullmatch(r"(projects/[^/]+/locations/[^/]+)/endpoints", name):
                    endpoint = dict(body, name=f"{m.group(1)}/endpoints/{600 + len(fake.endpoints)}")
                    fake.endpoints[endpoint["name"]] = endpoint
                    return self.send(200, fake.operation(m.group(1), dict(endpoint, **{"@type": _TYPES + "Endpoint"})))
                if m := re.fullmatch(r"((projects/[^/]+/locations/[^/]+)/endpoints/[^/:]+):deployModel", name):
                    if m.group(1) not in fake.endpoints:
                        return self.send(404, {"error": {"code": 404, "message": "no endpoint", "status": "NOT_FOUND"}})
                    deployed = dict(body.get("deployedModel", {}), id="4242")
                    return self.send(200, fake.operation(m.group(2), {"@type": _TYPES + "DeployModelResponse",
                                                                       "deployedModel": deployed}))
                if m := re.fullmatch(r"(projects/[^/]+/locations/[^/]+/endpoints/[^/:]+):predict", name):
                    return self.send(200, {"predictions": fake.predictor(body["instances"]), "deployedModelId": "4242"})
                if m := re.fullmatch(r"(projects/[^/]+/locations/[^/]+)/batchPredictionJobs", name):
                    job = dict(body, name=f"{m.group(1)}/batchPredictionJobs/{900 + len(fake.jobs)}",
                               state="JOB_STATE_PENDING", createTime="2026-11-22T10:00:00Z")
                    fake.jobs[job["name"]] = job
                    return self.send(200, job)
                self.send(404, {"error": {"code": 404, "message": f"no route {path}", "status": "NOT_FOUND"}})

        self.serve(Handler)

    def operation(self, parent: str, response: dict) -> dict:
        name = f"{parent}/operations/{100 + len(self.operations)}"
        self.operations[name] = {"name": name, "response": response}
        return {"name": name, "done": False}

    def posts(self, suffix: str = "") -> list[tuple[str, dict]]:
        return [(p, b) for m, p, b in self.requests if m == "POST" and p.endswith(suffix)]


class FakeTFServing(FakeServer):
    """A TF-Serving-shaped ``:predict`` endpoint answering from ``predictor``; records every body."""

    def __init__(self, model="digits", predictor=None):
        self.bodies: list[dict] = []
        self.predictor = predictor or (lambda instances: [canned(i) for i in instances])
        fake = self

        class Handler(_Handler):
            def do_POST(self):
                body = self.body()
                fake.bodies.append(body)
                if urlsplit(self.path).path != f"/v1/models/{model}:predict":
                    return self.send(404, {"error": f"Servable not found for request: Latest({self.path})"})
                self.send(200, {"predictions": fake.predictor(body["instances"])})

        self.serve(Handler)
        self.url += f"/v1/models/{model}:predict"


def canned(instance) -> dict:
    """A deterministic 3-class answer from the image bytes (class = first byte after the magic % 3)."""
    data = base64.b64decode(instance["image_bytes"]["b64"])
    top = len(data) % 3
    probabilities = [0.1, 0.1, 0.1]
    probabilities[top] = 0.8
    return {"probabilities": probabilities, "class_id": top, "class_name": f"model-{top}"}


@pytest.fixture(scope="session", autouse=True)
def serve_commands():
    """`tpuctl serve|predict|deploy` on the CLI app (a no-op once tpuctl/cli.py registers them)."""
    from tpuctl import cli
    from tpuctl.commands import serve

    names = {c.name or (c.callback.__name__ if c.callback else None) for c in cli.app.registered_commands}
    if "serve" not in names:
        serve.register(cli.app)


@pytest.fixture
def vertex(monkeypatch, tmp_path):
    with fake_factory(FakeVertexServing, monkeypatch, ["TPUCTL_VERTEX_ENDPOINT"], project=PROJECT,
                      credentials=tmp_path / "no-credentials.json") as make:
        yield make


@pytest.fixture
def tf_serving():
    with fake_factory(FakeTFServing) as make:
        yield make


@pytest.fixture
def gcs(monkeypatch):
    with emulated_buckets(monkeypatch, (ARTIFACTS, DATA), PROJECT) as client:
        yield client


@pytest.fixture
def outputs_file(tmp_path):
    return write_outputs(tmp_path / "outputs.json", OUTPUTS)


JPEG_HEADER = b"\xff\xd8\xff\xe0"
PNG_HEADER = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def fake_export(tmp_path):
    """A run folder ``runs/20261122-1000`` whose export has a (dummy) saved_model.pb, plus its data manifest."""
    run = tmp_path / "runs" / "20261122-1000"
    export = run / "export" / "small_cnn" / "3"
    (export / "variables").mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"\x08\x01")
    (export / "variables" / "variables.index").write_bytes(b"index")
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"classes": ["cat", "dog", "fox"]}))
    (run / "result.json").write_text(json.dumps({"export_dir": str(export), "model": "small_cnn", "epochs": 1}))
    (run / "tpuctl-run.json").write_text(json.dumps({"target": "local", "args": ["--data_dir", str(data)]}))
    return SimpleNamespace(runs=tmp_path / "runs", run=run, export=export, data=data)


def images(folder: Path, sizes=(10, 11, 12, 13, 14, 15, 16)) -> list[Path]:
    """Small files with JPEG/PNG magic bytes (contents irrelevant to the canned predictor)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, size in enumerate(sizes):
        header = PNG_HEADER if i % 2 else JPEG_HEADER
        path = folder / f"img{i}.{'png' if i % 2 else 'jpg'}"
        path.write_bytes(header + bytes(size - len(header)))
        paths.append(path)
    return paths


#: One small picture per format make-tfrecords reads (trainer.flags.IMAGE_FORMATS), written with the trainer
#: environment's Pillow: a format added to that list is covered here without a change.
_SAMPLES = r"""
import sys
from pathlib import Path
from PIL import Image
from trainer.flags import IMAGE_FORMATS
out = Path(sys.argv[1])
out.mkdir(parents=True)
picture = Image.new("RGBA", (10, 6), (200, 30, 60, 255))
picture.putpixel((0, 0), (0, 0, 0, 0))
for name, endings in IMAGE_FORMATS.items():
    for ending in endings:
        image = picture if name in ("PNG", "WebP", "TIFF", "GIF") else picture.convert("RGB")
        image.save(out / f"sample{ending}", format=name.upper())
whole = (out / "sample.webp").read_bytes()
(out / "cut.webp").write_bytes(whole[:len(whole) - 10])
"""


@pytest.fixture(scope="module")
def format_samples(tmp_path_factory):
    """``sample<ending>`` for every ending of trainer.flags.IMAGE_FORMATS, and a cut-short ``cut.webp``."""
    python = trainer_python()
    if not python.exists():
        pytest.skip(f"trainer environment {python} is missing (scripts/setup.sh)")
    out = tmp_path_factory.mktemp("formats") / "samples"
    subprocess.run([str(python), "-c", _SAMPLES, str(out)], env=trainer_env(), check=True, timeout=120)
    return out


@pytest.fixture
def helpers():
    return SimpleNamespace(images=images, canned=canned, OUTPUTS=OUTPUTS, PROJECT=PROJECT, REGION=REGION,
                           ARTIFACTS=ARTIFACTS, DATA=DATA, HERE=HERE)


# ----------------------------------------------------------------------------------------------
# A real export (slow): the trainer, briefly, in the trainer environment
# ----------------------------------------------------------------------------------------------

def _trainer(args, timeout=600):
    proc = subprocess.run([str(trainer_python()), *map(str, args)], env=trainer_env(), capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A real export (`trainer.task`, 1 epoch of 3 steps on 16x16 digits), test images cut from its validation
    shards (JPEG, and PNG re-encodings), and what the SavedModel's signature says of them when called directly."""
    root = tmp_path_factory.mktemp("trained")
    data, model, pictures = root / "data", root / "model", root / "images"
    _trainer(["-m", "trainer.sample_data", "--out", data, "--image-size", "16"])
    _trainer(["-m", "trainer.task", "--data_dir", data, "--model_dir", model, "--train_epochs", "1",
              "--steps_per_epoch", "3", "--distribution_strategy", "cpu"])
    result = json.loads((model / "result.json").read_text())
    _trainer([HERE / "make_reference.py", result["export_dir"], data, pictures])
    reference = json.loads((pictures / "reference.json").read_text())
    return SimpleNamespace(data=data, model=model, export=Path(result["export_dir"]), images=pictures,
                           reference=reference)


@pytest.fixture(scope="module")
def model_server(trained, tmp_path_factory):
    """tests/ops/serve/model_server.py in the trainer env: the real SavedModel behind TF Serving's REST
    ``:predict`` format; yields its predict URL."""
    with Watched([str(trainer_python()), str(HERE / "model_server.py"), str(trained.export), "digits"],
                 env=trainer_env()) as proc:
        line = proc.wait_line("listening ", "the model server's port")
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1/models/digits:predict"
