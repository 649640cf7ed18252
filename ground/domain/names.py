"""Google Cloud naming rules: buckets, projects, regions, zones, service account ids, labels.

Source: cloud.google.com/storage/docs/buckets#naming, cloud.google.com/resource-manager/docs/creating-managing-projects,
cloud.google.com/compute/docs/regions-zones, cloud.google.com/resource-manager/docs/labels-overview (checked 2026-11).
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Mapping

from ground.errors import DomainError

_BUCKET_CHARS = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")
_PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_SA_ACCOUNT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
#: A standard zone ends in one letter (us-central1-a); an AI zone in ``ai<N><letter>`` (us-central1-ai1a,
#: us-south1-ai1b: its parent zone is the standard zone with the same letter). Sources:
#: https://docs.cloud.google.com/compute/docs/regions-zones/ai-zones and the TPU7x/v6e rows of
#: https://docs.cloud.google.com/tpu/docs/regions-zones (both read 2026-11-24).
_ZONE = re.compile(r"^([a-z]+-[a-z]+[0-9]+)-(?:[a-z]|ai[0-9]+[a-z])$")
#: tpuctl's defaults (a choice, not a Google fact): the stack's ``region`` and ``zone`` when the config names none, and
#: the zone of the calls that need one before a stack exists (the Cloud TPU API's generateServiceIdentity).
DEFAULT_REGION = "us-central1"
DEFAULT_ZONE = "us-central1-a"
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
        return split_gs_uri(name)[0]
    validate_bucket_name(name)
    return name


def split_gs_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/some/path`` -> ``("bucket", "some/path")`` (``""`` for the bucket itself); the one parser of
    ``gs://`` addresses. The bucket name is validated; anything not starting with ``gs://`` is a DomainError."""
    if not uri.startswith("gs://"):
        raise DomainError(f"{uri!r} is not a gs://bucket/path address")
    bucket, _, path = uri[len("gs://"):].partition("/")
    validate_bucket_name(bucket)
    return bucket, path


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


def validate_zone(zone: str, region: str | None = None, also_regions: frozenset[str] = frozenset()) -> None:
    """A zone of a known region (or of one of ``also_regions``: regions of one product only)."""
    m = _ZONE.match(zone or "")
    if not m:
        raise DomainError(f"zone {zone!r} is not a zone name like 'us-central1-a' (or an AI zone like "
                          "'us-central1-ai1a')")
    if m.group(1) not in also_regions:
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


#: Artifact Registry repository ids: lowercase letters, digits and hyphens, starting with a letter, at most 63
#: (cloud.google.com/artifact-registry/docs/repositories/create-repos#create-console, checked 2026-11).
_REPOSITORY_ID = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


def validate_repository_id(name: str) -> None:
    if not _REPOSITORY_ID.match(name or ""):
        raise DomainError(f"repository id {name!r} must be 1-63 lowercase letters, digits or '-', starting with a "
                          "letter and not ending with '-'")


def nearest_multi_region(region: str | None) -> str:
    """The Artifact Registry multi-region (us / europe / asia) nearest ``region``: where Vertex AI publishes
    its prebuilt training and prediction images (cloud.google.com/vertex-ai/docs/training/pre-built-containers)."""
    if region and region.startswith("europe-"):
        return "europe"
    if region and region.startswith(("asia-", "australia-", "me-")):
        return "asia"
    return "us"


#: How long before an image's end of availability tpuctl starts warning.
AVAILABILITY_WARNING_DAYS = 90


def availability_warning(label: str, end: datetime.date | None, today: datetime.date, *, past: str,
                         soon: str) -> str | None:
    """DomainError from ``end`` on; a warning line within AVAILABILITY_WARNING_DAYS of it; else None."""
    if end is None:
        return None
    if today >= end:
        raise DomainError(f"{label} reached its end of availability on {end.isoformat()} {past}")
    days = (end - today).days
    if days <= AVAILABILITY_WARNING_DAYS:
        return f"warning: {label} reaches its end of availability on {end.isoformat()} ({days} days); {soon}"
    return None


#: A container image reference, as Docker's own grammar has it (github.com/distribution/reference, regexp.go:
#: ``[host[:port]/]component(/component)*[:tag][@algorithm:hex]``, lowercase path components, a tag of at most
#: 128 word characters, dots and dashes). Anything else would reach a request or a command line as typed.
_IMAGE_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?/)"
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REF = re.compile(rf"{_IMAGE_HOST}?{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                        r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")


def validate_image_ref(value: str, what: str = "image") -> str:
    """A container image reference (``_IMAGE_REF``), refused in one line otherwise (the same for every target)."""
    if len(value) > 512 or not _IMAGE_REF.fullmatch(value):
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise DomainError(f"{what} {shown!r} is not a container image reference (REGISTRY/PATH/IMAGE:TAG or "
                          "…@sha256:DIGEST, lowercase path)")
    return value

