"""Rules on what the stack puts in place: the hub cache layout and GPU quota preferences."""

from __future__ import annotations

import re
from typing import Any

from ground import domain
from ground import resources as r
from ground import tokens as T
from ground.settings import StackSettings
from policy.rules.base import MANDATORY, resource_rule

_HEXISH40 = re.compile(r"^[0-9a-fA-F]{40}$")
_DESCRIPTOR = re.compile(r"^[0-9a-f]{40}\.descriptor\.txt$")


@resource_rule("hub-cache-layout",
               "Hub cache objects live under <prefix>/<40 hex>/.",
               MANDATORY,
               types=frozenset({T.BUCKET_OBJECT}),
               config_keys=("hubCachePrefix",),
               rationale="tensorflow_hub looks for <TFHUB_CACHE_DIR>/<sha1(handle)>/saved_model.pb; anything else is ignored and it tries to download.")
def check_hub_cache_layout(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    name = r.get(props, "name")
    if not isinstance(name, str):
        return []
    prefix = settings.hub_cache_prefix
    parts = name.split("/")
    if name.startswith(prefix + "/"):
        rest = name[len(prefix) + 1:].split("/")
        if len(rest) == 1 and _DESCRIPTOR.match(rest[0]):
            return []       # <sha1>.descriptor.txt: what tensorflow_hub writes next to a module folder
        if len(rest) < 2 or not rest[-1]:
            return [f"object {name}: hub cache objects live in {prefix}/<sha1 of the handle>/<file>; "
                    "nothing may sit directly under the prefix"]
        if not domain.is_hub_cache_key(rest[0]):
            return [f"object {name}: folder {rest[0]!r} is not the 40-hex sha1 of a handle, so tensorflow_hub "
                    f"will not find it; upload to {prefix}/<sha1(handle)>/… (ground.domain.hub_object_name)"]
        return []
    if any(_HEXISH40.match(p) for p in parts[:-1]):
        return [f"object {name} looks like a hub cache file but is not under hubCachePrefix {prefix!r}; "
                f"TFHUB_CACHE_DIR=gs://BUCKET/{prefix} will not see it"]
    return []


@resource_rule("gpu-quota-preference",
               "GPU quota preferences name a contact and stay under the cap.",
               MANDATORY,
               types=frozenset({T.QUOTA_PREFERENCE}),
               config_keys=("maxGpuQuota",),
               rationale="Quota increases are reviewed by Google (contact needed) and cost money once used; the cap stops a typo like 80 for 8.")
def check_gpu_quota(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    out = []
    quota_id = r.get(props, "quotaId")
    email = r.get(props, "contactEmail")
    if email is not r.UNKNOWN and (not isinstance(email, str) or "@" not in email):
        out.append(f"quota preference {quota_id}: contactEmail is missing; Google reviews increases and writes "
                   "to that address (set quotaContactEmail)")
    value = r.get(props, "quotaConfig", "preferredValue")
    if value is r.UNKNOWN:
        return out
    try:
        preferred = int(str(value))
    except ValueError:
        out.append(f"quota preference {quota_id}: preferredValue {value!r} is not a whole number")
        return out
    is_gpu = not isinstance(quota_id, str) or "GPU" in quota_id.upper()
    if is_gpu and preferred > settings.max_gpu_quota:
        out.append(f"quota preference {quota_id}: asks for {preferred} GPUs, above the cap maxGpuQuota="
                   f"{settings.max_gpu_quota}; lower the count or raise the cap in the policy config")
    return out
