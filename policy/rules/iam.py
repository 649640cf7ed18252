"""IAM and ACL rules: additive grants only, no public members, no basic or admin roles, roles by access mode."""

from __future__ import annotations

import re
from typing import Any

from ground import domain
from ground import resources as r
from ground import tokens as T
from ground.settings import StackSettings
from policy.exceptions import accepted
from policy.rules.base import ADVISORY, MANDATORY, resource_rule

_IAM_AND_ACL = T.IAM_TYPES | T.ACL_TYPES | frozenset({T.BUCKET_OBJECT})



@resource_rule("no-public-members",
               "No allUsers/allAuthenticatedUsers in IAM or ACLs.",
               MANDATORY,
               types=_IAM_AND_ACL,
               checkov=("CKV_GCP_28",),
               rationale="A public member exposes training data or models to the internet.")
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


@resource_rule("no-authoritative-project-iam",
               "No authoritative project/folder/organization IAM (IAMPolicy, IAMBinding).",
               MANDATORY,
               types=T.AUTHORITATIVE_PROJECT_IAM_TYPES,
               rationale="Authoritative IAM replaces grants made by other tools and people; a mistake can lock everyone out of the project. tpuctl is additive-only.")
def check_authoritative_project_iam(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    kind = rtype.rsplit(":", 1)[-1]
    scope = rtype.split(":")[1].split("/")[0]
    what = "replaces the whole IAM policy" if kind == "IAMPolicy" else f"owns every member of {r.get(props, 'role')}"
    return [f"{scope} {kind} is authoritative: it {what} and removes grants made by others (and can lock "
            "people out); use the additive IAMMember"]


@resource_rule("additive-bucket-iam",
               "Bucket IAM is additive (BucketIAMMember).",
               ADVISORY,
               types=T.AUTHORITATIVE_BUCKET_IAM_TYPES,
               rationale="BucketIAMBinding/Policy remove grants that `tpuctl grant-access` or colleagues added on the next `pulumi up`.")
def check_authoritative_bucket_iam(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    bucket = r.strip_bucket(r.get(props, "bucket"))
    kind = rtype.rsplit(":", 1)[-1]
    return [f"{kind} on bucket {bucket} is authoritative: it removes grants `tpuctl grant-access` or others "
            "added; use BucketIAMMember"]


@resource_rule("no-authoritative-bucket-acl",
               "No authoritative ACL resources (BucketACL, DefaultObjectACL, ObjectACL).",
               MANDATORY,
               types=T.AUTHORITATIVE_ACL_TYPES,
               rationale="They replace the whole ACL and fail with HTTP 400 on uniform-access buckets.")
def check_authoritative_acl(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    kind = rtype.rsplit(":", 1)[-1]
    bucket = r.strip_bucket(r.get(props, "bucket"))
    return [f"{kind} on bucket {bucket} replaces the whole ACL (and fails with HTTP 400 on uniform-access "
            "buckets); use bucket IAM, or one BucketAccessControl entry on a referenced existing bucket"]


@resource_rule("acl-only-on-existing-bucket",
               "ACL entries only on the referenced existing data bucket in ACL mode.",
               MANDATORY,
               types=T.ACL_ENTRY_TYPES,
               config_keys=("existingDataBucket", "existingDataBucketAccess"),
               rationale="Buckets the stack creates use uniform access, where ACLs fail; ACLs are a migration aid for an existing fine-grained bucket.")
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


@resource_rule("acl-on-existing-bucket",
               "ACL entries on the existing data bucket are a stop-gap.",
               ADVISORY,
               types=T.ACL_ENTRY_TYPES,
               config_keys=("existingDataBucket", "existingDataBucketAccess"),
               rationale="Fine-grained ACLs work only while the bucket keeps uniform access off, and default-object entries only cover new objects.")
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
                     T.ORG_IAM_MEMBER: "CKV_GCP_115", T.ORG_IAM_BINDING: "CKV_GCP_115",
                     T.ORG_IAM_POLICY: "CKV_GCP_115", T.FOLDER_IAM_MEMBER: "CKV_GCP_116",
                     T.FOLDER_IAM_BINDING: "CKV_GCP_116", T.FOLDER_IAM_POLICY: "CKV_GCP_116"}


@resource_rule("no-basic-roles",
               "No roles/owner or roles/editor; no roles/viewer on the project, a folder or the organization.",
               MANDATORY,
               types=T.IAM_TYPES,
               checkov=tuple(dict.fromkeys(_CHECKOV_BASIC_ID.values())),   # the ids, once: from the table above
               rationale="Basic roles grant write (owner/editor) or read (viewer) access to nearly every service; a training job needs storage only. "
                         "roles/viewer for the stack's service accounts is judged by the accessMode rules.")
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


@resource_rule("no-admin-roles-for-service-accounts",
               "No project-level admin, editor or owner role for a service account.",
               MANDATORY,
               types=T.PROJECT_IAM_TYPES,
               checkov=("CKV_GCP_42",),
               rationale="Whatever runs as the account (a training job, a compromised dependency in it) could change the project's resources or IAM; roles/storage.admin is judged by the accessMode rules.")
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


@resource_rule("no-default-service-account-grants",
               "No grants to the Compute Engine or App Engine default service account.",
               MANDATORY,
               types=T.PROJECT_IAM_TYPES | T.HIERARCHY_IAM_TYPES,
               checkov=("CKV_GCP_46", "CKV_GCP_47", "CKV_GCP_48"),
               rationale="Every VM or app running as a default account inherits the grant; tpuctl's jobs run as the dedicated training-sa.")
def check_default_service_accounts(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    return [f"{g.role} granted to the default service account {g.member} (checkov CKV_GCP_46/47/48): every VM or "
            "App Engine app that runs as it gets the grant; use the dedicated training service account "
            "(principal training-sa)"
            for g in r.iam_grants(rtype, props)
            if isinstance(g.member, str) and _DEFAULT_SA.match(g.member.split(":", 1)[-1])]


def _project_mode_grants(rtype: str, props: Any) -> list[r.Grant]:
    return [g for g in r.iam_grants(rtype, props)
            if g.role in domain.PROJECT_MODE_ONLY_ROLES and r.is_service_account_member(g.member)]


@resource_rule("project-roles-need-project-mode",
               "Project-level roles/storage.admin and roles/viewer for service accounts only in accessMode=project.",
               MANDATORY,
               types=T.PROJECT_IAM_TYPES,
               config_keys=("accessMode",),
               checkov=("CKV_GCP_42",),
               rationale="storage.admin at project level reaches every bucket in the project; the default bucket mode grants object roles on four buckets.")
def check_project_roles_need_project_mode(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    if settings.access_mode == "project":
        return []
    return [f"project-level {g.role} for {_member_text(g.member)} reaches every bucket of the project; only the "
            f"explicit accessMode=project allows it (now {settings.access_mode!r}); grant bucket roles instead"
            for g in _project_mode_grants(rtype, props)]


@resource_rule("project-mode-broad-roles",
               "accessMode=project grants broad project roles.",
               ADVISORY,
               types=T.PROJECT_IAM_TYPES,
               config_keys=("accessMode",),
               checkov=("CKV_GCP_42",),
               rationale="The classic tutorial set is accepted when chosen explicitly, with the reason shown on every preview.")
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


@resource_rule("no-project-artifact-registry-roles",
               "Artifact Registry roles on the trainer image repository, not on the project (accessMode=bucket).",
               MANDATORY,
               types=T.PROJECT_IAM_TYPES,
               config_keys=("accessMode",),
               rationale="A project-level artifactregistry role reaches every repository of the project; pulling the "
                         "trainer image needs artifactregistry.reader on its one repository.")
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


@resource_rule("additive-repository-iam",
               "Repository IAM is additive (RepositoryIamMember).",
               ADVISORY,
               types=frozenset({T.ARTIFACT_REPOSITORY_IAM_BINDING, T.ARTIFACT_REPOSITORY_IAM_POLICY}),
               rationale="RepositoryIamBinding/Policy remove readers that colleagues or other stacks added.")
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


@resource_rule("no-project-impersonation-roles",
               "No project-level roles that act as or manage service accounts (serviceAccountUser, TokenCreator, "
               "service-agent roles, ...) beyond policy/exceptions.yaml.",
               MANDATORY,
               types=T.PROJECT_IAM_TYPES,
               checkov=("CKV_GCP_41", "CKV_GCP_49"),
               rationale="At project level these let a principal act as every service account; actAs belongs on the training service account only.")
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
