"""ServiceIdentities: the APIs training needs, the TPU/Vertex service agents, the training account.

How each agent comes to exist is a domain fact (``domain.AgentKind.creator``): the primary agents through
Service Usage (``gcp.projects.ServiceIdentity``), the TPU VM agent gcp-sa-tpu through the Cloud TPU v2 API
(``TpuServiceIdentity`` below: pulumi-gcp 10.2 has no resource for it, checked 2026-11 in
pulumi_gcp/tpu/: only V2Vm, V2QueuedResource and two lookups). An agent created on request is not granted
its service-agent role automatically, so each such agent gets its role as an additive IAMMember.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from cloud.google import tpu_v2
from ground import domain


@dataclass(frozen=True)
class ServiceIdentitiesArgs:
    project: str
    project_number: str
    apis: Sequence[str]                  # e.g. domain.REQUIRED_APIS
    agents: Sequence[str]                # service-agent keywords (domain.SERVICE_AGENTS)
    zone: str = domain.DEFAULT_ZONE          # location of the TPU v2 generateServiceIdentity call
    training_sa_id: str | None = None    # None: no dedicated training service account


def api_resource_name(api: str) -> str:
    return f"api-{api.split('.')[0]}"


class ServiceIdentities(pulumi.ComponentResource):
    """``emails``/``members`` map principal keywords to plain strings; ``ready`` lists what grants wait for."""
    apis: dict[str, gcp.projects.Service]
    identities: dict[str, pulumi.CustomResource]     # service (or "tpu-v2") -> the resource creating the agent
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
            creator = self._creator(kind, args)
            email = domain.agent_email(keyword, args.project_number)
            self.emails[keyword] = email
            self.members[keyword] = pulumi.Output.from_input(domain.member_for_email(email))
            ready: list[pulumi.Resource] = [creator]
            if kind.project_role and kind.created_on_request:
                ready.append(
                    gcp.projects.IAMMember(
                        f"{keyword}-service-agent-role",
                        gcp.projects.IAMMemberArgs(
                            project=args.project,
                            role=kind.project_role,
                            member=self.members[keyword],
                        ),
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[creator]),
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


    def _creator(self, kind: domain.AgentKind, args: ServiceIdentitiesArgs) -> pulumi.CustomResource:
        """The resource that creates ``kind``'s agent (one per creating call); IAM grants to an agent that
        was never created fail, so grants wait for it."""
        if kind.creator == "tpu-v2":
            if "tpu-v2" not in self.identities:
                self.identities["tpu-v2"] = TpuServiceIdentity(
                    "tpu-vm-agent-identity",
                    {"project": args.project, "location": args.zone},
                    opts=pulumi.ResourceOptions(parent=self, depends_on=_only(self.apis, kind.service)),
                )
            return self.identities["tpu-v2"]
        # Service Usage generateServiceIdentity creates the service's primary agent if it does not exist
        # yet (for a first-use agent such as Vertex AI's custom code agent it is the best a plan can do).
        if kind.service not in self.identities:
            self.identities[kind.service] = gcp.projects.ServiceIdentity(
                f"{kind.service.split('.')[0]}-identity",
                gcp.projects.ServiceIdentityArgs(project=args.project, service=kind.service),
                opts=pulumi.ResourceOptions(parent=self, depends_on=_only(self.apis, kind.service)),
            )
        return self.identities[kind.service]


# --------------------------------------------------------------------------------------------
# The TPU VM agent: Cloud TPU v2 API projects.locations.generateServiceIdentity
# --------------------------------------------------------------------------------------------

class _TpuIdentityProvider(pulumi.dynamic.ResourceProvider):
    """Calls google-cloud-tpu ``TpuClient.generate_service_identity`` (idempotent: it returns the existing
    agent). Like ``gcp.projects.ServiceIdentity`` it cannot delete the agent: delete only forgets it.

    The engine runs this in its own process from a dill pickle, so the class is pickled by value (its
    module is set to ``__main__`` below) and imports what it needs inside the methods.
    """

    serialize_as_secret_always = False   # the pickle holds no secret

    def create(self, props):
        client = tpu_v2.TpuClient()
        parent = tpu_v2.TpuClient.common_location_path(props["project"], props["location"])
        response = client.generate_service_identity(request=tpu_v2.GenerateServiceIdentityRequest(parent=parent))
        email = response.identity.email
        return pulumi.dynamic.CreateResult(id_=f"{parent}/serviceIdentity",
                                           outs={**props, "email": email, "member": f"serviceAccount:{email}"})

    def diff(self, _id, olds, news):
        replaces = [k for k in ("project", "location") if olds.get(k) != news.get(k)]
        return pulumi.dynamic.DiffResult(changes=bool(replaces), replaces=replaces, delete_before_replace=False)

    def delete(self, _id, _props):
        return None


_TpuIdentityProvider.__module__ = "__main__"   # dill pickles __main__ classes by value


class TpuServiceIdentity(pulumi.dynamic.Resource, module="tpu", name="ServiceIdentity"):
    """``service-N@gcp-sa-tpu.iam.gserviceaccount.com``, created through the Cloud TPU v2 API
    (type token ``tokens.TPU_SERVICE_IDENTITY``); outputs ``email`` and ``member``."""

    email: pulumi.Output[str]
    member: pulumi.Output[str]

    def __init__(self, name: str, props: dict, opts: pulumi.ResourceOptions | None = None):
        super().__init__(_TpuIdentityProvider(), name, {**props, "email": None, "member": None}, opts)


def _only(apis: dict[str, gcp.projects.Service], api: str) -> list[pulumi.Resource]:
    return [apis[api]] if api in apis else []
