"""The rules as pulumi_policy objects. ``policy/__main__.py`` hands these to ``PolicyPack``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

from ground.access import StackResource
from ground.resources import UNKNOWN
from ground.settings import StackSettings
from policy.rules import MANDATORY, RESOURCE_RULES, Rule
from policy.settings import SettingsError, schema_for, settings_from
from policy.stack_rules import STACK_RULES

PACK_NAME = "tpuctl"
PACK_DESCRIPTION = ("tpuctl: private, uniform-access training buckets, additive least-privilege IAM, GPU quota "
                    "caps, TF-Hub cache layout, and proof that every training principal can read its inputs "
                    "and write its outputs.")

_LEVELS = {MANDATORY: EnforcementLevel.MANDATORY, "advisory": EnforcementLevel.ADVISORY}


def plain(value: Any) -> Any:
    """A resource's properties as the engine hands them to a policy (pulumi_policy's proxies, whose unknown values
    raise on access) as plain dicts and lists, each value unknown at preview as ``ground.resources.UNKNOWN``: the
    rules and the access model read plain data only."""
    def entry(read):
        try:
            return plain(read())
        except UnknownValueError:
            return UNKNOWN

    if isinstance(value, Mapping):
        return {key: entry(lambda key=key: value[key]) for key in value}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [entry(lambda i=i: value[i]) for i in range(len(value))]
    return value


def _settings(config: Any, report: ReportViolation) -> StackSettings | None:
    try:
        return settings_from(config)
    except SettingsError as exc:
        report(f"invalid policy config: {exc}", None)
        return None


def _schema(spec: Rule) -> PolicyConfigSchema | None:
    return PolicyConfigSchema(properties=schema_for(spec.config_keys)) if spec.config_keys else None


def _resource_policy(spec: Rule) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if spec.types and args.resource_type not in spec.types:
            return
        settings = _settings(args.get_config(), report_violation)
        if settings is None:
            return
        for message in spec.check(args.resource_type, plain(args.props), settings):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name=spec.name, description=spec.description, validate=validate,
        enforcement_level=_LEVELS[spec.level], config_schema=_schema(spec),
        tags=[*spec.checkov] or None,
    )


def stack_resources(args: StackValidationArgs) -> list[StackResource]:
    """PolicyResources (outputs, with parents and property dependencies) as the stack rules read them."""
    out = []
    for res in args.resources:
        sources = {key: [dep.urn for dep in deps] for key, deps in (res.property_dependencies or {}).items()}
        out.append(StackResource(res.resource_type, res.name, res.urn, plain(res.props),
                                 res.parent.urn if res.parent is not None else None, sources))
    return out


def _stack_policy(spec: Rule) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        settings = _settings(args.get_config(), report_violation)
        if settings is None:
            return
        for message, urn in spec.check(stack_resources(args), settings):
            report_violation(message, urn)

    return StackValidationPolicy(
        name=spec.name, description=spec.description, validate=validate,
        enforcement_level=_LEVELS[spec.level], config_schema=_schema(spec),
        tags=[*spec.checkov] or None,
    )


def policies() -> list[Any]:
    return [_resource_policy(spec) for spec in RESOURCE_RULES] + [_stack_policy(spec) for spec in STACK_RULES]
