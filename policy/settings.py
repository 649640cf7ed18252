"""Policy configuration: the stack settings the rules need, validated by the stack's own settings model.

The same names, types, defaults and rules as the stack config of the Pulumi program (``accessMode``,
``existingDataBucket``, ``existingDataBucketAccess``, ``maxGpuQuota``, ``hubCachePrefix``): one model
(``tpuctl.ground.settings.StackSettings``) validates both and produces the schema each policy declares, so a
policy config file can be written from a stack file (``python -m policy.config Pulumi.dev.yaml``) and
``tpuctl plan`` hands the stack's values to the rules unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tpuctl.ground import domain
from tpuctl.ground.errors import ConfigError
from tpuctl.ground.settings import StackSettings

#: The stack keys the rules read. Their JSON schema (type, default, description, enum/range) comes from
#: the one settings model the program and ``tpuctl plan`` use; each policy declares the subset it reads.
POLICY_KEYS: tuple[str, ...] = ("accessMode", "existingDataBucket", "existingDataBucketAccess", "maxGpuQuota",
                                "hubCachePrefix")
SCHEMA: dict[str, dict[str, Any]] = StackSettings.json_schema_for(POLICY_KEYS)


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


def settings_from(config: Mapping[str, Any] | None, *, strict: bool = True) -> PolicySettings:
    """Validate a (partial) camelCase policy config with the stack's own rules; missing keys take the defaults.

    ``strict``: values have their JSON types (a policy config); otherwise stack-file spellings are accepted.
    """
    values = {}
    for key, value in dict(config or {}).items():
        if key == "enforcementLevel":
            continue
        if key not in SCHEMA:
            raise SettingsError(f"unknown policy setting {key!r}; known: {', '.join(SCHEMA)}")
        values[key] = value
    try:
        s = StackSettings.from_values(values, strict=strict, partial=True)
    except ConfigError as exc:
        raise SettingsError(f"{exc.key.partition(':')[2]}: {str(exc).split(': ', 1)[1]}") from None
    return settings_for_stack(s)


def schema_for(keys: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    return {key: dict(SCHEMA[key]) for key in keys}


def settings_for_stack(cfg: Any) -> PolicySettings:
    """Settings matching a validated stack config (``StackSettings``, ``infra.config.InfraConfig`` or anything
    with their fields)."""
    return PolicySettings(
        access_mode=cfg.access_mode,
        existing_data_bucket=cfg.existing_data_bucket or None,
        existing_data_bucket_access=cfg.existing_data_bucket_access,
        max_gpu_quota=int(cfg.max_gpu_quota),
        hub_cache_prefix=cfg.hub_cache_prefix,
    )
