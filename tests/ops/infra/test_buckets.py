"""TrainingBuckets under mocks: the hardened bucket each purpose gets, and existing-bucket references."""

from __future__ import annotations

import pytest

from ground import domain
from ground import tokens as T
from infra.buckets import ACCESS_LOG_WRITER, ACCESS_LOG_WRITER_ROLE
from infra.config import ConfigError
from infra.mocks import run_program

PROJECT = "my-tpu-project"


@pytest.fixture(scope="module")
def run():
    return run_program({"tpuctl:project": PROJECT, "tpuctl:labels": ["managed-by=tpuctl", "team=vision"],
                        "tpuctl:stagingRetentionDays": 3, "tpuctl:softDeleteRetentionDays": 14,
                        "tpuctl:region": "europe-west4", "tpuctl:zone": "europe-west4-b"})


def test_one_bucket_per_purpose_named_prefix_project_purpose(run):
    buckets = {r.name: r.inputs for r in run.of_type(T.BUCKET)}
    assert set(buckets) == set(domain.BUCKET_PURPOSES)
    for purpose, inputs in buckets.items():
        assert inputs["name"] == f"tpuctl-{PROJECT}-{purpose}"
        assert inputs["project"] == PROJECT
        assert inputs["location"] == "EUROPE-WEST4"


@pytest.mark.parametrize("purpose", domain.BUCKET_PURPOSES)
def test_every_bucket_is_hardened(run, purpose):
    inputs = run.named(T.BUCKET, purpose).inputs
    assert inputs["uniformBucketLevelAccess"] is True
    assert inputs["publicAccessPrevention"] == "enforced"
    assert inputs["forceDestroy"] is False
    assert inputs["softDeletePolicy"] == {"retentionDurationSeconds": 14 * 86400}
    assert inputs["labels"] == {"managed-by": "tpuctl", "team": "vision", domain.PURPOSE_LABEL: purpose}


def test_versioning_on_data_and_artifacts_by_default(run):
    versioning = {r.name: r.inputs["versioning"]["enabled"] for r in run.of_type(T.BUCKET)}
    assert versioning == {"data": True, "staging": False, "artifacts": True, "hub-cache": False}


def test_versioned_buckets_key_chooses_the_buckets():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:versionedBuckets": ["artifacts"]})
    assert {r.name for r in run.of_type(T.BUCKET) if r.inputs["versioning"]["enabled"]} == {"artifacts"}
    with pytest.raises(ConfigError, match=r"^tpuctl:versionedBuckets: .*must include artifacts"):
        run_program({"tpuctl:project": PROJECT, "tpuctl:versionedBuckets": ["data"]})
    with pytest.raises(ConfigError, match=r"^tpuctl:versionedBuckets: unknown bucket purpose 'logs'"):
        run_program({"tpuctl:project": PROJECT, "tpuctl:versionedBuckets": ["artifacts", "logs"]})


def test_no_access_logs_by_default(run):
    assert "access-logs" not in {r.name for r in run.of_type(T.BUCKET)}
    assert all("logging" not in r.inputs for r in run.of_type(T.BUCKET))
    assert not [g for g in run.of_type(T.BUCKET_IAM_MEMBER) if g.inputs["member"] == ACCESS_LOG_WRITER]


def test_access_logs_go_to_their_own_expiring_bucket():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:accessLogRetentionDays": 30,
                       "tpuctl:labels": ["managed-by=tpuctl"]})
    log = run.named(T.BUCKET, domain.ACCESS_LOG_PURPOSE)
    name = f"tpuctl-{PROJECT}-access-logs"
    assert log.inputs["name"] == name
    assert log.inputs["uniformBucketLevelAccess"] is True and log.inputs["publicAccessPrevention"] == "enforced"
    assert log.inputs["versioning"] == {"enabled": False} and "logging" not in log.inputs
    assert log.inputs["lifecycleRules"] == [{"action": {"type": "Delete"}, "condition": {"age": 30}}]
    assert log.inputs["labels"] == {"managed-by": "tpuctl", domain.PURPOSE_LABEL: domain.ACCESS_LOG_PURPOSE}
    for bucket in run.of_type(T.BUCKET):
        if bucket.name != domain.ACCESS_LOG_PURPOSE:
            assert bucket.inputs["logging"] == {"logBucket": name, "logObjectPrefix": bucket.inputs["name"]}
            assert log.urn in bucket.dependencies
    [writer] = [g for g in run.of_type(T.BUCKET_IAM_MEMBER) if g.inputs["member"] == ACCESS_LOG_WRITER]
    assert (writer.inputs["bucket"], writer.inputs["role"]) == (name, ACCESS_LOG_WRITER_ROLE)
    # the stack outputs still list the four training buckets only
    assert set(run.outputs["buckets"]) == set(domain.BUCKET_PURPOSES)


def test_access_log_bucket_name_override():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:accessLogRetentionDays": 7,
                       "tpuctl:accessLogBucket": "acme-logs"})
    assert run.named(T.BUCKET, domain.ACCESS_LOG_PURPOSE).inputs["name"] == "acme-logs"


def test_staging_objects_expire_after_the_retention(run):
    rules = {r.name: r.inputs.get("lifecycleRules", []) for r in run.of_type(T.BUCKET)}
    assert rules["staging"] == [{"action": {"type": "Delete"}, "condition": {"age": 3}}]
    assert rules["data"] == rules["artifacts"] == rules["hub-cache"] == []


def test_buckets_wait_for_the_storage_api(run):
    storage_api = run.named(T.SERVICE, "api-storage").urn
    for bucket in run.of_type(T.BUCKET):
        assert bucket.parent_type == T.TRAINING_BUCKETS
        assert storage_api in bucket.dependencies


def test_soft_delete_can_be_switched_off():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:softDeleteRetentionDays": 0})
    assert {r.inputs["softDeletePolicy"]["retentionDurationSeconds"] for r in run.of_type(T.BUCKET)} == {0}


def test_name_overrides():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:dataBucket": "acme-train-data",
                       "tpuctl:hubCacheBucket": "acme-hub", "tpuctl:namePrefix": "acme"})
    names = {r.name: r.inputs["name"] for r in run.of_type(T.BUCKET)}
    assert names == {"data": "acme-train-data", "staging": f"acme-{PROJECT}-staging",
                     "artifacts": f"acme-{PROJECT}-artifacts", "hub-cache": "acme-hub"}
    assert run.outputs["buckets"] == {"data": "acme-train-data", "staging": f"acme-{PROJECT}-staging",
                                      "artifacts": f"acme-{PROJECT}-artifacts", "hub-cache": "acme-hub"}
    assert run.outputs["tfhub_cache_dir"] == "gs://acme-hub/model-cache"


def test_existing_data_bucket_is_referenced_not_created():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:existingDataBucket": "shared-imagenet"})
    assert sorted(r.name for r in run.of_type(T.BUCKET)) == ["artifacts", "hub-cache", "staging"]
    assert run.outputs["buckets"]["data"] == "shared-imagenet"
    assert run.outputs["bucket_urls"]["data"] == "gs://shared-imagenet"
    # The IAM route needs no lookup of the bucket; only the ACL route reads it.
    assert not [c for c in run.calls if c[0] == "gcp:storage/getBucket:getBucket"]
