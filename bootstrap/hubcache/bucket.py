"""The bucket side of the hub cache (``hub-cache add``, ``list``, doctor's status): upload a model folder so that it
is complete or detectably not, skip what is already there, list and judge the cached folders.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from bootstrap.hubcache.model import SAVED_MODEL, LocalFile, Materialized, Progress, handle_from_descriptor, utc_now
from cloud.clients import download_bounded, google_errors
from cloud.google import api_exceptions
from cloud.uploads import upload_files
from ground import domain
from ground.errors import UserError
from ground.files import digest_b64

# --------------------------------------------------------------------------------------------
# Bucket side: upload with skip-unchanged, listing
# --------------------------------------------------------------------------------------------

def same_content(local: LocalFile, blob) -> bool:
    """Is ``blob`` exactly the local file? Size, then CRC32C (MD5 when the server gives no CRC32C)."""
    if blob.size is not None and int(blob.size) != local.size:
        return False
    if blob.crc32c:
        return blob.crc32c == local.crc32c()
    if blob.md5_hash:
        return blob.md5_hash == digest_b64(local.path, hashlib.md5())
    return False


@dataclass
class UploadResult:
    handle: str
    key: str
    uploaded: list[str] = field(default_factory=list)   # sent from this machine in this run
    reused: list[str] = field(default_factory=list)     # verified objects a previous interrupted run staged
    skipped: list[str] = field(default_factory=list)    # already in <sha1>/ with the same size and crc32c
    extra: list[str] = field(default_factory=list)      # objects in the folder that the model does not have
    cleaned: int = 0                                    # stray staging objects removed
    manifest_written: bool = False


def _rel_in_staging(name: str, staging_prefix: str) -> str | None:
    rest = name[len(staging_prefix):]
    _run, sep, rel = rest.partition("/")
    return rel if sep and rel else None


def _commit_copy(bucket, src, dest_name: str, generation: int) -> None:
    """Server-side copy with the rewrite API (large objects take several calls; ``token`` resumes).

    ``generation``: the destination's generation when it was listed (0: there was none). Passed as the precondition
    of every call, it makes google-cloud-storage retry a call that failed (503, 429, a reset: the library retries a
    write only when it is conditional); a copy that was done although its answer was lost finds the destination
    changed (412) and is taken as done when the destination now holds the source's bytes."""
    dest = bucket.blob(dest_name)
    try:
        token, _done, _total = dest.rewrite(src, if_generation_match=generation)
        while token is not None:
            token, _done, _total = dest.rewrite(src, token=token, if_generation_match=generation)
    except api_exceptions.PreconditionFailed:
        now = bucket.get_blob(dest_name)
        if now is None or now.crc32c != src.crc32c or now.size != src.size:
            raise UserError(f"gs://{bucket.name}/{dest_name} was changed by another writer during this add; run "
                            "the same command again", 1) from None


def _write_last(bucket, name: str, data: bytes | str, content_type: str = "text/plain") -> None:
    """Write the descriptor or the manifest with the generation it has now as the precondition (0: none), so a failed
    call is retried by the library; one whose answer was lost after the write is taken as done when the object holds
    exactly ``data``."""
    payload = data.encode() if isinstance(data, str) else data
    existing = bucket.get_blob(name)
    try:
        bucket.blob(name).upload_from_string(payload, content_type=content_type,
                                             if_generation_match=existing.generation if existing else 0)
    except api_exceptions.PreconditionFailed:
        now = bucket.get_blob(name)
        if now is None or _read_manifest(now) != payload:
            raise UserError(f"gs://{bucket.name}/{name} was changed by another writer during this add; run the same "
                            "command again", 1) from None


#: A hub manifest names a model's files with their sizes and checksums (a few KB); a descriptor is one line or two.
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_DESCRIPTOR_BYTES = 64 * 1024


def _read_manifest(blob) -> bytes | None:
    """The manifest object's bytes, bounded (whoever can write the bucket could put 10 GB there): a larger one is
    one line naming it."""
    try:
        return download_bounded(blob, MAX_MANIFEST_BYTES, f"gs://{blob.bucket.name}/{blob.name}",
                                "not a hub manifest tpuctl wrote; remove it and add the model again")
    except api_exceptions.NotFound:
        return None


def _read_descriptor(blob) -> str | None:
    """The handle a descriptor object names; None when it is missing, too large or not one."""
    try:
        return handle_from_descriptor(download_bounded(blob, MAX_DESCRIPTOR_BYTES, blob.name, "not a descriptor")
                                      .decode("utf-8", "replace"))
    except (UserError, api_exceptions.NotFound):
        return None


def upload_model(bucket, prefix: str, m: Materialized, workers: int = 8,
                 progress: Progress | None = None, on_total: Callable[[int], None] | None = None,
                 created_by: str = "tpuctl hub-cache add") -> UploadResult:
    """Put the model into ``<prefix>/<sha1(handle)>/`` so that the folder is complete or detectably not.

    1. files not already there (same size + crc32c) go to ``<prefix>/.staging/<sha1>-<random>/`` (outside
       anything tensorflow_hub reads), in parallel through transfer_manager; verified objects a previous
       interrupted run staged are reused;
    2. every staged object's crc32c is compared with the local file's;
    3. the old manifest is deleted (the folder is now incomplete), staged objects are copied in
       server-side, the folder is listed and checked again;
    4. the descriptor, then the manifest (handle, files, sizes, crc32c) are written LAST;
    5. every staging object of this model is removed.
    An interruption anywhere leaves either the previous complete folder (steps 1-2) or a folder without
    a valid manifest (3-4), which ``ls``, ``tpuctl doctor`` and the trainer report as incomplete.
    """

    domain.validate_hub_prefix(prefix)
    client = bucket.client
    folder = domain.hub_folder(prefix, m.handle)
    staging = domain.hub_staging_prefix(prefix, m.key)
    local = {f.rel: f for f in m.files}
    result = UploadResult(m.handle, m.key)
    where = f"gs://{bucket.name}/{folder}"

    with google_errors(f"listing {where}"):
        final = {b.name[len(folder):]: b for b in client.list_blobs(bucket, prefix=folder)}
        staged = list(client.list_blobs(bucket, prefix=staging))
    manifest_blob = final.pop(domain.HUB_MANIFEST, None)
    result.extra = sorted(rel for rel in final if rel not in local)
    in_place = {rel for rel, f in local.items() if rel in final and same_content(f, final[rel])}
    reusable: dict[str, object] = {}
    for b in staged:
        rel = _rel_in_staging(b.name, staging)
        if rel in local and rel not in in_place and rel not in reusable and same_content(local[rel], b):
            reusable[rel] = b
    layout = domain.hub_layout(prefix, m.handle, {rel: (f.size, f.crc32c()) for rel, f in local.items()},
                               created_by, utc_now())
    manifest = layout.manifest[1]
    if len(in_place) == len(local) and manifest_blob is not None:
        with google_errors(f"reading {where}{domain.HUB_MANIFEST}"):
            old = _read_manifest(manifest_blob)
        try:
            complete = old is not None and domain.parse_hub_manifest(old, m.handle) == domain.parse_hub_manifest(manifest)
        except domain.DomainError:
            complete = False
        if complete:
            result.skipped = sorted(in_place)
            result.cleaned = _remove_staging(bucket, staging)
            return result

    todo = [f for rel, f in sorted(local.items()) if rel not in in_place and rel not in reusable]
    if on_total:
        on_total(sum(f.size for f in todo))
    run_dir = f"{staging}{secrets.token_hex(6)}/"
    with google_errors(f"uploading to gs://{bucket.name}/{run_dir}"):
        upload_files(bucket, [(f.path, run_dir + f.rel) for f in todo], workers=workers, progress=progress,
                     done=lambda i: result.uploaded.append(todo[i].rel))
        # verify what was staged: the uploaded object's crc32c against the local file's
        fresh = {_rel_in_staging(b.name, staging): b for b in client.list_blobs(bucket, prefix=run_dir)}
    bad = [f.rel for f in todo if f.rel not in fresh or not same_content(f, fresh[f.rel])]
    if bad:
        raise UserError(f"upload of {m.handle} could not be verified: {len(bad)} object(s) in "
                        f"gs://{bucket.name}/{run_dir} differ from the local files (e.g. {bad[0]}); "
                        "nothing was placed in the cache folder, run the same command again", 1)
    sources = {**reusable, **{f.rel: fresh[f.rel] for f in todo}}
    result.reused = sorted(reusable)
    result.skipped = sorted(in_place)

    with google_errors(f"writing {where}"):
        if manifest_blob is not None:
            with contextlib.suppress(api_exceptions.NotFound):    # a retried delete whose first answer was lost
                manifest_blob.delete(if_generation_match=manifest_blob.generation)   # now detectably incomplete
        for rel, src in sorted(sources.items(), key=lambda kv: (kv[0] == SAVED_MODEL, kv[0])):
            listed = final.get(rel)
            _commit_copy(bucket, src, layout.files[rel], int(listed.generation) if listed is not None else 0)
        placed = {b.name[len(folder):]: b for b in client.list_blobs(bucket, prefix=folder)}
        wrong = [rel for rel, f in local.items() if rel not in placed or not same_content(f, placed[rel])]
        if wrong:
            raise UserError(f"{where} does not hold what was uploaded after the copy ({len(wrong)} object(s), "
                            f"e.g. {wrong[0]}); it stays incomplete, run the same command again", 1)
        _write_last(bucket, layout.descriptor[0], layout.descriptor[1])
        _write_last(bucket, layout.manifest[0], manifest, content_type="application/json")
        result.manifest_written = True
        result.cleaned = _remove_staging(bucket, staging)
    return result


def _remove_staging(bucket, staging_prefix: str) -> int:
    """Delete every staging object of one model (this run's and strays of interrupted runs)."""
    with google_errors(f"removing gs://{bucket.name}/{staging_prefix}*"):
        blobs = list(bucket.client.list_blobs(bucket, prefix=staging_prefix))
        for b in blobs:
            try:
                b.delete()
            except Exception as exc:
                if type(exc).__name__ != "NotFound":
                    raise
    return len(blobs)


@dataclass
class CacheEntry:
    key: str
    handle: str | None
    files: int
    size: int
    complete: bool
    problem: str | None = None          # why it is incomplete
    staging: int = 0                    # objects of interrupted uploads under .staging/


def _folder_state(bucket, prefix: str, key: str, objects: list,
                  handle: str | None = None) -> tuple[bool, str | None, str | None]:
    """(complete, problem, handle from the manifest) of one ``<sha1>/`` folder from its listed objects."""
    listed = {}
    manifest_blob = None
    for b in objects:
        rel = b.name[len(prefix) + len(key) + 2:]
        if rel == domain.HUB_MANIFEST:
            manifest_blob = b
        else:
            listed[rel] = (int(b.size or 0), b.crc32c)
    text = _read_manifest(bucket.blob(manifest_blob.name)) if manifest_blob is not None else None
    problem = domain.hub_folder_problem(text, listed, handle)
    found = None
    if text is not None:
        with contextlib.suppress(ValueError, RecursionError):
            doc = json.loads(text)
            found = doc.get("handle") if isinstance(doc, dict) and isinstance(doc.get("handle"), str) else None
    if problem is None and found is not None and domain.hub_cache_key(found) != key:
        problem = f"manifest is for {found!r}, whose sha1 is not {key}"
    return problem is None, problem, found


def list_cache(client, bucket_name: str, prefix: str) -> list[CacheEntry]:
    """Every ``<sha1>/`` folder under ``prefix``: handle, files, size, complete (a valid manifest whose
    files are all there with their size and crc32c) or why not; and staged objects of interrupted uploads."""
    domain.validate_hub_prefix(prefix)
    folders: dict[str, list] = {}
    descriptors: dict[str, str] = {}
    staging: dict[str, int] = {}
    for blob in client.list_blobs(bucket_name, prefix=f"{prefix}/"):
        rest = blob.name[len(prefix) + 1:]
        top, _, inner = rest.partition("/")
        if top == domain.HUB_STAGING:
            key = inner.partition("/")[0].partition("-")[0]
            if domain.is_hub_cache_key(key):
                staging[key] = staging.get(key, 0) + 1
            continue
        if not inner:
            if top.endswith(".descriptor.txt") and domain.is_hub_cache_key(top[: -len(".descriptor.txt")]):
                descriptors[top[: -len(".descriptor.txt")]] = blob.name
            continue
        if domain.is_hub_cache_key(top):
            folders.setdefault(top, []).append(blob)
    bucket = client.bucket(bucket_name)
    out = []
    for key in sorted(set(folders) | set(staging)):
        objects = folders.get(key, [])
        if objects:
            complete, problem, handle = _folder_state(bucket, prefix, key, objects)
        else:
            complete, problem, handle = False, "only an interrupted upload (nothing in the folder yet)", None
        if handle is None and key in descriptors:
            handle = _read_descriptor(bucket.blob(descriptors[key]))
        files = [b for b in objects if not b.name.endswith("/" + domain.HUB_MANIFEST)]
        out.append(CacheEntry(key, handle, len(files), sum(int(b.size or 0) for b in files), complete, problem,
                              staging.get(key, 0)))
    return out


@dataclass
class HubStatus:
    handle: str
    complete: bool
    detail: str          # where it is (complete) or what is wrong


def hub_status(client, bucket_name: str, prefix: str, handles: Iterable[str]) -> list[HubStatus]:
    """For each handle: is ``<prefix>/<sha1>/`` complete (doctor's hub check)? Lists only that model's
    folder and staging objects, reads its manifest."""
    domain.validate_hub_prefix(prefix)
    bucket = client.bucket(bucket_name)
    out = []
    for h in handles:
        key = domain.hub_cache_key(h)
        objects = list(client.list_blobs(bucket_name, prefix=domain.hub_folder(prefix, h)))
        staged = sum(1 for _ in client.list_blobs(bucket_name, prefix=domain.hub_staging_prefix(prefix, key)))
        where = f"gs://{bucket_name}/{prefix}/{key}/"
        note = f"; an interrupted upload left {staged} object(s) in {prefix}/{domain.HUB_STAGING}/" if staged else ""
        if not objects:
            out.append(HubStatus(h, False, "not in the cache (no saved_model.pb)" + note))
            continue
        complete, problem, _found = _folder_state(bucket, prefix, key, objects, h)
        out.append(HubStatus(h, True, where) if complete else
                   HubStatus(h, False, f"INCOMPLETE {where}: {problem}{note}"))
    return out


