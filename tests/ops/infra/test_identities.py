"""ServiceIdentities under mocks: APIs kept on destroy, agents from the project number, training SA."""

from __future__ import annotations

import pytest

from infra.mocks import project_number_for, run_program
from tpuctl.ground import domain
from tpuctl.ground import tokens as T

PROJECT = "my-tpu-project"
NUMBER = "123456789012"


@pytest.fixture(scope="module")
def run():
    return run_program({"tpuctl:project": PROJECT}, project_number=NUMBER)


def test_every_required_api_enabled_and_never_disabled_on_destroy(run):
    services = {r.inputs["service"]: r for r in run.of_type(T.SERVICE)}
    assert set(services) == set(domain.REQUIRED_APIS)
    for api, resource in services.items():
        assert resource.inputs["disableOnDestroy"] is False, api
        assert resource.inputs["disableDependentServices"] is False, api
        assert resource.inputs["project"] == PROJECT
        assert resource.parent_type == T.SERVICE_IDENTITIES


def test_service_identity_per_agent_service_after_its_api(run):
    identities = {r.inputs["service"]: r for r in run.of_type(T.SERVICE_IDENTITY)}
    assert set(identities) == {"tpu.googleapis.com", "aiplatform.googleapis.com"}
    for service, resource in identities.items():
        assert resource.inputs["project"] == PROJECT
        assert run.named(T.SERVICE, f"api-{service.split('.')[0]}").urn in resource.dependencies


def test_project_number_read_with_get_project(run):
    assert ("gcp:organizations/getProject:getProject", {"projectId": PROJECT}) in run.calls
    assert run.outputs["project_number"] == NUMBER


def test_agent_emails_follow_the_project_number(run):
    assert run.outputs["principals"] == {
        "tpu-agent": f"service-{NUMBER}@cloud-tpu.iam.gserviceaccount.com",
        "tpu-vm-agent": f"service-{NUMBER}@gcp-sa-tpu.iam.gserviceaccount.com",
        "vertex-agent": f"service-{NUMBER}@gcp-sa-aiplatform-cc.iam.gserviceaccount.com",
        "training-sa": f"tpuctl-trainer@{PROJECT}.iam.gserviceaccount.com",
    }


def test_tpu_vm_agent_gets_its_service_agent_role(run):
    role = domain.SERVICE_AGENTS["tpu-vm-agent"].project_role
    assert role
    grant = run.named(T.PROJECT_IAM_MEMBER, "tpu-vm-agent-service-agent-role")
    assert grant.inputs == {"project": PROJECT, "role": role,
                            "member": f"serviceAccount:service-{NUMBER}@gcp-sa-tpu.iam.gserviceaccount.com"}
    assert run.named(T.SERVICE_IDENTITY, "tpu-identity").urn in grant.dependencies


def test_dedicated_training_service_account(run):
    account = run.named(T.SERVICE_ACCOUNT, "training-sa")
    assert account.inputs["accountId"] == "tpuctl-trainer"
    assert account.inputs["project"] == PROJECT
    assert account.inputs["displayName"]
    assert run.named(T.SERVICE, "api-iam").urn in account.dependencies
    assert run.outputs["training_service_account"] == account.outputs["email"] == \
        f"tpuctl-trainer@{PROJECT}.iam.gserviceaccount.com"


def test_principals_switch_off_individually():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:principals": ["vertex-agent"],
                       "tpuctl:trainingServiceAccountId": "other-trainer"})
    assert [r.inputs["service"] for r in run.of_type(T.SERVICE_IDENTITY)] == ["aiplatform.googleapis.com"]
    assert run.of_type(T.SERVICE_ACCOUNT) == []
    assert run.of_type(T.PROJECT_IAM_MEMBER) == []      # no tpu-vm-agent, no service-agent role
    assert list(run.outputs["principals"]) == ["vertex-agent"]
    assert run.outputs["training_service_account"] is None
    # APIs are enabled whichever principals are used.
    assert len(run.of_type(T.SERVICE)) == len(domain.REQUIRED_APIS)


def test_training_sa_only_uses_custom_account_id():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:principals": ["training-sa"],
                       "tpuctl:trainingServiceAccountId": "vision-trainer"})
    assert run.of_type(T.SERVICE_IDENTITY) == []
    assert run.outputs["training_service_account"] == f"vision-trainer@{PROJECT}.iam.gserviceaccount.com"


def test_default_mock_project_number_is_stable_and_twelve_digits():
    assert project_number_for(PROJECT) == project_number_for(PROJECT)
    assert len(project_number_for(PROJECT)) == 12 and project_number_for(PROJECT).isdigit()
    assert project_number_for(PROJECT) != project_number_for("other-project")
