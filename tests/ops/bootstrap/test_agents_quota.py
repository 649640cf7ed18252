"""The TPU VM agent through the Cloud TPU v2 API, doctor's per-agent fix lines, Cloud Quotas lookups —
each with the real Google client (google-cloud-tpu, google-cloud-quotas) against the local fake."""

from __future__ import annotations

import pytest

from bootstrap import doctor, principals, quotas
from ground import domain
from ground.errors import DomainError

from fakegoogle import quota_info

PROJECT, NUMBER = "my-proj-1", "123456789012"
T4 = "aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus"


def test_tpu_vm_agent_comes_from_the_tpu_v2_api(fake, google_env):
    fake.add_project(PROJECT, NUMBER)
    email = principals.generate_tpu_identity(PROJECT, "europe-west4-a")
    assert email == f"service-{NUMBER}@gcp-sa-tpu.iam.gserviceaccount.com"
    assert fake.tpu_identity_calls == [(PROJECT, "europe-west4-a")] and fake.identity_calls == []


def test_agents_say_how_they_are_created_and_which_role_they_need():
    vm, tpu, vertex = (domain.SERVICE_AGENTS[k] for k in ("tpu-vm-agent", "tpu-agent", "vertex-agent"))
    assert (vm.creator, vm.project_role) == ("tpu-v2", "roles/cloudtpu.serviceAgent")
    assert (tpu.creator, tpu.project_role) == ("serviceusage", "roles/tpu.serviceAgent")
    assert vertex.creator == "first-use" and not vertex.created_on_request


@pytest.mark.parametrize("keyword, fix", [
    ("tpu-vm-agent", "gcloud compute tpus tpu-vm service-identity create --zone=us-east1-c --project=my-proj-1, "
                     "then gcloud projects add-iam-policy-binding my-proj-1 --member=serviceAccount:{email} "
                     "--role=roles/cloudtpu.serviceAgent --condition=None"),
    ("tpu-agent", "gcloud beta services identity create --service=tpu.googleapis.com --project=my-proj-1, "
                  "then gcloud projects add-iam-policy-binding my-proj-1 --member=serviceAccount:{email} "
                  "--role=roles/tpu.serviceAgent --condition=None"),
])
def test_doctor_fix_line_is_the_agents_own_creating_call(keyword, fix):
    email = domain.agent_email(keyword, NUMBER)
    (check,) = doctor.check_agent(keyword, email, domain.SERVICE_AGENTS[keyword], PROJECT, "us-east1-c", False, [])
    assert check.status == "fail" and check.fix == fix.format(email=email)


def test_doctor_flags_an_agent_without_its_service_agent_role():
    email = domain.agent_email("tpu-vm-agent", NUMBER)
    member = f"serviceAccount:{email}"
    kind = domain.SERVICE_AGENTS["tpu-vm-agent"]
    bindings = [{"role": "roles/storage.objectViewer", "members": {member}, "condition": False}]
    exists, role = doctor.check_agent("tpu-vm-agent", email, kind, PROJECT, "us-central1-a", True, bindings)
    assert exists.status == "pass" and role.status == "fail" and "roles/cloudtpu.serviceAgent" in role.fix
    bindings.append({"role": "roles/cloudtpu.serviceAgent", "members": {member}, "condition": False})
    assert [c.status for c in doctor.check_agent("tpu-vm-agent", email, kind, PROJECT, "us-central1-a", True,
                                                 bindings)] == ["pass", "pass"]


def test_quota_id_is_resolved_from_the_metric_with_the_real_client(fake, google_env):
    fake.quota_infos["aiplatform.googleapis.com"] = [
        quota_info("aiplatform.googleapis.com", T4, "CustomModelTrainingT4GPUsPerProjectPerRegion",
                   {"us-central1": 4}, default=0)]
    info = quotas.quota_info_for_metric(PROJECT, T4)
    assert info.quota_id == "CustomModelTrainingT4GPUsPerProjectPerRegion"
    assert quotas.limit_in(info, "us-central1") == 4 and quotas.limit_in(info, "europe-west4") == 0
    assert fake.quota_info_calls == [(PROJECT, "aiplatform.googleapis.com")]


def test_a_metric_no_quota_has_fails_naming_the_metric(fake, google_env):
    fake.quota_infos["aiplatform.googleapis.com"] = [
        quota_info("aiplatform.googleapis.com", "aiplatform.googleapis.com/other", "Other", {"us-central1": 1})]
    with pytest.raises(DomainError, match="custom_model_training_nvidia_t4_gpus"):
        quotas.quota_info_for_metric(PROJECT, T4)


def test_doctor_lists_quota_preferences_with_the_cloud_quotas_client(fake, google_env):
    fake.quota_preferences[PROJECT] = [{
        "name": f"projects/{PROJECT}/locations/global/quotaPreferences/t4", "service": "aiplatform.googleapis.com",
        "quotaId": "CustomModelTrainingT4GPUsPerProjectPerRegion", "dimensions": {"region": "us-central1"},
        "quotaConfig": {"preferredValue": "4", "grantedValue": "2"}}]
    (check,) = doctor.check_quota_preferences(PROJECT)
    assert check.status == "fail" and check.name == (
        "quota aiplatform.googleapis.com/CustomModelTrainingT4GPUsPerProjectPerRegion [region=us-central1]")
    assert "only 2 granted" in check.detail


TPU = "tpu.googleapis.com"


def tpu_zone_infos(limits: dict[str, dict[str, int]]) -> list[dict]:
    """Per-zone QuotaInfos of the Cloud TPU API for every catalogued id (``limits``: id -> zone -> value, else 0)."""
    ids = sorted({q for quota in domain.TPU_VM_QUOTAS.values() for q in (quota.on_demand, quota.spot) if q})
    return [quota_info(TPU, f"{TPU}/{q.lower()}", q, limits.get(q, {}), default=0, dimension="zone") for q in ids]


def test_doctor_shows_every_generations_tpu_vm_quota_in_the_zone(fake, google_env):
    fake.quota_infos[TPU] = tpu_zone_infos({
        "TPUV5sLitepodPerProjectPerZoneForTPUAPI": {"us-west4-a": 8, "us-east1-c": 4},
        "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI": {"us-west4-a": 64},
        "TPUV5PPreemptiblePerProjectPerZoneForTPUAPI": {"us-west4-a": -1},
    })
    (check,) = doctor.check_tpu_vm_quota(PROJECT, "us-west4-a")
    assert check.status == "pass" and check.name == "TPU VM quota in us-west4-a"
    # on-demand/Spot per generation, in its unit; v4 on-demand: no known id
    assert check.detail.startswith("on-demand/Spot "), check.detail
    for figure in ("v6e 0/0 chips", "v5p 0/unlimited TensorCores", "v5e 8/64 chips", "v4 ?/0 TensorCores"):
        assert figure in check.detail, check.detail
    assert fake.quota_info_calls == [(PROJECT, TPU)]   # one listing for all of them


def test_a_zone_without_tpu_vm_quota_is_a_warning_with_the_request_command(fake, google_env):
    fake.quota_infos[TPU] = tpu_zone_infos({"TPUV6EPerProjectPerZoneForTPUAPI": {"us-east5-b": 8}})
    (check,) = doctor.check_tpu_vm_quota(PROJECT, "us-west4-a")
    assert check.status == "warn" and check.ok
    assert "no TPU VM quota" in check.detail and "`--target tpu-vm`" in check.detail, check.detail
    assert "on-demand/Spot v6e 0/0" in check.detail, check.detail
    assert ("--service=tpu.googleapis.com --quota-id=TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI "
            "--preferred-value=8 --dimensions=zone=us-west4-a") in check.fix
    assert "tpuctl:tpuVmQuotas" in check.fix and "v5e:us-west4-a:8:spot" in check.fix


def test_a_tpu_vm_quota_id_the_api_does_not_list_is_named(fake, google_env):
    infos = tpu_zone_infos({"TPUV5sLitepodPerProjectPerZoneForTPUAPI": {"us-west4-a": 8}})
    fake.quota_infos[TPU] = [i for i in infos if i["quotaId"] != "TPUV6EPreemptiblePerProjectPerZoneForTPUAPI"]
    (check,) = doctor.check_tpu_vm_quota(PROJECT, "us-west4-a")
    assert check.status == "warn"
    assert "not listed" in check.detail and "report" in check.detail, check.detail
    assert check.detail.endswith("TPUV6EPreemptiblePerProjectPerZoneForTPUAPI"), check.detail
    assert "v6e 0/? chips" in check.detail


def test_doctor_runs_the_tpu_vm_quota_check_for_the_stacks_tpu_zone(fake, google_env):
    from ground.outputs import parse_outputs

    fake.add_project(PROJECT, NUMBER)
    fake.quota_infos[TPU] = tpu_zone_infos({"TPUV5sLitepodPerProjectPerZoneForTPUAPI": {"us-west4-a": 8}})
    outputs = parse_outputs({"project": PROJECT, "project_number": NUMBER, "region": "us-central1",
                             "zone": "us-central1-a", "tpu_zone": "us-west4-a"})
    names = [c.name for c in doctor.run_checks(outputs)]
    assert "TPU VM quota in us-west4-a" in names
