"""servingEndpoint and tpuZone under mocks. The stack owns one Vertex AI Endpoint with a numeric ID (the API
requires it; Pulumi's auto-name would not be), its labels, and its resource name as an output that `tpuctl
deploy` reads; tpu_zone is tpuZone, else zone."""

from __future__ import annotations

import pytest

from ground import domain
from ground import tokens as T
from ground.outputs import parse_outputs
from infra.config import ConfigError
from infra.mocks import run_program

PROJECT = "my-tpu-project"


def test_the_stack_owns_its_endpoint_and_names_it_in_the_outputs():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:region": "europe-west4", "tpuctl:zone": "europe-west4-a",
                       "tpuctl:servingEndpoint": "flowers-prod"})
    [endpoint] = run.of_type(T.VERTEX_ENDPOINT)
    endpoint_id = endpoint.inputs["name"]
    assert endpoint_id.isdigit() and len(endpoint_id) == 10 and not endpoint_id.startswith("0")
    assert endpoint_id == domain.serving_endpoint_id(PROJECT, "flowers-prod")          # stable across runs
    assert endpoint_id != domain.serving_endpoint_id(PROJECT, "flowers-canary")
    assert endpoint.inputs["displayName"] == "flowers-prod"
    assert endpoint.inputs["location"] == "europe-west4" and endpoint.inputs["project"] == PROJECT
    assert endpoint.inputs["labels"] == {"managed-by": "tpuctl", domain.PURPOSE_LABEL: "serving"}
    assert "trafficSplit" not in endpoint.inputs      # deployments (and their traffic) are tpuctl deploy's
    name = run.outputs["serving_endpoint"]
    assert name == f"projects/{PROJECT}/locations/europe-west4/endpoints/{endpoint_id}"
    assert parse_outputs(run.outputs).serving_endpoint == name      # the outputs document accepts it


def test_no_endpoint_unless_asked():
    run = run_program({"tpuctl:project": PROJECT})
    assert run.of_type(T.VERTEX_ENDPOINT) == [] and run.outputs["serving_endpoint"] is None


def test_a_bad_endpoint_name_is_a_config_error_before_anything_registers(registrations):
    with pytest.raises(ConfigError, match=r"^tpuctl:servingEndpoint: servingEndpoint 'flowers prod'"):
        run_program({"tpuctl:project": PROJECT, "tpuctl:servingEndpoint": "flowers prod"})
    assert registrations == []


def test_tpu_zone_is_output_and_defaults_to_the_zone():
    moved = run_program({"tpuctl:project": PROJECT, "tpuctl:tpuZone": "us-west4-a"})
    assert moved.outputs["tpu_zone"] == "us-west4-a" and moved.outputs["zone"] == "us-central1-a"
    default = run_program({"tpuctl:project": PROJECT, "tpuctl:zone": "us-central1-f"})
    assert default.outputs["tpu_zone"] == "us-central1-f"
    with pytest.raises(ConfigError, match=r"^tpuctl:tpuZone: .*us-west4"):
        run_program({"tpuctl:project": PROJECT, "tpuctl:tpuZone": "us-west4"})
