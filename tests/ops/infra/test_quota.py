"""GpuQuota under mocks: one Cloud Quotas preference per entry, fields as the API wants them."""

from __future__ import annotations

from infra.mocks import run_program
from tpuctl.ground import domain
from tpuctl.ground import tokens as T

PROJECT = "my-tpu-project"


def test_one_quota_preference_per_entry():
    run = run_program({
        "tpuctl:project": PROJECT,
        "tpuctl:gpuQuotas": ["nvidia-tesla-t4:us-central1:4", "l4:europe-west4:2"],
        "tpuctl:quotaContactEmail": "ml-platform@example.com",
        "tpuctl:quotaJustification": "Vision model training",
    })
    prefs = {r.name: r for r in run.of_type(T.QUOTA_PREFERENCE)}
    assert set(prefs) == {"gpu-quota-t4-us-central1", "gpu-quota-l4-europe-west4"}
    t4 = prefs["gpu-quota-t4-us-central1"].inputs
    assert t4 == {
        "parent": f"projects/{PROJECT}",
        "name": "compute_googleapis_com-NVIDIA-T4-GPUS-per-project-region_us-central1",
        "service": "compute.googleapis.com",
        "quotaId": domain.gpu_type("nvidia-tesla-t4").quota_id,
        "dimensions": {"region": "us-central1"},
        "quotaConfig": {"preferredValue": "4"},
        "contactEmail": "ml-platform@example.com",
        "justification": "Vision model training",
    }
    l4 = prefs["gpu-quota-l4-europe-west4"].inputs
    assert l4["quotaId"] == "NVIDIA-L4-GPUS-per-project-region"
    assert l4["dimensions"] == {"region": "europe-west4"} and l4["quotaConfig"] == {"preferredValue": "2"}
    quotas_api = run.named(T.SERVICE, "api-cloudquotas").urn
    for pref in prefs.values():
        assert pref.parent_type == T.GPU_QUOTA
        assert quotas_api in pref.dependencies


def test_default_justification_and_no_preferences_without_entries():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:gpuQuotas": ["a100:us-central1:8"],
                       "tpuctl:quotaContactEmail": "ml@example.com"})
    (pref,) = run.of_type(T.QUOTA_PREFERENCE)
    assert pref.inputs["justification"]          # Pulumi.yaml's default text
    assert pref.inputs["quotaConfig"] == {"preferredValue": "8"}
    none = run_program({"tpuctl:project": PROJECT})
    assert none.of_type(T.QUOTA_PREFERENCE) == [] and not [r for r in none.resources if r.type == T.GPU_QUOTA]


def test_quota_over_the_policy_cap_is_the_policy_packs_call_not_configs():
    # maxGpuQuota is the policy pack's cap; config only checks the count is positive.
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:gpuQuotas": ["t4:us-central1:64"],
                       "tpuctl:quotaContactEmail": "ml@example.com", "tpuctl:maxGpuQuota": 8})
    assert run.config.max_gpu_quota == 8
    assert run.of_type(T.QUOTA_PREFERENCE)[0].inputs["quotaConfig"] == {"preferredValue": "64"}
