"""Each resource rule as a plain function on hand-built (type, props): a good and a bad case per rule."""

from __future__ import annotations

import json

import pytest

from ground import domain
from ground import resources as r
from ground import tokens as T
from ground.settings import StackSettings
from policy.evaluate import ALL_RULES, check_resource, rule
from policy.rules import ADVISORY, MANDATORY
from policy.settings import SettingsError, settings_from, to_config

SA = "serviceAccount:tpuctl-trainer@proj-123456.iam.gserviceaccount.com"
HUB_KEY = domain.hub_cache_key("https://tfhub.dev/google/imagenet/mobilenet_v2_100_224/feature_vector/5")


def bucket(purpose: str = "data", **over):
    props = {
        "name": f"tpuctl-proj-{purpose}",
        "location": "US-CENTRAL1",
        "uniformBucketLevelAccess": True,
        "publicAccessPrevention": "enforced",
        "forceDestroy": False,
        "versioning": {"enabled": purpose in ("data", "artifacts")},
        "logging": {"logBucket": "tpuctl-proj-access-logs", "logObjectPrefix": f"tpuctl-proj-{purpose}"},
        "labels": {"managed-by": "tpuctl", domain.PURPOSE_LABEL: purpose},
    }
    props.update(over)
    return props


KMS_KEY = "projects/p/locations/us-central1/keyRings/ml/cryptoKeys/images"


def repository(**over):
    props = {"repositoryId": "tpuctl-trainer", "location": "us-central1", "format": "DOCKER",
             "labels": {"managed-by": "tpuctl", domain.PURPOSE_LABEL: domain.TRAINER_IMAGES_PURPOSE}}
    return {**props, **over}


def endpoint(**over):
    props = {"displayName": "flowers", "location": "us-central1",
             "labels": {"managed-by": "tpuctl", domain.PURPOSE_LABEL: domain.SERVING_ENDPOINT_PURPOSE}}
    return {**props, **over}


def names(violations):
    return sorted({v.rule for v in violations})


def only(rule_name, rtype, props, settings=None):
    """Messages of one rule for one resource (and the rule must apply to the type)."""
    spec = rule(rule_name)
    assert not spec.types or rtype in spec.types
    return spec.check(rtype, props, settings or StackSettings())


# --- buckets ---------------------------------------------------------------------------------

@pytest.mark.parametrize("purpose", domain.BUCKET_PURPOSES)
def test_secure_bucket_of_every_purpose_passes_all_rules(purpose):
    assert check_resource(T.BUCKET, bucket(purpose)) == []


@pytest.mark.parametrize("value", ["inherited", None, "unspecified"])
def test_public_access_prevention_must_be_enforced(value):
    msgs = only("bucket-public-access-prevention", T.BUCKET, bucket(publicAccessPrevention=value))
    assert len(msgs) == 1 and "public_access_prevention='enforced'" in msgs[0]
    assert only("bucket-public-access-prevention", T.BUCKET, bucket()) == []


def test_uniform_access_required():
    assert only("bucket-uniform-access", T.BUCKET, bucket()) == []
    msgs = only("bucket-uniform-access", T.BUCKET, bucket(uniformBucketLevelAccess=False))
    assert "uniform_bucket_level_access=True" in msgs[0]
    assert only("bucket-uniform-access", T.BUCKET, {k: v for k, v in bucket().items()
                                                    if k != "uniformBucketLevelAccess"})


def test_artifacts_bucket_must_be_versioned_other_buckets_need_not():
    assert only("artifacts-bucket-versioned", T.BUCKET, bucket("artifacts")) == []
    bad = only("artifacts-bucket-versioned", T.BUCKET, bucket("artifacts", versioning={"enabled": False}))
    assert bad and "versioning" in bad[0]
    assert only("artifacts-bucket-versioned", T.BUCKET, bucket("artifacts", versioning=None))
    assert only("artifacts-bucket-versioned", T.BUCKET, bucket("staging", versioning={"enabled": False})) == []


@pytest.mark.parametrize("purpose,flagged", [("data", True), ("artifacts", True), ("staging", False), ("hub-cache", False)])
def test_force_destroy_off_on_data_and_artifacts(purpose, flagged):
    msgs = only("no-force-destroy", T.BUCKET, bucket(purpose, forceDestroy=True))
    assert bool(msgs) is flagged
    assert only("no-force-destroy", T.BUCKET, bucket(purpose)) == []


def test_labels_advisory():
    assert rule("bucket-labels").level == ADVISORY
    assert only("bucket-labels", T.BUCKET, bucket()) == []
    assert "no labels" in only("bucket-labels", T.BUCKET, bucket(labels={}))[0]
    wrong = only("bucket-labels", T.BUCKET, bucket(labels={domain.PURPOSE_LABEL: "scratch"}))
    assert "scratch" in wrong[0]


# --- public members --------------------------------------------------------------------------

@pytest.mark.parametrize("rtype,props", [
    (T.BUCKET_IAM_MEMBER, {"bucket": "b1", "role": "roles/storage.objectViewer", "member": "allUsers"}),
    (T.BUCKET_IAM_BINDING, {"bucket": "b1", "role": "roles/storage.objectViewer", "members": [SA, "allAuthenticatedUsers"]}),
    (T.PROJECT_IAM_MEMBER, {"project": "p", "role": "roles/storage.objectViewer", "member": "allUsers"}),
    (T.BUCKET_IAM_POLICY, {"bucket": "b1", "policyData": json.dumps(
        {"bindings": [{"role": "roles/storage.objectViewer", "members": ["allUsers"]}]})}),
    (T.BUCKET_ACCESS_CONTROL, {"bucket": "b1", "role": "READER", "entity": "allUsers"}),
    (T.DEFAULT_OBJECT_ACCESS_CONTROL, {"bucket": "b1", "role": "READER", "entity": "allAuthenticatedUsers"}),
    (T.BUCKET_ACL, {"bucket": "b1", "roleEntities": ["READER:allUsers"]}),
    (T.BUCKET_ACL, {"bucket": "b1", "predefinedAcl": "publicRead"}),
    (T.BUCKET_OBJECT, {"bucket": "b1", "name": "x", "predefinedAcl": "publicRead"}),
])
def test_public_members_rejected_everywhere(rtype, props):
    assert only("no-public-members", rtype, props), (rtype, props)


@pytest.mark.parametrize("rtype,props", [
    (T.BUCKET_IAM_MEMBER, {"bucket": "b1", "role": "roles/storage.objectViewer", "member": SA}),
    (T.BUCKET_IAM_BINDING, {"bucket": "b1", "role": "roles/storage.objectViewer", "members": [SA, "group:ml@example.com"]}),
    (T.BUCKET_ACCESS_CONTROL, {"bucket": "b1", "role": "READER", "entity": "user-a@example.com"}),
    (T.BUCKET_OBJECT, {"bucket": "b1", "name": "x"}),
])
def test_private_members_pass(rtype, props):
    assert only("no-public-members", rtype, props) == []


# --- authoritative IAM / ACL ------------------------------------------------------------------

@pytest.mark.parametrize("rtype", sorted(T.AUTHORITATIVE_PROJECT_IAM_TYPES))
def test_authoritative_project_iam_is_mandatory_violation(rtype):
    got = check_resource(rtype, {"project": "p", "role": "roles/storage.objectViewer", "members": [SA],
                                 "policyData": json.dumps({"bindings": []})})
    assert "no-authoritative-project-iam" in names(got)
    assert all(v.level == MANDATORY for v in got if v.rule == "no-authoritative-project-iam")


def test_additive_project_iam_member_passes():
    got = check_resource(T.PROJECT_IAM_MEMBER, {"project": "p", "role": "roles/aiplatform.user", "member": SA})
    assert got == []


def test_authoritative_bucket_iam_is_advisory():
    got = check_resource(T.BUCKET_IAM_BINDING, {"bucket": "b1", "role": "roles/storage.objectViewer", "members": [SA]})
    assert [(v.rule, v.level) for v in got] == [("additive-bucket-iam", ADVISORY)]
    assert check_resource(T.BUCKET_IAM_MEMBER, {"bucket": "b1", "role": "roles/storage.objectViewer", "member": SA}) == []


@pytest.mark.parametrize("rtype", sorted(T.AUTHORITATIVE_ACL_TYPES))
def test_authoritative_acl_resources_rejected(rtype):
    msgs = only("no-authoritative-bucket-acl", rtype, {"bucket": "b1", "roleEntities": ["READER:user-a@example.com"]})
    assert msgs and "replaces the whole ACL" in msgs[0]


EXISTING = StackSettings(existing_data_bucket="legacy-data", existing_data_bucket_access="acl")


def test_acl_entry_on_created_bucket_is_mandatory_violation():
    props = {"bucket": "tpuctl-proj-data", "role": "READER", "entity": "user-a@example.com"}
    assert only("acl-only-on-existing-bucket", T.BUCKET_ACCESS_CONTROL, props, EXISTING)
    assert only("acl-only-on-existing-bucket", T.BUCKET_ACCESS_CONTROL, props, StackSettings())
    assert only("acl-on-existing-bucket", T.BUCKET_ACCESS_CONTROL, props, EXISTING) == []


def test_acl_entry_on_existing_bucket_needs_acl_mode():
    props = {"bucket": "legacy-data", "role": "READER", "entity": "user-a@example.com"}
    iam_mode = StackSettings(existing_data_bucket="legacy-data", existing_data_bucket_access="iam")
    assert "existingDataBucketAccess" in only("acl-only-on-existing-bucket", T.BUCKET_ACCESS_CONTROL, props, iam_mode)[0]
    assert only("acl-only-on-existing-bucket", T.BUCKET_ACCESS_CONTROL, props, EXISTING) == []


def test_acl_entry_on_existing_bucket_in_acl_mode_is_advisory_with_reason():
    got = check_resource(T.DEFAULT_OBJECT_ACCESS_CONTROL,
                         {"bucket": "legacy-data", "role": "READER", "entity": "user-a@example.com"}, EXISTING)
    assert [(v.rule, v.level) for v in got] == [("acl-on-existing-bucket", ADVISORY)]
    assert "objects written after the grant" in got[0].message
    assert "user:a@example.com" in got[0].message


# --- roles -------------------------------------------------------------------------------------

@pytest.mark.parametrize("role", sorted(domain.FORBIDDEN_ROLES))
@pytest.mark.parametrize("rtype", [T.PROJECT_IAM_MEMBER, T.BUCKET_IAM_MEMBER])
def test_basic_roles_rejected(role, rtype):
    assert only("no-basic-roles", rtype, {"project": "p", "bucket": "b", "role": role, "member": SA})


def test_non_basic_role_passes_basic_roles_rule():
    assert only("no-basic-roles", T.PROJECT_IAM_MEMBER, {"project": "p", "role": "roles/aiplatform.user", "member": SA}) == []


@pytest.mark.parametrize("role", sorted(domain.PROJECT_MODE_ONLY_ROLES))
def test_broad_project_roles_need_project_mode(role):
    props = {"project": "p", "role": role, "member": SA}
    bucket_mode = check_resource(T.PROJECT_IAM_MEMBER, props, StackSettings(access_mode="bucket"))
    assert [(v.rule, v.level) for v in bucket_mode] == [("project-roles-need-project-mode", MANDATORY)]
    project_mode = check_resource(T.PROJECT_IAM_MEMBER, props, StackSettings(access_mode="project"))
    assert [(v.rule, v.level) for v in project_mode] == [("project-mode-broad-roles", ADVISORY)]
    assert "accepted because accessMode=project" in project_mode[0].message


def test_broad_project_role_for_a_person_is_not_the_service_account_rule():
    props = {"project": "p", "role": "roles/viewer", "member": "user:someone@example.com"}
    # roles/viewer on the project is still a basic role (checkov CKV_GCP_117), whoever holds it
    assert [(v.rule, v.level) for v in check_resource(T.PROJECT_IAM_MEMBER, props)] == [("no-basic-roles", MANDATORY)]
    props["role"] = "roles/storage.admin"
    assert check_resource(T.PROJECT_IAM_MEMBER, props) == []


def test_unknown_member_at_preview_counts_as_service_account():
    props = {"project": "p", "role": "roles/storage.admin", "member": r.UNKNOWN}
    assert only("project-roles-need-project-mode", T.PROJECT_IAM_MEMBER, props)


@pytest.mark.parametrize("role", sorted(domain.IMPERSONATION_ROLES))
def test_project_level_impersonation_roles_rejected(role):
    assert only("no-project-impersonation-roles", T.PROJECT_IAM_MEMBER, {"project": "p", "role": role, "member": SA})
    # on one service account (serviceaccount.IAMMember) it is the right place
    assert check_resource(T.SA_IAM_MEMBER, {"serviceAccountId": "x", "role": role, "member": SA}) == []


# --- hub cache ---------------------------------------------------------------------------------

def test_hub_cache_objects_in_sha1_layout_pass():
    name = domain.hub_object_name("model-cache", "https://tfhub.dev/google/x/1", "variables/variables.index")
    assert only("hub-cache-layout", T.BUCKET_OBJECT, {"bucket": "hub", "name": name}) == []
    assert only("hub-cache-layout", T.BUCKET_OBJECT, {"bucket": "hub", "name": f"model-cache/{HUB_KEY}/saved_model.pb"}) == []
    assert only("hub-cache-layout", T.BUCKET_OBJECT, {"bucket": "hub", "name": f"model-cache/{HUB_KEY}.descriptor.txt"}) == []


@pytest.mark.parametrize("name,fragment", [
    ("model-cache/mobilenet_v2/saved_model.pb", "not the 40-hex sha1"),
    (f"model-cache/{HUB_KEY.upper()}/saved_model.pb", "not the 40-hex sha1"),
    ("model-cache/saved_model.pb", "directly under the prefix"),
    (f"models/{HUB_KEY}/saved_model.pb", "not under hubCachePrefix"),
])
def test_hub_cache_objects_elsewhere_rejected(name, fragment):
    msgs = only("hub-cache-layout", T.BUCKET_OBJECT, {"bucket": "hub", "name": name})
    assert msgs and fragment in msgs[0]


def test_hub_cache_prefix_comes_from_config():
    settings = settings_from({"hubCachePrefix": "tfhub/cache"})
    assert only("hub-cache-layout", T.BUCKET_OBJECT, {"name": f"tfhub/cache/{HUB_KEY}/saved_model.pb"}, settings) == []
    assert only("hub-cache-layout", T.BUCKET_OBJECT, {"name": f"model-cache/{HUB_KEY}/saved_model.pb"}, settings)


# --- GPU quota -----------------------------------------------------------------------------------

def quota(preferred="4", email="ml@example.com", quota_id="NVIDIA-T4-GPUS-per-project-region"):
    props = {"parent": "projects/p", "service": "compute.googleapis.com", "quotaId": quota_id,
             "quotaConfig": {"preferredValue": preferred}, "dimensions": {"region": "us-central1"}}
    if email is not None:
        props["contactEmail"] = email
    return props


def test_gpu_quota_within_cap_with_contact_passes():
    assert check_resource(T.QUOTA_PREFERENCE, quota()) == []
    assert check_resource(T.QUOTA_PREFERENCE, quota(str(domain.DEFAULT_MAX_GPU_QUOTA))) == []


def test_gpu_quota_without_contact_fails():
    assert "contactEmail" in only("gpu-quota-preference", T.QUOTA_PREFERENCE, quota(email=None))[0]
    assert only("gpu-quota-preference", T.QUOTA_PREFERENCE, quota(email=""))


def test_gpu_quota_above_default_and_configured_cap_fails():
    assert "maxGpuQuota=16" in only("gpu-quota-preference", T.QUOTA_PREFERENCE, quota("80"))[0]
    tight = settings_from({"maxGpuQuota": 2})
    assert "maxGpuQuota=2" in only("gpu-quota-preference", T.QUOTA_PREFERENCE, quota("4"), tight)[0]
    assert only("gpu-quota-preference", T.QUOTA_PREFERENCE, quota("2"), tight) == []


def test_unknown_values_at_preview_are_not_violations():
    assert only("gpu-quota-preference", T.QUOTA_PREFERENCE,
                {**quota(), "quotaConfig": {"preferredValue": r.UNKNOWN}, "contactEmail": r.UNKNOWN}) == []
    assert only("bucket-uniform-access", T.BUCKET, bucket(uniformBucketLevelAccess=r.UNKNOWN)) == []


# --- settings ------------------------------------------------------------------------------------

def test_settings_defaults_and_validation():
    s = settings_from({})
    assert (s.access_mode, s.existing_data_bucket, s.max_gpu_quota, s.hub_cache_prefix) == (
        domain.DEFAULT_ACCESS_MODE, "", domain.DEFAULT_MAX_GPU_QUOTA, domain.DEFAULT_HUB_CACHE_PREFIX)
    assert settings_from(to_config(s)) == s
    for bad in ({"accessMode": "org"}, {"maxGpuQuota": -1}, {"maxGpuQuota": "8"}, {"hubCachePrefix": "/abs"},
                {"existingDataBucketAccess": "public"}, {"existingDataBucket": "Bad_Name"}, {"typo": 1}):
        with pytest.raises(SettingsError):
            settings_from(bad)


def test_every_rule_is_documented_and_named_uniquely():
    seen = [spec.name for spec in ALL_RULES]
    assert len(seen) == len(set(seen))
    for spec in ALL_RULES:
        assert spec.level in (MANDATORY, ADVISORY)
        assert spec.rationale, spec.name


# --- one good and one bad resource per rule, and proof that the table covers every rule ------------

ACL_MODE = StackSettings(existing_data_bucket="legacy-data", existing_data_bucket_access="acl")
PROJECT_MODE = StackSettings(access_mode="project")
CASES = {
    # rule: (type, good props, bad props, settings); a bad case of another type is written (type, props)
    "bucket-public-access-prevention": (T.BUCKET, bucket(), bucket(publicAccessPrevention="inherited"), None),
    "bucket-uniform-access": (T.BUCKET, bucket(), bucket(uniformBucketLevelAccess=False), None),
    "no-public-members": (T.BUCKET_IAM_MEMBER, {"bucket": "b", "role": "roles/storage.objectViewer", "member": SA},
                          {"bucket": "b", "role": "roles/storage.objectViewer", "member": "allUsers"}, None),
    "no-authoritative-project-iam": (T.PROJECT_IAM_MEMBER, {"project": "p", "role": "roles/aiplatform.user", "member": SA},
                                     (T.PROJECT_IAM_BINDING, {"project": "p", "role": "roles/aiplatform.user", "members": [SA]}), None),
    "additive-bucket-iam": (T.BUCKET_IAM_MEMBER, {"bucket": "b", "role": "roles/storage.objectViewer", "member": SA},
                            (T.BUCKET_IAM_BINDING, {"bucket": "b", "role": "roles/storage.objectViewer", "members": [SA]}), None),
    "no-authoritative-bucket-acl": (T.BUCKET_ACCESS_CONTROL, {"bucket": "legacy-data", "role": "READER", "entity": "user-a@example.com"},
                                    (T.BUCKET_ACL, {"bucket": "legacy-data", "roleEntities": ["READER:user-a@example.com"]}), ACL_MODE),
    "acl-only-on-existing-bucket": (T.BUCKET_ACCESS_CONTROL, {"bucket": "legacy-data", "role": "READER", "entity": "user-a@example.com"},
                                    {"bucket": "tpuctl-proj-data", "role": "READER", "entity": "user-a@example.com"}, ACL_MODE),
    "acl-on-existing-bucket": (T.BUCKET_ACCESS_CONTROL, {"bucket": "tpuctl-proj-data", "role": "READER", "entity": "user-a@example.com"},
                               {"bucket": "legacy-data", "role": "READER", "entity": "user-a@example.com"}, ACL_MODE),
    "no-basic-roles": (T.PROJECT_IAM_MEMBER, {"project": "p", "role": "roles/aiplatform.user", "member": SA},
                       {"project": "p", "role": "roles/owner", "member": SA}, None),
    "project-roles-need-project-mode": (T.PROJECT_IAM_MEMBER, {"project": "p", "role": "roles/aiplatform.user", "member": SA},
                                        {"project": "p", "role": "roles/storage.admin", "member": SA}, None),
    "project-mode-broad-roles": (T.PROJECT_IAM_MEMBER, {"project": "p", "role": "roles/aiplatform.user", "member": SA},
                                 {"project": "p", "role": "roles/storage.admin", "member": SA}, PROJECT_MODE),
    "no-project-artifact-registry-roles": (T.PROJECT_IAM_MEMBER,
                                           {"project": "p", "role": "roles/aiplatform.user", "member": SA},
                                           {"project": "p", "role": "roles/artifactregistry.reader", "member": SA},
                                           None),
    "additive-repository-iam": (T.ARTIFACT_REPOSITORY_IAM_MEMBER,
                                {"repository": "tpuctl-trainer", "role": "roles/artifactregistry.reader", "member": SA},
                                (T.ARTIFACT_REPOSITORY_IAM_BINDING,
                                 {"repository": "tpuctl-trainer", "role": "roles/artifactregistry.reader",
                                  "members": [SA]}), None),
    "no-project-impersonation-roles": (T.PROJECT_IAM_MEMBER, {"project": "p", "role": "roles/aiplatform.user", "member": SA},
                                       {"project": "p", "role": "roles/iam.serviceAccountUser", "member": SA}, None),
    "artifacts-bucket-versioned": (T.BUCKET, bucket("artifacts"), bucket("artifacts", versioning={"enabled": False}), None),
    "bucket-versioning": (T.BUCKET, bucket("data"), bucket("data", versioning={"enabled": False}), None),
    "bucket-access-logs": (T.BUCKET, bucket("data"), bucket("data", logging=None), None),
    "no-admin-roles-for-service-accounts": (T.PROJECT_IAM_MEMBER, {"project": "p", "role": "roles/aiplatform.user", "member": SA},
                                            {"project": "p", "role": "roles/compute.admin", "member": SA}, None),
    "no-default-service-account-grants": (T.PROJECT_IAM_MEMBER, {"project": "p", "role": "roles/aiplatform.user", "member": SA},
                                          {"project": "p", "role": "roles/aiplatform.user",
                                           "member": "serviceAccount:123456789012-compute@developer.gserviceaccount.com"}, None),
    "no-force-destroy": (T.BUCKET, bucket("data"), bucket("data", forceDestroy=True), None),
    "hub-cache-layout": (T.BUCKET_OBJECT, {"bucket": "h", "name": f"model-cache/{HUB_KEY}/saved_model.pb"},
                         {"bucket": "h", "name": "model-cache/mobilenet/saved_model.pb"}, None),
    "gpu-quota-preference": (T.QUOTA_PREFERENCE, quota("8"), quota("64"), None),
    "bucket-labels": (T.BUCKET, bucket(), bucket(labels={}), None),
    "customer-managed-keys": (T.ARTIFACT_REPOSITORY, repository(kmsKeyName=KMS_KEY), repository(labels={}), None),
    "private-serving-endpoint": (T.VERTEX_ENDPOINT, endpoint(network="projects/1/global/networks/ml"),
                                 endpoint(labels={}), None),
}


def test_case_table_covers_every_resource_rule():
    from policy.rules import RESOURCE_RULES

    assert set(CASES) == {spec.name for spec in RESOURCE_RULES}


@pytest.mark.parametrize("rule_name", sorted(CASES))
def test_each_rule_good_and_bad(rule_name):
    rtype, good, bad, settings = CASES[rule_name]
    settings = settings or StackSettings()
    bad_type, bad = bad if isinstance(bad, tuple) else (rtype, bad)
    good_rules = {v.rule for v in check_resource(rtype, good, settings)}
    bad_hits = [v for v in check_resource(bad_type, bad, settings) if v.rule == rule_name]
    assert rule_name not in good_rules
    assert bad_hits and all(v.level == rule(rule_name).level and v.message for v in bad_hits)


def test_a_public_reader_of_the_trainer_image_repository_is_refused():
    props = {"repository": "tpuctl-trainer", "location": "us-central1", "role": "roles/artifactregistry.reader"}
    assert only("no-public-members", T.ARTIFACT_REPOSITORY_IAM_MEMBER, {**props, "member": SA}, None) == []
    found = only("no-public-members", T.ARTIFACT_REPOSITORY_IAM_MEMBER, {**props, "member": "allUsers"}, None)
    assert len(found) == 1 and "allUsers" in found[0] and "public" in found[0]


def test_tpuctls_own_repository_and_endpoint_are_accepted_and_others_are_not():
    """policy/exceptions.yaml accepts Google-managed keys and the public API for the resources labelled as
    tpuctl's trainer images and serving Endpoint; the same resources without that label are reported."""
    assert check_resource(T.ARTIFACT_REPOSITORY, repository()) == []
    assert check_resource(T.VERTEX_ENDPOINT, endpoint()) == []
    (cmek,) = only("customer-managed-keys", T.ARTIFACT_REPOSITORY, repository(labels={}))
    assert "repository tpuctl-trainer" in cmek and "CKV_GCP_84" in cmek
    messages = [v.message for v in check_resource(T.VERTEX_ENDPOINT, endpoint(labels={"managed-by": "x"}))]
    assert any("CKV2_GCP_24" in m for m in messages) and any("CKV2_GCP_33" in m for m in messages)
    assert only("customer-managed-keys", T.VERTEX_ENDPOINT, endpoint(labels={}, encryptionSpec={"kmsKeyName": KMS_KEY})) == []
