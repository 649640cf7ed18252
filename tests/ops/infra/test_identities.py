"""ServiceIdentities under mocks: APIs kept on destroy, agents from the project number, training SA."""

from __future__ import annotations

import pytest

from ground import domain
from ground import tokens as T
from infra.mocks import project_number_for, run_program

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
    # Service Usage's identity of tpu.googleapis.com is the PRIMARY agent (cloud-tpu), not gcp-sa-tpu
    assert identities["tpu.googleapis.com"].outputs["email"] == f"service-{NUMBER}@cloud-tpu.iam.gserviceaccount.com"


def test_tpu_vm_agent_is_created_through_the_tpu_v2_api(run):
    (agent,) = run.of_type(T.TPU_SERVICE_IDENTITY)
    assert agent.name == "tpu-vm-agent-identity" and agent.parent_type == T.SERVICE_IDENTITIES
    assert agent.inputs == {"__provider": "<dynamic provider>", "project": PROJECT, "location": "us-central1-a"}
    assert agent.outputs["email"] == f"service-{NUMBER}@gcp-sa-tpu.iam.gserviceaccount.com"
    assert run.named(T.SERVICE, "api-tpu").urn in agent.dependencies


def test_tpu_identity_provider_pickle_loads_without_the_repository(tmp_path):
    """The engine unpickles a dynamic provider in its own process: the pickle must not import infra/."""
    import subprocess
    import sys

    from pulumi.dynamic.dynamic import serialize_provider

    from infra.identities import _TpuIdentityProvider

    blob = serialize_provider(_TpuIdentityProvider())
    code = ("import base64, sys, dill; p = dill.loads(base64.b64decode(sys.stdin.read())); "
            "print(type(p).__name__, hasattr(p, 'create'))")
    proc = subprocess.run([sys.executable, "-I", "-c", code], input=blob, capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["_TpuIdentityProvider", "True"]


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
    assert run.named(T.TPU_SERVICE_IDENTITY, "tpu-vm-agent-identity").urn in grant.dependencies


def test_agents_created_on_request_get_their_roles_and_vertex_first_use_agent_none(run):
    grants = {r.name: r.inputs["role"] for r in run.of_type(T.PROJECT_IAM_MEMBER)
              if r.parent_type not in (T.IMAGE_BUILDER, T.ACCESS_GRANTS)}    # the agents' own, from ServiceIdentities
    assert grants == {"tpu-agent-service-agent-role": "roles/tpu.serviceAgent",
                      "tpu-vm-agent-service-agent-role": "roles/cloudtpu.serviceAgent"}
    assert run.named(T.SERVICE_IDENTITY, "tpu-identity").urn in \
        run.named(T.PROJECT_IAM_MEMBER, "tpu-agent-service-agent-role").dependencies


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
    # the image builder is not a principal: it stays (infra/builder.py, tests/ops/infra/test_registry.py)
    assert [r.name for r in run.of_type(T.SERVICE_ACCOUNT)] == ["image-builder"]
    assert [r for r in run.of_type(T.PROJECT_IAM_MEMBER) if r.parent_type != T.IMAGE_BUILDER] == []
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
