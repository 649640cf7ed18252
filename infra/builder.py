"""ImageBuilder: the service account Cloud Build runs ``tpuctl image build`` as, with exactly what a build needs.

Google recommends a service account per task, e.g. "one service account for building and pushing images to
Artifact Registry" (cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts, read
2026-11-27). What a user-specified build account needs, and where it is granted (``domain.IMAGE_BUILDER_ROLES``,
sources there): ``roles/artifactregistry.writer`` on the trainer image repository (push), ``roles/logging.logWriter``
on the project (the build logs to Cloud Logging only), ``roles/storage.objectViewer`` on the staging bucket (the
build context tpuctl uploads). Nothing on the data, artifacts or hub-cache buckets, no training job runs as it,
the same grants in both access modes (the access mode is about training principals). Additive IAM only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from ground import domain


@dataclass(frozen=True)
class ImageBuilderArgs:
    project: str
    region: str
    account_id: str
    repository: pulumi.Input[str]          # the trainer image repository id (an Output carries the dependency)
    staging_bucket: pulumi.Input[str]      # the staging bucket's name (Output)
    staging_bucket_name: str               # the same, plain (access map)
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)


class ImageBuilder(pulumi.ComponentResource):
    """``email`` is the builder's e-mail (plain); ``access_map`` its entry of the stack's access map."""
    email: str
    account: gcp.serviceaccount.Account
    access_map: dict[str, dict[str, list[str]]]

    def __init__(self, name: str, args: ImageBuilderArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpuctl:infra:ImageBuilder", name, None, opts)
        self.account = gcp.serviceaccount.Account(
            domain.IMAGE_BUILDER,
            gcp.serviceaccount.AccountArgs(
                project=args.project,
                account_id=args.account_id,
                display_name="tpuctl image builds",
                description="Cloud Build runs `tpuctl image build` as this account: pushes the trainer image, "
                            "writes build logs, reads the build context",
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.email = domain.service_account_email(args.project, args.account_id)
        member = self.account.member
        after = pulumi.ResourceOptions(parent=self, depends_on=[self.account])
        bucket_roles: list[str] = []
        for role, where in domain.IMAGE_BUILDER_ROLES.items():
            short = role.removeprefix("roles/")
            if where == domain.TRAINER_IMAGES_PURPOSE:
                gcp.artifactregistry.RepositoryIamMember(
                    f"image-builder-{short}", project=args.project, location=args.region,
                    repository=args.repository, role=role, member=member, opts=after)
            elif where == "project":
                gcp.projects.IAMMember(
                    f"image-builder-{short}",
                    gcp.projects.IAMMemberArgs(project=args.project, role=role, member=member), opts=after)
            else:
                assert where == "staging", f"image builder role {role} on {where}: only the staging bucket is known"
                gcp.storage.BucketIAMMember(
                    f"{where}-image-builder-{short}",
                    gcp.storage.BucketIAMMemberArgs(bucket=args.staging_bucket, role=role, member=member), opts=after)
                bucket_roles.append(role)
        self.access_map = {domain.member_for_email(self.email): {args.staging_bucket_name: bucket_roles}}
        self.register_outputs({"email": self.account.email})
