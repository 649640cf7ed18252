"""Every CustomJob request `tpuctl train --target vertex --dry-run` can print is valid for Google's own types.

The requests are parsed strictly with the installed client's ``aiplatform_v1.CustomJob.from_json(...,
ignore_unknown_fields=False)``: a field the API does not define, a wrong enum name or a wrong JSON type is
an error. The dry run runs in-process through the CLI boundary with a stack outputs file; no cloud access.
"""

from __future__ import annotations

import datetime
import json

import pytest
from google.cloud import aiplatform_v1

from ground import domain
from tpuctl.services.runs import vertex

from clifixtures import invoke

OUTPUTS = {
    "project": "my-project-1", "project_number": "123456789012", "region": "us-central1",
    "buckets": {"data": "tpuctl-my-project-1-data", "staging": "tpuctl-my-project-1-staging",
                "artifacts": "tpuctl-my-project-1-artifacts", "hub-cache": "tpuctl-my-project-1-hub-cache"},
    "training_service_account": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
    "tfhub_cache_dir": "gs://tpuctl-my-project-1-hub-cache/model-cache",
    "labels": {"app": "tpuctl"},
}


def _catalogue() -> list[tuple[str, int]]:
    """Every accelerator name the catalogue accepts (GPUs past their end of support are refused: not here) × 1 worker,
    and × 3 workers where that is allowed. The newer GPUs (H100 Mega, H200, B200, RTX PRO 6000) are in google-cloud-
    aiplatform's protos but not in the Cloud SDK 528 schema (tests/ops/gcloud): this strict parse is their contract."""
    today = datetime.date.today()
    names = ["cpu", *(f"gpu-{g.short}x{c}" for g in domain.GPU_TYPES.values() for c in sorted(g.machine_types)
                      if g.end_of_support is None or g.end_of_support > today),
             *domain.vertex_tpu_names()]
    out = []
    for name in names:
        out.append((name, 1))
        if domain.parse_accelerator(name).kind != "tpu":  # a Vertex TPU job has exactly one replica
            out.append((name, 3))
    return out


def _region(name: str) -> str:
    regions = domain.parse_accelerator(name).regions
    return "us-central1" if regions is None or "us-central1" in regions else sorted(regions)[0]


@pytest.fixture(scope="module")
def outputs_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("contract") / "outputs.json"
    path.write_text(json.dumps(OUTPUTS))
    return path


@pytest.mark.parametrize("name, workers", _catalogue(), ids=lambda v: str(v))
def test_dry_run_request_parses_strictly_as_a_custom_job(outputs_file, name, workers):
    result = invoke(["train", "--target", "vertex", "--outputs", outputs_file, "--dry-run", "--accelerator", name,
                     "--workers", workers, "--region", _region(name), "--name", "contract"])
    assert result.exit_code == 0, result.stderr
    job = aiplatform_v1.CustomJob.from_json(result.stdout, ignore_unknown_fields=False)
    pools = job.job_spec.worker_pool_specs
    assert [p.replica_count for p in pools] == ([1] if workers == 1 else [1, workers - 1])
    accel = domain.parse_accelerator(name)
    spec = pools[0].machine_spec
    assert spec.machine_type == accel.machine_type
    if accel.kind == "gpu":
        assert (aiplatform_v1.AcceleratorType(spec.accelerator_type).name, spec.accelerator_count) == (
            accel.gpu.vertex_accelerator, accel.gpu_count)
    if accel.kind == "tpu":      # v5e/v6e: the machine type and tpuTopology of the slice; v2/v3: the enum and count
        assert (spec.tpu_topology, aiplatform_v1.AcceleratorType(spec.accelerator_type).name, spec.accelerator_count) \
            == (accel.tpu.vertex.topology or "", accel.tpu.vertex.accelerator_type or "ACCELERATOR_TYPE_UNSPECIFIED",
                accel.tpu.vertex.accelerator_count)
    # what the parse kept is everything that was printed (nothing dropped or renamed on the way)
    printed = json.loads(result.stdout)
    assert vertex.job_to_dict(job) == printed


def test_a_gpu_past_its_end_of_support_is_refused_naming_the_date(outputs_file):
    result = invoke(["train", "--target", "vertex", "--outputs", str(outputs_file), "--dry-run", "-a", "gpu-p100"])
    assert result.exit_code == 2
    assert "end of support on 2026-09-15" in result.stderr and result.stderr.count("\n") == 1


def test_a_multi_host_tpu_is_one_replica_with_its_topology_and_no_local_tpu_name(outputs_file):
    result = invoke(["train", "--target", "vertex", "--outputs", str(outputs_file), "--dry-run", "-a", "tpu-v5e-16",
                     "--region", "us-central1", "--name", "pod"])
    assert result.exit_code == 0, result.stderr
    job = aiplatform_v1.CustomJob.from_json(result.stdout, ignore_unknown_fields=False)
    (pool,) = job.job_spec.worker_pool_specs
    assert (pool.replica_count, pool.machine_spec.machine_type, pool.machine_spec.tpu_topology) == (
        1, "ct5lp-hightpu-4t", "4x4")
    env = {e.name for e in pool.container_spec.env}
    assert "TPU_NAME" not in env and "--distribution_strategy" in pool.container_spec.args
    assert pool.container_spec.args[pool.container_spec.args.index("--distribution_strategy") + 1] == "tpu"
    assert "4 TPU VMs" in result.stderr and "--target tpu-vm" in result.stderr
    pod = invoke(["train", "--target", "vertex", "--outputs", str(outputs_file), "--dry-run", "-a", "tpu-v3-32",
                  "--region", "europe-west4", "--name", "pod"])
    assert pod.exit_code == 0, pod.stderr
    (pool,) = aiplatform_v1.CustomJob.from_json(pod.stdout, ignore_unknown_fields=False).job_spec.worker_pool_specs
    assert (pool.machine_spec.machine_type, pool.machine_spec.accelerator_count) == ("cloud-tpu", 32)
    assert "4 TPU VMs" in pod.stderr and "--target tpu-vm" not in pod.stderr      # v2/v3 are Vertex AI only


def test_every_catalogue_accelerator_enum_exists_in_the_installed_client():
    names = {g.vertex_accelerator for g in domain.GPU_TYPES.values()}
    names |= {t.vertex.accelerator_type for t in domain.TPU_SLICES.values() if t.vertex and t.vertex.accelerator_type}
    known = set(aiplatform_v1.AcceleratorType.__members__)
    assert names - known == set()


def test_an_unknown_field_really_fails_the_strict_parse():
    with pytest.raises(Exception, match="noSuchField|no_such_field"):
        aiplatform_v1.CustomJob.from_json('{"displayName": "x", "noSuchField": 1}', ignore_unknown_fields=False)
