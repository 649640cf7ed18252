"""The resource rules: plain functions ``check(rtype, props, settings) -> [message, …]``.

One function per rule, one message per problem, each message saying what to change. ``RESOURCE_RULES``
lists them with their level and documentation; ``policy.pack`` turns them into pulumi_policy
policies and ``policy.evaluate`` runs them for ``tpuctl plan`` and the tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from policy import resources as r
from policy.exceptions import accepted
from tpuctl.ground import domain
from tpuctl.ground import tokens as T
from tpuctl.ground.settings import StackSettings

MANDATORY = "mandatory"
ADVISORY = "advisory"

@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    level: str
    check: Callable[..., Any]
    kind: str = "resource"                    # resource | stack
    types: frozenset[str] = frozenset()       # resource types it looks at ("" = any)
    config_keys: tuple[str, ...] = ()         # policy settings it reads
    checkov: tuple[str, ...] = ()             # equivalent checkov CKV_GCP ids
    rationale: str = ""


# --------------------------------------------------------------------------------------------
# Buckets
# --------------------------------------------------------------------------------------------

def check_public_access_prevention(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    value = r.get(props, "publicAccessPrevention")
    if value is r.UNKNOWN or value == "enforced":
        return []
    return [f"bucket {r.bucket_name(props, '?')}: publicAccessPrevention is {value or 'unset'!r}; "
            "set public_access_prevention='enforced'"]


def check_uniform_access(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    value = r.get(props, "uniformBucketLevelAccess")
    if value is r.UNKNOWN or value is True:
        return []
    return [f"bucket {r.bucket_name(props, '?')}: uniform bucket-level access is off; "
            "set uniform_bucket_level_access=True (ACLs on created buckets are not allowed)"]


def check_artifacts_versioned(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    if r.bucket_purpose(props) != "artifacts":
        return []
    enabled = r.get(props, "versioning", "enabled")
    if enabled is r.UNKNOWN or enabled is True:
        return []
    return [f"artifacts bucket {r.bucket_name(props, '?')}: versioning is off; set versioning={{'enabled': True}} "
            "so an overwritten or deleted model can be restored"]


def check_force_destroy(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    purpose = r.bucket_purpose(props)
    if purpose not in ("data", "artifacts"):
        return []
    if r.get(props, "forceDestroy") is True:
        return [f"{purpose} bucket {r.bucket_name(props, '?')}: force_destroy is on, so `pulumi destroy` would "
                "delete every object in it; set force_destroy=False"]
    return []


def check_access_logs(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    name = r.bucket_name(props, "?")
    log_bucket = r.get(props, "logging", "logBucket")
    if log_bucket is r.UNKNOWN:
        return []
    if not log_bucket:
        if accepted("CKV_GCP_62", rtype, props, settings):
            return []
        return [f"bucket {name} logs no access (checkov CKV_GCP_62): nobody can tell later who read or changed "
                "the data; set accessLogRetentionDays > 0 so its usage and storage logs go to the access-log bucket"]
    if log_bucket == r.get(props, "name"):
        return [f"bucket {name} logs to itself (checkov CKV_GCP_63): every log write is logged again; log to the "
                "separate access-log bucket"]
    return []


def check_bucket_versioning(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    purpose = r.labelled_purpose(props)
    if purpose == "artifacts":      # artifacts-bucket-versioned (mandatory) judges it
        return []
    enabled = r.get(props, "versioning", "enabled")
    if enabled is r.UNKNOWN or enabled is True or accepted("CKV_GCP_78", rtype, props, settings):
        return []
    what = f"{purpose} bucket" if isinstance(purpose, str) else "bucket"
    fix = (f"add {purpose} to versionedBuckets" if purpose in domain.BUCKET_PURPOSES
           else "set versioning={'enabled': True}")
    return [f"{what} {r.bucket_name(props, '?')}: versioning is off (checkov CKV_GCP_78), so an overwritten or "
            f"deleted object is gone once soft delete expires; {fix}, or accept it in policy/exceptions.yaml "
            "with a reason"]


#: checkov's checks of the stack's non-bucket resources (Artifact Registry repository, Vertex AI Endpoint):
#: (type, attribute that must be set, checkov id, what it means).
_CMEK_CHECKS = {
    T.ARTIFACT_REPOSITORY: ("kmsKeyName", "CKV_GCP_84", "repository"),
    T.VERTEX_ENDPOINT: ("encryptionSpec", "CKV2_GCP_24", "Endpoint"),
}


def _display(rtype: str, props: Any) -> str:
    name = r.get(props, "repositoryId") if rtype == T.ARTIFACT_REPOSITORY else r.get(props, "displayName")
    return name if isinstance(name, str) else "?"


def check_customer_managed_key(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    attribute, check, what = _CMEK_CHECKS[rtype]
    value = r.get(props, attribute)
    if value is r.UNKNOWN or value or accepted(check, rtype, props, settings):
        return []
    return [f"{what} {_display(rtype, props)}: encrypted with Google-managed keys, not a customer-managed key "
            f"(checkov {check}); set {attribute}, or accept it in policy/exceptions.yaml with a reason"]


def check_private_endpoint(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    network = r.get(props, "network")
    if network is r.UNKNOWN or network or accepted("CKV2_GCP_33", rtype, props, settings):
        return []
    return [f"Endpoint {_display(rtype, props)}: reachable through Vertex AI's public API (IAM still applies), not "
            "only from a peered VPC network (checkov CKV2_GCP_33); set network, or accept it in "
            "policy/exceptions.yaml with a reason"]


def check_labels(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    labels = r.get(props, "labels")
    if labels is r.UNKNOWN:
        return []
    name = r.bucket_name(props, "?")
    if not labels:
        return [f"bucket {name} has no labels; add {domain.PURPOSE_LABEL}=<purpose> and an owner/cost label"]
    purpose = r.get(labels, domain.PURPOSE_LABEL)
    if purpose is r.UNKNOWN:
        return []
    if purpose not in domain.BUCKET_PURPOSES and purpose != domain.ACCESS_LOG_PURPOSE:
        return [f"bucket {name}: label {domain.PURPOSE_LABEL} is {purpose!r}; set it to one of "
                f"{', '.join(domain.BUCKET_PURPOSES)} so policies and `tpuctl plan` know what the bucket is for"]
    return []


# --------------------------------------------------------------------------------------------
# IAM
# --------------------------------------------------------------------------------------------

def check_public_members(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    out = []
    for grant in r.iam_grants(rtype, props) + r.acl_grants(rtype, props):
        if r.is_public_member(grant.member):
            out.append(f"{grant.role} is granted to {grant.member}: that makes it public; grant it to a "
                       "service account or group instead")
    for key in ("predefinedAcl", "defaultAcl"):
        acl = r.get(props, key)
        if isinstance(acl, str) and acl in r.PUBLIC_PREDEFINED_ACLS:
            out.append(f"{key} {acl!r} makes the data public; remove it")
    return out


def check_authoritative_project_iam(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    kind = rtype.rsplit(":", 1)[-1]
    scope = rtype.split(":")[1].split("/")[0]
    what = "replaces the whole IAM policy" if kind == "IAMPolicy" else f"owns every member of {r.get(props, 'role')}"
    return [f"{scope} {kind} is authoritative: it {what} and removes grants made by others (and can lock "
            "people out); use the additive IAMMember"]


def check_authoritative_bucket_iam(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    bucket = r.strip_bucket(r.get(props, "bucket"))
    kind = rtype.rsplit(":", 1)[-1]
    return [f"{kind} on bucket {bucket} is authoritative: it removes grants `tpuctl grant-access` or others "
            "added; use BucketIAMMember"]


def check_authoritative_acl(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    kind = rtype.rsplit(":", 1)[-1]
    bucket = r.strip_bucket(r.get(props, "bucket"))
    return [f"{kind} on bucket {bucket} replaces the whole ACL (and fails with HTTP 400 on uniform-access "
            "buckets); use bucket IAM, or one BucketAccessControl entry on a referenced existing bucket"]


def check_acl_only_on_existing_bucket(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    bucket = r.strip_bucket(r.get(props, "bucket"))
    if bucket is r.UNKNOWN:
        return []
    existing = settings.existing_data_bucket
    if existing is None or bucket != existing:
        return [f"ACL entry on bucket {bucket}: ACLs are only allowed on the referenced existing data bucket "
                "in ACL mode (buckets the stack creates use uniform access and IAM); grant a bucket IAM role"]
    if settings.existing_data_bucket_access != "acl":
        return [f"ACL entry on existing bucket {bucket} but existingDataBucketAccess is "
                f"{settings.existing_data_bucket_access!r}; use BucketIAMMember or set existingDataBucketAccess=acl"]
    return []


def check_acl_on_existing_bucket(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    bucket = r.strip_bucket(r.get(props, "bucket"))
    existing = settings.existing_data_bucket
    if bucket is r.UNKNOWN or existing is None or bucket != existing or settings.existing_data_bucket_access != "acl":
        return []
    out = []
    for grant in r.acl_grants(rtype, props):
        note = ("applies only to objects written after the grant" if str(grant.role).startswith("defaultObject:")
                else "stops working (HTTP 400) once the bucket turns on uniform bucket-level access")
        out.append(f"ACL {grant.role} for {grant.member} on existing bucket {bucket}: accepted because "
                   f"existingDataBucketAccess=acl, but it {note}; move the bucket to IAM when you can")
    return out


#: Basic roles checkov rejects above the bucket (CKV_GCP_115/116/117, AbsGoogleBasicRoles.BASIC_ROLES).
CHECKOV_BASIC_ROLES = frozenset({"roles/owner", "roles/editor", "roles/viewer"})
_HIERARCHY_IAM = T.PROJECT_IAM_TYPES | T.HIERARCHY_IAM_TYPES
_CHECKOV_BASIC_ID = {**{t: "CKV_GCP_117" for t in T.PROJECT_IAM_TYPES},
                     T.FOLDER_IAM_MEMBER: "CKV_GCP_116", T.FOLDER_IAM_BINDING: "CKV_GCP_116",
                     T.FOLDER_IAM_POLICY: "CKV_GCP_116", T.ORG_IAM_MEMBER: "CKV_GCP_115",
                     T.ORG_IAM_BINDING: "CKV_GCP_115", T.ORG_IAM_POLICY: "CKV_GCP_115"}


def check_basic_roles(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    out = [f"{g.role} granted to {g.member}: basic roles give write access to almost everything in the "
           "project; grant the storage role the job needs instead"
           for g in r.iam_grants(rtype, props) if g.role in domain.FORBIDDEN_ROLES]
    if rtype not in _HIERARCHY_IAM or accepted(_CHECKOV_BASIC_ID[rtype], rtype, props, settings):
        return out
    for g in r.iam_grants(rtype, props):
        if g.role not in CHECKOV_BASIC_ROLES - domain.FORBIDDEN_ROLES:
            continue
        if rtype in T.PROJECT_IAM_TYPES and r.is_service_account_member(g.member):
            continue    # project-roles-need-project-mode / project-mode-broad-roles judge these
        out.append(f"{g.role} granted to {_member_text(g.member)} at {rtype.split(':')[1].split('/')[0]} level "
                   f"is a basic role (checkov {_CHECKOV_BASIC_ID[rtype]}): it reads the configuration of nearly "
                   "every resource; grant the specific viewer role needed instead")
    return out


#: checkov CKV_GCP_42 (GoogleProjectAdminServiceAccount): a user-managed or agent service account holding an
#: admin, editor or owner role on the project.
_SA_EMAIL = re.compile(r".*@.*\.iam\.gserviceaccount\.com$")
_ADMIN_ROLE = re.compile(r".*(.*Admin|.*admin|editor|owner)")


def check_admin_roles_for_service_accounts(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    if accepted("CKV_GCP_42", rtype, props, settings):
        return []
    out = []
    for g in r.iam_grants(rtype, props):
        if not (isinstance(g.role, str) and isinstance(g.member, str)):
            continue
        if g.role in domain.FORBIDDEN_ROLES | domain.PROJECT_MODE_ONLY_ROLES:
            continue    # no-basic-roles and the accessMode rules judge these
        if _SA_EMAIL.match(g.member) and _ADMIN_ROLE.match(g.role):
            out.append(f"project-level {g.role} for service account {g.member} (checkov CKV_GCP_42): an admin role "
                       "lets whatever runs as that account change the project's resources or IAM; grant the "
                       "narrow role the job needs, on the resource it needs it for")
    return out


#: checkov CKV_GCP_46/47/48 (AbsGoogleIAMMemberDefaultServiceAccount): Compute Engine and App Engine default accounts.
_DEFAULT_SA = re.compile(r".*-compute@developer\.gserviceaccount\.com|.*@appspot\.gserviceaccount\.com")


def check_default_service_accounts(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    return [f"{g.role} granted to the default service account {g.member} (checkov CKV_GCP_46/47/48): every VM or "
            "App Engine app that runs as it gets the grant; use the dedicated training service account "
            "(principal training-sa)"
            for g in r.iam_grants(rtype, props)
            if isinstance(g.member, str) and _DEFAULT_SA.match(g.member.split(":", 1)[-1])]


def _project_mode_grants(rtype: str, props: Any) -> list[r.Grant]:
    return [g for g in r.iam_grants(rtype, props)
            if g.role in domain.PROJECT_MODE_ONLY_ROLES and r.is_service_account_member(g.member)]


def check_project_roles_need_project_mode(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    if settings.access_mode == "project":
        return []
    return [f"project-level {g.role} for {_member_text(g.member)} reaches every bucket of the project; only the "
            f"explicit accessMode=project allows it (now {settings.access_mode!r}); grant bucket roles instead"
            for g in _project_mode_grants(rtype, props)]


def check_project_mode_roles(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    if settings.access_mode != "project":
        return []
    out = []
    for g in _project_mode_grants(rtype, props):
        entry = (accepted("CKV_GCP_42", rtype, props, settings) or accepted("CKV_GCP_117", rtype, props, settings))
        where = f" (policy/exceptions.yaml accepts checkov {entry.check} for it)" if entry else ""
        out.append(f"project-level {g.role} for {_member_text(g.member)}: accepted because accessMode=project{where}, "
                   f"but it {_BROAD_REASON.get(g.role, 'reaches every resource of the project')}; accessMode=bucket "
                   "grants only objectViewer/objectUser on the four training buckets")
    return out


def check_project_artifact_registry_roles(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    if settings.access_mode == "project":
        return []
    return [f"project-level {g.role} for {_member_text(g.member)} reaches every Artifact Registry repository of the "
            f"project; grant {ARTIFACT_READER_ROLE} on the trainer image repository instead "
            f"(accessMode={settings.access_mode!r})"
            for g in r.iam_grants(rtype, props)
            if isinstance(g.role, str) and not g.conditional and _pulls_images(g.role)]


def _pulls_images(role: str) -> bool:
    """A predefined Artifact Registry role (``artifactregistry.*``: reader and up reach every repository's
    images at project level); basic roles are the project-roles rule's business."""
    return role.removeprefix("roles/").startswith("artifactregistry.")


def check_authoritative_repository_iam(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    kind = rtype.rsplit(":", 1)[-1]
    return [f"{kind} on repository {r.get(props, 'repository')} is authoritative: it removes readers others "
            "granted; use RepositoryIamMember"]


#: The one Artifact Registry role a training principal needs: pull the trainer image.
ARTIFACT_READER_ROLE = "roles/artifactregistry.reader"

_BROAD_REASON = {
    "roles/storage.admin": "gives full control (objects, bucket settings, IAM) of every bucket in the project "
                           "(checkov CKV_GCP_42)",
    "roles/viewer": "lets the account read the configuration of every resource in the project",
}


#: Roles checkov CKV_GCP_49 rejects at project level because they can act as or manage service accounts
#: (checkov/terraform/checks/resource/gcp/AbsGoogleImpersonationRoles.py, IMPERSONATION_ROLES, checked 2026-11;
#: roles/owner and roles/editor are left to no-basic-roles). Mostly Google service-agent roles.
CHECKOV_IMPERSONATION_ROLES: frozenset[str] = frozenset({
    "roles/iam.securityAdmin", "roles/iam.serviceAccountAdmin", "roles/iam.serviceAccountKeyAdmin",
    "roles/iam.serviceAccountUser", "roles/iam.serviceAccountTokenCreator", "roles/iam.workloadIdentityUser",
    "roles/iam.serviceAccountOpenIdTokenCreator", "roles/dataflow.developer", "roles/dataflow.admin",
    "roles/deploymentmanager.editor", "roles/cloudbuild.builds.editor", "roles/cloudbuild.builds.builder",
    "roles/composer.worker", "roles/run.sourceDeveloper", "roles/assuredoss.admin", "roles/securitycenter.admin",
    "roles/backupdr.computeEngineOperator",
    "roles/serverless.serviceAgent", "roles/dataproc.serviceAgent", "roles/aiplatform.customCodeServiceAgent",
    "roles/aiplatform.extensionServiceAgent", "roles/aiplatform.serviceAgent", "roles/apigateway.serviceAgent",
    "roles/apigee.serviceAgent", "roles/appengine.serviceAgent", "roles/appengineflex.serviceAgent",
    "roles/bigquerycontinuousquery.serviceAgent", "roles/bigquerydatatransfer.serviceAgent",
    "roles/bigqueryspark.serviceAgent", "roles/cloudbuild.serviceAgent", "roles/cloudconfig.serviceAgent",
    "roles/clouddeploy.serviceAgent", "roles/cloudfunctions.serviceAgent", "roles/cloudscheduler.serviceAgent",
    "roles/cloudtasks.serviceAgent", "roles/composer.serviceAgent", "roles/compute.serviceAgent",
    "roles/connectors.serviceAgent", "roles/dataflow.serviceAgent", "roles/eventarc.serviceAgent",
    "roles/integrations.serviceAgent", "roles/ml.serviceAgent", "roles/notebooks.serviceAgent",
    "roles/pubsub.serviceAgent", "roles/run.serviceAgent", "roles/sourcerepo.serviceAgent",
    "roles/workflows.serviceAgent", "roles/aiplatform.colabServiceAgent", "roles/backupdr.serviceAgent",
    "roles/batch.serviceAgent", "roles/clouddeploymentmanager.serviceAgent", "roles/cloudtpu.serviceAgent",
    "roles/compute.instanceGroupManagerServiceAgent", "roles/configdelivery.serviceAgent",
    "roles/container.serviceAgent", "roles/datapipelines.serviceAgent", "roles/dataplex.serviceAgent",
    "roles/dataprep.serviceAgent", "roles/dataproc.hubAgent", "roles/firebaseapphosting.serviceAgent",
    "roles/firebasemods.serviceAgent", "roles/gameservices.serviceAgent", "roles/genomics.serviceAgent",
    "roles/krmapihosting.anthosApiEndpointServiceAgent", "roles/krmapihosting.serviceAgent",
    "roles/lifesciences.serviceAgent", "roles/osconfig.serviceAgent", "roles/runapps.serviceAgent",
    "roles/securitycenter.securityResponseServiceAgent", "roles/workstations.serviceAgent",
    "roles/securesourcemanager.serviceAgent", "roles/vpcaccess.serviceAgent",
})


def check_project_impersonation_roles(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    out = []
    for g in r.iam_grants(rtype, props):
        if g.role in domain.IMPERSONATION_ROLES:
            if not accepted("CKV_GCP_41", rtype, props, settings) and not accepted("CKV_GCP_49", rtype, props, settings):
                out.append(f"project-level {g.role} for {_member_text(g.member)} lets it act as every service "
                           "account of the project; grant it on the training service account only "
                           "(serviceaccount.IAMMember)")
        elif g.role in CHECKOV_IMPERSONATION_ROLES and not accepted("CKV_GCP_49", rtype, props, settings):
            out.append(f"project-level {g.role} for {_member_text(g.member)} can act as or manage the project's "
                       "service accounts (checkov CKV_GCP_49); service-agent roles belong to their Google agent "
                       "only; accept such a grant in policy/exceptions.yaml with the reason, or grant a narrower role")
    return out


def _member_text(member: Any) -> str:
    return "a member computed at deploy time" if member is r.UNKNOWN else str(member)


# --------------------------------------------------------------------------------------------
# Hub cache objects and GPU quota
# --------------------------------------------------------------------------------------------

_HEXISH40 = re.compile(r"^[0-9a-fA-F]{40}$")
_DESCRIPTOR = re.compile(r"^[0-9a-f]{40}\.descriptor\.txt$")


def check_hub_cache_layout(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    name = r.get(props, "name")
    if not isinstance(name, str):
        return []
    prefix = settings.hub_cache_prefix
    parts = name.split("/")
    if name.startswith(prefix + "/"):
        rest = name[len(prefix) + 1:].split("/")
        if len(rest) == 1 and _DESCRIPTOR.match(rest[0]):
            return []       # <sha1>.descriptor.txt: what tensorflow_hub writes next to a module folder
        if len(rest) < 2 or not rest[-1]:
            return [f"object {name}: hub cache objects live in {prefix}/<sha1 of the handle>/<file>; "
                    "nothing may sit directly under the prefix"]
        if not domain.is_hub_cache_key(rest[0]):
            return [f"object {name}: folder {rest[0]!r} is not the 40-hex sha1 of a handle, so tensorflow_hub "
                    f"will not find it; upload to {prefix}/<sha1(handle)>/… (tpuctl.ground.domain.hub_object_name)"]
        return []
    if any(_HEXISH40.match(p) for p in parts[:-1]):
        return [f"object {name} looks like a hub cache file but is not under hubCachePrefix {prefix!r}; "
                f"TFHUB_CACHE_DIR=gs://BUCKET/{prefix} will not see it"]
    return []


def check_gpu_quota(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    out = []
    quota_id = r.get(props, "quotaId")
    email = r.get(props, "contactEmail")
    if email is not r.UNKNOWN and (not isinstance(email, str) or "@" not in email):
        out.append(f"quota preference {quota_id}: contactEmail is missing; Google reviews increases and writes "
                   "to that address (set quotaContactEmail)")
    value = r.get(props, "quotaConfig", "preferredValue")
    if value is r.UNKNOWN:
        return out
    try:
        preferred = int(str(value))
    except ValueError:
        out.append(f"quota preference {quota_id}: preferredValue {value!r} is not a whole number")
        return out
    is_gpu = not isinstance(quota_id, str) or "GPU" in quota_id.upper()
    if is_gpu and preferred > settings.max_gpu_quota:
        out.append(f"quota preference {quota_id}: asks for {preferred} GPUs, above the cap maxGpuQuota="
                   f"{settings.max_gpu_quota}; lower the count or raise the cap in the policy config")
    return out


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

_IAM_AND_ACL = T.IAM_TYPES | T.ACL_TYPES | frozenset({T.BUCKET_OBJECT})

RESOURCE_RULES: tuple[Rule, ...] = (
    Rule("bucket-public-access-prevention", "Buckets enforce public access prevention.", MANDATORY,
         check_public_access_prevention, types=frozenset({T.BUCKET}), checkov=("CKV_GCP_114",),
         rationale="Training data and models are private; 'enforced' blocks any later public grant, even a mistaken one."),
    Rule("bucket-uniform-access", "Buckets use uniform bucket-level access.", MANDATORY,
         check_uniform_access, types=frozenset({T.BUCKET}), checkov=("CKV_GCP_29",),
         rationale="One access system (IAM) per bucket: no per-object ACLs that drift, and IAM grants are what the access map shows."),
    Rule("no-public-members", "No allUsers/allAuthenticatedUsers in IAM or ACLs.", MANDATORY,
         check_public_members, types=_IAM_AND_ACL, checkov=("CKV_GCP_28",),
         rationale="A public member exposes training data or models to the internet."),
    Rule("no-authoritative-project-iam", "No authoritative project/folder/organization IAM (IAMPolicy, IAMBinding).",
         MANDATORY, check_authoritative_project_iam, types=T.AUTHORITATIVE_PROJECT_IAM_TYPES,
         rationale="Authoritative IAM replaces grants made by other tools and people; a mistake can lock everyone out of the project. tpuctl is additive-only."),
    Rule("additive-bucket-iam", "Bucket IAM is additive (BucketIAMMember).", ADVISORY,
         check_authoritative_bucket_iam, types=T.AUTHORITATIVE_BUCKET_IAM_TYPES,
         rationale="BucketIAMBinding/Policy remove grants that `tpuctl grant-access` or colleagues added on the next `pulumi up`."),
    Rule("no-authoritative-bucket-acl", "No authoritative ACL resources (BucketACL, DefaultObjectACL, ObjectACL).",
         MANDATORY, check_authoritative_acl, types=T.AUTHORITATIVE_ACL_TYPES,
         rationale="They replace the whole ACL and fail with HTTP 400 on uniform-access buckets."),
    Rule("acl-only-on-existing-bucket", "ACL entries only on the referenced existing data bucket in ACL mode.",
         MANDATORY, check_acl_only_on_existing_bucket, types=T.ACL_ENTRY_TYPES,
         config_keys=("existingDataBucket", "existingDataBucketAccess"),
         rationale="Buckets the stack creates use uniform access, where ACLs fail; ACLs are a migration aid for an existing fine-grained bucket."),
    Rule("acl-on-existing-bucket", "ACL entries on the existing data bucket are a stop-gap.", ADVISORY,
         check_acl_on_existing_bucket, types=T.ACL_ENTRY_TYPES,
         config_keys=("existingDataBucket", "existingDataBucketAccess"),
         rationale="Fine-grained ACLs work only while the bucket keeps uniform access off, and default-object entries only cover new objects."),
    Rule("no-basic-roles", "No roles/owner or roles/editor; no roles/viewer on the project, a folder or the organization.",
         MANDATORY, check_basic_roles, types=T.IAM_TYPES, checkov=("CKV_GCP_117", "CKV_GCP_115", "CKV_GCP_116"),
         rationale="Basic roles grant write (owner/editor) or read (viewer) access to nearly every service; a training job needs storage only. "
                   "roles/viewer for the stack's service accounts is judged by the accessMode rules."),
    Rule("project-roles-need-project-mode",
         "Project-level roles/storage.admin and roles/viewer for service accounts only in accessMode=project.",
         MANDATORY, check_project_roles_need_project_mode, types=T.PROJECT_IAM_TYPES,
         config_keys=("accessMode",), checkov=("CKV_GCP_42",),
         rationale="storage.admin at project level reaches every bucket in the project; the default bucket mode grants object roles on four buckets."),
    Rule("project-mode-broad-roles", "accessMode=project grants broad project roles.", ADVISORY,
         check_project_mode_roles, types=T.PROJECT_IAM_TYPES, config_keys=("accessMode",), checkov=("CKV_GCP_42",),
         rationale="The classic tutorial set is accepted when chosen explicitly, with the reason shown on every preview."),
    Rule("no-project-artifact-registry-roles",
         "Artifact Registry roles on the trainer image repository, not on the project (accessMode=bucket).",
         MANDATORY, check_project_artifact_registry_roles, types=T.PROJECT_IAM_TYPES, config_keys=("accessMode",),
         rationale="A project-level artifactregistry role reaches every repository of the project; pulling the "
                   "trainer image needs artifactregistry.reader on its one repository."),
    Rule("additive-repository-iam", "Repository IAM is additive (RepositoryIamMember).", ADVISORY,
         check_authoritative_repository_iam,
         types=frozenset({T.ARTIFACT_REPOSITORY_IAM_BINDING, T.ARTIFACT_REPOSITORY_IAM_POLICY}),
         rationale="RepositoryIamBinding/Policy remove readers that colleagues or other stacks added."),
    Rule("no-project-impersonation-roles",
         "No project-level roles that act as or manage service accounts (serviceAccountUser, TokenCreator, "
         "service-agent roles, ...) beyond policy/exceptions.yaml.",
         MANDATORY, check_project_impersonation_roles, types=T.PROJECT_IAM_TYPES, checkov=("CKV_GCP_41", "CKV_GCP_49"),
         rationale="At project level these let a principal act as every service account; actAs belongs on the training service account only."),
    Rule("no-admin-roles-for-service-accounts", "No project-level admin, editor or owner role for a service account.",
         MANDATORY, check_admin_roles_for_service_accounts, types=T.PROJECT_IAM_TYPES, checkov=("CKV_GCP_42",),
         rationale="Whatever runs as the account (a training job, a compromised dependency in it) could change the project's resources or IAM; roles/storage.admin is judged by the accessMode rules."),
    Rule("no-default-service-account-grants", "No grants to the Compute Engine or App Engine default service account.",
         MANDATORY, check_default_service_accounts, types=T.PROJECT_IAM_TYPES | T.HIERARCHY_IAM_TYPES,
         checkov=("CKV_GCP_46", "CKV_GCP_47", "CKV_GCP_48"),
         rationale="Every VM or app running as a default account inherits the grant; tpuctl's jobs run as the dedicated training-sa."),
    Rule("bucket-access-logs", "Buckets log access to the separate access-log bucket.", ADVISORY,
         check_access_logs, types=frozenset({T.BUCKET}), checkov=("CKV_GCP_62", "CKV_GCP_63"),
         rationale="Usage and storage logs tell later who read or changed training data and models. Advisory: "
                   "they cost a bucket and storage, so the stack turns them on with accessLogRetentionDays; the "
                   "log bucket itself is accepted in policy/exceptions.yaml."),
    Rule("bucket-versioning", "Buckets whose contents cannot be rebuilt keep object versions.", ADVISORY,
         check_bucket_versioning, types=frozenset({T.BUCKET}), checkov=("CKV_GCP_78",),
         rationale="Versioning makes an overwrite or delete of training data recoverable beyond soft delete. "
                   "Advisory: versionedBuckets may leave out data that is a copy; staging, hub-cache and the log "
                   "bucket are accepted in policy/exceptions.yaml (their files are rebuilt or expire)."),
    Rule("artifacts-bucket-versioned", "The artifacts bucket keeps object versions.", MANDATORY,
         check_artifacts_versioned, types=frozenset({T.BUCKET}), checkov=("CKV_GCP_78",),
         rationale="Models and checkpoints are the result of hours of accelerator time; versioning makes an overwrite or delete recoverable."),
    Rule("no-force-destroy", "force_destroy is off on the data and artifacts buckets.", MANDATORY,
         check_force_destroy, types=frozenset({T.BUCKET}),
         rationale="With force_destroy, `pulumi destroy` deletes the training data and trained models along with the bucket."),
    Rule("hub-cache-layout", "Hub cache objects live under <prefix>/<40 hex>/.", MANDATORY,
         check_hub_cache_layout, types=frozenset({T.BUCKET_OBJECT}), config_keys=("hubCachePrefix",),
         rationale="tensorflow_hub looks for <TFHUB_CACHE_DIR>/<sha1(handle)>/saved_model.pb; anything else is ignored and it tries to download."),
    Rule("gpu-quota-preference", "GPU quota preferences name a contact and stay under the cap.", MANDATORY,
         check_gpu_quota, types=frozenset({T.QUOTA_PREFERENCE}), config_keys=("maxGpuQuota",),
         rationale="Quota increases are reviewed by Google (contact needed) and cost money once used; the cap stops a typo like 80 for 8."),
    Rule("customer-managed-keys", "The trainer image repository and the serving Endpoint use a customer-managed "
         "key.", ADVISORY, check_customer_managed_key, types=frozenset(_CMEK_CHECKS), checkov=("CKV_GCP_84", "CKV2_GCP_24"),
         rationale="A customer-managed key lets the team revoke access to the stored images and endpoint data. "
                   "Advisory: it needs a Cloud KMS key ring the stack does not own; tpuctl's own repository and "
                   "Endpoint are accepted in policy/exceptions.yaml (they hold no training data)."),
    Rule("private-serving-endpoint", "The serving Endpoint is reachable only from a peered VPC network.", ADVISORY,
         check_private_endpoint, types=frozenset({T.VERTEX_ENDPOINT}), checkov=("CKV2_GCP_33",),
         rationale="A private Endpoint cannot be called from outside the network even with stolen credentials. "
                   "Advisory: it needs a VPC peered with Google's service network; tpuctl's Endpoint is called "
                   "through the public API with IAM and is accepted in policy/exceptions.yaml."),
    Rule("bucket-labels", "Buckets carry labels, including tpuctl-purpose.", ADVISORY,
         check_labels, types=frozenset({T.BUCKET}),
         rationale="Labels attribute storage cost; tpuctl-purpose tells the stack rule and `tpuctl plan` which bucket is data, staging, artifacts or hub-cache."),
)
