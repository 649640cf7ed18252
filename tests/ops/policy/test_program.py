"""The whole pack on the real Pulumi program (infra/, run under the SDK mocks): good stacks pass, bad ones fail."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from ground import domain
from ground import tokens as T
from infra.mocks import run_program
from policy.evaluate import evaluate, from_mocked


def verdicts(run, settings=None):
    return evaluate(from_mocked(run.resources), settings or run.config.settings)


def mandatory(violations):
    return sorted({v.rule for v in violations if v.mandatory})


def with_props(run, pick, change):
    """The run's resources with ``change(props)`` applied to those ``pick(resource)`` selects."""
    out = []
    for res in run.resources:
        if pick(res):
            props = copy.deepcopy(res.outputs)
            change(props)
            res = dataclasses.replace(res, outputs=props)
        out.append(res)
    return out


@pytest.fixture
def example_run(stack_values):
    return run_program(stack_values)


def test_example_stack_passes_every_mandatory_rule(example_run):
    violations = verdicts(example_run)
    assert mandatory(violations) == [], [v.message for v in violations]
    types = {res.type for res in example_run.resources}
    # the rules really had something to look at: buckets, grants, quota preference, hub objects
    assert {T.BUCKET, T.BUCKET_IAM_MEMBER, T.QUOTA_PREFERENCE, T.BUCKET_OBJECT} <= types


def test_project_access_mode_passes_with_advisories(stack_values):
    run = run_program({**stack_values, "tpuctl:accessMode": "project"})
    violations = verdicts(run)
    assert mandatory(violations) == []
    advisories = {v.rule for v in violations if not v.mandatory}
    assert "project-mode-broad-roles" in advisories
    # access comes from the project (the bucket grants are GCS's log writer on the access-log bucket and the image
    # builder's read of the build context, the same in both modes)
    assert sorted(res.name for res in run.resources if res.type == T.BUCKET_IAM_MEMBER) == [
        "access-logs-writer", "staging-image-builder-storage.objectViewer"]


def test_existing_bucket_via_iam_passes(stack_values):
    run = run_program({**stack_values, "tpuctl:existingDataBucket": "legacy-training-data"})
    assert mandatory(verdicts(run)) == []


def test_existing_bucket_via_acl_passes_with_advisories(stack_values):
    run = run_program({**stack_values, "tpuctl:existingDataBucket": "legacy-training-data",
                       "tpuctl:existingDataBucketAccess": "acl"})
    violations = verdicts(run)
    assert mandatory(violations) == []
    assert {v.rule for v in violations if not v.mandatory} == {"acl-on-existing-bucket"}


def test_program_in_project_mode_checked_as_bucket_mode_fails(stack_values):
    run = run_program({**stack_values, "tpuctl:accessMode": "project"})
    settings = run.config.settings.model_copy(update={"access_mode": "bucket"})
    assert mandatory(verdicts(run, settings)) == ["project-roles-need-project-mode"]


def test_acl_grants_without_acl_mode_fail(stack_values):
    run = run_program({**stack_values, "tpuctl:existingDataBucket": "legacy-training-data",
                       "tpuctl:existingDataBucketAccess": "acl"})
    settings = run.config.settings.model_copy(update={"existing_data_bucket_access": "iam"})
    assert mandatory(verdicts(run, settings)) == ["acl-only-on-existing-bucket"]


def test_gpu_quota_above_policy_cap_fails(stack_values):
    run = run_program(stack_values)  # asks for 4 T4s
    settings = run.config.settings.model_copy(update={"max_gpu_quota": 2})
    assert mandatory(verdicts(run, settings)) == ["gpu-quota-preference"]


def test_legacy_roles_only_stack_fails_the_access_rule(example_run):
    legacy = {"roles/storage.objectViewer": "roles/storage.legacyBucketReader",
              "roles/storage.objectUser": "roles/storage.legacyBucketWriter"}
    def training_grant(res) -> bool:   # the access-log writer and the image builder are not training principals
        return res.type == T.BUCKET_IAM_MEMBER and res.name != "access-logs-writer" and "image-builder" not in res.name

    resources = with_props(example_run, training_grant, lambda p: p.update(role=legacy.get(p["role"], p["role"])))
    roles = {res.outputs["role"] for res in resources if training_grant(res)}
    assert roles == set(domain.LEGACY_BUCKET_ROLES)
    violations = evaluate(from_mocked(resources), example_run.config.settings)
    assert mandatory(violations) == ["training-principals-storage-access"]
    failing = [v for v in violations if v.rule == "training-principals-storage-access"]
    principals = {v.message.split(" lacks")[0] for v in failing}
    assert len(principals) == len(example_run.outputs["principals"])  # every principal, every bucket
    assert len(failing) == len(principals) * len(domain.BUCKET_PURPOSES)


def test_insecure_buckets_fail_with_the_expected_rules(example_run):
    def loosen(props):
        purpose = props["labels"][domain.PURPOSE_LABEL]
        if purpose == "artifacts":
            props["versioning"] = {"enabled": False}
        if purpose == "data":
            props["forceDestroy"] = True
        if purpose == "staging":
            props["publicAccessPrevention"] = "inherited"
            props["uniformBucketLevelAccess"] = False
    resources = with_props(example_run, lambda res: res.type == T.BUCKET, loosen)
    violations = evaluate(from_mocked(resources), example_run.config.settings)
    assert mandatory(violations) == ["artifacts-bucket-versioned", "bucket-public-access-prevention",
                                     "bucket-uniform-access", "no-force-destroy"]


def test_public_and_basic_role_grants_fail(example_run):
    def worsen(props):
        if "objectViewer" in props["role"]:
            props["member"] = "allUsers"
        else:
            props["role"] = "roles/editor"
    resources = with_props(example_run, lambda res: res.type == T.BUCKET_IAM_MEMBER, worsen)
    got = mandatory(evaluate(from_mocked(resources), example_run.config.settings))
    assert {"no-public-members", "no-basic-roles"} <= set(got)


def test_misplaced_hub_objects_fail(example_run):
    resources = with_props(example_run, lambda res: res.type == T.BUCKET_OBJECT,
                           lambda p: p.update(name=p["name"].replace(domain.DEFAULT_HUB_CACHE_PREFIX, "models")))
    assert mandatory(evaluate(from_mocked(resources), example_run.config.settings)) == ["hub-cache-layout"]


def test_bad_config_gpu_request_over_the_cap_fails(stack_values):
    run = run_program({**stack_values, "tpuctl:gpuQuotas": ["nvidia-tesla-t4:us-central1:64"]})
    violations = verdicts(run)
    assert mandatory(violations) == ["gpu-quota-preference"]
    assert "asks for 64 GPUs" in next(v.message for v in violations if v.rule == "gpu-quota-preference")


def test_bad_config_without_quota_contact_fails_or_is_rejected(stack_values):
    """Either the program's config validation or the policy stops a quota request without a contact."""
    from infra.config import ConfigError

    values = {k: v for k, v in stack_values.items() if k != "tpuctl:quotaContactEmail"}
    try:
        run = run_program(values)
    except ConfigError as exc:
        assert "quotaContactEmail" in str(exc)
    else:
        assert "gpu-quota-preference" in mandatory(verdicts(run))


def test_hub_model_nested_one_folder_too_deep_fails(example_run):
    def nest(props):
        prefix, key, rest = props["name"].split("/", 2)
        props["name"] = f"{prefix}/{key}/mobilenet/{rest}"
    # the model's files (not the <sha1>.descriptor.txt next to the folder) one folder too deep
    resources = with_props(example_run, lambda res: res.type == T.BUCKET_OBJECT and res.inputs["name"].count("/") >= 2,
                           nest)
    assert mandatory(evaluate(from_mocked(resources), example_run.config.settings)) == ["hub-cache-complete"]


@pytest.mark.parametrize("dropped, missing", [
    ("image-builder-logging.logWriter", domain.LOG_WRITE_PERMISSION),
    ("image-builder-artifactregistry.writer", domain.PUSH_PERMISSION),
    ("staging-image-builder-storage.objectViewer", "storage.objects.get"),
])
def test_an_image_builder_without_a_grant_cloud_build_needs_fails(example_run, dropped, missing):
    resources = [res for res in example_run.resources if res.name != dropped]
    assert len(resources) == len(example_run.resources) - 1
    violations = evaluate(from_mocked(resources), example_run.config.settings)
    assert mandatory(violations) == ["image-builder-can-build"]
    [violation] = [v for v in violations if v.rule == "image-builder-can-build"]
    assert missing in violation.message and "tpuctl-builder@" in violation.message


@pytest.mark.parametrize("mode", ["bucket", "project"])
def test_a_training_principal_that_can_push_images_fails(stack_values, mode):
    run = run_program({**stack_values, "tpuctl:accessMode": mode})
    resources = with_props(run, lambda res: res.name == "image-reader-training-sa",
                           lambda p: p.update(role="roles/artifactregistry.writer"))
    violations = evaluate(from_mocked(resources), run.config.settings)
    assert mandatory(violations) == ["image-builder-can-build"]
    [violation] = [v for v in violations if v.rule == "image-builder-can-build"]
    assert violation.message.startswith("training principal serviceAccount:tpuctl-trainer@")
    assert domain.PUSH_PERMISSION in violation.message


@pytest.mark.parametrize("mode", ["bucket", "project"])
def test_a_training_account_that_cannot_write_logs_is_an_advisory(stack_values, mode):
    # Its TPU VM hosts (Docker's gcplogs driver, the VM's service account) and Vertex AI jobs log with it; without
    # logging.logEntries.create the run still trains, so the verdict warns and does not block `pulumi up`.
    run = run_program({**stack_values, "tpuctl:accessMode": mode})
    assert "training-account-writes-logs" not in {v.rule for v in verdicts(run)}
    resources = [res for res in run.resources if res.name != "project-training-sa-logging.logWriter"]
    assert len(resources) == len(run.resources) - 1
    violations = evaluate(from_mocked(resources), run.config.settings)
    assert mandatory(violations) == []
    [violation] = [v for v in violations if v.rule == "training-account-writes-logs"]
    assert not violation.mandatory
    assert violation.message.startswith("the training service account serviceAccount:tpuctl-trainer@")
    assert domain.LOG_WRITE_PERMISSION in violation.message and "roles/logging.logWriter" in violation.message


def test_a_log_writer_held_through_another_role_or_an_unknown_member_counts(stack_values):
    run = run_program(stack_values)
    # roles/editor holds logging.logEntries.create too (the role snapshot): the rule asks for the permission, not a name
    resources = with_props(run, lambda res: res.name == "project-training-sa-logging.logWriter",
                           lambda p: p.update(role="roles/editor"))
    assert "training-account-writes-logs" not in {v.rule for v in evaluate(from_mocked(resources), run.config.settings)}
    # a grant to another account is not the training account's
    resources = with_props(run, lambda res: res.name == "project-training-sa-logging.logWriter",
                           lambda p: p.update(member="serviceAccount:someone@my-tpu-project.iam.gserviceaccount.com"))
    assert "training-account-writes-logs" in {v.rule for v in evaluate(from_mocked(resources), run.config.settings)}
