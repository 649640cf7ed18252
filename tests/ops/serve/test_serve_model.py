"""`tpuctl predict` on a real export: the trainer's SavedModel behind TF Serving's documented REST `:predict`
format (tests/ops/serve/model_server.py, trainer env) and behind a Vertex AI Endpoint (the fake forwards the
instances it received to that server) gives, for the same JPEGs and PNGs, the classes the SavedModel's
serving signature gives when called directly (tests/ops/serve/make_reference.py)."""

from __future__ import annotations

import json

import pytest
import requests

from clifixtures import invoke

pytestmark = pytest.mark.slow


def _check(shown, trained):
    assert len(shown) == len(trained.reference)
    for item in shown:
        name = item["image"].rsplit("/", 1)[-1]
        want = trained.reference[name]
        top = item["top"][0]
        assert (top["class_id"], top["class_name"]) == (want["class_id"], want["class_name"]), name
        assert top["probability"] == pytest.approx(max(want["probabilities"]), abs=1e-6)
        ranked = sorted(range(len(want["probabilities"])), key=lambda i: (-want["probabilities"][i], i))[:3]
        assert [t["class_id"] for t in item["top"]] == ranked, name
        # names for the other classes come from the run's data manifest (the digits' classes are "0".."9")
        assert [t["class_name"] for t in item["top"]] == [str(i) for i in ranked]


def test_predict_rest_matches_the_signature_called_directly(trained, model_server):
    paths = sorted(p for p in trained.images.iterdir() if p.suffix in (".jpg", ".png"))
    result = invoke(["predict", model_server, *paths, "--batch-size", "4", "--json",
                     "--manifest", trained.data])
    assert result.exit_code == 0, result.stderr
    _check(json.loads(result.stdout), trained)


def test_predict_vertex_endpoint_matches_too(trained, model_server, vertex):
    def forward(instances):
        answer = requests.post(model_server, json={"instances": instances}, timeout=60)
        assert answer.status_code == 200, answer.text
        return answer.json()["predictions"]

    vertex(predictor=forward, endpoints=["digits"])
    paths = sorted(p for p in trained.images.iterdir() if p.suffix in (".jpg", ".png"))
    endpoint = "projects/my-serve-project/locations/us-central1/endpoints/500"
    result = invoke(["predict", endpoint, *paths, "--batch-size", "5", "--json", "--manifest", trained.data])
    assert result.exit_code == 0, result.stderr
    _check(json.loads(result.stdout), trained)


def test_serve_prints_the_command_for_the_real_export(trained):
    result = invoke(["serve", trained.model, "--dry-run", "--model-name", "digits", "--port", "9501"])
    assert result.exit_code == 0, result.stderr
    assert f"source={trained.export},target=/models/digits/1,readonly" in result.stdout
    assert "-p 127.0.0.1:9501:8501" in result.stdout
