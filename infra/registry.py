"""TrainerImageRepository: the Artifact Registry Docker repository the trainer image (`tpuctl image build`)
is pushed to, with reader access for the principals that run jobs.

Facts (pulumi-gcp 10.2 ``gcp.artifactregistry.Repository`` / ``RepositoryIamMember``; Artifact Registry
cleanup policies: cloud.google.com/artifact-registry/docs/repositories/cleanup-policy, checked 2026-11-22):
a DOCKER repository lives in one region; a cleanup policy with ``action=DELETE`` and
``condition.tag_state=UNTAGGED`` + ``older_than`` removes image versions no tag points at any more (every
`tpuctl image build` of changed sources leaves the previous tag in place; untagged layers come from
re-pushes). ``roles/artifactregistry.reader`` on the repository lets a principal pull from it only.
Additive IAM only (``RepositoryIamMember``), as for buckets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from ground import domain

READER_ROLE = "roles/artifactregistry.reader"
#: Untagged versions are deleted after this long (Artifact Registry takes a duration in seconds).
UNTAGGED_MAX_AGE = "604800s"   # 7 days


@dataclass(frozen=True)
class TrainerImageRepositoryArgs:
    project: str
    region: str
    repository_id: str
    labels: Mapping[str, str]
    members: Mapping[str, pulumi.Input[str]]        # principal keyword -> IAM member (may be an Output)
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    ready: Mapping[str, Sequence[pulumi.Resource]] = field(default_factory=dict)


class TrainerImageRepository(pulumi.ComponentResource):
    """``url`` is ``<region>-docker.pkg.dev/<project>/<repository>``; ``readers`` the IAM members granted."""
    url: pulumi.Output[str]
    repository_id: pulumi.Output[str]
    readers: list[str]

    def __init__(self, name: str, args: TrainerImageRepositoryArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpuctl:infra:TrainerImageRepository", name, None, opts)
        repo = gcp.artifactregistry.Repository(
            "trainer-images",
            project=args.project,
            location=args.region,
            repository_id=args.repository_id,
            format="DOCKER",
            description="tpuctl trainer images (container/Dockerfile), tagged by a hash of their sources",
            labels={**args.labels, domain.PURPOSE_LABEL: domain.TRAINER_IMAGES_PURPOSE},
            cleanup_policy_dry_run=False,
            cleanup_policies=[gcp.artifactregistry.RepositoryCleanupPolicyArgs(
                id="delete-untagged",
                action="DELETE",
                condition=gcp.artifactregistry.RepositoryCleanupPolicyConditionArgs(
                    tag_state="UNTAGGED", older_than=UNTAGGED_MAX_AGE),
            )],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.readers = []
        for keyword in domain.IMAGE_PULLERS:
            member = args.members.get(keyword)
            if member is None:
                continue
            gcp.artifactregistry.RepositoryIamMember(
                f"image-reader-{keyword}",
                project=args.project,
                location=args.region,
                repository=repo.repository_id,
                role=READER_ROLE,
                member=member,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.ready.get(keyword, ()))),
            )
            self.readers.append(keyword)
        self.repository_id = repo.repository_id
        self.url = pulumi.Output.concat(args.region, "-docker.pkg.dev/", args.project, "/", repo.repository_id)
        self.register_outputs({"url": self.url})
