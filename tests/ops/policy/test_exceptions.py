"""policy/exceptions.yaml: one list of accepted checkov findings that the rules, the scanner baseline and the
docs all use."""

from __future__ import annotations

import pytest

from ground import domain
from ground import resources as r
from ground import tokens as T
from ground.envs import REPO_ROOT
from ground.settings import StackSettings
from policy import exceptions
from policy.evaluate import ALL_RULES, check_resource

TPU_VM_AGENT = "serviceAccount:service-123456789012@gcp-sa-tpu.iam.gserviceaccount.com"
SA = "serviceAccount:tpuctl-trainer@proj-123456.iam.gserviceaccount.com"


def bucket(purpose, **over):
    props = {"name": f"b-{purpose}", "uniformBucketLevelAccess": True, "publicAccessPrevention": "enforced",
             "forceDestroy": False, "versioning": {"enabled": False},
             "labels": {"managed-by": "tpuctl", domain.PURPOSE_LABEL: purpose}}
    props.update(over)
    return props


def test_file_parses_and_every_entry_is_a_check_a_rule_covers():
    entries = exceptions.load()
    assert entries
    covered = {check for spec in ALL_RULES for check in spec.checkov}
    for entry in entries:
        assert entry.check in covered, f"{entry.check}: no policy rule names it, so the pack could not apply it"
        assert entry.resource in r.TERRAFORM_TYPES.values()


def test_docs_render_every_entry():
    doc = (REPO_ROOT / "docs" / "policy-rules.md").read_text()
    assert exceptions.markdown() in doc, "docs/policy-rules.md: paste `python -c 'from policy.exceptions import markdown; print(markdown())'`"


@pytest.mark.parametrize("purpose", ["staging", "hub-cache", "access-logs"])
def test_rebuildable_buckets_need_no_versioning(purpose):
    assert "bucket-versioning" not in {v.rule for v in check_resource(T.BUCKET, bucket(purpose))}


def test_data_bucket_without_versioning_is_reported():
    got = [v for v in check_resource(T.BUCKET, bucket("data")) if v.rule == "bucket-versioning"]
    assert got and "versionedBuckets" in got[0].message and "CKV_GCP_78" in got[0].message


def test_only_the_log_bucket_may_go_without_access_logs():
    assert "bucket-access-logs" not in {v.rule for v in check_resource(T.BUCKET, bucket("access-logs"))}
    assert "bucket-access-logs" in {v.rule for v in check_resource(T.BUCKET, bucket("staging"))}
    selfish = bucket("data", logging={"logBucket": "b-data"})
    assert "CKV_GCP_63" in next(v.message for v in check_resource(T.BUCKET, selfish) if v.rule == "bucket-access-logs")


def test_tpu_vm_agent_role_is_accepted_for_that_agent_only():
    props = {"project": "p", "role": "roles/cloudtpu.serviceAgent", "member": TPU_VM_AGENT}
    assert check_resource(T.PROJECT_IAM_MEMBER, props) == []
    other = check_resource(T.PROJECT_IAM_MEMBER, {**props, "member": SA})
    assert [(v.rule, v.mandatory) for v in other] == [("no-project-impersonation-roles", True)]
    assert "CKV_GCP_49" in other[0].message


def test_project_mode_exceptions_hold_only_in_project_mode():
    props = {"project": "p", "role": "roles/storage.admin", "member": SA}
    project = StackSettings(access_mode="project")
    assert exceptions.accepted("CKV_GCP_42", T.PROJECT_IAM_MEMBER, props, project)
    assert exceptions.accepted("CKV_GCP_42", T.PROJECT_IAM_MEMBER, props, StackSettings()) is None
    msg = check_resource(T.PROJECT_IAM_MEMBER, props, project)[0].message
    assert "policy/exceptions.yaml" in msg and "CKV_GCP_42" in msg, msg


@pytest.mark.parametrize("text, fragment", [
    ("exceptions: {}", "needs a list"),
    ("exceptions:\n  - check: CKV_AWS_1\n    resource: google_storage_bucket\n    match: {purpose: staging}\n"
     "    reason: because it is rebuilt every run", "not a checkov GCP id"),
    ("exceptions:\n  - check: CKV_GCP_78\n    resource: aws_s3_bucket\n    match: {purpose: staging}\n"
     "    reason: because it is rebuilt every run", "not a Terraform type"),
    ("exceptions:\n  - check: CKV_GCP_78\n    resource: google_storage_bucket\n    match: {colour: red}\n"
     "    reason: because it is rebuilt every run", "match needs"),
    ("exceptions:\n  - check: CKV_GCP_78\n    resource: google_storage_bucket\n    match: {purpose: staging}\n"
     "    reason: ok", "reason"),
])
def test_malformed_file_is_rejected_naming_the_entry(text, fragment):
    with pytest.raises(exceptions.ExceptionsError, match=fragment):
        exceptions.parse(text)
