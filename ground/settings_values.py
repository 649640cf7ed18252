"""How a stack's ``tpuctl:`` values are read: the spellings accepted (text integers, JSON-text arrays, empty text as
"not set") turned into typed values, and the per-key rules, as pydantic validators of ``StackSettings``
(ground/settings.py). Their messages are the ones users see after the key."""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ValidationInfo

from ground import domain

#: GCS accepts a soft-delete retention of 0 (off) or 7-90 days
#: (cloud.google.com/storage/docs/soft-delete#retention-duration, checked 2026-11).
SOFT_DELETE_MIN_DAYS, SOFT_DELETE_MAX_DAYS = 7, 90


def _strict(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("strict"))


def _no_secret(value: Any) -> None:
    if isinstance(value, dict) and "secure" in value:
        raise ValueError("is a secret; tpuctl does not read secrets offline (and this key needs none)")


def as_string(value: Any, info: ValidationInfo) -> str:
    _no_secret(value)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or (_strict(info) and not isinstance(value, str)):
        raise ValueError(f"must be a string, not {type(value).__name__}")
    return str(value).strip()


def _as_int(value: Any, info: ValidationInfo) -> int:
    _no_secret(value)
    if isinstance(value, bool):
        raise ValueError(f"must be a whole number, not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, str) and not _strict(info):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ValueError(f"must be a whole number, not {value!r}")


def _as_list(value: Any, info: ValidationInfo) -> tuple[str, ...]:
    """Arrays come as lists (YAML) or as JSON text (what the engine hands the program)."""
    _no_secret(value)
    if isinstance(value, str) and not _strict(info):
        text = value.strip()
        if not text:
            return ()
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            raise ValueError(f"must be a list, e.g. [\"a\", \"b\"]; got {value!r}") from None
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"must be a list, not {type(value).__name__}")
    items = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise ValueError(f"items must be strings, not {item!r}")
        items.append(str(item).strip())
    return tuple(items)


def checked(check, *, skip_empty: bool = True):
    """An AfterValidator that runs a domain check and keeps the value (its message becomes the error)."""
    def run(value):
        if value or not skip_empty:
            check(value)
        return value
    return AfterValidator(run)



def check_name_prefix(prefix: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,19}", prefix) or prefix.endswith("-"):
        raise ValueError(f"name prefix {prefix!r} must be 1-20 lowercase letters, digits or '-', start with a letter "
                         "and not end with '-'")
    return prefix


def check_principals(items: tuple[str, ...]) -> tuple[str, ...]:
    for p in items:
        if p not in domain.PRINCIPAL_KEYWORDS:
            raise ValueError(f"unknown principal {p!r}; use any of {', '.join(domain.PRINCIPAL_KEYWORDS)}")
    for p in items:
        if items.count(p) > 1:
            raise ValueError(f"principal {p!r} is listed twice")
    return items



def check_bucket(value: str) -> str:
    return domain.bucket_name_from(value) if value else value


def check_soft_delete(days: int) -> int:
    if days != 0 and not SOFT_DELETE_MIN_DAYS <= days <= SOFT_DELETE_MAX_DAYS:
        raise ValueError(f"must be 0 (off) or {SOFT_DELETE_MIN_DAYS}-{SOFT_DELETE_MAX_DAYS} days (GCS limits), "
                         f"not {days}")
    return days


def unique_quotas(parse):
    """AfterValidator: every entry parses with ``parse`` and names its (accelerator, region) once."""
    def check(entries: tuple[str, ...]) -> tuple[str, ...]:
        seen: dict[tuple[str, str], str] = {}
        for entry in entries:
            req = parse(entry)
            ident = (req.label, req.location)
            if ident in seen:
                raise ValueError(f"{entry!r} repeats {req.label} in {req.location} (already {seen[ident]!r})")
            seen[ident] = entry
        return entries
    return check


def check_contact(email: str) -> str:
    if email and domain.member_for_email(email).startswith("serviceAccount:"):
        raise ValueError(f"{email!r} is a service account; Google needs a person to contact")
    return email


def check_hub_handles(handles: tuple[str, ...]) -> tuple[str, ...]:
    for i, handle in enumerate(handles):
        domain.hub_cache_key(handle)
        if handle in handles[:i]:
            raise ValueError(f"hub handle {handle!r} is listed twice")
    return handles


def check_labels(items: tuple[str, ...]) -> tuple[str, ...]:
    label_map(items)
    return items


def label_map(items: tuple[str, ...]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition("=")
        k, v = k.strip(), v.strip()
        if not sep or not k:
            raise ValueError(f"label {item!r} must be key=value, e.g. team=vision")
        if k in labels:
            raise ValueError(f"label key {k!r} is given twice")
        if k == domain.PURPOSE_LABEL:
            raise ValueError(f"label key {k!r} is set by tpuctl on each bucket; choose another key")
        labels[k] = v
    domain.validate_labels(labels)
    return labels


Str = Annotated[str, BeforeValidator(as_string)]
Int = Annotated[int, BeforeValidator(_as_int)]
List = Annotated[tuple[str, ...], BeforeValidator(_as_list)]
