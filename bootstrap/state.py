"""``tpuctl bootstrap``: what must exist before the first ``pulumi up``.

The APIs Pulumi itself calls (``domain.BOOTSTRAP_APIS``) and a bucket for Pulumi's state
(``pulumi login gs://BUCKET``), created with the same safe defaults as the training buckets:
uniform bucket-level access, public access prevention enforced, versioning on (state history).
With ``agents``: also the service agents that exist only on request (``domain.SERVICE_AGENTS`` whose
creator is Service Usage or the Cloud TPU v2 API), each created through its own API and granted its
service-agent role on the project, for teams that use ``grant-access`` without the Pulumi program (the
program creates and grants them itself).
Idempotent: a second run finds everything in place and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bootstrap import grants, principals
from cloud import clients
from cloud.google import api_exceptions, service_usage_v1
from ground import domain
from ground.errors import UserError

STATE_LABELS = {"managed-by": "tpuctl", "purpose": "pulumi-state"}


def default_state_bucket(project: str) -> str:
    return f"{project}-pulumi-state"


@dataclass
class BootstrapPlan:
    project: str
    bucket: str
    location: str
    bucket_exists: bool
    apis_missing: list[str] = field(default_factory=list)
    bucket_fixes: list[str] = field(default_factory=list)   # safe defaults an existing bucket lacks
    apis: tuple[str, ...] = domain.BOOTSTRAP_APIS
    agents: list[AgentStep] = field(default_factory=list)
    zone: str = domain.DEFAULT_ZONE
    #: why the project's state was not read (an offline dry run): every item is then shown as it would be
    #: checked, not as found
    unread: str | None = None
    agents_wanted: bool = False

    @property
    def pending(self) -> bool:
        return (self.unread is not None or bool(self.apis_missing) or not self.bucket_exists
                or bool(self.bucket_fixes) or any(not a.has_role for a in self.agents))

    @property
    def backend_url(self) -> str:
        return f"gs://{self.bucket}"

    def lines(self) -> list[str]:
        if self.unread is not None:
            return self._unread_lines()
        out = [f"project {self.project}"]
        for api in self.apis:
            out.append(f"  + enable {api}" if api in self.apis_missing else f"    {api}: enabled")
        if self.bucket_exists and self.bucket_fixes:
            out.append(f"  ~ state bucket gs://{self.bucket}: turn on " + ", ".join(self.bucket_fixes))
        elif self.bucket_exists:
            out.append(f"    state bucket gs://{self.bucket}: exists")
        else:
            out.append(f"  + create state bucket gs://{self.bucket} in {self.location} "
                       "(uniform access, public access prevention, versioning)")
        for a in self.agents:
            how = "Cloud TPU v2 API, zone " + self.zone if a.kind.creator == "tpu-v2" else "Service Usage"
            out.append(f"    {a.kind.keyword} {a.email}: present with {a.kind.project_role}" if a.has_role else
                       f"  + {a.kind.keyword} {a.email}: create ({how}) and grant {a.kind.project_role}")
        return out

    def _unread_lines(self) -> list[str]:
        out = [f"project {self.project} (not read: {self.unread}; each item is checked first and done only "
               "if missing)"]
        out += [f"  ? enable {api}" for api in self.apis]
        out.append(f"  ? create state bucket gs://{self.bucket} in {self.location} (uniform access, public access "
                   "prevention, versioning), or turn those on if it exists")
        for kind in on_request_agents() if self.agents_wanted else ():
            how = "Cloud TPU v2 API, zone " + self.zone if kind.creator == "tpu-v2" else "Service Usage"
            out.append(f"  ? {kind.keyword}: create ({how}) and grant {kind.project_role}")
        return out


def on_request_agents() -> list[domain.AgentKind]:
    """The service agents that exist only once asked for and need their role granted (``--agents``)."""
    return [k for k in domain.SERVICE_AGENTS.values() if k.created_on_request and k.project_role]


@dataclass
class AgentStep:
    kind: domain.AgentKind
    email: str
    has_role: bool   # holds its service-agent role on the project (so it exists and is ready)


def _usage_client():
    return clients.gapic(service_usage_v1.ServiceUsageClient, "serviceusage")


def plan_bootstrap(project: str, bucket: str | None = None, location: str = "US",
                   storage_client=None, usage_client=None, *, agents: bool = False,
                   zone: str = domain.DEFAULT_ZONE, crm_client=None, unread: str | None = None) -> BootstrapPlan:
    """What bootstrap would do: the project's APIs, state bucket and (``agents``) on-request service agents as read
    now. ``unread``: why nothing can be read (an offline dry run): the plan then lists every item unchecked."""

    domain.validate_project_id(project)
    name = domain.bucket_name_from(bucket) if bucket else default_state_bucket(project)
    domain.validate_bucket_name(name)
    if not location or not location.replace("-", "").isalnum():
        raise UserError(f"location {location!r} must be a region (us-central1) or multi-region (US, EU)")

    on_request = on_request_agents()
    if agents:
        domain.validate_zone(zone)
    apis = tuple(dict.fromkeys([*domain.BOOTSTRAP_APIS, *(k.service for k in on_request if agents)]))
    if unread is not None:
        return BootstrapPlan(project, name, location, False, list(apis), [], apis, [], zone, unread, agents)
    usage = usage_client or _usage_client()
    names = [service_usage_v1.ServiceUsageClient.service_path(project, s) for s in apis]
    with clients.google_errors(f"reading the services of {project}", not_found=f"project {project} does not exist",
                               forbidden=f"permission denied reading services of {project}: you need "
                                         "serviceusage.services.get (e.g. roles/serviceusage.serviceUsageViewer)"):
        resp = usage.batch_get_services(request={"parent": service_usage_v1.ServiceUsageClient.common_project_path(project),
                                             "names": names})
    enabled = {s.name.rsplit("/", 1)[-1] for s in resp.services if s.state == service_usage_v1.State.ENABLED}
    missing = [s for s in apis if s not in enabled]

    client = storage_client or clients.storage_client(project)
    fixes: list[str] = []
    try:
        fixes = missing_safe_defaults(client.get_bucket(name))
        exists = True
    except api_exceptions.NotFound:
        exists = False
    except api_exceptions.Forbidden:
        raise UserError(f"gs://{name} exists but you cannot read it (bucket names are global: it may belong to "
                        "someone else); pick another name with --bucket") from None
    steps: list[AgentStep] = []
    if agents:
        number = principals.project_number(project)
        policy = grants.bindings(grants.project_policy(project, crm_client).read())
        for kind in on_request:
            email = domain.agent_email(kind.keyword, number)
            member = domain.member_for_email(email)
            steps.append(AgentStep(kind, email, grants.holds(policy, member, kind.project_role)))
    return BootstrapPlan(project, name, location, exists, missing, fixes, apis, steps, zone, None, agents)


def missing_safe_defaults(bucket) -> list[str]:
    cfg = bucket.iam_configuration
    out = []
    if not cfg.uniform_bucket_level_access_enabled:
        out.append("uniform bucket-level access")
    if cfg.public_access_prevention != "enforced":
        out.append("public access prevention")
    if not bucket.versioning_enabled:
        out.append("versioning")
    return out


def apply_safe_defaults(bucket) -> None:
    """Turn on what the bucket lacks (one metageneration-checked patch)."""
    bucket.iam_configuration.uniform_bucket_level_access_enabled = True
    bucket.iam_configuration.public_access_prevention = "enforced"
    bucket.versioning_enabled = True
    bucket.patch(if_metageneration_match=bucket.metageneration)


def execute(plan: BootstrapPlan, log: Callable[[str], None],
            storage_client=None, usage_client=None, crm_client=None) -> None:
    _execute_apis_and_bucket(plan, log, storage_client, usage_client)
    for step in plan.agents:   # after the APIs: an agent is created through its own service
        if step.has_role:
            continue
        if step.kind.creator == "tpu-v2":
            principals.generate_tpu_identity(plan.project, plan.zone)
        else:
            principals.generate_service_identity(plan.project, step.kind.service)
        grants.apply(grants.project_policy(plan.project, crm_client),
                     [(domain.member_for_email(step.email), step.kind.project_role)], False)
        log(f"{step.kind.keyword} {step.email}: present, granted {step.kind.project_role}")


def _execute_apis_and_bucket(plan: BootstrapPlan, log, storage_client, usage_client) -> None:
    if plan.apis_missing:
        usage = usage_client or _usage_client()
        op = usage.batch_enable_services(request={"parent": service_usage_v1.ServiceUsageClient.common_project_path(plan.project),
                                                  "service_ids": plan.apis_missing})
        op.result(timeout=600)
        log(f"enabled {', '.join(plan.apis_missing)}")
    client = storage_client or clients.storage_client(plan.project)
    if plan.bucket_exists and plan.bucket_fixes:
        apply_safe_defaults(client.get_bucket(plan.bucket))
        log(f"state bucket gs://{plan.bucket}: turned on {', '.join(plan.bucket_fixes)}")
    if not plan.bucket_exists:
        bucket = client.bucket(plan.bucket)
        bucket.iam_configuration.uniform_bucket_level_access_enabled = True
        bucket.iam_configuration.public_access_prevention = "enforced"
        bucket.versioning_enabled = True
        bucket.labels = dict(STATE_LABELS)
        try:
            client.create_bucket(bucket, project=plan.project, location=plan.location)
        except api_exceptions.Conflict:
            # created meanwhile (a parallel run) or owned by someone else: tell them apart
            try:
                client.get_bucket(plan.bucket)
            except api_exceptions.Forbidden:
                raise UserError(f"gs://{plan.bucket} is taken by someone else; pick another name with --bucket", 1) from None
            log(f"state bucket gs://{plan.bucket} already exists")
            return
        created = client.get_bucket(plan.bucket)
        if missing_safe_defaults(created):   # a server that ignored settings at creation time
            apply_safe_defaults(created)
        log(f"created state bucket gs://{plan.bucket}")
