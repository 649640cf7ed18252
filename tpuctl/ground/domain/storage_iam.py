"""The four training buckets, the two access modes, and what each role or ACL entry allows on a bucket.
"""

from __future__ import annotations

import re
from typing import Iterable

from tpuctl.ground.errors import DomainError

#: The four training buckets, keyed by the purpose the user knows them by.
BUCKET_PURPOSES: tuple[str, ...] = ("data", "staging", "artifacts", "hub-cache")
#: Buckets the training job only reads, and the ones it writes.
READ_BUCKETS: tuple[str, ...] = ("data", "hub-cache")
WRITE_BUCKETS: tuple[str, ...] = ("artifacts", "staging")

ACCESS_MODES: tuple[str, ...] = ("bucket", "project")
DEFAULT_ACCESS_MODE = "bucket"

#: Bucket mode: least privilege per bucket. objectViewer is what lets TFRecords and hub models be
#: read (objects.get); legacyBucketReader adds buckets.get for code that reads bucket metadata.
BUCKET_READ_ROLES: tuple[str, ...] = ("roles/storage.objectViewer", "roles/storage.legacyBucketReader")
BUCKET_WRITE_ROLES: tuple[str, ...] = ("roles/storage.objectUser",)

#: Project mode: the seeds' project-wide set, minus roles/ml.serviceAgent (AI Platform, shut down
#: 2025-01-31). Broad: storage.admin on every bucket of the project. Checkov CKV_GCP_42/117 flag it.
PROJECT_MODE_ROLES: tuple[str, ...] = ("roles/viewer", "roles/storage.admin")

#: The roles the classic tutorials grant per bucket. NOT enough: neither grants storage.objects.get.
LEGACY_BUCKET_ROLES: tuple[str, ...] = ("roles/storage.legacyBucketReader", "roles/storage.legacyBucketWriter")

#: What the training job needs on each kind of bucket (short names, without "storage.").
REQUIRED_READ_PERMISSIONS: frozenset[str] = frozenset({"objects.list", "objects.get"})
REQUIRED_WRITE_PERMISSIONS: frozenset[str] = frozenset({"objects.create", "objects.get", "objects.delete"})

_OBJECT_ALL = frozenset(
    {"objects.create", "objects.delete", "objects.get", "objects.list", "objects.update",
     "objects.getIamPolicy", "objects.setIamPolicy", "objects.restore"}
)
_BUCKET_ALL = frozenset(
    {"buckets.create", "buckets.delete", "buckets.get", "buckets.list", "buckets.update",
     "buckets.getIamPolicy", "buckets.setIamPolicy"}
)

#: Storage permissions (without the "storage." prefix) of every predefined role this project meets.
#: Source: cloud.google.com/storage/docs/access-control/iam-roles.
ROLE_STORAGE_PERMISSIONS: dict[str, frozenset[str]] = {
    "roles/storage.objectViewer": frozenset({"objects.get", "objects.list", "folders.get", "folders.list",
                                             "managedFolders.get", "managedFolders.list"}),
    "roles/storage.objectCreator": frozenset({"objects.create", "folders.create", "managedFolders.create",
                                              "multipartUploads.create", "multipartUploads.abort",
                                              "multipartUploads.listParts"}),
    "roles/storage.objectUser": frozenset({"objects.create", "objects.delete", "objects.get", "objects.list",
                                           "objects.update", "objects.restore", "folders.create",
                                           "folders.delete", "folders.get", "folders.list", "folders.rename",
                                           "managedFolders.create", "managedFolders.delete",
                                           "managedFolders.get", "managedFolders.list",
                                           "multipartUploads.create", "multipartUploads.abort",
                                           "multipartUploads.list", "multipartUploads.listParts"}),
    "roles/storage.objectAdmin": _OBJECT_ALL | frozenset({"folders.create", "folders.delete", "folders.get",
                                                          "folders.list", "multipartUploads.create",
                                                          "multipartUploads.abort", "multipartUploads.list",
                                                          "multipartUploads.listParts"}),
    "roles/storage.legacyBucketReader": frozenset({"buckets.get", "objects.list"}),
    "roles/storage.legacyBucketWriter": frozenset({"buckets.get", "objects.list", "objects.create",
                                                   "objects.delete", "multipartUploads.create",
                                                   "multipartUploads.abort", "multipartUploads.list",
                                                   "multipartUploads.listParts"}),
    "roles/storage.legacyBucketOwner": frozenset({"buckets.get", "buckets.update", "buckets.getIamPolicy",
                                                  "buckets.setIamPolicy", "objects.list", "objects.create",
                                                  "objects.delete", "multipartUploads.create",
                                                  "multipartUploads.abort", "multipartUploads.list",
                                                  "multipartUploads.listParts"}),
    "roles/storage.legacyObjectReader": frozenset({"objects.get"}),
    "roles/storage.legacyObjectOwner": frozenset({"objects.get", "objects.update", "objects.getIamPolicy",
                                                  "objects.setIamPolicy"}),
    "roles/storage.admin": _OBJECT_ALL | _BUCKET_ALL | frozenset({"folders.create", "folders.delete",
                                                                  "folders.get", "folders.list",
                                                                  "multipartUploads.create",
                                                                  "multipartUploads.abort",
                                                                  "multipartUploads.list",
                                                                  "multipartUploads.listParts"}),
    "roles/storage.bucketViewer": frozenset({"buckets.get", "buckets.list", "buckets.getIamPolicy"}),
    # Basic roles: project viewers see bucket metadata but get no object data through this role.
    "roles/viewer": frozenset({"buckets.get", "buckets.list"}),
    "roles/editor": _OBJECT_ALL | _BUCKET_ALL,
    "roles/owner": _OBJECT_ALL | _BUCKET_ALL,
    # Service agent roles carry no data access to the project's buckets.
    "roles/cloudtpu.serviceAgent": frozenset(),
    "roles/aiplatform.customCodeServiceAgent": frozenset(),
    "roles/ml.serviceAgent": frozenset({"buckets.get", "objects.get", "objects.list"}),
    "roles/aiplatform.user": frozenset(),
    "roles/iam.serviceAccountUser": frozenset(),
}

#: Bucket ACL (fine-grained access) entries expressed as the permissions they give.
ACL_PERMISSIONS: dict[str, frozenset[str]] = {
    "bucket:READER": frozenset({"buckets.get", "objects.list"}),
    "bucket:WRITER": frozenset({"buckets.get", "objects.list", "objects.create", "objects.delete"}),
    "bucket:OWNER": frozenset({"buckets.get", "buckets.update", "objects.list", "objects.create", "objects.delete"}),
    # Default object ACL: applies to objects written after the grant (existing ones need their own entry).
    "defaultObject:READER": frozenset({"objects.get"}),
    "defaultObject:OWNER": frozenset({"objects.get", "objects.update"}),
}

#: Roles the project never grants to a training principal.
FORBIDDEN_ROLES: frozenset[str] = frozenset({"roles/owner", "roles/editor"})
#: Project-level roles accepted only in the explicit "project" access mode.
PROJECT_MODE_ONLY_ROLES: frozenset[str] = frozenset({"roles/storage.admin", "roles/viewer"})
PUBLIC_MEMBERS: frozenset[str] = frozenset({"allUsers", "allAuthenticatedUsers"})
#: Roles that let a principal act as, or mint credentials for, service accounts. Granted at project
#: level they reach every service account of the project (checkov CKV_GCP_41/49); grant them on one
#: service account instead.
IMPERSONATION_ROLES: frozenset[str] = frozenset(
    {"roles/iam.serviceAccountUser", "roles/iam.serviceAccountTokenCreator", "roles/iam.serviceAccountAdmin",
     "roles/iam.serviceAccountKeyAdmin", "roles/iam.workloadIdentityUser"}
)
#: Label every bucket the stack creates carries, value one of BUCKET_PURPOSES; policy and plan find
#: the data/staging/artifacts/hub-cache buckets by it.
PURPOSE_LABEL = "tpuctl-purpose"


def is_predefined_role(role: str) -> bool:
    return role.startswith("roles/")


def is_custom_role(role: str) -> bool:
    return bool(re.match(r"^(projects|organizations)/[^/]+/roles/[A-Za-z0-9_.]{3,64}$", role))


def validate_role(role: str) -> None:
    """Predefined roles are checked offline against the catalogue; custom roles need an API lookup."""
    if is_custom_role(role):
        return
    if not is_predefined_role(role):
        raise DomainError(f"role {role!r} is neither 'roles/NAME' nor 'projects/P/roles/NAME'")
    if role not in ROLE_STORAGE_PERMISSIONS:
        raise DomainError(f"role {role!r} is not in tpuctl's role catalogue; use a predefined storage role or a custom role")


def roles_for(access_mode: str, bucket_purpose: str) -> tuple[str, ...]:
    """Bucket IAM roles a training principal gets on a bucket of ``bucket_purpose`` in bucket mode."""
    validate_access_mode(access_mode)
    if bucket_purpose in READ_BUCKETS:
        return BUCKET_READ_ROLES
    if bucket_purpose in WRITE_BUCKETS:
        return BUCKET_WRITE_ROLES
    raise DomainError(f"unknown bucket purpose {bucket_purpose!r}; expected one of {', '.join(BUCKET_PURPOSES)}")


def validate_access_mode(mode: str) -> None:
    if mode not in ACCESS_MODES:
        raise DomainError(f"access mode {mode!r} must be one of: {', '.join(ACCESS_MODES)}")


def storage_permissions(roles: Iterable[str]) -> frozenset[str]:
    """Union of the storage permissions granted by ``roles`` (unknown roles give nothing)."""
    out: set[str] = set()
    for role in roles:
        out |= ROLE_STORAGE_PERMISSIONS.get(role, frozenset())
        out |= ACL_PERMISSIONS.get(role, frozenset())
    return frozenset(out)


def required_permissions(bucket_purpose: str) -> frozenset[str]:
    return REQUIRED_READ_PERMISSIONS if bucket_purpose in READ_BUCKETS else REQUIRED_WRITE_PERMISSIONS


def access_summary(permissions: Iterable[str]) -> str:
    """Render permissions as the read/list/write triple shown in access maps, e.g. ``read,list``."""
    perms = set(permissions)
    parts = []
    if "objects.get" in perms:
        parts.append("read")
    if "objects.list" in perms:
        parts.append("list")
    if {"objects.create", "objects.delete"} <= perms:
        parts.append("write")
    elif "objects.create" in perms:
        parts.append("create")
    return ",".join(parts) or "-"
