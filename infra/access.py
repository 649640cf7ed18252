"""AccessGrants: additive grants for the training principals, in the stack's access mode.

The training service account also gets ``domain.TRAINING_SA_PROJECT_ROLES`` on the project in both modes (Logs
Writer: its TPU VM hosts and Vertex AI jobs write their logs with it).

Additive only: ``BucketIAMMember`` / ``projects.IAMMember`` (and, for the ACL route, single ACL
entries). Never ``…IAMPolicy`` or ``…IAMBinding``, which would take over roles that other tools
or people manage on the same project and buckets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from ground import domain

#: Access-map entries of the ACL route (keys of domain.ACL_PERMISSIONS).
ACL_BUCKET_READER = "bucket:READER"
ACL_DEFAULT_OBJECT_READER = "defaultObject:READER"


@dataclass(frozen=True)
class AccessGrantsArgs:
    project: str
    access_mode: str                                    # domain.ACCESS_MODES
    emails: Mapping[str, str]                           # principal keyword -> e-mail
    members: Mapping[str, pulumi.Input[str]]            # principal keyword -> IAM member (may be an Output)
    bucket_names: Mapping[str, str]                     # purpose -> bucket name (plain, for the access map)
    bucket_refs: Mapping[str, pulumi.Input[str]]        # purpose -> bucket name Output (carries the dependency)
    existing: Sequence[str] = ()                        # purposes whose bucket tpuctl does not create
    acl: Sequence[str] = ()                             # purposes shared through ACLs instead of IAM
    ready: Mapping[str, Sequence[pulumi.Resource]] = field(default_factory=dict)  # keyword -> wait for


class AccessGrants(pulumi.ComponentResource):
    """``access_map`` is ``{member: {bucket name: [roles or ACL entries]}}``, plain data."""
    access_map: dict[str, dict[str, list[str]]]
    grants: list[pulumi.CustomResource]

    def __init__(self, name: str, args: AccessGrantsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpuctl:infra:AccessGrants", name, None, opts)
        domain.validate_access_mode(args.access_mode)
        self.access_map = {}
        self.grants = []
        for keyword, email in args.emails.items():
            member = domain.member_for_email(email)
            member_ref = args.members.get(keyword, member)
            wait = list(args.ready.get(keyword, ()))
            child = pulumi.ResourceOptions(parent=self, depends_on=wait)
            entry = self.access_map.setdefault(member, {})

            if keyword == domain.TRAINING_SA_KEYWORD:
                # What the account jobs run as needs on the project in both modes (its hosts' and jobs' logs).
                for role in domain.TRAINING_SA_PROJECT_ROLES:
                    self.grants.append(gcp.projects.IAMMember(
                        f"project-{keyword}-{role.removeprefix('roles/')}",
                        gcp.projects.IAMMemberArgs(project=args.project, role=role, member=member_ref),
                        opts=child,
                    ))

            if args.access_mode == "project":
                # The classic set, granted on the project: it reaches every bucket of the project.
                for role in domain.PROJECT_MODE_ROLES:
                    self.grants.append(gcp.projects.IAMMember(
                        f"project-{keyword}-{role.removeprefix('roles/')}",
                        gcp.projects.IAMMemberArgs(project=args.project, role=role, member=member_ref),
                        opts=child,
                    ))
                for purpose, bucket in args.bucket_names.items():
                    if purpose not in args.existing:
                        entry[bucket] = list(domain.PROJECT_MODE_ROLES)
                # A referenced bucket may live in another project: it keeps its own grants below.
                per_bucket = [p for p in args.bucket_names if p in args.existing]
            else:
                per_bucket = list(args.bucket_names)

            for purpose in per_bucket:
                bucket = args.bucket_names[purpose]
                ref = args.bucket_refs.get(purpose, bucket)
                if purpose in args.acl:
                    entry[bucket] = self._acl_reader(purpose, keyword, email, ref, child)
                    continue
                roles = domain.roles_for("bucket", purpose)
                for role in roles:
                    self.grants.append(gcp.storage.BucketIAMMember(
                        f"{purpose}-{keyword}-{role.removeprefix('roles/')}",
                        gcp.storage.BucketIAMMemberArgs(bucket=ref, role=role, member=member_ref),
                        opts=child,
                    ))
                entry[bucket] = sorted(set(entry.get(bucket, [])) | set(roles))
        self.register_outputs({"access_map": self.access_map})

    def _acl_reader(self, purpose: str, keyword: str, email: str, bucket: pulumi.Input[str],
                    opts: pulumi.ResourceOptions) -> list[str]:
        """The seeds' "bucket ACL" route, for an existing fine-grained bucket: READER on the bucket
        (list) plus a default object READER (get) for objects written from now on."""
        entity = f"user-{email}"
        self.grants.append(gcp.storage.BucketAccessControl(
            f"{purpose}-{keyword}-acl-reader",
            gcp.storage.BucketAccessControlArgs(bucket=bucket, entity=entity, role="READER"),
            opts=opts,
        ))
        self.grants.append(gcp.storage.DefaultObjectAccessControl(
            f"{purpose}-{keyword}-default-object-acl-reader",
            gcp.storage.DefaultObjectAccessControlArgs(bucket=bucket, entity=entity, role="READER"),
            opts=opts,
        ))
        return [ACL_BUCKET_READER, ACL_DEFAULT_OBJECT_READER]
