"""The checkov findings tpuctl accepts (``policy/exceptions.yaml``), for the rules and for scanners.

One file says what is accepted and why. The policy rules ask ``accepted(check, type, props, settings)`` before
reporting a finding that checkov would report too; ``tpuctl plan --format tfplan`` users (and
``scripts/test.sh``) turn it into a checkov baseline with ``baseline(...)`` so checkov fails on anything
else; ``markdown()`` is the table docs/policy-rules.md shows.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ground import resources as r
from ground.errors import DomainError
from ground.settings import StackSettings

EXCEPTIONS_FILE = Path(__file__).with_name("exceptions.yaml")
MATCH_KEYS = ("purpose", "role", "member", "accessMode")
_CHECK_ID = re.compile(r"^CKV2?_GCP_\d+$")


@dataclass(frozen=True)
class Accepted:
    """One accepted finding: checkov ``check`` on resources of Terraform type ``resource`` that ``match``."""
    check: str
    resource: str
    reason: str
    purpose: str | None = None
    role: str | None = None
    member: str | None = None            # fnmatch pattern
    access_mode: str | None = None

    def matches(self, check: str, tf_type: str | None, *, purpose: Any = None, role: Any = None,
                member: Any = None, access_mode: str | None = None) -> bool:
        if check != self.check or tf_type != self.resource:
            return False
        if self.purpose is not None and purpose != self.purpose:
            return False
        if self.role is not None and role != self.role:
            return False
        if self.member is not None and not (isinstance(member, str) and fnmatch.fnmatchcase(member, self.member)):
            return False
        return self.access_mode is None or access_mode == self.access_mode

    def match_text(self) -> str:
        parts = [f"{key} `{value}`" for key, value in (("purpose", self.purpose), ("role", self.role),
                                                      ("member", self.member), ("accessMode", self.access_mode))
                 if value is not None]
        return ", ".join(parts) or "every resource"


class ExceptionsError(DomainError):
    """policy/exceptions.yaml is malformed; the message names the entry."""


def parse(text: str, source: str = "exceptions.yaml") -> tuple[Accepted, ...]:
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ExceptionsError(f"{source} is not valid YAML: {str(exc).splitlines()[0]}") from None
    entries = doc.get("exceptions") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ExceptionsError(f"{source}: needs a list 'exceptions:'")
    out = []
    for i, entry in enumerate(entries):
        where = f"{source}: exception #{i + 1}"
        if not isinstance(entry, dict) or set(entry) != {"check", "resource", "match", "reason"}:
            raise ExceptionsError(f"{where}: needs exactly check, resource, match and reason")
        check, resource, match, reason = entry["check"], entry["resource"], entry["match"], entry["reason"]
        if not isinstance(check, str) or not _CHECK_ID.match(check):
            raise ExceptionsError(f"{where}: check {check!r} is not a checkov GCP id (CKV_GCP_<n>)")
        if resource not in r.TERRAFORM_TYPES.values():
            raise ExceptionsError(f"{where}: resource {resource!r} is not a Terraform type tpuctl exports")
        if not isinstance(match, dict) or not match or set(match) - set(MATCH_KEYS):
            raise ExceptionsError(f"{where}: match needs one or more of {', '.join(MATCH_KEYS)}")
        if not isinstance(reason, str) or len(reason.split()) < 5:
            raise ExceptionsError(f"{where}: give the reason in a sentence")
        out.append(Accepted(check, resource, " ".join(reason.split()), match.get("purpose"), match.get("role"),
                            match.get("member"), match.get("accessMode")))
    return tuple(out)


@lru_cache(maxsize=4)
def load(path: Path = EXCEPTIONS_FILE) -> tuple[Accepted, ...]:
    return parse(Path(path).read_text(), Path(path).name)


def resource_facts(rtype: str, props: Any) -> dict[str, Any]:
    """What an exception can match on, from a resource's camelCase props."""
    labelled = rtype in (r.T.BUCKET, r.T.ARTIFACT_REPOSITORY, r.T.VERTEX_ENDPOINT)   # what tpuctl labels with a purpose
    return {"purpose": r.labelled_purpose(props) if labelled else None,
            "role": r.get(props, "role"), "member": r.get(props, "member")}


def accepted(check: str, rtype: str, props: Any, settings: StackSettings | None = None,
             entries: Iterable[Accepted] | None = None) -> Accepted | None:
    """The exception that accepts checkov ``check`` on this resource, or None."""
    tf_type = r.TERRAFORM_TYPES.get(rtype)
    mode = (settings or StackSettings()).access_mode
    facts = resource_facts(rtype, props)
    for entry in load() if entries is None else entries:
        if entry.matches(check, tf_type, access_mode=mode, **facts):
            return entry
    return None


def accepted_checks(rtype: str, props: Any, settings: StackSettings | None = None,
                    entries: Iterable[Accepted] | None = None) -> list[str]:
    """Every checkov id accepted on this resource (for a scanner baseline)."""
    entries = tuple(load() if entries is None else entries)
    return sorted({e.check for e in entries if accepted(e.check, rtype, props, settings, entries) is e})


def markdown(entries: Iterable[Accepted] | None = None) -> str:
    """The table docs/policy-rules.md shows."""
    lines = ["| check | resource | which | reason |", "|---|---|---|---|"]
    for e in load() if entries is None else entries:
        lines.append(f"| {e.check} | `{e.resource}` | {e.match_text()} | {e.reason} |")
    return "\n".join(lines) + "\n"


__all__ = ["Accepted", "EXCEPTIONS_FILE", "ExceptionsError", "accepted", "accepted_checks", "load", "markdown", "parse"]
