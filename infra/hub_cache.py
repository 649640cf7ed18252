"""HubModelCache: hub models as objects in tensorflow_hub's cache layout.

``TFHUB_CACHE_DIR=gs://<bucket>/<prefix>`` makes ``hub.load(handle)`` look in
``<prefix>/<sha1(handle)>/`` for ``saved_model.pb``; every file of a model goes there unchanged
(``FileAsset``: bytes as they are, not re-packed like a ``FileArchive``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pulumi
import pulumi_gcp as gcp

from tpuctl.ground import domain


@dataclass(frozen=True)
class HubModelFiles:
    handle: str
    files: Sequence[tuple[str, Path]]      # (path relative to the model folder, local file)


@dataclass(frozen=True)
class HubModelCacheArgs:
    bucket: pulumi.Input[str]
    prefix: str
    models: Sequence[HubModelFiles]


class HubModelCache(pulumi.ComponentResource):
    objects: dict[str, gcp.storage.BucketObject]   # object name -> object

    def __init__(self, name: str, args: HubModelCacheArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpuctl:infra:HubModelCache", name, None, opts)
        self.objects = {}
        for model in args.models:
            for rel, path in model.files:
                object_name = domain.hub_object_name(args.prefix, model.handle, rel)
                # The object name is unique in the bucket and stable across runs: a good resource name.
                self.objects[object_name] = gcp.storage.BucketObject(
                    object_name,
                    gcp.storage.BucketObjectArgs(
                        bucket=args.bucket,
                        name=object_name,
                        source=pulumi.FileAsset(str(path)),
                    ),
                    opts=pulumi.ResourceOptions(parent=self),
                )
        self.register_outputs({"objects": sorted(self.objects)})
