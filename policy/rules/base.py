"""The shape of a resource rule and the registry ``@resource_rule`` adds each rule to, where it is defined."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MANDATORY = "mandatory"
ADVISORY = "advisory"


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    level: str
    check: Callable[..., Any]
    kind: str = "resource"                    # resource | stack
    types: frozenset[str] = frozenset()       # resource types it looks at ("" = any)
    config_keys: tuple[str, ...] = ()         # policy settings it reads
    checkov: tuple[str, ...] = ()             # equivalent checkov CKV_GCP ids
    rationale: str = ""


#: The resource rules in the order they are defined: each is registered by ``@resource_rule`` on its check.
REGISTERED: list[Rule] = []


def resource_rule(name: str, description: str, level: str, **fields: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated check as the resource rule ``name`` (its level, types, config keys, checkov ids and
    rationale written beside the code that enforces them)."""
    def register(check: Callable[..., Any]) -> Callable[..., Any]:
        REGISTERED.append(Rule(name, description, level, check, **fields))
        return check

    return register
