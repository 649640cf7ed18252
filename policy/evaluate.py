"""Run every rule over a list of resources, without the Pulumi engine (``tpuctl plan``, tests)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ground.access import StackResource, check_training_access
from ground.settings import StackSettings
from policy.rules import MANDATORY, RESOURCE_RULES, Rule
from policy.stack_rules import STACK_RULES


@dataclass(frozen=True)
class Violation:
    rule: str
    level: str               # mandatory | advisory
    resource: str | None     # resource name (or None for the whole stack)
    message: str
    urn: str | None = None
    type: str | None = None

    @property
    def mandatory(self) -> bool:
        return self.level == MANDATORY

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


ALL_RULES: tuple[Rule, ...] = RESOURCE_RULES + STACK_RULES


def rule(name: str) -> Rule:
    for candidate in ALL_RULES:
        if candidate.name == name:
            return candidate
    raise KeyError(name)


def check_resource(rtype: str, props: Any, settings: StackSettings | None = None,
                   name: str | None = None, urn: str | None = None) -> list[Violation]:
    """Every resource rule that applies to one resource."""
    settings = settings or StackSettings()
    out = []
    for spec in RESOURCE_RULES:
        if spec.types and rtype not in spec.types:
            continue
        for message in spec.check(rtype, props, settings):
            out.append(Violation(spec.name, spec.level, name, message, urn, rtype))
    return out


def evaluate(resources: Iterable[StackResource], settings: StackSettings | None = None) -> list[Violation]:
    """Resource rules on each resource, then the stack rules on all of them."""
    settings = settings or StackSettings()
    resources = list(resources)
    by_urn = {res.urn: res for res in resources}
    out: list[Violation] = []
    for res in resources:
        out.extend(check_resource(res.type, res.props, settings, res.name, res.urn))
    for spec in STACK_RULES:
        for message, urn in spec.check(resources, settings):
            target = by_urn.get(urn) if urn else None
            out.append(Violation(spec.name, spec.level, target.name if target else None, message, urn,
                                 target.type if target else None))
    return out


def from_mocked(resources: Iterable[Any]) -> list[StackResource]:
    """Custom resources of an ``infra.mocks.MockRun`` (type, name, urn, parent, custom, outputs) as stack resources."""
    return [StackResource(res.type, res.name, res.urn, res.outputs, res.parent)
            for res in resources if getattr(res, "custom", True)]


__all__ = ["from_mocked", "Violation", "ALL_RULES", "rule", "check_resource", "evaluate", "StackResource", "check_training_access"]
