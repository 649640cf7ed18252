"""TrainerImageRepository under mocks: a Docker repository in the stack's region with a cleanup policy for old
untagged images and managed-by labels, additive reader members for the principals that run jobs only, and its
id and URL as stack outputs."""

from __future__ import annotations

from ground import domain
from ground import tokens as T
from infra.mocks import run_program
from infra.registry import READER_ROLE, UNTAGGED_MAX_AGE

PROJECT = "my-tpu-project"


def test_repository_readers_and_outputs():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:region": "europe-west4", "tpuctl:zone": "europe-west4-a",
                       "tpuctl:trainerImageRepository": "vision-trainer"})
    [repo] = run.of_type(T.ARTIFACT_REPOSITORY)
    assert repo.inputs["repositoryId"] == "vision-trainer" and repo.inputs["format"] == "DOCKER"
    assert repo.inputs["location"] == "europe-west4" and repo.inputs["project"] == PROJECT
    assert repo.inputs["labels"] == {"managed-by": "tpuctl", domain.PURPOSE_LABEL: domain.TRAINER_IMAGES_PURPOSE}
    assert repo.inputs["cleanupPolicyDryRun"] is False
    assert repo.inputs["cleanupPolicies"] == [{"id": "delete-untagged", "action": "DELETE",
                                              "condition": {"tagState": "UNTAGGED", "olderThan": UNTAGGED_MAX_AGE}}]
    members = {(m.inputs["role"], m.inputs["member"]) for m in run.of_type(T.ARTIFACT_REPOSITORY_IAM_MEMBER)}
    principals = run.outputs["principals"]
    assert members == {(READER_ROLE, domain.member_for_email(principals[k])) for k in ("training-sa", "vertex-agent")}
    # additive only: no binding or policy resources, no project-level Artifact Registry role
    assert not run.of_type(T.ARTIFACT_REPOSITORY_IAM_BINDING) and not run.of_type(T.ARTIFACT_REPOSITORY_IAM_POLICY)
    assert not [r for r in run.of_type(T.PROJECT_IAM_MEMBER) if "artifactregistry" in r.inputs["role"]]
    assert run.outputs["trainer_image_repository"] == "vision-trainer"
    assert run.outputs["trainer_image_url"] == f"europe-west4-docker.pkg.dev/{PROJECT}/vision-trainer"


def test_without_the_training_sa_only_the_vertex_agent_reads():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:principals": ["vertex-agent", "tpu-agent"]})
    members = [m.inputs["member"] for m in run.of_type(T.ARTIFACT_REPOSITORY_IAM_MEMBER)]
    assert members == [domain.member_for_email(run.outputs["principals"]["vertex-agent"])]


def test_a_bad_repository_id_is_a_config_error_before_anything_registers(registrations):
    import pytest

    from infra.config import ConfigError

    with pytest.raises(ConfigError, match=r"^tpuctl:trainerImageRepository: repository id 'Vision_Trainer'"):
        run_program({"tpuctl:project": PROJECT, "tpuctl:trainerImageRepository": "Vision_Trainer"})
    assert registrations == []
