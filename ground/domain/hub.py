"""TF-Hub cache layout: tensorflow_hub looks for <TFHUB_CACHE_DIR>/<sha1(exact handle)>/.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ground.errors import DomainError, validation_problem

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


def _under(prefix: str, name: str) -> str:
    """``<prefix>/<name>`` in a bucket; ``name`` alone under the empty prefix (the root of a local cache folder)."""
    return f"{prefix}/{name}" if prefix else name


def hub_object_name(prefix: str, handle: str, relative_path: str) -> str:
    """Object name of one file of a hub model in the bucket: ``<prefix>/<sha1(handle)>/<relative path>``."""
    rel = relative_path.replace("\\", "/").lstrip("/")
    return _under(prefix, f"{hub_cache_key(handle)}/{rel}")


def tfhub_cache_dir(bucket: str, prefix: str = DEFAULT_HUB_CACHE_PREFIX) -> str:
    return f"gs://{bucket}/{prefix}"


# --------------------------------------------------------------------------------------------
# Crash-safe layout: staging, the completeness manifest, the descriptor
# --------------------------------------------------------------------------------------------
# tensorflow_hub treats <TFHUB_CACHE_DIR>/<sha1>/ as cached when the folder EXISTS AND IS NON-EMPTY
# (tensorflow_hub/resolver.py, atomic_download: ``check_module_exists = gfile.Exists(module_dir) and
# gfile.ListDirectory(module_dir)``; tensorflow_hub 0.16.1, checked 2025). It never looks for
# saved_model.pb and never re-downloads, so a half-written folder is "loaded" and crashes the job.
# tpuctl therefore uploads to a staging prefix tensorflow_hub never reads, copies into <sha1>/ only
# verified objects, and writes a manifest LAST: a folder without a valid manifest is incomplete.
# trainer/hubcheck.py reads the same manifest with tf.io.gfile (the trainer imports nothing of ours).

#: Object (file) written last into ``<prefix>/<sha1>/``; its presence and content mark the folder complete.
HUB_MANIFEST = ".tpuctl-manifest.json"
#: Format tag inside the manifest (trainer/hubcheck.py checks the same string).
HUB_MANIFEST_FORMAT = "tpuctl-hub-manifest/1"
#: Folder under the prefix where uploads are staged: not a sha1, so tensorflow_hub never reads it.
HUB_STAGING = ".staging"


def hub_folder(prefix: str, handle: str) -> str:
    """``<prefix>/<sha1(handle)>/`` (with the trailing slash: a listing prefix)."""
    return _under(prefix, f"{hub_cache_key(handle)}/")


def hub_manifest_name(prefix: str, handle: str) -> str:
    return _under(prefix, f"{hub_cache_key(handle)}/{HUB_MANIFEST}")


def hub_descriptor_name(prefix: str, handle: str) -> str:
    """``<prefix>/<sha1>.descriptor.txt``: the descriptor tensorflow_hub writes next to a module folder."""
    return _under(prefix, f"{hub_cache_key(handle)}.descriptor.txt")


def hub_staging_prefix(prefix: str, key: str) -> str:
    """Listing prefix of every staging folder of one model: ``<prefix>/.staging/<sha1>-``."""
    return f"{prefix}/{HUB_STAGING}/{key}-"


def hub_manifest(handle: str, files: dict[str, tuple[int, str]], created_by: str, created: str | None) -> str:
    """Manifest text: handle, sha1, every file (relative path -> (size, base64 crc32c)), who wrote it, when.

    ``created`` is None when the writer must be deterministic (the Pulumi program: a date would change
    the object on every ``pulumi up``)."""

    body = {
        "format": HUB_MANIFEST_FORMAT,
        "handle": handle,
        "key": hub_cache_key(handle),
        "created_by": created_by,
        "created": created,
        "descriptor": f"{hub_cache_key(handle)}.descriptor.txt",
        "files": [{"path": rel, "size": int(size), "crc32c": crc} for rel, (size, crc) in sorted(files.items())],
    }
    return json.dumps(body, indent=1, sort_keys=True) + "\n"


class _ManifestFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    path: str = Field(min_length=1, max_length=4096)
    size: int = Field(ge=0, le=2**50)
    crc32c: str = Field(max_length=64)

    @field_validator("path")
    @classmethod
    def _relative(cls, path: str) -> str:
        parts = path.split("/")
        if path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
            raise ValueError("a file's path is relative, without '.', '..' or empty segments")
        return path


class _Manifest(BaseModel):
    """A hub manifest as ``hub_manifest`` writes it: read back by this shape only (a manifest nested a million
    levels deep, or with a list where a path goes, is a bad manifest, not a RecursionError or a TypeError)."""
    model_config = ConfigDict(extra="allow", strict=True)
    format: str
    handle: str | None = Field(None, max_length=4096)
    key: str | None = Field(None, max_length=64)
    files: list[_ManifestFile] = Field(max_length=1_000_000)


def parse_hub_manifest(text: str | bytes, handle: str | None = None) -> dict[str, tuple[int, str]]:
    """Files of a manifest (relative path -> (size, crc32c)); raises DomainError if it is not valid
    (or, with ``handle``, is the manifest of another handle)."""
    try:
        body = _Manifest.model_validate_json(text)
    except ValidationError as exc:
        raise DomainError(f"unreadable manifest ({validation_problem(exc)[:160]})") from None
    if body.format != HUB_MANIFEST_FORMAT:
        raise DomainError(f"unknown manifest format {body.format[:80]!r}")
    files = {f.path: (f.size, f.crc32c) for f in body.files}
    if handle is not None and (body.handle != handle or body.key != hub_cache_key(handle)):
        raise DomainError(f"manifest is for {(body.handle or '')[:200]!r}, not {handle!r}")
    if not files or "saved_model.pb" not in files:
        raise DomainError("manifest lists no saved_model.pb")
    return files


def hub_folder_problem(manifest: str | bytes | None, objects: dict[str, tuple[int, str | None]],
                       handle: str | None = None) -> str | None:
    """Why the folder is not complete, or None. ``objects``: relative path -> (size, crc32c) as listed
    (the manifest itself excluded). Every manifest file must be there with its size and crc32c."""
    if manifest is None:
        if not objects:
            return "empty"
        return f"no {HUB_MANIFEST} (an upload was interrupted, or it predates manifests)"
    try:
        files = parse_hub_manifest(manifest, handle)
    except DomainError as exc:
        return str(exc)
    missing = sorted(rel for rel in files if rel not in objects)
    if missing:
        return f"{len(missing)} of {len(files)} file(s) missing (e.g. {missing[0]})"
    bad = sorted(rel for rel, (size, crc) in files.items()
                 if objects[rel][0] != size or (objects[rel][1] is not None and objects[rel][1] != crc))
    if bad:
        return f"{len(bad)} file(s) differ from the manifest (size or crc32c; e.g. {bad[0]})"
    return None


def hub_descriptor(handle: str, created_by: str, created: str | None) -> str:
    """``<sha1>.descriptor.txt``: tensorflow_hub's first line (``Module: <handle>``, what it reads back), then who
    wrote the folder and when (``created`` None: deterministic, for the Pulumi program)."""
    return f"Module: {handle}\nWritten by: {created_by}\n" + (f"Download Time: {created}\n" if created else "")


@dataclass(frozen=True)
class HubLayout:
    """Where one model goes in a hub cache (a bucket's or a local folder's), in the order it must be written:
    every file, then the descriptor, then the manifest LAST (its presence marks the folder complete). The one
    description of the layout; the Pulumi program (infra/hub_cache.py), ``tpuctl hub-cache add`` and
    ``hub-cache fetch`` (bootstrap/hubcache/model.py) each write what it lists."""

    folder: str                        # <prefix>/<sha1>/
    files: dict[str, str]              # relative path -> object name (<prefix>/<sha1>/<path>)
    descriptor: tuple[str, str]        # (<prefix>/<sha1>.descriptor.txt, its text)
    manifest: tuple[str, str]          # (<prefix>/<sha1>/.tpuctl-manifest.json, its text)


def hub_layout(prefix: str, handle: str, files: dict[str, tuple[int, str]], created_by: str,
               created: str | None) -> HubLayout:
    """The layout of ``handle``'s ``files`` (relative path -> (size, base64 crc32c)) under ``prefix`` (a bucket
    prefix, or ``""`` for the root of a local cache folder). A manifest among ``files`` is not a file of the
    model (``hub-cache fetch`` writes one locally): it is left out and written anew, last."""
    model = {rel: value for rel, value in files.items() if rel != HUB_MANIFEST}
    return HubLayout(
        folder=hub_folder(prefix, handle),
        files={rel: hub_object_name(prefix, handle, rel) for rel in sorted(model)},
        descriptor=(hub_descriptor_name(prefix, handle), hub_descriptor(handle, created_by, created)),
        manifest=(hub_manifest_name(prefix, handle), hub_manifest(handle, model, created_by, created)),
    )
