"""Policy configuration: the four settings the rules need, their JSON schema, defaults and validation.

The same names as the stack config of the Pulumi program (``accessMode``, ``existingDataBucket``,
``existingDataBucketAccess``, ``maxGpuQuota``, ``hubCachePrefix``), so a policy config file can be
written from a stack file (``python -m policy.config Pulumi.dev.yaml``) and ``tpuctl plan`` hands the
stack's values to the rules unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tpuctl import domain

EXISTING_BUCKET_ACCESS: tuple[str, ...] = ("iam", "acl")

#: JSON schema of every setting, with its default. Each policy declares the subset it reads.
SCHEMA: dict[str, dict[str, Any]] = {
    "accessMode": {
        "type": "string",
        "enum": list(domain.ACCESS_MODES),
        "default": domain.DEFAULT_ACCESS_MODE,
        "description": "Access mode of the stack: 'bucket' (least privilege per bucket) or 'project' "
                       "(project-wide roles, accepted with an advisory).",
    },
    "existingDataBucket": {
        "type": "string",
        "default": "",
        "description": "Name of an existing data bucket the stack references instead of creating one ('' = none).",
    },
    "existingDataBucketAccess": {
        "type": "string",
        "enum": list(EXISTING_BUCKET_ACCESS),
        "default": "iam",
        "description": "How the stack grants access to the existing data bucket: 'iam' or fine-grained 'acl'.",
    },
    "maxGpuQuota": {
        "type": "integer",
        "minimum": 0,
        "default": domain.DEFAULT_MAX_GPU_QUOTA,
        "description": "Largest GPU quota preference (preferred value) the stack may request.",
    },
    "hubCachePrefix": {
        "type": "string",
        "default": domain.DEFAULT_HUB_CACHE_PREFIX,
        "description": "Folder of the TF-Hub cache in the hub-cache bucket (TFHUB_CACHE_DIR = gs://BUCKET/PREFIX).",
    },
}


class SettingsError(domain.DomainError):
    """A policy config value is invalid. ``str()`` says which and what to write instead."""


@dataclass(frozen=True)
class PolicySettings:
    access_mode: str = domain.DEFAULT_ACCESS_MODE
    existing_data_bucket: str | None = None
    existing_data_bucket_access: str = "iam"
    max_gpu_quota: int = domain.DEFAULT_MAX_GPU_QUOTA
    hub_cache_prefix: str = domain.DEFAULT_HUB_CACHE_PREFIX

    def to_config(self) -> dict[str, Any]:
        """The camelCase mapping a policy config file (or ``args.get_config()``) carries."""
        return {
            "accessMode": self.access_mode,
            "existingDataBucket": self.existing_data_bucket or "",
            "existingDataBucketAccess": self.existing_data_bucket_access,
            "maxGpuQuota": self.max_gpu_quota,
            "hubCachePrefix": self.hub_cache_prefix,
        }


def settings_from(config: Mapping[str, Any] | None) -> PolicySettings:
    """Validate a (partial) camelCase config; missing keys take the schema defaults."""
    values = {key: spec["default"] for key, spec in SCHEMA.items()}
    for key, value in dict(config or {}).items():
        if key == "enforcementLevel":
            continue
        if key not in SCHEMA:
            raise SettingsError(f"unknown policy setting {key!r}; known: {', '.join(SCHEMA)}")
        values[key] = value
    mode = values["accessMode"]
    if mode not in domain.ACCESS_MODES:
        raise SettingsError(f"accessMode {mode!r} must be one of: {', '.join(domain.ACCESS_MODES)}")
    access = values["existingDataBucketAccess"]
    if access not in EXISTING_BUCKET_ACCESS:
        raise SettingsError(f"existingDataBucketAccess {access!r} must be one of: {', '.join(EXISTING_BUCKET_ACCESS)}")
    bucket = values["existingDataBucket"] or None
    if bucket is not None:
        if not isinstance(bucket, str):
            raise SettingsError("existingDataBucket must be a bucket name")
        try:
            bucket = domain.bucket_name_from(bucket)
        except domain.DomainError as exc:
            raise SettingsError(f"existingDataBucket: {exc}") from None
    cap = values["maxGpuQuota"]
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or int(cap) != cap or cap < 0:
        raise SettingsError(f"maxGpuQuota {cap!r} must be a whole number >= 0")
    prefix = values["hubCachePrefix"]
    if not isinstance(prefix, str):
        raise SettingsError("hubCachePrefix must be a string like 'model-cache'")
    try:
        domain.validate_hub_prefix(prefix)
    except domain.DomainError as exc:
        raise SettingsError(f"hubCachePrefix: {exc}") from None
    return PolicySettings(
        access_mode=mode,
        existing_data_bucket=bucket,
        existing_data_bucket_access=access,
        max_gpu_quota=int(cap),
        hub_cache_prefix=prefix,
    )


def schema_for(keys: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    return {key: dict(SCHEMA[key]) for key in keys}


def settings_for_stack(cfg: Any) -> PolicySettings:
    """Settings matching a validated stack config (``infra.config.InfraConfig`` or anything with its fields)."""
    return PolicySettings(
        access_mode=cfg.access_mode,
        existing_data_bucket=cfg.existing_data_bucket or None,
        existing_data_bucket_access=cfg.existing_data_bucket_access,
        max_gpu_quota=int(cfg.max_gpu_quota),
        hub_cache_prefix=cfg.hub_cache_prefix,
    )
