"""TrainingBuckets: the data, staging, artifacts and hub-cache buckets, hardened by default, and the optional
access-log bucket their usage and storage logs go to.

Judged by checkov's GCS checks too (policy/exceptions.yaml says which findings tpuctl accepts and why):
every created bucket logs access (CKV_GCP_62) when ``accessLogRetentionDays`` > 0, and the buckets whose
contents cannot be rebuilt keep object versions (CKV_GCP_78, ``versionedBuckets``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from ground import domain

SECONDS_PER_DAY = 86_400
#: GCS writes usage and storage logs as this group, which needs objects.create on the log bucket
#: (cloud.google.com/storage/docs/access-logs#delivery, checked 2026-11; IAM because the bucket is uniform).
ACCESS_LOG_WRITER = "group:cloud-storage-analytics@google.com"
ACCESS_LOG_WRITER_ROLE = "roles/storage.objectCreator"
DEFAULT_VERSIONED: tuple[str, ...] = ("data", "artifacts")


@dataclass(frozen=True)
class BucketOptions:
    """The stack keys versionedBuckets, accessLogBucket and accessLogRetentionDays, resolved."""
    versioned: tuple[str, ...] = DEFAULT_VERSIONED   # purposes that keep object versions
    access_log_bucket: str = ""                      # "" = no access logs
    access_log_retention_days: int = 0


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
    options: BucketOptions = field(default_factory=BucketOptions)


class TrainingBuckets(pulumi.ComponentResource):
    """Creates one bucket per purpose in ``args.names``; ``names``/``urls`` also cover existing ones."""
    buckets: dict[str, gcp.storage.Bucket]
    names: dict[str, pulumi.Output[str]]
    urls: dict[str, pulumi.Output[str]]
    access_log_bucket: gcp.storage.Bucket | None

    def __init__(self, name: str, args: TrainingBucketsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpuctl:infra:TrainingBuckets", name, None, opts)
        options = args.options
        self.buckets = {}
        self.access_log_bucket = self._access_log_bucket(args, options)
        for purpose in domain.BUCKET_PURPOSES:
            if purpose not in args.names:
                continue
            # Staging holds packaged trainer code and job scratch files: nothing there outlives a run.
            lifecycle = _delete_after(args.staging_retention_days) if purpose == "staging" else []
            # Checkpoints, models and (by default) training data cannot be rebuilt: keep old versions.
            self.buckets[purpose] = self._bucket(args, purpose, args.names[purpose], purpose in options.versioned,
                                                 lifecycle, self._logging(args.names[purpose]))
        self.names = {p: b.name for p, b in self.buckets.items()}
        self.urls = {p: b.url for p, b in self.buckets.items()}
        for purpose, existing in args.existing.items():
            self.names[purpose] = pulumi.Output.from_input(existing)
            self.urls[purpose] = pulumi.Output.from_input(f"gs://{existing}")
        self.register_outputs({"names": self.names, "urls": self.urls,
                               "access_log_bucket": self.access_log_bucket.name if self.access_log_bucket else None})

    def _access_log_bucket(self, args: TrainingBucketsArgs, options: BucketOptions) -> gcp.storage.Bucket | None:
        """Hardened like the training buckets; no versioning and no access logs of its own (both accepted in
        policy/exceptions.yaml): logs are append-only and expire after the retention."""
        if not options.access_log_bucket:
            return None
        bucket = self._bucket(args, domain.ACCESS_LOG_PURPOSE, options.access_log_bucket, False,
                              _delete_after(options.access_log_retention_days))
        self._log_writer = gcp.storage.BucketIAMMember(
            f"{domain.ACCESS_LOG_PURPOSE}-writer",
            gcp.storage.BucketIAMMemberArgs(bucket=bucket.name, role=ACCESS_LOG_WRITER_ROLE, member=ACCESS_LOG_WRITER),
            opts=pulumi.ResourceOptions(parent=self),
        )
        return bucket

    def _bucket(self, args: TrainingBucketsArgs, purpose: str, bucket_name: str, versioned: bool,
                lifecycle_rules: list[gcp.storage.BucketLifecycleRuleArgs],
                logging: gcp.storage.BucketLoggingArgs | None = None) -> gcp.storage.Bucket:
        """A bucket with the safe defaults every bucket of the stack has, named after its purpose."""
        return gcp.storage.Bucket(
            purpose,
            gcp.storage.BucketArgs(
                name=bucket_name,
                project=args.project,
                location=args.location,
                uniform_bucket_level_access=True,
                public_access_prevention="enforced",
                versioning=gcp.storage.BucketVersioningArgs(enabled=versioned),
                lifecycle_rules=lifecycle_rules,
                logging=logging,
                soft_delete_policy=gcp.storage.BucketSoftDeletePolicyArgs(
                    retention_duration_seconds=args.soft_delete_retention_days * SECONDS_PER_DAY,
                ),
                labels={**args.labels, domain.PURPOSE_LABEL: purpose},
                force_destroy=False,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )

    def _logging(self, bucket_name: str) -> gcp.storage.BucketLoggingArgs | None:
        if self.access_log_bucket is None:
            return None
        # One prefix per bucket, so each bucket's usage and storage logs can be told apart (and deleted) alone.
        return gcp.storage.BucketLoggingArgs(log_bucket=self.access_log_bucket.name, log_object_prefix=bucket_name)


def _delete_after(days: int) -> list[gcp.storage.BucketLifecycleRuleArgs]:
    """One lifecycle rule: delete each object ``days`` after it was written."""
    return [gcp.storage.BucketLifecycleRuleArgs(
        action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
        condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=days),
    )]
