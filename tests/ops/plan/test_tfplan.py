"""`tpuctl plan --format tfplan`: the stack as a Terraform plan JSON that plan scanners (checkov, conftest) read,
and the checkov baseline derived from policy/exceptions.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ground import tokens as T
from ground.resources import TERRAFORM_TYPES
from tpuctl.services.plan import checkov_baseline, plan, tf_values, to_tfplan

from clifixtures import invoke
from stackfixtures import write_stack

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tfplan")
    result = plan(config_file=write_stack(folder / "Pulumi.dev.yaml", folder / "hub"))
    return result, to_tfplan(result)


def by_address(tfplan):
    return {r["address"]: r for r in tfplan["planned_values"]["root_module"]["resources"]}


def test_plan_has_the_terraform_json_plan_shape(example):
    _, tfplan = example
    assert tfplan["format_version"] and tfplan["terraform_version"]
    planned = by_address(tfplan)
    changes = {c["address"]: c for c in tfplan["resource_changes"]}
    assert planned.keys() == changes.keys()
    for address, res in planned.items():
        assert address == f"{res['type']}.{res['name']}" and res["mode"] == "managed"
        assert changes[address]["change"]["actions"] == ["create"]
        assert changes[address]["change"]["after"] == res["values"]
    types = {r["type"] for r in planned.values()}
    assert {"google_storage_bucket", "google_storage_bucket_iam_member", "google_project_iam_member",
            "google_project_service", "google_service_account", "google_storage_bucket_object",
            "google_cloud_quotas_quota_preference", "google_artifact_registry_repository",
            "google_artifact_registry_repository_iam_member"} <= types
    repository = next(r for r in planned.values() if r["type"] == "google_artifact_registry_repository")
    # what checkov's CKV_GCP_84 reads (kms_key_name) is absent, and the purpose label the exception matches is there
    assert "kms_key_name" not in repository["values"]
    assert repository["values"]["labels"]["tpuctl-purpose"] == "trainer-images"


def test_every_google_resource_is_exported_once_and_others_are_left_out(example):
    result, tfplan = example
    mapped = [res for res in result.registered if res.type in TERRAFORM_TYPES]
    assert len(by_address(tfplan)) == len(mapped)
    assert len(tfplan["resource_changes"]) == len(mapped)


def test_round_trip_of_what_checkov_reads_on_buckets_and_iam_members(example):
    """checkov's GCS and IAM checks read these attributes (CKV_GCP_28/29/41/42/46/49/62/63/78/114/117);
    each must carry exactly what the program registered."""
    result, tfplan = example
    planned = list(by_address(tfplan).values())
    for res in result.registered:
        tf_type = TERRAFORM_TYPES.get(res.type)
        exported = [p["values"] for p in planned if p["type"] == tf_type and p["values"].get("name", p["name"]) ==
                    res.props.get("name", p["name"]) and p["values"].get("role") == res.props.get("role")
                    and p["values"].get("member") == res.props.get("member")]
        if res.type == T.BUCKET:
            [values] = exported
            assert values["public_access_prevention"] == res.props["publicAccessPrevention"]
            assert values["uniform_bucket_level_access"] is res.props["uniformBucketLevelAccess"]
            assert values["versioning"] == [{"enabled": res.props["versioning"]["enabled"]}]
            logging = res.props.get("logging")
            if logging:
                assert values["logging"] == [{"log_bucket": logging["logBucket"],
                                              "log_object_prefix": logging["logObjectPrefix"]}]
            else:
                assert "logging" not in values
            assert values["labels"] == res.props["labels"]          # a map: keys as written
        elif res.type in (T.BUCKET_IAM_MEMBER, T.PROJECT_IAM_MEMBER, T.SA_IAM_MEMBER):
            assert exported, (res.type, res.name)
            scope = {"bucket": "bucket", "project": "project", "serviceAccountId": "service_account_id"}
            assert any(all(values.get(tf) == res.props[key] for key, tf in scope.items() if key in res.props)
                       for values in exported), (res.type, res.name)


def test_values_are_snake_case_with_blocks_as_lists_and_maps_as_maps():
    got = tf_values({"uniformBucketLevelAccess": True, "softDeletePolicy": {"retentionDurationSeconds": 604800.0},
                     "lifecycleRules": [{"action": {"type": "Delete"}, "condition": {"age": 7.0}}],
                     "labels": {"tpuctl-purpose": "data", "costCenter": "x"}, "source": {"asset": "file", "path": "/m/x"},
                     "condition": None})
    assert got == {"uniform_bucket_level_access": True, "soft_delete_policy": [{"retention_duration_seconds": 604800}],
                   "lifecycle_rule": [{"action": [{"type": "Delete"}], "condition": [{"age": 7}]}],
                   "labels": {"tpuctl-purpose": "data", "costCenter": "x"}, "source": "/m/x"}


def test_baseline_accepts_exactly_the_exceptions_on_this_plan(example):
    result, tfplan = example
    baseline = checkov_baseline(result)
    findings = {f["resource"]: f["check_ids"] for entry in baseline["failed_checks"] for f in entry["findings"]}
    assert set(findings) <= set(by_address(tfplan))
    assert findings["google_storage_bucket.staging"] == ["CKV_GCP_78"]
    assert findings["google_storage_bucket.hub-cache"] == ["CKV_GCP_78"]
    assert findings["google_storage_bucket.access-logs"] == ["CKV_GCP_62", "CKV_GCP_78"]
    assert "google_storage_bucket.data" not in findings and "google_storage_bucket.artifacts" not in findings


def test_command_writes_tfplan_and_baseline(tmp_path):
    stack = write_stack(tmp_path / "Pulumi.dev.yaml", tmp_path / "hub")
    res = invoke(["plan", "--config", str(stack), "--format", "tfplan", "--checkov-baseline", tmp_path / "b.json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["planned_values"]["root_module"]["resources"]
    assert json.loads((tmp_path / "b.json").read_text())["failed_checks"]
    bad = invoke(["plan", "--config", str(stack), "--format", "yaml"])
    assert bad.exit_code == 2 and "--format" in bad.stderr
