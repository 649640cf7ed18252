"""TF-Hub cache layout: tensorflow_hub looks for <TFHUB_CACHE_DIR>/<sha1(exact handle)>/.
"""

from __future__ import annotations

import hashlib
import re

from tpuctl.ground.errors import DomainError

DEFAULT_HUB_CACHE_PREFIX = "model-cache"
_HUB_DIR = re.compile(r"^[0-9a-f]{40}$")


def hub_cache_key(handle: str) -> str:
    """Folder name tensorflow_hub uses for ``handle`` under TFHUB_CACHE_DIR: sha1 of the exact string."""
    if not handle or handle != handle.strip():
        raise DomainError(f"hub handle {handle!r} must be non-empty and have no surrounding spaces")
    return hashlib.sha1(handle.encode("utf8")).hexdigest()


def is_hub_cache_key(name: str) -> bool:
    return bool(_HUB_DIR.match(name))


def validate_hub_prefix(prefix: str) -> None:
    if not prefix or prefix.startswith("/") or prefix.endswith("/") or "//" in prefix or ".." in prefix.split("/"):
        raise DomainError(f"hub cache prefix {prefix!r} must be a relative path like 'model-cache' (no leading/trailing '/')")


def hub_object_name(prefix: str, handle: str, relative_path: str) -> str:
    """Object name of one file of a hub model in the bucket: ``<prefix>/<sha1(handle)>/<relative path>``."""
    rel = relative_path.replace("\\", "/").lstrip("/")
    return f"{prefix}/{hub_cache_key(handle)}/{rel}"


def tfhub_cache_dir(bucket: str, prefix: str = DEFAULT_HUB_CACHE_PREFIX) -> str:
    return f"gs://{bucket}/{prefix}"
