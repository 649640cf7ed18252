"""`tpuctl cluster create|ls|delete` (Vertex AI persistent resources) through the real PersistentResourceServiceClient
on the local stand-in (tests/fixtures/vertexfakes.py), and `train/tune --target vertex --cluster NAME`: every job's
request, and every trial's of a tuning job, carries ``persistent_resource_id``."""

from __future__ import annotations

import json

import pytest
from google.cloud import aiplatform_v1

from ground.errors import UserError
from ground.outputs import read_outputs_file
from tpuctl.services.runs import cluster as clusters
from tpuctl.services.runs import vertex
from tpuctl.services.runs.target import Report
from tpuctl.services.runs.vertex import VertexTarget

from clifixtures import error_line, invoke
from httpfakes import fake_factory
from runfixtures import planned
from stackfixtures import SAMPLE_OUTPUTS, write_outputs
from vertexfakes import FakePersistentResources, FakeTuningJobs

PROJECT, REGION = SAMPLE_OUTPUTS["project"], SAMPLE_OUTPUTS["region"]
PARENT = f"projects/{PROJECT}/locations/{REGION}"
IMAGE = "us-docker.pkg.dev/my-project-1/team-images/trainer:7"   # not tpuctl's: Vertex AI's to find


@pytest.fixture
def outputs_file(tmp_path):
    return write_outputs(tmp_path / "outputs.json")


@pytest.fixture
def fake_clusters(monkeypatch):
    with fake_factory(FakePersistentResources, monkeypatch, ["TPUCTL_VERTEX_ENDPOINT"]) as make:
        yield make


def _cluster(outputs_file, *args):
    return invoke(["cluster", *args, "--outputs", str(outputs_file)])


def test_create_dry_run_is_a_strict_persistent_resource_with_its_cost_per_hour(outputs_file, monkeypatch):
    monkeypatch.delenv("TPUCTL_VERTEX_ENDPOINT", raising=False)
    r = _cluster(outputs_file, "create", "team-t4", "-a", "gpu-t4x2", "--replicas", "3", "--dry-run")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["parent"] == PARENT and doc["persistentResourceId"] == "team-t4"
    resource = aiplatform_v1.PersistentResource.from_json(json.dumps(doc["persistentResource"]),
                                                          ignore_unknown_fields=False)
    [pool] = resource.resource_pools
    assert pool.replica_count == 3 and pool.machine_spec.accelerator_count == 2
    assert aiplatform_v1.AcceleratorType(pool.machine_spec.accelerator_type).name == "NVIDIA_TESLA_T4"
    assert resource.resource_runtime_spec.service_account_spec.enable_custom_service_account
    assert resource.labels["managed-by"] == "tpuctl"
    [total] = [line for line in r.stderr.splitlines() if "total:" in line]
    assert "while the cluster exists" in total, total


def test_create_ls_delete_through_the_real_client(outputs_file, fake_clusters):
    fake = fake_clusters(provisioning_gets=1)
    r = _cluster(outputs_file, "create", "team-cpu", "--replicas", "2")
    assert r.exit_code == 0, r.output
    assert f"creating {PARENT}/persistentResources/team-cpu" in r.stdout
    [(_, url, body)] = fake.creates()
    assert "persistentResourceId=team-cpu" in url
    aiplatform_v1.PersistentResource.from_json(json.dumps(body), ignore_unknown_fields=False)
    again = _cluster(outputs_file, "create", "team-cpu")
    assert "already exists" in error_line(again, 1)
    listed = _cluster(outputs_file, "ls", "--json")
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.stdout)
    assert row["name"] == "team-cpu" and row["state"] == "PROVISIONING" and row["managed"]
    assert row["machines"] == "2 × n1-standard-4"
    assert clusters.list_clusters(PROJECT, REGION)[0].state in ("PROVISIONING", "RUNNING")
    deleted = _cluster(outputs_file, "delete", "team-cpu")
    assert deleted.exit_code == 0 and fake.resources == {}
    assert "no clusters" in _cluster(outputs_file, "ls").stdout


def test_what_cluster_refuses_is_one_line(outputs_file, fake_clusters):
    fake = fake_clusters(existing=[{"name": f"{PARENT}/persistentResources/theirs", "state": "RUNNING",
                                    "labels": {"team": "other"}}])
    assert "not created by tpuctl" in error_line(_cluster(outputs_file, "delete", "theirs"), 2)
    assert "no cluster gone" in error_line(_cluster(outputs_file, "delete", "gone"), 1)
    assert "cluster name 'Team_1'" in error_line(_cluster(outputs_file, "create", "Team_1"), 2)
    assert "--replicas" in error_line(_cluster(outputs_file, "create", "c1", "--replicas", "0"), 2)
    assert fake.creates() == [] and f"{PARENT}/persistentResources/theirs" in fake.resources


def _running(name: str, machine: dict) -> dict:
    return {"name": f"{PARENT}/persistentResources/{name}", "state": "RUNNING", "labels": {"managed-by": "tpuctl"},
            "resourcePools": [{"machineSpec": machine, "replicaCount": "2"}]}


def test_a_job_on_a_cluster_carries_it_and_is_checked_against_the_clusters_pools(outputs_file, fake_clusters,
                                                                                 monkeypatch):
    fake = fake_clusters(existing=[_running("c1", {"machineType": "n1-standard-4"})])
    api = vertex.cluster_client(REGION)
    outputs = read_outputs_file(outputs_file)
    spec = planned("vertex", outputs, name="on-c1", cluster="c1")
    notes: list[str] = []
    target = VertexTarget(spec, Report(note=notes.append), cluster_api=api)
    target.preflight()
    assert target.custom_job.job_spec.persistent_resource_id == "c1"
    assert any("quota check skipped" in n and "c1" in n for n in notes), notes
    assert any("not charged separately" in n for n in notes), notes
    gpu = planned("vertex", outputs, name="on-c1", cluster="c1", accelerator="gpu-t4")
    with pytest.raises(UserError, match=r"cluster c1 has no pool of n1-standard-8 \+ 1 × NVIDIA_TESLA_T4 \(its pools: n1-standard-4\)"):
        VertexTarget(gpu, Report(note=notes.append), cluster_api=api).preflight()
    with pytest.raises(UserError, match="no cluster c2"):
        VertexTarget(planned("vertex", outputs, name="x", cluster="c2"), Report(note=notes.append), cluster_api=api).preflight()
    assert fake.creates() == []


@pytest.mark.parametrize("extra, says", [
    (["--cluster", "c1", "--spot"], "--spot"), (["--cluster", "c1", "--reservation", "any"], "--reservation"),
    (["--cluster", "c1", "--budget", "5"], "not charged separately"), (["--cluster", "C 1"], "--cluster 'C 1'"),
])
def test_cluster_flag_refusals_are_one_line(outputs_file, extra, says):
    r = invoke(["train", "--target", "vertex", "--outputs", str(outputs_file), "--dry-run", *extra])
    assert says in error_line(r, 2, alone=True)


def test_every_trial_of_a_tuning_job_on_a_cluster_carries_it(outputs_file, monkeypatch, tmp_path):
    """A HyperparameterTuningJob runs every trial from its one trial_job_spec: the request the real client sends
    carries the cluster there, and nothing else per trial."""
    from gcsfixtures import emulated_buckets

    with fake_factory(FakeTuningJobs, monkeypatch, ["TPUCTL_VERTEX_ENDPOINT"]) as make, \
            emulated_buckets(monkeypatch, [SAMPLE_OUTPUTS["buckets"]["staging"]]):
        fake = make()
        fake.clusters[f"{PARENT}/persistentResources/c1"] = _running("c1", {"machineType": "n1-standard-4"})
        r = invoke(["tune", "--target", "vertex", "--outputs", str(outputs_file), "--image", IMAGE, "--name", "t-c1",
                    "--cluster", "c1"])
        assert r.exit_code == 0, r.output
    [(_, _, body)] = fake.posts()
    job = aiplatform_v1.HyperparameterTuningJob.from_json(json.dumps(body), ignore_unknown_fields=False)
    assert job.trial_job_spec.persistent_resource_id == "c1"
    assert job.max_trial_count > 1 and "trial" not in json.dumps(body).replace("trialJobSpec", "").replace(
        "maxTrialCount", "").replace("parallelTrialCount", "").lower()
