"""Facts about Google Cloud that infra/, policy/, bootstrap/ and the CLI all ask.

Pure Python on purpose: no pulumi, no google-cloud client, no TensorFlow. Every
function here either returns a value or raises ``DomainError`` with a one-line
message that says what to fix.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping


class DomainError(ValueError):
    """A value breaks a Google Cloud naming or catalogue rule. ``str()`` is the user message."""


# --------------------------------------------------------------------------------------------
# Names and formats
# --------------------------------------------------------------------------------------------

_BUCKET_CHARS = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")
_PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_SA_ACCOUNT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_ZONE = re.compile(r"^([a-z]+-[a-z]+[0-9]+)-[a-z]$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")

# Regions where Compute Engine runs today. A region outside this list is almost always a typo
# ("us-central" / "us-centra1"); a brand-new region can be added here in one line.
REGIONS: frozenset[str] = frozenset(
    {
        "africa-south1",
        "asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2", "asia-northeast3",
        "asia-south1", "asia-south2", "asia-southeast1", "asia-southeast2",
        "australia-southeast1", "australia-southeast2",
        "europe-central2", "europe-north1", "europe-north2", "europe-southwest1", "europe-west1",
        "europe-west2", "europe-west3", "europe-west4", "europe-west6", "europe-west8",
        "europe-west9", "europe-west10", "europe-west12",
        "me-central1", "me-central2", "me-west1",
        "northamerica-northeast1", "northamerica-northeast2", "northamerica-south1",
        "southamerica-east1", "southamerica-west1",
        "us-central1", "us-east1", "us-east4", "us-east5", "us-south1", "us-west1", "us-west2",
        "us-west3", "us-west4",
    }
)


def bucket_name_from(value: str) -> str:
    """Accept ``name``, ``gs://name`` or ``gs://name/path`` and return the validated name."""
    name = value.strip()
    if name.startswith("gs://"):
        name = name[len("gs://"):].split("/", 1)[0]
    validate_bucket_name(name)
    return name


def validate_bucket_name(name: str) -> None:
    """GCS bucket naming rules (cloud.google.com/storage/docs/buckets#naming)."""
    if not name:
        raise DomainError("bucket name is empty")
    if "." in name:
        if len(name) > 222 or any(not 1 <= len(part) <= 63 for part in name.split(".")):
            raise DomainError(
                f"bucket name {name!r}: dotted names may be up to 222 characters with each "
                "dot-separated part 1-63 characters"
            )
    elif not 3 <= len(name) <= 63:
        raise DomainError(f"bucket name {name!r} must be 3-63 characters long (it is {len(name)})")
    if not _BUCKET_CHARS.match(name):
        raise DomainError(
            f"bucket name {name!r} may only contain lowercase letters, digits, '-', '_' and '.', "
            "and must start and end with a letter or digit"
        )
    if name.startswith("goog") or "google" in name or "g00gle" in name:
        raise DomainError(f"bucket name {name!r} must not start with 'goog' or contain 'google'")
    try:
        ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        raise DomainError(f"bucket name {name!r} must not look like an IP address")
    if ".." in name or ".-" in name or "-." in name:
        raise DomainError(f"bucket name {name!r} must not contain '..', '.-' or '-.'")


def validate_project_id(project: str) -> None:
    if not _PROJECT_ID.match(project or ""):
        raise DomainError(
            f"project id {project!r} must be 6-30 characters: lowercase letters, digits and "
            "hyphens, starting with a letter and not ending with a hyphen"
        )


def validate_region(region: str) -> None:
    if not _REGION.match(region or ""):
        raise DomainError(f"region {region!r} is not a region name like 'us-central1'")
    if region not in REGIONS:
        raise DomainError(f"region {region!r} is not a Google Cloud region (e.g. us-central1, europe-west4)")


def validate_zone(zone: str, region: str | None = None) -> None:
    m = _ZONE.match(zone or "")
    if not m:
        raise DomainError(f"zone {zone!r} is not a zone name like 'us-central1-a'")
    validate_region(m.group(1))
    if region is not None and m.group(1) != region:
        raise DomainError(f"zone {zone!r} is not in region {region!r}")


def validate_account_id(account_id: str) -> None:
    if not _SA_ACCOUNT_ID.match(account_id or ""):
        raise DomainError(
            f"service account id {account_id!r} must be 6-30 characters: lowercase letters, digits "
            "and hyphens, starting with a letter and not ending with a hyphen"
        )


def validate_labels(labels: Mapping[str, str]) -> None:
    if len(labels) > 64:
        raise DomainError("at most 64 labels are allowed")
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise DomainError(
                f"label key {key!r} must start with a lowercase letter and contain only lowercase "
                "letters, digits, '_' and '-' (max 63)"
            )
        if not _LABEL_VALUE.match(str(value)):
            raise DomainError(
                f"label {key}={value!r}: values may contain only lowercase letters, digits, '_' and '-' (max 63)"
            )


def default_bucket_name(prefix: str, project: str, purpose: str) -> str:
    """``<prefix>-<project>-<purpose>``; bucket names are global, so the project id keeps them unique."""
    return f"{prefix}-{project}-{purpose}"


# --------------------------------------------------------------------------------------------
# Buckets, access modes and roles
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Principals and service agents
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AgentKind:
    keyword: str
    description: str
    service: str          # API whose service identity this is (generateServiceIdentity target)
    email_format: str     # str.format with project_number
    project_role: str | None = None  # the agent's own service-agent role, when Google does not grant it


SERVICE_AGENTS: dict[str, AgentKind] = {
    "tpu-agent": AgentKind(
        "tpu-agent", "Cloud TPU service agent (TPU nodes)", "tpu.googleapis.com",
        "service-{project_number}@cloud-tpu.iam.gserviceaccount.com",
    ),
    "tpu-vm-agent": AgentKind(
        "tpu-vm-agent", "Cloud TPU VM service agent", "tpu.googleapis.com",
        "service-{project_number}@gcp-sa-tpu.iam.gserviceaccount.com", "roles/cloudtpu.serviceAgent",
    ),
    "vertex-agent": AgentKind(
        "vertex-agent", "Vertex AI custom code service agent", "aiplatform.googleapis.com",
        "service-{project_number}@gcp-sa-aiplatform-cc.iam.gserviceaccount.com",
    ),
}
TRAINING_SA_KEYWORD = "training-sa"
PRINCIPAL_KEYWORDS: tuple[str, ...] = (*SERVICE_AGENTS, TRAINING_SA_KEYWORD)
DEFAULT_TRAINING_SA_ID = "tpuctl-trainer"

_EMAIL = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$")
_MEMBER_KINDS = ("user", "serviceAccount", "group", "domain", "principal", "principalSet")


def agent_email(keyword: str, project_number: str | int) -> str:
    if keyword not in SERVICE_AGENTS:
        raise DomainError(f"unknown service agent {keyword!r}; expected one of {', '.join(SERVICE_AGENTS)}")
    number = str(project_number)
    if not number.isdigit():
        raise DomainError(f"project number {project_number!r} must be digits")
    return SERVICE_AGENTS[keyword].email_format.format(project_number=number)


def training_sa_email(project: str, account_id: str = DEFAULT_TRAINING_SA_ID) -> str:
    validate_account_id(account_id)
    return f"{account_id}@{project}.iam.gserviceaccount.com"


def member_for_email(email: str) -> str:
    """IAM member string for an e-mail: service accounts get ``serviceAccount:``, others ``user:``."""
    if not _EMAIL.match(email):
        raise DomainError(f"{email!r} is not an e-mail address")
    kind = "serviceAccount" if email.endswith(".gserviceaccount.com") else "user"
    return f"{kind}:{email}"


def classify_principal(value: str) -> tuple[str, str]:
    """Sort a ``--principal`` value into ``("keyword", k)``, ``("member", m)``.

    Keywords need the project (number) to resolve; e-mails and member strings are used as given.
    """
    value = value.strip()
    if value in PRINCIPAL_KEYWORDS:
        return "keyword", value
    if ":" in value:
        kind, _, rest = value.partition(":")
        if kind not in _MEMBER_KINDS or not rest:
            raise DomainError(
                f"principal {value!r}: member strings look like serviceAccount:EMAIL, user:EMAIL, "
                "group:EMAIL or domain:NAME"
            )
        if kind in PUBLIC_MEMBERS:
            raise DomainError(f"principal {value!r} would make data public")
        return "member", value
    if value in PUBLIC_MEMBERS:
        raise DomainError(f"principal {value!r} would make the bucket public; tpuctl never grants it")
    if "@" in value:
        return "member", member_for_email(value)
    raise DomainError(
        f"unknown principal {value!r}; use one of {', '.join(PRINCIPAL_KEYWORDS)}, an e-mail or a member string"
    )


# --------------------------------------------------------------------------------------------
# APIs
# --------------------------------------------------------------------------------------------

#: APIs the training setup needs. Enabled by infra/ and bootstrap/, never disabled on destroy.
REQUIRED_APIS: tuple[str, ...] = (
    "tpu.googleapis.com",
    "aiplatform.googleapis.com",
    "storage.googleapis.com",
    "iam.googleapis.com",
    "cloudquotas.googleapis.com",
    "serviceusage.googleapis.com",
    "compute.googleapis.com",
)
#: APIs Pulumi itself needs before the first `pulumi up` (state bucket, resource manager, usage).
BOOTSTRAP_APIS: tuple[str, ...] = (
    "cloudresourcemanager.googleapis.com",
    "serviceusage.googleapis.com",
    "storage.googleapis.com",
    "iam.googleapis.com",
)


# --------------------------------------------------------------------------------------------
# Accelerators: GPUs (quota ids, Vertex enums) and TPUs (Vertex machine specs)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuType:
    name: str                 # Compute Engine accelerator type, e.g. nvidia-tesla-t4
    short: str                # CLI short name: t4
    vertex_accelerator: str   # aiplatform AcceleratorType enum name
    quota_id: str             # Cloud Quotas per-region quota id (compute.googleapis.com)
    machine_types: Mapping[int, str]  # GPU count -> smallest machine type Vertex accepts with it
    regions: frozenset[str]


_N1 = {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32", 8: "n1-standard-64"}

GPU_TYPES: dict[str, GpuType] = {
    g.name: g
    for g in (
        GpuType("nvidia-tesla-t4", "t4", "NVIDIA_TESLA_T4", "NVIDIA-T4-GPUS-per-project-region", _N1,
                frozenset({"us-central1", "us-east1", "us-east4", "us-west1", "us-west2", "us-west4",
                           "europe-west1", "europe-west2", "europe-west3", "europe-west4",
                           "asia-east1", "asia-northeast1", "asia-northeast3", "asia-south1",
                           "asia-southeast1", "australia-southeast1", "northamerica-northeast1",
                           "southamerica-east1"})),
        GpuType("nvidia-tesla-v100", "v100", "NVIDIA_TESLA_V100", "NVIDIA-V100-GPUS-per-project-region", _N1,
                frozenset({"us-central1", "us-east1", "us-west1", "europe-west4", "asia-east1"})),
        GpuType("nvidia-tesla-p100", "p100", "NVIDIA_TESLA_P100", "NVIDIA-P100-GPUS-per-project-region",
                {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32"},
                frozenset({"us-central1", "us-east1", "us-west1", "europe-west1", "europe-west4", "asia-east1"})),
        GpuType("nvidia-l4", "l4", "NVIDIA_L4", "NVIDIA-L4-GPUS-per-project-region",
                {1: "g2-standard-8", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"},
                frozenset({"us-central1", "us-east1", "us-east4", "us-west1", "us-west4", "europe-west1",
                           "europe-west2", "europe-west3", "europe-west4", "asia-east1", "asia-northeast1",
                           "asia-southeast1"})),
        GpuType("nvidia-tesla-a100", "a100", "NVIDIA_TESLA_A100", "NVIDIA-A100-GPUS-per-project-region",
                {1: "a2-highgpu-1g", 2: "a2-highgpu-2g", 4: "a2-highgpu-4g", 8: "a2-highgpu-8g"},
                frozenset({"us-central1", "us-east1", "us-west1", "us-west3", "us-west4", "europe-west4",
                           "asia-northeast1", "asia-southeast1"})),
        GpuType("nvidia-a100-80gb", "a100-80gb", "NVIDIA_A100_80GB", "NVIDIA-A100-80GB-GPUS-per-project-region",
                {1: "a2-ultragpu-1g", 2: "a2-ultragpu-2g", 4: "a2-ultragpu-4g", 8: "a2-ultragpu-8g"},
                frozenset({"us-central1", "us-east4", "us-east5", "europe-west4", "asia-southeast1"})),
        GpuType("nvidia-h100-80gb", "h100", "NVIDIA_H100_80GB", "NVIDIA-H100-GPUS-per-project-region",
                {8: "a3-highgpu-8g"},
                frozenset({"us-central1", "us-east4", "us-east5", "us-west1", "europe-west4", "asia-southeast1"})),
    )
}
GPU_BY_SHORT: dict[str, GpuType] = {g.short: g for g in GPU_TYPES.values()}
#: Project-wide GPU quota (all regions) that every regional GPU request also needs.
GPUS_ALL_REGIONS_QUOTA_ID = "GPUS-ALL-REGIONS-per-project"
QUOTA_SERVICE = "compute.googleapis.com"
DEFAULT_MAX_GPU_QUOTA = 16


def gpu_type(name: str) -> GpuType:
    """Look up a GPU by Compute Engine name (nvidia-tesla-t4) or short name (t4)."""
    key = name.strip().lower()
    if key in GPU_TYPES:
        return GPU_TYPES[key]
    if key in GPU_BY_SHORT:
        return GPU_BY_SHORT[key]
    raise DomainError(f"unknown GPU type {name!r}; known: {', '.join(sorted(GPU_TYPES))}")


@dataclass(frozen=True)
class GpuQuotaRequest:
    gpu: GpuType
    region: str
    count: int

    @property
    def quota_id(self) -> str:
        return self.gpu.quota_id


def parse_gpu_quota(spec: str) -> GpuQuotaRequest:
    """``GPU_TYPE:REGION:COUNT`` (e.g. ``nvidia-tesla-t4:us-central1:4``) → validated request."""
    parts = [p.strip() for p in str(spec).split(":")]
    if len(parts) != 3:
        raise DomainError(f"GPU quota {spec!r} must be GPU_TYPE:REGION:COUNT, e.g. nvidia-tesla-t4:us-central1:4")
    name, region, count_text = parts
    gpu = gpu_type(name)
    validate_region(region)
    if region not in gpu.regions:
        raise DomainError(f"GPU {gpu.name} is not offered in {region}; try one of {', '.join(sorted(gpu.regions))}")
    try:
        count = int(count_text)
    except ValueError:
        raise DomainError(f"GPU quota {spec!r}: count {count_text!r} is not a whole number") from None
    if count <= 0:
        raise DomainError(f"GPU quota {spec!r}: count must be at least 1")
    return GpuQuotaRequest(gpu, region, count)


@dataclass(frozen=True)
class TpuType:
    name: str                     # CLI name: tpu-v3-8
    version: str                  # v2, v3, v5e
    chips: int
    vertex_machine_type: str
    vertex_accelerator: str | None   # aiplatform AcceleratorType enum name
    vertex_accelerator_count: int
    topology: str | None
    regions: frozenset[str]


_V23_REGIONS = frozenset({"us-central1", "europe-west4"})
_V5E_REGIONS = frozenset({"us-central1", "us-east1", "us-east5", "us-south1", "us-west1", "us-west4",
                          "europe-west4", "asia-southeast1"})

TPU_TYPES: dict[str, TpuType] = {
    t.name: t
    for t in (
        TpuType("tpu-v2-8", "v2", 4, "cloud-tpu", "TPU_V2", 8, None, _V23_REGIONS),
        TpuType("tpu-v3-8", "v3", 4, "cloud-tpu", "TPU_V3", 8, None, _V23_REGIONS),
        TpuType("tpu-v5e-1", "v5e", 1, "ct5lp-hightpu-1t", None, 0, "1x1", _V5E_REGIONS),
        TpuType("tpu-v5e-4", "v5e", 4, "ct5lp-hightpu-4t", None, 0, "2x2", _V5E_REGIONS),
        TpuType("tpu-v5e-8", "v5e", 8, "ct5lp-hightpu-8t", None, 0, "2x4", _V5E_REGIONS),
    )
}


@dataclass(frozen=True)
class Accelerator:
    """What ``--accelerator`` names: where the trainer runs and with which strategy."""

    name: str
    kind: str                         # cpu | gpu | tpu
    gpu: GpuType | None = None
    gpu_count: int = 0
    tpu: TpuType | None = None
    cpu_machine_type: str = "n1-standard-4"
    strategy: str = field(default="cpu")   # trainer --distribution_strategy

    @property
    def machine_type(self) -> str:
        if self.kind == "gpu":
            assert self.gpu is not None
            return self.gpu.machine_types[self.gpu_count]
        if self.kind == "tpu":
            assert self.tpu is not None
            return self.tpu.vertex_machine_type
        return self.cpu_machine_type

    @property
    def regions(self) -> frozenset[str] | None:
        if self.gpu is not None:
            return self.gpu.regions
        if self.tpu is not None:
            return self.tpu.regions
        return None


_GPU_ACCEL = re.compile(r"^gpu(?:-(?P<type>[a-z0-9-]+?))?(?:x(?P<count>\d+))?$")


def parse_accelerator(name: str) -> Accelerator:
    """``cpu``, ``gpu`` (one T4), ``gpu-t4``, ``gpu-t4x2``, ``gpu-l4x4``, ``tpu-v3-8``, ``tpu-v5e-4``…"""
    key = name.strip().lower()
    if key == "cpu":
        return Accelerator("cpu", "cpu", strategy="cpu")
    if key in TPU_TYPES:
        return Accelerator(key, "tpu", tpu=TPU_TYPES[key], strategy="tpu")
    m = _GPU_ACCEL.match(key)
    if m:
        gpu = gpu_type(m.group("type") or "t4")
        count = int(m.group("count") or 1)
        if count not in gpu.machine_types:
            raise DomainError(
                f"accelerator {name!r}: {gpu.name} comes in counts {', '.join(map(str, sorted(gpu.machine_types)))}"
            )
        return Accelerator(key, "gpu", gpu=gpu, gpu_count=count, strategy="gpu")
    known = ["cpu", "gpu", *(f"gpu-{g.short}[xN]" for g in GPU_TYPES.values()), *TPU_TYPES]
    raise DomainError(f"unknown accelerator {name!r}; known: {', '.join(known)}")


def check_accelerator_region(accel: Accelerator, region: str) -> None:
    validate_region(region)
    regions = accel.regions
    if regions is not None and region not in regions:
        raise DomainError(
            f"{accel.name} is not available in {region} according to tpuctl's catalogue; "
            f"use --region with one of {', '.join(sorted(regions))}"
        )


# --------------------------------------------------------------------------------------------
# Vertex AI custom training: prebuilt images, console links
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainingImage:
    """A Vertex AI prebuilt training container (python_package_spec.executor_image_uri)."""

    name: str          # image name under <multi-region>-docker.pkg.dev/vertex-ai/training/
    tensorflow: str    # TensorFlow minor version inside: the trainer package pins tf-keras to it

    def uri(self, region: str | None = None) -> str:
        """Same image in the Artifact Registry multi-region nearest to ``region`` (us/europe/asia)."""
        area = "us"
        if region and region.startswith("europe-"):
            area = "europe"
        elif region and region.startswith(("asia-", "australia-", "me-")):
            area = "asia"
        return f"{area}-docker.pkg.dev/vertex-ai/training/{self.name}:latest"


#: Newest TensorFlow prebuilt training containers in Vertex AI's list
#: (cloud.google.com/vertex-ai/docs/training/pre-built-containers, checked 2026-11): TF 2.17 for
#: CPU/GPU, TF 2.15 for TPU VMs (no newer TF TPU image is published). Only ``:latest`` tags work.
#: ``tpuctl train --image`` overrides the choice.
VERTEX_TRAINING_IMAGES: dict[str, TrainingImage] = {
    "cpu": TrainingImage("tf-cpu.2-17.py310", "2.17"),
    "gpu": TrainingImage("tf-gpu.2-17.py310", "2.17"),
    "tpu": TrainingImage("tf-tpu.2-15.cp310", "2.15"),
}

#: Console page of a CustomJob (job_id = last segment of projects/P/locations/R/customJobs/ID), as
#: google-cloud-aiplatform 2.x links it (Vertex AI's console moved under "agent-platform").
VERTEX_CUSTOM_JOB_CONSOLE_URL = (
    "https://console.cloud.google.com/agent-platform/locations/{region}/training/{job_id}?project={project}"
)
#: Regional Vertex AI API host (REST and gRPC).
VERTEX_API_HOST = "{region}-aiplatform.googleapis.com"


# --------------------------------------------------------------------------------------------
# TF-Hub cache layout
# --------------------------------------------------------------------------------------------

DEFAULT_HUB_CACHE_PREFIX = "model-cache"
_HUB_DIR = re.compile(r"^[0-9a-f]{40}$")


def hub_cache_key(handle: str) -> str:
    """Folder name tensorflow_hub uses for ``handle`` under TFHUB_CACHE_DIR: sha1 of the exact string."""
    if not handle or handle != handle.strip():
        raise DomainError(f"hub handle {handle!r} must be non-empty and have no surrounding spaces")
    return hashlib.sha1(handle.encode("utf8")).hexdigest()


def is_hub_cache_key(name: str) -> bool:
    return bool(_HUB_DIR.match(name))


def validate_hub_prefix(prefix: str) -> None:
    if not prefix or prefix.startswith("/") or prefix.endswith("/") or "//" in prefix or ".." in prefix.split("/"):
        raise DomainError(f"hub cache prefix {prefix!r} must be a relative path like 'model-cache' (no leading/trailing '/')")


def hub_object_name(prefix: str, handle: str, relative_path: str) -> str:
    """Object name of one file of a hub model in the bucket: ``<prefix>/<sha1(handle)>/<relative path>``."""
    rel = relative_path.replace("\\", "/").lstrip("/")
    return f"{prefix}/{hub_cache_key(handle)}/{rel}"


def tfhub_cache_dir(bucket: str, prefix: str = DEFAULT_HUB_CACHE_PREFIX) -> str:
    return f"gs://{bucket}/{prefix}"


# --------------------------------------------------------------------------------------------
# Stack outputs: the one shape infra/ exports and every CLI command's --outputs FILE accepts
# --------------------------------------------------------------------------------------------

#: Keys of the stack outputs (`pulumi stack output --json`), documented in docs/stack-outputs.md.
OUTPUT_KEYS: tuple[str, ...] = (
    "project", "project_number", "region", "zone", "access_mode",
    "buckets",             # {purpose: bucket name}
    "bucket_urls",         # {purpose: gs://name}
    "principals",          # {keyword: e-mail}
    "training_service_account",
    "tfhub_cache_dir", "hub_cache_prefix", "hub_models",
    "access_map",          # {member: {bucket name: [roles]}}
    "labels",
)
