"""GpuQuota under mocks: one Cloud Quotas preference per entry, for the quota of the service the job runs on
(Vertex AI custom training by default), with the quota id looked up from the catalogue's metric."""

from __future__ import annotations

import json

import pytest

from ground import domain
from ground import tokens as T
from infra.config import ConfigError
from infra.mocks import quota_info, run_program

PROJECT = "my-tpu-project"
AIP = "aiplatform.googleapis.com"
BASE = {"tpuctl:project": PROJECT, "tpuctl:quotaContactEmail": "ml-platform@example.com"}


def test_default_is_vertex_ai_custom_training_quota_not_compute_engine():
    run = run_program({**BASE, "tpuctl:gpuQuotas": ["nvidia-tesla-t4:us-central1:4", "l4:europe-west4:2"],
                       "tpuctl:quotaJustification": "Vision model training"})
    prefs = {r.name: r for r in run.of_type(T.QUOTA_PREFERENCE)}
    assert set(prefs) == {"vertex-quota-t4-us-central1", "vertex-quota-l4-europe-west4"}
    t4 = prefs["vertex-quota-t4-us-central1"].inputs
    assert t4 == {
        "parent": f"projects/{PROJECT}",
        "name": "aiplatform_googleapis_com-CustomModelTrainingT4GPUsPerProjectPerRegion_us-central1",
        "service": AIP,
        "quotaId": "CustomModelTrainingT4GPUsPerProjectPerRegion",
        "dimensions": {"region": "us-central1"},
        "quotaConfig": {"preferredValue": "4"},
        "contactEmail": "ml-platform@example.com",
        "justification": "Vision model training",
    }
    # the id came from the project's quota infos of the Vertex AI service, not from a table
    assert ("gcp:cloudquota/getSQuotaInfos:getSQuotaInfos", {"parent": f"projects/{PROJECT}", "service": AIP}) \
        in run.calls
    quotas_api = run.named(T.SERVICE, "api-cloudquotas").urn
    for pref in prefs.values():
        assert pref.parent_type == T.GPU_QUOTA and quotas_api in pref.dependencies
        assert pref.inputs["service"] == AIP


def test_spot_and_tpu_quota_use_their_own_metrics():
    run = run_program({**BASE, "tpuctl:gpuQuotas": ["t4:us-central1:4", "t4:us-central1:8:spot"],
                       "tpuctl:tpuQuotas": ["v5e:us-central1:8"]})
    prefs = {r.name: r.inputs for r in run.of_type(T.QUOTA_PREFERENCE)}
    assert set(prefs) == {"vertex-quota-t4-us-central1", "vertex-quota-t4-spot-us-central1",
                          "vertex-quota-tpu-v5e-us-central1"}
    assert prefs["vertex-quota-t4-spot-us-central1"]["quotaConfig"] == {"preferredValue": "8"}
    assert prefs["vertex-quota-t4-spot-us-central1"]["quotaId"] != prefs["vertex-quota-t4-us-central1"]["quotaId"]
    assert prefs["vertex-quota-tpu-v5e-us-central1"]["service"] == AIP


def test_compute_engine_quota_stays_available_for_own_vms():
    run = run_program({**BASE, "tpuctl:gpuQuotas": ["t4:us-central1:4"], "tpuctl:quotaService": "compute"})
    (pref,) = run.of_type(T.QUOTA_PREFERENCE)
    assert pref.name == "gpu-quota-t4-us-central1"       # the name earlier versions gave it: no change for them
    assert (pref.inputs["service"], pref.inputs["quotaId"]) == ("compute.googleapis.com",
                                                                "NVIDIA-T4-GPUS-per-project-region")


def test_a_metric_without_quota_is_a_config_error_naming_the_metric(registrations):
    other = quota_info(AIP, f"{AIP}/custom_model_training_cpus", "CustomModelTrainingCPUsPerProjectPerRegion")
    with pytest.raises(ConfigError, match=r"^tpuctl:gpuQuotas: .*custom_model_training_nvidia_t4_gpus"):
        run_program({**BASE, "tpuctl:gpuQuotas": ["t4:us-central1:4"]}, quota_infos={AIP: [other]})
    assert registrations == []


def test_preferences_parse_into_the_cloud_quotas_type():
    from google.cloud.cloudquotas_v1 import QuotaPreference

    run = run_program({**BASE, "tpuctl:gpuQuotas": ["t4:us-central1:4", "a100:us-central1:8:spot"],
                       "tpuctl:tpuQuotas": ["v3:europe-west4:8"]})
    for pref in run.of_type(T.QUOTA_PREFERENCE):
        body = {k: v for k, v in pref.inputs.items() if k != "parent"}      # parent is the URL, not the body
        parsed = QuotaPreference.from_json(json.dumps(body), ignore_unknown_fields=False)
        assert parsed.quota_id == pref.inputs["quotaId"] and parsed.service == pref.inputs["service"]
        assert parsed.quota_config.preferred_value == int(pref.inputs["quotaConfig"]["preferredValue"])
        assert dict(parsed.dimensions) == {"region": pref.inputs["dimensions"]["region"]}


def test_default_justification_and_no_preferences_without_entries():
    run = run_program({**BASE, "tpuctl:gpuQuotas": ["a100:us-central1:8"]})
    (pref,) = run.of_type(T.QUOTA_PREFERENCE)
    assert pref.inputs["justification"]          # Pulumi.yaml's default text
    assert pref.inputs["quotaConfig"] == {"preferredValue": "8"}
    none = run_program({"tpuctl:project": PROJECT})
    assert none.of_type(T.QUOTA_PREFERENCE) == [] and not [r for r in none.resources if r.type == T.GPU_QUOTA]
    assert not [c for c in none.calls if c[0] == T.GET_QUOTA_INFOS]


def test_quota_over_the_policy_cap_is_the_policy_packs_call_not_configs():
    # maxGpuQuota is the policy pack's cap; config only checks the count is positive.
    run = run_program({**BASE, "tpuctl:gpuQuotas": ["t4:us-central1:64"], "tpuctl:maxGpuQuota": 8})
    assert run.config.settings.max_gpu_quota == 8
    assert run.of_type(T.QUOTA_PREFERENCE)[0].inputs["quotaConfig"] == {"preferredValue": "64"}


@pytest.mark.parametrize("entry, kind, metric", [
    ("t4:us-central1:1", "vertex", f"{AIP}/custom_model_training_nvidia_t4_gpus"),
    ("t4:us-central1:1:spot", "vertex", f"{AIP}/custom_model_training_preemptible_nvidia_t4_gpus"),
    ("t4:us-central1:1", "compute", "compute.googleapis.com/nvidia_t4_gpus"),
    ("h100:us-central1:8", "vertex", f"{AIP}/custom_model_training_nvidia_h100_gpus"),
])
def test_catalogue_metric_per_accelerator(entry, kind, metric):
    assert domain.parse_gpu_quota(entry, kind).metric == metric


TPU = "tpu.googleapis.com"


def test_tpu_vm_quota_is_a_per_zone_preference_on_the_cloud_tpu_api():
    from google.cloud.cloudquotas_v1 import QuotaPreference

    run = run_program({**BASE, "tpuctl:tpuVmQuotas": ["v5e:us-west4-a:16:spot", "v5p:us-east5-a:32"]})
    prefs = {r.name: r for r in run.of_type(T.QUOTA_PREFERENCE)}
    assert set(prefs) == {"quota-tpu-vm-v5e-spot-us-west4-a", "quota-tpu-vm-v5p-us-east5-a"}
    v5e = prefs["quota-tpu-vm-v5e-spot-us-west4-a"].inputs
    assert v5e == {
        "parent": f"projects/{PROJECT}",
        "name": "tpu_googleapis_com-TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI_us-west4-a",
        "service": TPU,
        "quotaId": "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI",
        "dimensions": {"zone": "us-west4-a"},
        "quotaConfig": {"preferredValue": "16"},
        "contactEmail": "ml-platform@example.com",
        "justification": "TensorFlow model training on Vertex AI (tpuctl)",
    }
    assert prefs["quota-tpu-vm-v5p-us-east5-a"].inputs["quotaId"] == "TPUV5PPerProjectPerZoneForTPUAPI"
    # the catalogued id was checked against the project's quota infos of the Cloud TPU API first
    assert ("gcp:cloudquota/getSQuotaInfos:getSQuotaInfos", {"parent": f"projects/{PROJECT}", "service": TPU}) \
        in run.calls
    for pref in prefs.values():
        body = {k: v for k, v in pref.inputs.items() if k != "parent"}
        parsed = QuotaPreference.from_json(json.dumps(body), ignore_unknown_fields=False)
        assert dict(parsed.dimensions) == pref.inputs["dimensions"]


def test_a_tpu_vm_quota_id_google_renamed_stops_the_program_naming_it(registrations):
    renamed = quota_info(TPU, f"{TPU}/tpu-v5s-litepod-preemptible", "TPUV5sSpotLitepodPerProjectPerZone", ("zone",))
    # the key, the service, the id tpuctl looked for, what the API has instead
    with pytest.raises(ConfigError, match=r"^tpuctl:tpuVmQuotas: .*\btpu\.googleapis\.com\b.*"
                                          r"TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI.*"
                                          r"TPUV5sSpotLitepodPerProjectPerZone"):
        run_program({**BASE, "tpuctl:tpuVmQuotas": ["v5e:us-west4-a:16:spot"]}, quota_infos={TPU: [renamed]})
    assert registrations == []


def test_a_tpu_vm_quota_id_that_is_only_per_region_is_refused(registrations):
    regional = quota_info(TPU, f"{TPU}/x", "TPUV6EPerProjectPerZoneForTPUAPI", ("region",))
    with pytest.raises(ConfigError, match=r"^tpuctl:tpuVmQuotas: .*TPUV6EPerProjectPerZoneForTPUAPI\b.*\bper-zone\b"
                                          r".*\(dimensions: region\)"):
        run_program({**BASE, "tpuctl:tpuVmQuotas": ["v6e:us-east5-b:8"]}, quota_infos={TPU: [regional]})
    assert registrations == []


@pytest.mark.parametrize("entry, fragment", [
    ("v5e:us-west4:16", "zone 'us-west4' is not a zone name"),
    ("v7:us-west4-a:16", "generation 'v7' must be one of v6e, v5p, v5e, v4"),
    ("v4:us-central2-b:32", "does not know the on-demand quota id of v4"),
    ("v5e:us-west4-a:0:spot", "count must be 1 to 100,000"),
    ("v5e:us-west4-a:16:preemptible", "must be GENERATION:ZONE:COUNT or GENERATION:ZONE:COUNT:spot"),
])
def test_bad_tpu_vm_quota_entries_are_config_errors(entry, fragment, registrations):
    with pytest.raises(ConfigError, match=r"^tpuctl:tpuVmQuotas: ") as info:
        run_program({**BASE, "tpuctl:tpuVmQuotas": [entry]})
    assert fragment in str(info.value)
    assert registrations == []


def test_the_same_tpu_vm_quota_twice_is_refused(registrations):
    with pytest.raises(ConfigError, match=r"tpuctl:tpuVmQuotas: .*repeats tpu-vm-v5e-spot in us-west4-a"):
        run_program({**BASE, "tpuctl:tpuVmQuotas": ["v5e:us-west4-a:16:spot", "tpu-v5e:us-west4-a:32:spot"]})
    assert registrations == []
