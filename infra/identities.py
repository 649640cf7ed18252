"""ServiceIdentities: the APIs training needs, the TPU/Vertex service agents, the training account."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pulumi
import pulumi_gcp as gcp

from tpuctl.ground import domain


@dataclass(frozen=True)
class ServiceIdentitiesArgs:
    project: str
    project_number: str
    apis: Sequence[str]                  # e.g. domain.REQUIRED_APIS
    agents: Sequence[str]                # service-agent keywords (domain.SERVICE_AGENTS)
    training_sa_id: str | None = None    # None: no dedicated training service account


def api_resource_name(api: str) -> str:
    return f"api-{api.split('.')[0]}"


class ServiceIdentities(pulumi.ComponentResource):
    """``emails``/``members`` map principal keywords to plain strings; ``ready`` lists what grants wait for."""

    apis: dict[str, gcp.projects.Service]
    identities: dict[str, gcp.projects.ServiceIdentity]
    training_sa: gcp.serviceaccount.Account | None
    emails: dict[str, str]
    members: dict[str, pulumi.Output[str]]
    ready: dict[str, list[pulumi.Resource]]

    def __init__(self, name: str, args: ServiceIdentitiesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpuctl:infra:ServiceIdentities", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.apis = {
            api: gcp.projects.Service(
                api_resource_name(api),
                gcp.projects.ServiceArgs(
                    project=args.project,
                    service=api,
                    # Other workloads in the project may use these APIs: never switch them off.
                    disable_on_destroy=False,
                    disable_dependent_services=False,
                ),
                opts=child,
            )
            for api in args.apis
        }

        self.identities = {}
        self.emails = {}
        self.members = {}
        self.ready = {}
        for keyword in args.agents:
            kind = domain.SERVICE_AGENTS[keyword]
            if kind.service not in self.identities:
                # generateServiceIdentity creates the agent if it does not exist yet; IAM grants to
                # an agent that was never created fail, so grants wait for this resource.
                self.identities[kind.service] = gcp.projects.ServiceIdentity(
                    f"{kind.service.split('.')[0]}-identity",
                    gcp.projects.ServiceIdentityArgs(project=args.project, service=kind.service),
                    opts=pulumi.ResourceOptions(parent=self, depends_on=_only(self.apis, kind.service)),
                )
            email = domain.agent_email(keyword, args.project_number)
            self.emails[keyword] = email
            self.members[keyword] = pulumi.Output.from_input(domain.member_for_email(email))
            ready: list[pulumi.Resource] = [self.identities[kind.service]]
            if kind.project_role:
                ready.append(
                    gcp.projects.IAMMember(
                        f"{keyword}-service-agent-role",
                        gcp.projects.IAMMemberArgs(
                            project=args.project,
                            role=kind.project_role,
                            member=self.members[keyword],
                        ),
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[self.identities[kind.service]]),
                    )
                )
            self.ready[keyword] = ready

        self.training_sa = None
        if args.training_sa_id:
            self.training_sa = gcp.serviceaccount.Account(
                domain.TRAINING_SA_KEYWORD,
                gcp.serviceaccount.AccountArgs(
                    project=args.project,
                    account_id=args.training_sa_id,
                    display_name="tpuctl training jobs",
                    description="Runs tpuctl training jobs (Vertex AI CustomJob service account / TPU VM account)",
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=_only(self.apis, "iam.googleapis.com")),
            )
            self.emails[domain.TRAINING_SA_KEYWORD] = domain.training_sa_email(args.project, args.training_sa_id)
            self.members[domain.TRAINING_SA_KEYWORD] = self.training_sa.member
            self.ready[domain.TRAINING_SA_KEYWORD] = [self.training_sa]

        self.register_outputs({
            "emails": self.emails,
            "training_service_account": self.training_sa.email if self.training_sa else None,
        })


def _only(apis: dict[str, gcp.projects.Service], api: str) -> list[pulumi.Resource]:
    return [apis[api]] if api in apis else []
