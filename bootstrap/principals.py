"""Turn ``--principal`` values into IAM members, and make sure the accounts behind them exist.

Keywords (tpu-agent, tpu-vm-agent, vertex-agent, training-sa) resolve through the project number
(resource manager) and domain's e-mail formats; explicit e-mails/member strings need no API call.
Agents are created the way ``domain.AgentKind.creator`` says: primary agents with serviceusage v1beta1
``generateServiceIdentity`` (no client library method covers it, so an authorised REST call), the TPU VM
agent gcp-sa-tpu with the Cloud TPU v2 API (google-cloud-tpu ``TpuClient.generate_service_identity``);
Service Usage never returns gcp-sa-tpu. The training service account is looked up or created through the
IAM admin API (google-cloud-iam ``iam_admin_v1``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cloud import clients
from cloud.google import api_exceptions, iam_admin_v1, resourcemanager_v3, tpu_v2
from ground import domain
from ground.errors import UserError
from ground.polling import poll


@dataclass(frozen=True)
class Principal:
    given: str             # what the user typed (keyword, e-mail or member)
    member: str            # IAM member string
    keyword: str | None = None

    @property
    def email(self) -> str:
        return self.member.split(":", 1)[1]

    @property
    def agent(self) -> domain.AgentKind | None:
        return domain.SERVICE_AGENTS.get(self.keyword or "")


def project_number(project: str, known: str | None = None) -> str:
    """The project number (stack outputs, else resource manager ``get_project``)."""
    if known:
        return str(known)

    client = clients.gapic(resourcemanager_v3.ProjectsClient, "crm")
    with clients.google_errors(
        not_found=f"project {project} does not exist (check --project)",
        forbidden=f"permission denied reading project {project}: you need resourcemanager.projects.get "
                  "(e.g. roles/viewer) to resolve agent e-mails; or pass explicit member strings",
    ):
        found = client.get_project(name=resourcemanager_v3.ProjectsClient.project_path(project))
    return found.name.split("/", 1)[1]


def classify_all(values: list[str]) -> list[tuple[str, str]]:
    """Offline check of every ``--principal`` value; raises DomainError on the first bad one."""
    return [domain.classify_principal(v) for v in values]


def resolve(values: list[str], project: str | None, *, number: str | None = None,
            training_sa: str | None = None, known: dict[str, str] | None = None) -> list[Principal]:
    """Resolve principals to members. ``known`` maps keyword -> e-mail (stack outputs)."""
    known = known or {}
    classified = classify_all(values)
    out: list[Principal] = []
    for given, (kind, value) in zip(values, classified):
        if kind == "member":
            out.append(Principal(given, value))
            continue
        if value in known:
            out.append(Principal(given, domain.member_for_email(known[value]), value))
            continue
        if project is None:
            raise UserError(f"principal {value!r} needs --project (or --stack/--outputs) to resolve")
        if value == domain.TRAINING_SA_KEYWORD:
            email = training_sa or domain.training_sa_email(project)
        else:
            number = project_number(project, number)
            email = domain.agent_email(value, number)
        out.append(Principal(given, domain.member_for_email(email), value))
    # Same member named twice (keyword and e-mail) counts once.
    unique: dict[str, Principal] = {}
    for p in out:
        unique.setdefault(p.member, p)
    return list(unique.values())


# --------------------------------------------------------------------------------------------
# Making sure the accounts exist
# --------------------------------------------------------------------------------------------

def generate_service_identity(project: str, service: str, *, poll_seconds: float = 1.0,
                              timeout: float = 120.0) -> str | None:
    """Create (or return) the service agent of ``service`` in ``project``; returns its e-mail."""
    session = clients.authorized_session("serviceusage")
    base = clients.base_url("serviceusage")
    url = f"{base}/v1beta1/projects/{project}/services/{service}:generateServiceIdentity"
    resp = session.post(url, json={}, timeout=60)
    _raise_for(resp, f"creating the {service} service agent in {project}",
               "serviceusage.services.use (e.g. roles/serviceusage.serviceUsageAdmin)")
    first = resp.json()
    reads = iter([first])   # the POST's answer is the first read; then the operation is read until done

    def read() -> dict:
        answer = next(reads, None)
        if answer is not None:
            return answer
        resp = session.get(f"{base}/v1beta1/{first['name']}", timeout=60)
        _raise_for(resp, f"waiting for the {service} service agent", "serviceusage.services.use")
        return resp.json()

    op = poll(read, lambda op: bool(op.get("done")) or not op.get("name"), interval=poll_seconds, timeout=timeout,
              expired=lambda _: f"creating the {service} service agent did not finish in {timeout:.0f} s; run again")
    if "error" in op:
        raise UserError(f"creating the {service} service agent failed: {op['error'].get('message', op['error'])}", 1)
    return (op.get("response") or {}).get("email")


def generate_tpu_identity(project: str, zone: str = domain.DEFAULT_ZONE, client=None) -> str:
    """Create (or return) the TPU VM agent ``service-N@gcp-sa-tpu…`` through the Cloud TPU v2 API; its e-mail."""
    domain.validate_zone(zone)
    client = client or clients.gapic(tpu_v2.TpuClient, "tpu")
    with clients.google_errors(
        f"creating the TPU VM service agent in {project}",
        # Which permission this call needs is on no Google page tpuctl could read, and no predefined role of the
        # snapshot (domain.ROLE_PERMISSIONS) lists a tpu.*generateServiceIdentity permission - roles/tpu.admin
        # has neither it nor tpu.queuedResources.*. So name no role; the agent also appears with the first TPU VM.
        forbidden=f"permission denied creating the TPU VM service agent in {project}: ask an administrator of it to run "
                  f"`gcloud compute tpus tpu-vm service-identity create --zone={zone} --project={project}` (Google "
                  "also creates the agent with the project's first TPU VM)",
        not_found=f"project {project} or zone {zone} not found, or the Cloud TPU API is not enabled "
                  f"(gcloud services enable tpu.googleapis.com --project {project})",
    ):
        response = client.generate_service_identity(
            request=tpu_v2.GenerateServiceIdentityRequest(parent=tpu_v2.TpuClient.common_location_path(project, zone)))
    return response.identity.email


def _raise_for(resp, doing: str, permission: str) -> None:
    if resp.status_code < 400:
        return
    try:
        message = resp.json().get("error", {}).get("message", "")
    except ValueError:
        message = resp.text[:200]
    if resp.status_code == 403:
        raise UserError(f"permission denied {doing}: you need {permission} ({message})", 1)
    if resp.status_code == 404:
        raise UserError(f"not found while {doing}: {message or 'check the project'}", 1)
    raise UserError(f"HTTP {resp.status_code} while {doing}: {message}", 1)


def iam_client():
    return clients.gapic(iam_admin_v1.IAMClient, "iam", transport="grpc")


def service_account_exists(project: str, email: str, client=None) -> bool:
    client = client or iam_client()
    try:
        client.get_service_account(name=iam_admin_v1.IAMClient.service_account_path(project, email))
        return True
    except api_exceptions.NotFound:
        return False


def ensure_training_sa(project: str, email: str, client=None) -> bool:
    """Look up the training SA; create it when missing. Returns True when it was created."""
    client = client or iam_client()
    if service_account_exists(project, email, client):
        return False
    account_id = email.split("@", 1)[0]
    domain.validate_account_id(account_id)
    if not email.endswith(f"@{project}.iam.gserviceaccount.com"):
        raise UserError(f"service account {email} is not in project {project}; create it in its own project first", 1)
    with clients.google_errors(f"creating service account {email}", exit_code=1,
                               forbidden=f"permission denied creating service account {email}: you need "
                                         "iam.serviceAccounts.create (e.g. roles/iam.serviceAccountAdmin)"):
        try:
            client.create_service_account(
                request=iam_admin_v1.CreateServiceAccountRequest(
                    name=iam_admin_v1.IAMClient.common_project_path(project), account_id=account_id,
                    service_account=iam_admin_v1.ServiceAccount(
                        display_name="tpuctl training", description="Runs tpuctl training jobs (created by tpuctl)"),
                )
            )
        except api_exceptions.AlreadyExists:
            return False  # a concurrent run created it first
    return True


def check_custom_role(role: str, client=None) -> None:
    """Predefined roles: offline catalogue. Custom roles: must exist (IAM admin ``get_role``)."""
    domain.validate_role(role)
    if not domain.is_custom_role(role):
        return
    client = client or iam_client()
    with clients.google_errors(not_found=f"custom role {role} does not exist",
                               forbidden=f"permission denied reading custom role {role}: you need iam.roles.get"):
        found = client.get_role(request={"name": role})
    if found.deleted:
        raise UserError(f"custom role {role} is deleted; undelete it or pick another role")


def role_command(project: str, email: str, role: str) -> str:
    return (f"gcloud projects add-iam-policy-binding {project} --member=serviceAccount:{email} "
            f"--role={role} --condition=None")


def ensure_exists(principals: list[Principal], project: str | None, log: Callable[[str], None], zone: str = domain.DEFAULT_ZONE) -> None:
    """Create missing agents / the training SA (called after confirmation, before IAM writes).

    An agent created on request does not get its service-agent role automatically: the caller's plan
    carries that project binding (``access.plan_grants``, ``state.plan_bootstrap``), written after this.
    """
    done: set[str] = set()
    for p in principals:
        agent = p.agent
        if agent is not None and project:
            creator = "tpu-v2" if agent.creator == "tpu-v2" else agent.service
            if creator in done:
                continue
            if agent.creator == "tpu-v2":
                generate_tpu_identity(project, zone)
                log(f"TPU VM service agent {p.email} is present (Cloud TPU v2 API)")
            else:
                generate_service_identity(project, agent.service)
                log(f"service agent for {agent.service} is present")
            done.add(creator)
        elif p.keyword == domain.TRAINING_SA_KEYWORD and project:
            if ensure_training_sa(project, p.email):
                log(f"created service account {p.email}")
