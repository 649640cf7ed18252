"""Policy configuration: the rules read the stack's own settings model (``StackSettings``), here validated
from a policy config object (the subset of keys below, each policy declaring the ones it reads).

The same names, types, defaults and rules as the stack config of the Pulumi program (``accessMode``,
``existingDataBucket``, ``existingDataBucketAccess``, ``maxGpuQuota``, ``hubCachePrefix``): one model
(``ground.settings.StackSettings``) validates both and produces the schema each policy declares, so a
policy config file can be written from a stack file (``python -m policy.config Pulumi.dev.yaml``) and
``tpuctl plan`` hands the stack's values to the rules unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ground import domain
from ground.errors import ConfigError
from ground.settings import StackSettings

#: The stack keys the rules read. Their JSON schema (type, default, description, enum/range) comes from
#: the one settings model the program and ``tpuctl plan`` use; each policy declares the subset it reads.
POLICY_KEYS: tuple[str, ...] = ("accessMode", "existingDataBucket", "existingDataBucketAccess", "maxGpuQuota",
                                "hubCachePrefix")
SCHEMA: dict[str, dict[str, Any]] = StackSettings.json_schema_for(POLICY_KEYS)


class SettingsError(domain.DomainError):
    """A policy config value is invalid. ``str()`` says which and what to write instead."""


def to_config(settings: StackSettings) -> dict[str, Any]:
    """The camelCase mapping a policy config file (or ``args.get_config()``) carries for these settings."""
    return settings.model_dump(by_alias=True, include={StackSettings.keys()[key] for key in POLICY_KEYS})


def settings_from(config: Mapping[str, Any] | None, *, strict: bool = True) -> StackSettings:
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
        return StackSettings.from_values(values, strict=strict, partial=True)
    except ConfigError as exc:
        raise SettingsError(f"{exc.key.partition(':')[2]}: {str(exc).split(': ', 1)[1]}") from None


def schema_for(keys: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    return {key: dict(SCHEMA[key]) for key in keys}
