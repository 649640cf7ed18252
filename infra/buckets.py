"""TrainingBuckets: the data, staging, artifacts and hub-cache buckets, hardened by default."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pulumi
import pulumi_gcp as gcp

from tpuctl.ground import domain

SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class TrainingBucketsArgs:
    project: str
    location: str                                   # e.g. US-CENTRAL1
    names: Mapping[str, str]                        # purpose -> name, for every bucket to create
    staging_retention_days: int
    soft_delete_retention_days: int                 # 0 turns soft delete off
    labels: Mapping[str, str] = field(default_factory=dict)
    existing: Mapping[str, str] = field(default_factory=dict)   # purpose -> name, only referenced
    depends_on: Sequence[pulumi.Resource] = ()                   # e.g. the storage API


class TrainingBuckets(pulumi.ComponentResource):
    """Creates one bucket per purpose in ``args.names``; ``names``/``urls`` also cover existing ones."""

    buckets: dict[str, gcp.storage.Bucket]
    names: dict[str, pulumi.Output[str]]
    urls: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: TrainingBucketsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpuctl:infra:TrainingBuckets", name, None, opts)
        self.buckets = {}
        for purpose in domain.BUCKET_PURPOSES:
            if purpose not in args.names:
                continue
            self.buckets[purpose] = gcp.storage.Bucket(
                purpose,
                gcp.storage.BucketArgs(
                    name=args.names[purpose],
                    project=args.project,
                    location=args.location,
                    uniform_bucket_level_access=True,
                    public_access_prevention="enforced",
                    # Checkpoints and exported models are the expensive output: keep old versions.
                    versioning=gcp.storage.BucketVersioningArgs(enabled=purpose == "artifacts"),
                    lifecycle_rules=_lifecycle(purpose, args.staging_retention_days),
                    soft_delete_policy=gcp.storage.BucketSoftDeletePolicyArgs(
                        retention_duration_seconds=args.soft_delete_retention_days * SECONDS_PER_DAY,
                    ),
                    labels={**args.labels, domain.PURPOSE_LABEL: purpose},
                    force_destroy=False,
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
            )
        self.names = {p: b.name for p, b in self.buckets.items()}
        self.urls = {p: b.url for p, b in self.buckets.items()}
        for purpose, existing in args.existing.items():
            self.names[purpose] = pulumi.Output.from_input(existing)
            self.urls[purpose] = pulumi.Output.from_input(f"gs://{existing}")
        self.register_outputs({"names": self.names, "urls": self.urls})


def _lifecycle(purpose: str, staging_days: int) -> list[gcp.storage.BucketLifecycleRuleArgs]:
    if purpose != "staging":
        return []
    # Staging holds packaged trainer code and job scratch files: nothing there outlives a run.
    return [
        gcp.storage.BucketLifecycleRuleArgs(
            action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
            condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=staging_days),
        )
    ]
