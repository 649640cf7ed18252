"""TrainerImageRepository under mocks: a Docker repository in the stack's region with a cleanup policy for old
untagged images and managed-by labels, additive reader members for the principals that run jobs only, and its
id and URL as stack outputs."""

from __future__ import annotations

import pytest

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
    builder = domain.member_for_email(run.outputs["image_builder_service_account"])
    assert members == {(READER_ROLE, domain.member_for_email(principals[k])) for k in ("training-sa", "vertex-agent")} | {
        ("roles/artifactregistry.writer", builder)}
    # additive only: no binding or policy resources, no project-level Artifact Registry role
    assert not run.of_type(T.ARTIFACT_REPOSITORY_IAM_BINDING) and not run.of_type(T.ARTIFACT_REPOSITORY_IAM_POLICY)
    assert not [r for r in run.of_type(T.PROJECT_IAM_MEMBER) if "artifactregistry" in r.inputs["role"]]
    assert run.outputs["trainer_image_repository"] == "vision-trainer"
    assert run.outputs["trainer_image_url"] == f"europe-west4-docker.pkg.dev/{PROJECT}/vision-trainer"


def test_without_the_training_sa_only_the_vertex_agent_reads():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:principals": ["vertex-agent", "tpu-agent"]})
    members = [m.inputs["member"] for m in run.of_type(T.ARTIFACT_REPOSITORY_IAM_MEMBER) if m.inputs["role"] == READER_ROLE]
    assert members == [domain.member_for_email(run.outputs["principals"]["vertex-agent"])]


def test_a_bad_repository_id_is_a_config_error_before_anything_registers(registrations):
    from infra.config import ConfigError

    with pytest.raises(ConfigError, match=r"^tpuctl:trainerImageRepository: repository id 'Vision_Trainer'"):
        run_program({"tpuctl:project": PROJECT, "tpuctl:trainerImageRepository": "Vision_Trainer"})
    assert registrations == []


@pytest.mark.parametrize("mode", ["bucket", "project"])
def test_the_image_builder_has_exactly_what_cloud_build_needs_in_both_access_modes(mode):
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:accessMode": mode,
                       "tpuctl:imageBuilderServiceAccountId": "vision-builder"})
    email = run.outputs["image_builder_service_account"]
    assert email == f"vision-builder@{PROJECT}.iam.gserviceaccount.com"
    member = domain.member_for_email(email)
    [account] = [a for a in run.of_type(T.SERVICE_ACCOUNT) if a.inputs["accountId"] == "vision-builder"]
    assert account.inputs["project"] == PROJECT
    granted = set()
    for token in (T.ARTIFACT_REPOSITORY_IAM_MEMBER, T.PROJECT_IAM_MEMBER, T.BUCKET_IAM_MEMBER):
        for res in run.of_type(token):
            if res.inputs["member"] == member:
                where = res.inputs.get("bucket") or ("repository" if token == T.ARTIFACT_REPOSITORY_IAM_MEMBER
                                                     else "project")
                granted.add((res.inputs["role"], where))
    staging = run.outputs["buckets"]["staging"]
    assert granted == {("roles/artifactregistry.writer", "repository"), ("roles/logging.logWriter", "project"),
                       ("roles/storage.objectViewer", staging)}
    perms = set().union(*(domain.ROLE_PERMISSIONS[role] for role, _ in granted))
    assert {domain.PUSH_PERMISSION, domain.LOG_WRITE_PERMISSION, "storage.objects.get", "storage.objects.list"} <= perms
    # the builder is not a training principal: no grant on data/artifacts/hub-cache, not in principals
    assert email not in run.outputs["principals"].values()
    assert run.outputs["access_map"][member] == {staging: ["roles/storage.objectViewer"]}
    # and no training principal can push
    trainers = {domain.member_for_email(e) for e in run.outputs["principals"].values()}
    pushers = {m.inputs["member"] for m in run.of_type(T.ARTIFACT_REPOSITORY_IAM_MEMBER)
               if domain.PUSH_PERMISSION in domain.ROLE_PERMISSIONS[m.inputs["role"]]}
    assert pushers == {member} and not pushers & trainers
