"""``tpuctl hub-cache add|ls|fetch``: TF-Hub models in tensorflow_hub's cache layout (see bootstrap/hubcache.py)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from bootstrap import hubcache
from cloud import clients
from ground import domain
from ground.envs import REPO_ROOT
from ground.errors import EXIT_INTERRUPTED, UserError
from ground.outputs import load_outputs
from tpuctl.commands.options import say, stderr_bar

hub_app = typer.Typer(help="TF-Hub models in tensorflow_hub's cache layout (<TFHUB_CACHE_DIR>/<sha1(handle)>/).",
                      no_args_is_help=True)


def _target(bucket: Optional[str], prefix: Optional[str], stack: Optional[str], outputs: Optional[Path]):
    """(bucket name, prefix, stack outputs) from --bucket/--prefix or the stack outputs."""
    so = load_outputs(stack=stack, outputs_file=outputs)
    if bucket is None and so is not None:
        bucket = so.require("buckets.hub-cache", "pass --bucket")
    if bucket is None:
        raise UserError("give --bucket B, or --stack NAME / --outputs FILE")
    name = domain.bucket_name_from(bucket)
    prefix = prefix or (so.hub_cache_prefix if so and so.hub_cache_prefix else domain.DEFAULT_HUB_CACHE_PREFIX)
    domain.validate_hub_prefix(prefix)
    return name, prefix, so


def _handles(handles: List[str], so, source: Optional[str]) -> list[str]:
    out = list(handles) or (list(so.hub_models) if so is not None else [])
    if not out and so is not None:
        raise UserError("the stack outputs list no hub models (hub_models is empty); name a HANDLE, or add it to "
                        "tpuctl:hubModels in the stack config and `pulumi up`")
    if not out:
        raise UserError("name at least one HANDLE (or use --stack/--outputs with hub_models)")
    if source is not None and len(out) != 1:
        raise UserError("--from gives the source of one handle; name exactly one HANDLE with it")
    for h in out:
        domain.hub_cache_key(h)
    return out


@hub_app.command("add")
def add(
    handles: List[str] = typer.Argument(None, help="Hub handles (URLs; the exact string hub.load will get)."),
    bucket: Optional[str] = typer.Option(None, "--bucket", help="Bucket (name or gs://) holding the hub cache."),
    prefix: Optional[str] = typer.Option(None, "--prefix", help="Folder in the bucket (default: the stack's tpuctl:hubCachePrefix, whose own default is model-cache)."),
    source: Optional[str] = typer.Option(None, "--from", help="Take the model from this folder, .tar.gz or URL instead of the handle."),
    stack: Optional[str] = typer.Option(None, "--stack", help="Bucket, prefix and handles from this stack's outputs."),
    outputs: Optional[Path] = typer.Option(None, "--outputs", help="Bucket, prefix and handles from this outputs JSON."),
    workers: int = typer.Option(8, "--workers", min=1, max=64, help="Parallel uploads."),
) -> None:
    """Fetch hub models, unpack them safely and upload them to <prefix>/<sha1(handle)>/ in the bucket."""
    name, prefix, so = _target(bucket, prefix, stack, outputs)
    todo = _handles(handles or [], so, source)
    client = clients.storage_client()
    gcs_bucket = clients.get_bucket(client, name, "storage.buckets.get and storage.objects.create")
    for handle in todo:
        with stderr_bar(f"fetch {handle}", data=True) as (advance, total):
            model = hubcache.materialize(handle, source, progress=advance, on_total=total)
        try:
            with stderr_bar(f"upload {model.key[:12]}", data=True) as (advance, total):
                result = hubcache.upload_model(gcs_bucket, prefix, model, workers=workers,
                                               progress=advance, on_total=total)
        except KeyboardInterrupt:
            # Ctrl-C: no new file was submitted after the current window; whatever was sent is in
            # <prefix>/.staging/ (never read by tensorflow_hub) or in a folder without a manifest
            raise UserError(f"interrupted: gs://{name}/{prefix}/{model.key}/ was not completed; run the same "
                            f"command again to resume (verified staged files are reused, the rest cleaned up)",
                            EXIT_INTERRUPTED) from None
        finally:
            model.cleanup()
        reused = f", {len(result.reused)} resumed" if result.reused else ""
        cleaned = f", {result.cleaned} staging object(s) removed" if result.cleaned else ""
        say(f"{handle} -> gs://{name}/{prefix}/{model.key}/  "
                   f"({len(result.uploaded)} uploaded, {len(result.skipped)} unchanged{reused}{cleaned}; complete)")
        if result.extra:
            say(f"  note: {len(result.extra)} object(s) there are not part of this model: "
                       + ", ".join(result.extra[:5]))
    say(f"TFHUB_CACHE_DIR={domain.tfhub_cache_dir(name, prefix)}")


@hub_app.command("ls")
def ls(
    bucket: Optional[str] = typer.Option(None, "--bucket", help="Bucket (name or gs://) holding the hub cache."),
    prefix: Optional[str] = typer.Option(None, "--prefix", help="Folder in the bucket (default: the stack's tpuctl:hubCachePrefix, whose own default is model-cache)."),
    stack: Optional[str] = typer.Option(None, "--stack", help="Bucket and prefix from this stack's outputs."),
    outputs: Optional[Path] = typer.Option(None, "--outputs", help="Bucket and prefix from this outputs JSON."),
) -> None:
    """List the models in the hub cache: sha1 folder, handle, files, size, complete or not."""
    name, prefix, so = _target(bucket, prefix, stack, outputs)
    with clients.google_errors(f"listing gs://{name}", not_found=f"bucket gs://{name} does not exist",
                               forbidden=f"permission denied listing gs://{name}: you need storage.objects.list"):
        entries = hubcache.list_cache(clients.storage_client(), name, prefix)
    configured = set(so.hub_models) if so is not None else set()
    repair_target = f"--stack {stack}" if stack else f"--bucket {name} --prefix {prefix}"
    for e in entries:
        if e.complete:
            state = "complete"
        else:
            state = f"INCOMPLETE ({e.problem}; repair: tpuctl hub-cache add {e.handle or 'HANDLE'} {repair_target})"
        staged = f"  [{e.staging} staged object(s) of an interrupted upload]" if e.staging else ""
        say(f"{e.key}  {e.handle or '?'}  {e.files} files  {e.size} bytes  {state}{staged}")
    seen = {e.key for e in entries}
    for h in sorted(configured):
        if domain.hub_cache_key(h) not in seen:
            say(f"{domain.hub_cache_key(h)}  {h}  MISSING (run: tpuctl hub-cache add {h} {repair_target})")
    if not entries and not configured:
        say(f"gs://{name}/{prefix}/ holds no hub models")
    say(f"TFHUB_CACHE_DIR={domain.tfhub_cache_dir(name, prefix)}")


@hub_app.command("fetch")
def fetch(
    handles: List[str] = typer.Argument(None, help="Hub handles (URLs; the exact string hub.load will get)."),
    dest: Optional[Path] = typer.Option(
        None, "--dest",
        help="Local cache folder (the Pulumi program's hubCacheSource; default <project folder>/.tpuctl-cache/hub)."),
    source: Optional[str] = typer.Option(None, "--from", help="Take the model from this folder, .tar.gz or URL instead of the handle."),
    stack: Optional[str] = typer.Option(None, "--stack", help="Handles from this stack's outputs (hub_models)."),
    outputs: Optional[Path] = typer.Option(None, "--outputs", help="Handles from this outputs JSON (hub_models)."),
) -> None:
    """Fetch hub models into a local folder in the same <sha1(handle)>/ layout."""
    so = load_outputs(stack=stack, outputs_file=outputs)
    todo = _handles(handles or [], so, source)
    dest = dest if dest is not None else REPO_ROOT / hubcache.DEFAULT_LOCAL_CACHE
    for handle in todo:
        with stderr_bar(f"fetch {handle}", data=True) as (advance, total):
            model = hubcache.materialize(handle, source, progress=advance, on_total=total)
        try:
            path, replaced = hubcache.install_local(model, dest)
        finally:
            model.cleanup()
        say(f"{handle} -> {path}{' (replaced)' if replaced else ''}")
    say(f"TFHUB_CACHE_DIR={dest.resolve()}")


def register(app: typer.Typer) -> None:
    app.add_typer(hub_app, name="hub-cache")
