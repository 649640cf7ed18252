"""`tpuctl train --target vertex` checks the region's Vertex AI quota before it submits: the real
google-cloud-quotas client against the local fake Google server (tests/ops/bootstrap/fakegoogle.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ground import domain
from ground.errors import UserError
from tpuctl.services.runs import vertex
from tpuctl.services.runs.spec import RunSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bootstrap"))
from clifixtures import invoke
from fakegoogle import quota_info, quotas_endpoint
from runfixtures import planned

PROJECT = "my-proj-1"
AIP = "aiplatform.googleapis.com"
T4 = f"{AIP}/custom_model_training_nvidia_t4_gpus"
V5E = f"{AIP}/custom_model_training_tpu_v5e"
OUTPUTS = {"project": PROJECT, "project_number": "123", "region": "us-central1", "zone": "us-central1-a",
           "buckets": {"data": "p-data", "staging": "p-staging", "artifacts": "p-art"}}


@pytest.fixture
def quotas(monkeypatch, tmp_path):
    with quotas_endpoint(monkeypatch, tmp_path, {AIP: [
        quota_info(AIP, T4, "CustomModelTrainingT4GPUsPerProjectPerRegion", {"us-central1": 2}, default=0),
        quota_info(AIP, V5E, "CustomModelTrainingTpuV5ePerProjectPerRegion", {"us-central1": 8}),
    ]}) as server:
        yield server


def job(accelerator: str, workers: int = 1) -> RunSpec:
    from ground.outputs import parse_outputs

    return planned("vertex", parse_outputs(OUTPUTS), accelerator=accelerator, workers=workers, name="q")


def test_job_within_quota_passes(quotas):
    assert vertex.check_quota(job("gpu-t4x2"), echo=print) == 2
    assert vertex.check_quota(job("tpu-v5e-8"), echo=print) == 8      # v5e: one core per chip


def test_job_over_quota_fails_with_the_stack_key_and_gcloud_command(quotas):
    with pytest.raises(UserError) as err:
        vertex.check_quota(job("gpu-t4x2", workers=2), echo=print)     # 2 replicas x 2 GPUs
    text = str(err.value)
    # the quota (its id, its limit) and what the job needs; both fixes: the stack key entry, the request command
    assert "CustomModelTrainingT4GPUsPerProjectPerRegion" in text and "is 2" in text and "needs 4" in text, text
    assert "tpuctl:gpuQuotas" in text and "nvidia-tesla-t4:us-central1:4" in text, text
    assert "quotaService: vertex" in text, text
    assert (f"gcloud beta quotas preferences create --service={AIP} --quota-id="
            "CustomModelTrainingT4GPUsPerProjectPerRegion --preferred-value=4 --dimensions=region=us-central1 "
            f"--project={PROJECT}") in text
    assert err.value.exit_code == 1


def test_vertex_quota_not_compute_engine_quota_is_asked(quotas):
    vertex.check_quota(job("gpu-t4"), echo=print)
    assert quotas.quota_info_calls == [(PROJECT, AIP)]
    assert domain.job_quota_need(domain.parse_accelerator("gpu-t4"))[0] == T4


def test_unknown_metric_names_the_metric(quotas):
    quotas.quota_infos[AIP] = []
    with pytest.raises(UserError, match="custom_model_training_nvidia_t4_gpus"):
        vertex.check_quota(job("gpu-t4"), echo=print)


def test_offline_without_credentials_is_a_note_not_a_failure(monkeypatch, tmp_path):
    monkeypatch.delenv("TPUCTL_CLOUDQUOTAS_ENDPOINT", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    notes: list[str] = []
    assert vertex.check_quota(job("gpu-t4"), echo=notes.append) is None
    assert notes and notes[0].startswith("note: quota check skipped")
    assert vertex.check_quota(job("cpu"), echo=notes.append) is None and len(notes) == 1   # CPU: nothing to check


def test_dry_run_stops_before_printing_when_quota_is_short(quotas, tmp_path):
    out = tmp_path / "outputs.json"
    out.write_text(json.dumps(OUTPUTS))
    r = invoke(["train", "--target", "vertex", "--dry-run", "--outputs", str(out), "--accelerator", "gpu-t4x4"])
    assert r.exit_code == 1 and "is 2, the job needs 4" in r.stderr and r.stdout == ""
    ok = invoke(["train", "--target", "vertex", "--dry-run", "--outputs", str(out), "--accelerator", "gpu-t4x2"])
    assert ok.exit_code == 0, ok.stderr
    assert json.loads(ok.stdout)["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorCount"] == 2


L4_SPOT = f"{AIP}/custom_model_training_preemptible_nvidia_l4_gpus"


@pytest.fixture
def l4_quotas(monkeypatch, tmp_path):
    with quotas_endpoint(monkeypatch, tmp_path, {AIP: [
        quota_info(AIP, L4_SPOT, "CustomModelTrainingPreemptibleL4GPUsPerProjectPerRegion", {"us-central1": 2},
                   default=0),
    ]}) as server:
        yield server


def test_flex_start_reads_the_preemptible_quota_and_a_shortfall_is_a_note(l4_quotas):
    """Google documents the preemptible quota for Vertex AI flex-start inference, not for training: the pre-flight
    reads it and says a shortfall, and the job goes on (Vertex AI decides)."""
    from ground.outputs import parse_outputs

    notes: list[str] = []
    spec = planned("vertex", parse_outputs(OUTPUTS), accelerator="gpu-l4x4", name="q", provisioning="flex-start")
    assert vertex.check_quota(spec, echo=notes.append) == 2
    [note] = notes
    assert note.startswith("note: ") and "CustomModelTrainingPreemptibleL4GPUsPerProjectPerRegion" in note, note
    assert "needs 4" in note and "flex-start" in note, note
    spot = planned("vertex", parse_outputs(OUTPUTS), accelerator="gpu-l4x4", name="q", provisioning="spot")
    with pytest.raises(UserError, match="CustomModelTrainingPreemptibleL4GPUsPerProjectPerRegion"):
        vertex.check_quota(spot, echo=notes.append)       # Spot: the same quota, a refusal


V6E = f"{AIP}/custom_model_training_tpu_v6e"


def test_a_tpu_v6e_job_draws_on_the_v6e_metric_in_chips_and_an_unlisted_metric_is_a_note(monkeypatch, tmp_path):
    """TPU v6e on Vertex AI: one TensorCore per chip (Cloud TPU v6e page), a tpu-v6e-16 replica (4 VMs) needs 16; the
    metric follows the pattern of v3/v5e [unverified: tpu-v6e-quota-metric], so a project whose QuotaInfos lack it
    gets a note naming the fact, not a refusal."""
    assert domain.job_quota_need(domain.parse_accelerator("tpu-v6e-16")) == (V6E, 16)
    assert domain.unverified_metric_fact(V6E) == "tpu-v6e-quota-metric"
    assert domain.parse_tpu_quota("v6e:us-east5:16").metric == V6E      # the stack's tpuQuotas takes it too
    with quotas_endpoint(monkeypatch, tmp_path, {AIP: [
            quota_info(AIP, V6E, "CustomModelTrainingTpuV6ePerProjectPerRegion", {"us-central1": 8})]}):
        assert vertex.check_quota(job("tpu-v6e-8"), echo=print) == 8
        with pytest.raises(UserError) as err:
            vertex.check_quota(job("tpu-v6e-16"), echo=print)
        assert "needs 16" in str(err.value) and "tpuctl:tpuQuotas entry v6e:us-central1:16" in str(err.value)
    with quotas_endpoint(monkeypatch, tmp_path, {AIP: []}):
        notes: list[str] = []
        assert vertex.check_quota(job("tpu-v6e-8"), echo=notes.append) is None
        assert len(notes) == 1 and "custom_model_training_tpu_v6e" in notes[0], notes
        assert "unverified: tpu-v6e-quota-metric" in notes[0], notes
