"""The four training buckets, the two access modes, and what each role or ACL entry allows on a bucket.
"""

from __future__ import annotations

import functools as _functools
import json as _json
import re
from collections.abc import Iterable
from importlib import resources as _resources
from typing import Any

from ground.errors import DomainError

#: The four training buckets, keyed by the purpose the user knows them by.
BUCKET_PURPOSES: tuple[str, ...] = ("data", "staging", "artifacts", "hub-cache")
#: Purpose label of the access-log bucket (accessLogRetentionDays > 0): not a training bucket, no training
#: principal gets access; GCS's log writer does.
ACCESS_LOG_PURPOSE = "access-logs"
#: Purpose label of the Artifact Registry repository of the trainer image (in the access map next to buckets).
TRAINER_IMAGES_PURPOSE = "trainer-images"
#: The permission that lets a principal pull an image (roles/artifactregistry.reader has it).
PULL_PERMISSION = "artifactregistry.repositories.downloadArtifacts"
#: Principals that pull the trainer image, and where (infra/registry.py grants them the reader role; doctor checks it).
#: Vertex AI: "you can't configure a custom service account to pull images from Artifact Registry. Vertex AI uses
#:   the default service account to pull the images" (https://cloud.google.com/vertex-ai/docs/general/custom-service-account,
#:   "Configure a custom service account", read 2026-11-24) - so the job's service account (the training SA) is NOT
#:   the puller. The same page names the Vertex AI Custom Code Service Agent as a job's default account; that this
#:   agent (and not the primary gcp-sa-aiplatform agent) is the one that pulls is NOT stated there
#:   [unverified: vertex-image-puller].
#: TPU VMs (`tpuctl train --target tpu-vm`): the startup script runs `docker pull` on each host with the VM's attached service
#:   account, which tpuctl sets to the training SA (services/tpuvm/plan.py) - the one place it needs the reader role.
IMAGE_PULLERS: dict[str, str] = {
    "training-sa": "TPU VMs (docker pull on the host as the VM's service account)",
    "vertex-agent": "Vertex AI jobs (Vertex pulls with its service agent, never the job's service account; that "
                    "it is this agent is unconfirmed)",
}
#: The image build's identity (`tpuctl image build`): a service account of its own, the *image builder*, not the
#: training account. Sources (read 2026-11-27):
#: - "we recommend following the principle of least privilege by assigning permissions and roles to service accounts
#:   scoped to the task they perform. For example, you can use one service account for building and pushing images to
#:   Artifact Registry" (https://cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts);
#: - "if you are using a user-specified service account to run builds, grant the Artifact Registry Writer role to the
#:   build service account" (https://cloud.google.com/build/docs/building/store-artifacts-in-artifact-registry):
#:   pushing ``images`` needs ``artifactregistry.repositories.uploadArtifacts`` - granted on the one repository;
#: - a build that runs as a user-specified account must store its logs in Cloud Logging or a user bucket, and for
#:   Cloud Logging the account needs the Logs Writer role ``roles/logging.logWriter`` (same page, "Set up build
#:   logs"; tpuctl's builds use CLOUD_LOGGING_ONLY) - a project-level role (logs are written to the project);
#: - Cloud Build fetches a Cloud Storage build source as the build's service account (the build context tpuctl
#:   uploads to the staging bucket): ``storage.objects.get``/``list`` there, ``roles/storage.objectViewer``
#:   [unverified: builder-source-read] (Cloud Build's own fetch errors name the build account; no Google page says it).
#: Why not the training account: the account that runs training jobs (user code) would otherwise hold write access
#: to the repository its own jobs pull from, and the builder needs none of the training buckets.
IMAGE_BUILDER = "image-builder"
DEFAULT_IMAGE_BUILDER_SA_ID = "tpuctl-builder"
PUSH_PERMISSION = "artifactregistry.repositories.uploadArtifacts"
LOG_WRITE_PERMISSION = "logging.logEntries.create"
#: role -> where it is granted ("repository", "project", or a bucket purpose)
IMAGE_BUILDER_ROLES: dict[str, str] = {
    "roles/artifactregistry.writer": TRAINER_IMAGES_PURPOSE,
    "roles/logging.logWriter": "project",
    "roles/storage.objectViewer": "staging",
}
#: What the training service account (``principals.TRAINING_SA_KEYWORD``) needs on the project, in both access modes,
#: beside its bucket grants: role -> why (infra/access.py grants it; doctor, plan and the stack rule
#: ``training-account-writes-logs`` check it). Writing a log entry is ``logging.logEntries.create``
#: (``LOG_WRITE_PERMISSION``): ``roles/logging.logWriter`` "provides the permissions to write log entries" (Google's
#: Cloud Logging role list, cloud.google.com/iam/docs/roles-permissions/logging, a stored copy read 2026-11-27) and
#: holds that one permission only (the role snapshot below). Log entries are written to the project, so it is
#: granted there. Who writes with it:
#: - TPU VM hosts: the trainer container logs through Docker's ``gcplogs`` driver, which on a Google Cloud VM takes its
#:   credentials from the metadata server (https://docs.docker.com/engine/logging/drivers/gcplogs/, read
#:   2026-11-27), i.e. the VM's service account, which tpuctl sets to the training account;
#: - Vertex AI jobs that run as the training account (``CustomJob.job_spec.service_account``): that their output reaches
#:   Cloud Logging with the job's account [unverified: vertex-job-log-writer] - Google's custom service account page
#:   (https://cloud.google.com/vertex-ai/docs/general/custom-service-account, read 2026-11-27) names no logging role;
#:   the account a job runs as by default, the custom code agent, holds ``logging.logEntries.create`` through
#:   roles/aiplatform.customCodeServiceAgent (role snapshot), and the training account replaces it.
#: Without it the run still trains; only its log lines never reach Cloud Logging (`tpuctl logs` and the cloud live
#: display have nothing to read; a TPU VM host's output stays in its journal).
TRAINING_SA_PROJECT_ROLES: dict[str, str] = {
    "roles/logging.logWriter": "its TPU VM hosts' and Vertex AI jobs' logs reach Cloud Logging through it",
}
#: Facts of this module that no Google page confirmed (``[unverified: id]`` where used; docs/access-modes.md).
UNVERIFIED_IAM_FACTS: dict[str, str] = {
    "vertex-image-puller": "the Vertex AI agent that pulls a job's image is the custom code agent (gcp-sa-aiplatform-cc)",
    "builder-source-read": "Cloud Build reads a Cloud Storage build source as the build's service account "
                           "(storage.objects.get/list on the staging bucket)",
    "vertex-job-log-writer": "a Vertex AI job's output reaches Cloud Logging with the job's service account (a "
                             "custom one needs logging.logEntries.create)",
    "convenience-bindings": "a new bucket's IAM policy holds the projectOwner/Editor/Viewer convenience bindings "
                            "of DEFAULT_CONVENIENCE_BINDINGS (doctor reads the real policy instead)",
}
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

#: Google's predefined role definitions, checked in: ``data/predefined_roles.json`` holds role ->
#: includedPermissions (the full list, every service) for every role string in tpuctl's code, docs and
#: tests (``tests/ops/test_domain.py`` scans the tree and fails on a role the snapshot lacks). Source:
#: the ``gcloud iam roles describe`` dumps of github.com/iann0036/iam-dataset (gcp/roles/*.json) at
#: commit 2073fa52ac008a45477aa0b1b4580cd99135bf60 (2026-08-22), copied 2026-11-22; the file names
#: its source. To add a role: copy gcp/roles/<ID>.json of a newer commit into the snapshot and update
#: "source". Read with the standard library only (ground layer).
#: The names below (PREDEFINED_ROLES_SOURCE, ROLE_PERMISSIONS, ROLE_STORAGE_PERMISSIONS, ACL_PERMISSIONS) are read
#: from the 2 MB snapshot on first use (module ``__getattr__``), not at import: `tpuctl --help` never parses it.
#:
#: ROLE_PERMISSIONS: every permission of every snapshotted predefined role (full names, e.g.
#: ``aiplatform.customJobs.create``). ROLE_STORAGE_PERMISSIONS: its storage part, without the "storage." prefix
#: (``objects.get``…). Facts worth knowing (all from the snapshot): roles/viewer has ``buckets.list`` but not
#: ``buckets.get``; roles/editor and roles/owner carry no ``objects.*`` at all (basic-role members reach objects only
#: through a bucket's convenience bindings, see DEFAULT_CONVENIENCE_BINDINGS); roles/storage.bucketViewer is
#: ``buckets.get`` + ``buckets.list`` only; the service-agent roles roles/aiplatform.customCodeServiceAgent and
#: roles/ml.serviceAgent carry broad storage permissions. ACL_PERMISSIONS: what each ACL entry grants (below).
SNAPSHOT_FACTS = ("PREDEFINED_ROLES_SOURCE", "ROLE_PERMISSIONS", "ROLE_STORAGE_PERMISSIONS", "ACL_PERMISSIONS")


@_functools.cache
def _facts() -> dict[str, Any]:
    snapshot = _json.loads(
        _resources.files("ground.domain").joinpath("data/predefined_roles.json").read_text(encoding="utf-8"))
    roles = {role: frozenset(entry["includedPermissions"]) for role, entry in snapshot["roles"].items()}
    storage = {role: frozenset(p[len("storage."):] for p in perms if p.startswith("storage."))
               for role, perms in roles.items()}
    return {
        "PREDEFINED_ROLES_SOURCE": {**snapshot["source"], "retrieved": snapshot["retrieved"]},
        "ROLE_PERMISSIONS": roles,
        "ROLE_STORAGE_PERMISSIONS": storage,
        "ACL_PERMISSIONS": {key: storage[role] for key, role in ACL_EQUIVALENT_ROLES.items()},
    }


def __getattr__(name: str) -> Any:
    if name in SNAPSHOT_FACTS:
        return _facts()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Bucket ACL (fine-grained access) entries as the legacy role Google defines as their equivalent
#: (Cloud Storage JSON API, Policy.bindings.role: "legacyBucketReader — equivalent to an ACL entry on a
#: bucket with the READER role" …; cloud.google.com/storage/docs/access-control/iam#acls). Default
#: object ACL entries apply to objects written after the grant (existing ones need their own entry).
ACL_EQUIVALENT_ROLES: dict[str, str] = {
    "bucket:READER": "roles/storage.legacyBucketReader",
    "bucket:WRITER": "roles/storage.legacyBucketWriter",
    "bucket:OWNER": "roles/storage.legacyBucketOwner",
    "defaultObject:READER": "roles/storage.legacyObjectReader",
    "defaultObject:OWNER": "roles/storage.legacyObjectOwner",
}

#: Basic roles and the bucket-policy member type ("convenience value") that stands for their holders:
#: ``projectViewer:PROJECT`` in a bucket policy means "whoever holds roles/viewer on PROJECT".
BASIC_ROLE_CONVENIENCE_MEMBERS: dict[str, str] = {
    "roles/viewer": "projectViewer",
    "roles/editor": "projectEditor",
    "roles/owner": "projectOwner",
}
#: The convenience bindings Cloud Storage writes into the IAM policy of a new bucket with uniform
#: bucket-level access (every bucket tpuctl creates): owners and editors get legacyBucketOwner +
#: legacyObjectOwner, viewers legacyBucketReader + legacyObjectReader [unverified: convenience-bindings]: not
#: checked against a Google documentation page (the page could not be retrieved when this was written, 2026-11-22); it is the
#: policy `gcloud storage buckets get-iam-policy` shows for a new bucket, as seen in public exports of
#: live bucket policies. ``tpuctl doctor`` reads the real bucket policy instead of assuming it.
DEFAULT_CONVENIENCE_BINDINGS: dict[str, tuple[str, ...]] = {
    "projectOwner": ("roles/storage.legacyBucketOwner", "roles/storage.legacyObjectOwner"),
    "projectEditor": ("roles/storage.legacyBucketOwner", "roles/storage.legacyObjectOwner"),
    "projectViewer": ("roles/storage.legacyBucketReader", "roles/storage.legacyObjectReader"),
}


def convenience_member_type(member: str) -> str | None:
    """``projectViewer`` for ``projectViewer:my-proj`` (or ``projectViewer:123``), else None."""
    kind, sep, _ = member.partition(":")
    return kind if sep and kind in DEFAULT_CONVENIENCE_BINDINGS else None


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
    if role not in _facts()["ROLE_STORAGE_PERMISSIONS"]:
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
    """Union of the storage permissions granted by ``roles`` or ACL keys (unknown ones give nothing)."""
    out: set[str] = set()
    for role in roles:
        out |= _facts()["ROLE_STORAGE_PERMISSIONS"].get(role, frozenset())
        out |= _facts()["ACL_PERMISSIONS"].get(role, frozenset())
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
