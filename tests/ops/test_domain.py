"""The shared catalogue: naming rules, role sets, agents, accelerators, hub hashing."""

import hashlib

import pytest

from tpuctl.ground import domain
from tpuctl.ground.domain import DomainError


@pytest.mark.parametrize("name", ["abc", "my-bucket_1", "a.b.c", "x" * 63, "tpuctl-proj-123-data"])
def test_valid_bucket_names(name):
    domain.validate_bucket_name(name)


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("ab", "3-63"),
        ("x" * 64, "3-63"),
        ("Upper", "lowercase"),
        ("-lead", "start and end"),
        ("goog-data", "goog"),
        ("my-google-bucket", "google"),
        ("192.168.1.1", "IP address"),
        ("a..b", ".."),
        ("has space", "lowercase"),
    ],
)
def test_invalid_bucket_names_say_what_rule(name, fragment):
    with pytest.raises(DomainError, match=fragment.replace(".", r"\.")):
        domain.validate_bucket_name(name)


def test_bucket_name_from_gs_url():
    assert domain.bucket_name_from("gs://my-data/some/path") == "my-data"
    assert domain.bucket_name_from("my-data") == "my-data"
    with pytest.raises(DomainError):
        domain.bucket_name_from("gs://Bad_Name")


def test_project_region_zone():
    domain.validate_project_id("my-project-123")
    for bad in ("short", "1starts-with-digit", "ends-with-", "UPPER-case-id"):
        with pytest.raises(DomainError, match="project id"):
            domain.validate_project_id(bad)
    domain.validate_region("europe-west4")
    with pytest.raises(DomainError, match="not a Google Cloud region"):
        domain.validate_region("us-central9")
    with pytest.raises(DomainError, match="not a region name"):
        domain.validate_region("us_central1")
    domain.validate_zone("us-central1-b", "us-central1")
    with pytest.raises(DomainError, match="not in region"):
        domain.validate_zone("europe-west4-a", "us-central1")


def test_legacy_roles_cannot_read_objects_but_bucket_mode_roles_can():
    legacy = domain.storage_permissions(domain.LEGACY_BUCKET_ROLES)
    assert "objects.get" not in legacy
    assert not domain.REQUIRED_READ_PERMISSIONS <= legacy
    assert domain.REQUIRED_READ_PERMISSIONS <= domain.storage_permissions(domain.roles_for("bucket", "data"))
    assert domain.REQUIRED_WRITE_PERMISSIONS <= domain.storage_permissions(domain.roles_for("bucket", "artifacts"))
    assert not domain.REQUIRED_WRITE_PERMISSIONS <= domain.storage_permissions(domain.roles_for("bucket", "hub-cache"))
    assert domain.access_summary(domain.storage_permissions(["roles/storage.objectUser"])) == "read,list,write"
    assert domain.access_summary(domain.storage_permissions(["roles/storage.legacyBucketReader"])) == "list"


def test_agent_emails_and_principals():
    assert domain.agent_email("tpu-agent", 123) == "service-123@cloud-tpu.iam.gserviceaccount.com"
    assert domain.agent_email("tpu-vm-agent", "123") == "service-123@gcp-sa-tpu.iam.gserviceaccount.com"
    assert domain.agent_email("vertex-agent", 9) == "service-9@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"
    assert domain.classify_principal("training-sa") == ("keyword", "training-sa")
    assert domain.classify_principal("a@p.iam.gserviceaccount.com") == ("member", "serviceAccount:a@p.iam.gserviceaccount.com")
    assert domain.classify_principal("alice@example.com") == ("member", "user:alice@example.com")
    assert domain.classify_principal("group:ml@example.com") == ("member", "group:ml@example.com")
    for bad in ("tpu", "allUsers", "robot:x@y.z"):
        with pytest.raises(DomainError):
            domain.classify_principal(bad)


def test_accelerators():
    t4x2 = domain.parse_accelerator("gpu-t4x2")
    assert (t4x2.kind, t4x2.gpu.vertex_accelerator, t4x2.gpu_count, t4x2.machine_type) == (
        "gpu", "NVIDIA_TESLA_T4", 2, "n1-standard-16")
    assert domain.parse_accelerator("gpu").gpu.name == "nvidia-tesla-t4"
    v38 = domain.parse_accelerator("tpu-v3-8")
    assert (v38.machine_type, v38.tpu.vertex_accelerator, v38.tpu.vertex_accelerator_count) == ("cloud-tpu", "TPU_V3", 8)
    assert domain.parse_accelerator("tpu-v5e-4").tpu.topology == "2x2"
    with pytest.raises(DomainError, match="unknown accelerator"):
        domain.parse_accelerator("tpu-v9-1")
    with pytest.raises(DomainError, match="counts"):
        domain.parse_accelerator("gpu-h100x2")
    with pytest.raises(DomainError, match="not available in"):
        domain.check_accelerator_region(v38, "asia-south1")


def test_gpu_quota_spec():
    q = domain.parse_gpu_quota("nvidia-tesla-t4:us-central1:4")
    assert (q.quota_id, q.region, q.count) == ("NVIDIA-T4-GPUS-per-project-region", "us-central1", 4)
    for bad, frag in [("t4:us-central1", "GPU_TYPE:REGION:COUNT"), ("nvidia-x:us-central1:1", "unknown GPU"),
                      ("t4:us-central1:0", "at least 1"), ("t4:us-central1:-2", "at least 1"),
                      ("t4:mars-north1:1", "region"), ("t4:us-central1:two", "whole number")]:
        with pytest.raises(DomainError, match=frag):
            domain.parse_gpu_quota(bad)


def test_hub_cache_key_is_sha1_of_exact_handle():
    handle = "https://tfhub.dev/google/imagenet/resnet_v2_50/feature_vector/4"
    assert domain.hub_cache_key(handle) == hashlib.sha1(handle.encode()).hexdigest()
    assert domain.hub_cache_key(handle) != domain.hub_cache_key(handle + "/")
    assert domain.is_hub_cache_key(domain.hub_cache_key(handle))
    assert domain.hub_object_name("model-cache", handle, "variables/variables.index") == (
        f"model-cache/{domain.hub_cache_key(handle)}/variables/variables.index")
    with pytest.raises(DomainError):
        domain.validate_hub_prefix("/abs")
