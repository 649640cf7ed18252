"""HubModelCache: hub models as objects in tensorflow_hub's cache layout, complete or detectably not.

``TFHUB_CACHE_DIR=gs://<bucket>/<prefix>`` makes ``hub.load(handle)`` use ``<prefix>/<sha1(handle)>/`` as
soon as that folder exists and is non-empty (tensorflow_hub never checks it further), so a ``pulumi up``
that fails half-way would leave a folder every job "loads" and crashes on. Every file of a model goes
there unchanged (``FileAsset``: bytes as they are, not re-packed like a ``FileArchive``), then the
descriptor, and the manifest (``<sha1>/.tpuctl-manifest.json``: handle, files, sizes, crc32c) LAST: it
``depends_on`` every file object, so Pulumi creates it only after all of them succeeded. ``tpuctl
hub-cache ls``, ``tpuctl doctor`` and the trainer treat a folder without a valid manifest as incomplete.
The manifest and descriptor are deterministic (no date, no host) so an unchanged model is not rewritten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_gcp as gcp

from cloud.google import crc32c
from ground import domain
from ground.files import digest_b64

CREATED_BY = "pulumi up (tpuctl infra HubModelCache)"


@dataclass(frozen=True)
class HubModelFiles:
    handle: str
    files: Sequence[tuple[str, Path]]      # (path relative to the model folder, local file)


@dataclass(frozen=True)
class HubModelCacheArgs:
    bucket: pulumi.Input[str]
    prefix: str
    models: Sequence[HubModelFiles]


def layout(model: HubModelFiles, prefix: str) -> domain.HubLayout:
    """Where the model's files, descriptor and manifest go (``domain.hub_layout``, the CLI's layout too);
    deterministic, so an unchanged model is not rewritten."""
    files = {rel: (path.stat().st_size, digest_b64(path, crc32c.Checksum())) for rel, path in model.files
             if rel != domain.HUB_MANIFEST}
    return domain.hub_layout(prefix, model.handle, files, CREATED_BY, None)


class HubModelCache(pulumi.ComponentResource):
    objects: dict[str, gcp.storage.BucketObject]   # object name -> object (files, descriptor, manifest)
    manifests: dict[str, gcp.storage.BucketObject]  # handle -> its manifest object

    def __init__(self, name: str, args: HubModelCacheArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpuctl:infra:HubModelCache", name, None, opts)
        self._bucket = args.bucket
        self.objects = {}
        self.manifests = {}
        for model in args.models:
            placed = layout(model, args.prefix)
            paths = dict(model.files)
            files = [self._object(name, pulumi.FileAsset(str(paths[rel]))) for rel, name in placed.files.items()]
            descriptor = self._object(placed.descriptor[0], pulumi.StringAsset(placed.descriptor[1]), depends_on=files)
            self.manifests[model.handle] = self._object(
                placed.manifest[0], pulumi.StringAsset(placed.manifest[1]), depends_on=[*files, descriptor],
                content_type="application/json")
        self.register_outputs({"objects": sorted(self.objects)})

    def _object(self, object_name: str, source, depends_on=(), content_type: str | None = None):
        # The object name is unique in the bucket and stable across runs: a good resource name.
        obj = gcp.storage.BucketObject(
            object_name,
            gcp.storage.BucketObjectArgs(bucket=self._bucket, name=object_name, source=source,
                                         content_type=content_type),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)),
        )
        self.objects[object_name] = obj
        return obj
