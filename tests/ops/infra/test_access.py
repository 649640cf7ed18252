"""AccessGrants under mocks: bucket mode, project mode, the ACL route, and additive-only IAM."""

from __future__ import annotations

import pytest

from ground import domain
from ground import tokens as T
from infra.config import ConfigError
from infra.mocks import run_program

PROJECT = "my-tpu-project"
NUMBER = "123456789012"
MEMBERS = {
    "tpu-agent": f"serviceAccount:service-{NUMBER}@cloud-tpu.iam.gserviceaccount.com",
    "tpu-vm-agent": f"serviceAccount:service-{NUMBER}@gcp-sa-tpu.iam.gserviceaccount.com",
    "vertex-agent": f"serviceAccount:service-{NUMBER}@gcp-sa-aiplatform-cc.iam.gserviceaccount.com",
    "training-sa": f"serviceAccount:tpuctl-trainer@{PROJECT}.iam.gserviceaccount.com",
}
BUCKETS = {p: f"tpuctl-{PROJECT}-{p}" for p in domain.BUCKET_PURPOSES}


def training(run, type_token: str) -> list:
    """The resources of ``type_token`` AccessGrants registers (the image builder's grants are infra/builder.py's,
    tests/ops/infra/test_registry.py)."""
    return [r for r in run.of_type(type_token) if "tpuctl:infra:ImageBuilder$" not in r.urn]


def grants(run, type_token=T.BUCKET_IAM_MEMBER) -> set[tuple[str, str, str]]:
    return {(r.inputs["member"], r.inputs["bucket"], r.inputs["role"]) for r in training(run, type_token)}


@pytest.fixture(scope="module")
def bucket_run():
    return run_program({"tpuctl:project": PROJECT}, project_number=NUMBER)


@pytest.fixture(scope="module")
def project_run():
    return run_program({"tpuctl:project": PROJECT, "tpuctl:accessMode": "project"}, project_number=NUMBER)


def test_bucket_mode_grants_read_roles_on_read_buckets_and_object_user_on_write_buckets(bucket_run):
    expected = {
        (member, BUCKETS[purpose], role)
        for member in MEMBERS.values()
        for purpose in domain.BUCKET_PURPOSES
        for role in domain.roles_for("bucket", purpose)
    }
    assert grants(bucket_run) == expected
    assert ("roles/storage.objectViewer" in domain.roles_for("bucket", "data")
            and domain.roles_for("bucket", "artifacts") == ("roles/storage.objectUser",))
    # Nothing project-wide besides the TPU agents' own service-agent roles (created on request: not automatic) and
    # the training account's log writer (no storage permission: it reaches no bucket).
    assert {(r.inputs["member"], r.inputs["role"]) for r in training(bucket_run, T.PROJECT_IAM_MEMBER)} == {
        (MEMBERS["tpu-vm-agent"], domain.SERVICE_AGENTS["tpu-vm-agent"].project_role),
        (MEMBERS["tpu-agent"], domain.SERVICE_AGENTS["tpu-agent"].project_role),
        (MEMBERS["training-sa"], "roles/logging.logWriter")}
    assert not domain.storage_permissions(domain.TRAINING_SA_PROJECT_ROLES)


def test_bucket_mode_gives_each_principal_what_training_needs_and_no_more(bucket_run):
    access = dict(bucket_run.outputs["access_map"])
    builder = access.pop(domain.member_for_email(bucket_run.outputs["image_builder_service_account"]))
    assert builder == {BUCKETS["staging"]: ["roles/storage.objectViewer"]}   # the build context only
    assert set(access) == set(MEMBERS.values())
    for member, per_bucket in access.items():
        assert set(per_bucket) == set(BUCKETS.values())
        for purpose, bucket in BUCKETS.items():
            perms = domain.storage_permissions(per_bucket[bucket])
            assert domain.required_permissions(purpose) <= perms, (member, purpose)
            if purpose in domain.READ_BUCKETS:
                assert "objects.create" not in perms and "objects.delete" not in perms
            assert not any(p.startswith("buckets.") and p != "buckets.get" for p in perms)


def test_bucket_grants_reference_the_bucket_and_wait_for_the_principal(bucket_run):
    identity = {r.inputs["service"]: r.urn for r in bucket_run.of_type(T.SERVICE_IDENTITY)}
    account = bucket_run.named(T.SERVICE_ACCOUNT, "training-sa").urn
    for grant in training(bucket_run, T.BUCKET_IAM_MEMBER):
        bucket_urn = bucket_run.named(T.BUCKET, next(p for p in BUCKETS if grant.inputs["bucket"] == BUCKETS[p])).urn
        assert bucket_urn in grant.dependencies, grant.name
        if grant.inputs["member"] == MEMBERS["training-sa"]:
            assert account in grant.dependencies
        elif grant.inputs["member"] == MEMBERS["vertex-agent"]:
            assert identity["aiplatform.googleapis.com"] in grant.dependencies
        elif grant.inputs["member"] == MEMBERS["tpu-vm-agent"]:   # created by the Cloud TPU v2 API
            assert bucket_run.named(T.TPU_SERVICE_IDENTITY, "tpu-vm-agent-identity").urn in grant.dependencies
        else:
            assert identity["tpu.googleapis.com"] in grant.dependencies
        assert grant.parent_type == T.ACCESS_GRANTS


def test_project_mode_grants_the_classic_set_on_the_project_only(project_run):
    project_grants = {(r.inputs["member"], r.inputs["role"]) for r in training(project_run, T.PROJECT_IAM_MEMBER)
                      if r.parent_type == T.ACCESS_GRANTS}
    assert project_grants == {(m, role) for m in MEMBERS.values() for role in domain.PROJECT_MODE_ROLES} | {
        (MEMBERS["training-sa"], "roles/logging.logWriter")}     # in both modes (below)
    assert all(r.inputs["project"] == PROJECT for r in training(project_run, T.PROJECT_IAM_MEMBER))
    assert training(project_run, T.BUCKET_IAM_MEMBER) == []
    assert "roles/ml.serviceAgent" not in {role for _, role in project_grants}
    assert project_run.outputs["access_mode"] == "project"
    for member in MEMBERS.values():
        assert project_run.outputs["access_map"][member] == {b: list(domain.PROJECT_MODE_ROLES) for b in BUCKETS.values()}


@pytest.mark.parametrize("mode", domain.ACCESS_MODES)
def test_the_training_account_may_write_logs_on_the_project_in_both_modes(mode):
    # its TPU VM hosts log through Docker's gcplogs driver as the VM's service account, its Vertex AI jobs run as it
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:accessMode": mode}, project_number=NUMBER)
    [grant] = [r for r in training(run, T.PROJECT_IAM_MEMBER) if r.inputs["role"] == "roles/logging.logWriter"]
    assert grant.name == "project-training-sa-logging.logWriter" and grant.parent_type == T.ACCESS_GRANTS
    assert (grant.inputs["member"], grant.inputs["project"]) == (MEMBERS["training-sa"], PROJECT)
    assert run.named(T.SERVICE_ACCOUNT, "training-sa").urn in grant.dependencies
    assert domain.LOG_WRITE_PERMISSION in domain.ROLE_PERMISSIONS[grant.inputs["role"]]


def test_no_training_account_no_log_writer_grant():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:principals": ["tpu-agent", "vertex-agent"]},
                      project_number=NUMBER)
    assert not [r for r in training(run, T.PROJECT_IAM_MEMBER) if r.inputs["role"] == "roles/logging.logWriter"]


def test_existing_data_bucket_via_iam_gets_bucket_grants_on_the_given_name():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:existingDataBucket": "shared-imagenet",
                       "tpuctl:principals": ["training-sa"]}, project_number=NUMBER)
    data = {(m, r) for m, b, r in grants(run) if b == "shared-imagenet"}
    assert data == {(MEMBERS["training-sa"], role) for role in domain.BUCKET_READ_ROLES}
    assert run.outputs["access_map"][MEMBERS["training-sa"]]["shared-imagenet"] == sorted(domain.BUCKET_READ_ROLES)


def test_project_mode_still_grants_on_an_existing_bucket_it_may_not_own():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:accessMode": "project",
                       "tpuctl:existingDataBucket": "shared-imagenet"}, project_number=NUMBER)
    assert {b for _, b, _ in grants(run)} == {"shared-imagenet"}
    # + the two TPU agents' own service-agent roles and the training account's log writer
    assert len(training(run, T.PROJECT_IAM_MEMBER)) == len(MEMBERS) * len(domain.PROJECT_MODE_ROLES) + 3


def test_acl_route_on_a_fine_grained_existing_bucket():
    run = run_program(
        {"tpuctl:project": PROJECT, "tpuctl:existingDataBucket": "legacy-data",
         "tpuctl:existingDataBucketAccess": "acl"},
        existing_buckets={"legacy-data": {"uniformBucketLevelAccess": False}}, project_number=NUMBER,
    )
    assert ("gcp:storage/getBucket:getBucket", {"name": "legacy-data"}) in run.calls
    emails = {m.split(":", 1)[1] for m in MEMBERS.values()}
    bucket_acl = {(r.inputs["bucket"], r.inputs["entity"], r.inputs["role"]) for r in run.of_type(T.BUCKET_ACCESS_CONTROL)}
    object_acl = {(r.inputs["bucket"], r.inputs["entity"], r.inputs["role"])
                  for r in run.of_type(T.DEFAULT_OBJECT_ACCESS_CONTROL)}
    assert bucket_acl == object_acl == {("legacy-data", f"user-{e}", "READER") for e in emails}
    # The ACL'd bucket gets no IAM member; the created buckets keep theirs.
    assert "legacy-data" not in {b for _, b, _ in grants(run)}
    assert {b for _, b, _ in grants(run)} == {BUCKETS["staging"], BUCKETS["artifacts"], BUCKETS["hub-cache"]}
    for member in MEMBERS.values():
        entries = run.outputs["access_map"][member]["legacy-data"]
        assert entries == ["bucket:READER", "defaultObject:READER"]
        assert domain.required_permissions("data") <= domain.storage_permissions(entries)


def test_acl_route_rejects_a_uniform_bucket_before_registering_anything(registrations):
    with pytest.raises(ConfigError) as info:
        run_program({"tpuctl:project": PROJECT, "tpuctl:existingDataBucket": "modern-data",
                     "tpuctl:existingDataBucketAccess": "acl"},
                    existing_buckets={"modern-data": {"uniformBucketLevelAccess": True}})
    message = str(info.value)
    assert info.value.key == "tpuctl:existingDataBucketAccess" and "'modern-data'" in message, message
    assert "uniform bucket-level access" in message, message
    assert "existingDataBucketAccess: iam" in message
    assert registrations == []


def test_acl_route_on_a_missing_bucket_is_a_config_error(registrations):
    with pytest.raises(ConfigError, match=r"^tpuctl:existingDataBucket: cannot read bucket 'gone-data'.*404"):
        run_program({"tpuctl:project": PROJECT, "tpuctl:existingDataBucket": "gone-data",
                     "tpuctl:existingDataBucketAccess": "acl"}, existing_buckets={})
    assert registrations == []


def test_no_principals_no_grants():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:principals": []})
    assert grants(run) == set() and training(run, T.PROJECT_IAM_MEMBER) == []
    assert run.outputs["principals"] == {}
    assert set(run.outputs["access_map"]) == {domain.member_for_email(run.outputs["image_builder_service_account"])}


SCENARIOS = [
    {},
    {"tpuctl:accessMode": "project"},
    {"tpuctl:existingDataBucket": "legacy-data", "tpuctl:existingDataBucketAccess": "acl"},
    {"tpuctl:accessMode": "project", "tpuctl:existingDataBucket": "legacy-data"},
    {"tpuctl:principals": ["training-sa", "tpu-vm-agent"]},
]


def registered_access(run) -> set[tuple[str, str, str]]:
    """(member, bucket, role or ACL entry) from the grant resources themselves."""
    out = {(r.inputs["member"], r.inputs["bucket"], r.inputs["role"]) for r in run.of_type(T.BUCKET_IAM_MEMBER)}
    for type_token, entry in ((T.BUCKET_ACCESS_CONTROL, "bucket:READER"), (T.DEFAULT_OBJECT_ACCESS_CONTROL, "defaultObject:READER")):
        for r in run.of_type(type_token):
            assert r.inputs["role"] == "READER" and r.inputs["entity"].startswith("user-")
            out.add((domain.member_for_email(r.inputs["entity"][len("user-"):]), r.inputs["bucket"], entry))
    created = {r.inputs["name"] for r in run.of_type(T.BUCKET)}
    for r in training(run, T.PROJECT_IAM_MEMBER):
        # project mode: reaches every bucket of the project (the log writer, in both modes, reaches none)
        if r.parent_type == T.ACCESS_GRANTS and domain.storage_permissions([r.inputs["role"]]):
            out |= {(r.inputs["member"], bucket, r.inputs["role"]) for bucket in created}
    return out


@pytest.mark.parametrize("extra", SCENARIOS, ids=["bucket", "project", "acl", "project+existing", "subset"])
def test_only_additive_iam_is_ever_registered_and_the_access_map_matches_it(extra):
    run = run_program({"tpuctl:project": PROJECT, **extra})
    types = {r.type for r in run.resources}
    assert not [t for t in types if any(marker in t for marker in T.AUTHORITATIVE_IAM_MARKERS)], types
    iam_types = {t for t in types if "IAM" in t or "AccessControl" in t}
    assert iam_types <= {T.BUCKET_IAM_MEMBER, T.PROJECT_IAM_MEMBER, T.BUCKET_ACCESS_CONTROL, T.DEFAULT_OBJECT_ACCESS_CONTROL}
    exported = {(m, b, role) for m, per_bucket in run.outputs["access_map"].items()
                for b, roles in per_bucket.items() for role in roles}
    assert exported == registered_access(run)
    assert exported, "every scenario grants something"
