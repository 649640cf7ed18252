"""``tpuctl doctor``: one line per check, pass/fail, and the command that fixes a failure.

Effective bucket permissions come from the policy pack's access model (``ground.access.AccessModel``), fed with
the IAM policies actually set (bucket policy plus project policy, unconditional bindings only) instead of
the planned resources: the same role -> permission table, the same required permissions per bucket purpose.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from bootstrap import grants, quotas
from bootstrap import principals as principals_mod
from bootstrap.hubcache import hub_status
from cloud import clients
from cloud.google import api_exceptions, artifactregistry_v1, auth, auth_exceptions, service_usage_v1
from ground import domain
from ground.access import AccessModel
from ground.errors import UserError
from ground.outputs import StackOutputs


@dataclass(frozen=True)
class Check:
    name: str
    status: str          # pass | fail | warn
    detail: str
    fix: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != "fail"

    def line(self) -> str:
        text = f"{self.status.upper():4}  {self.name}: {self.detail}"
        if self.status != "pass" and self.fix:
            text += f"  -> fix: {self.fix}"
        return text


def _err(exc: Exception) -> str:
    """The first line of a check's failure. An endpoint that cannot be reached at all is not the check's
    failure: it is raised (``EndpointUnreachable``), so doctor stops with one ``error: cannot reach …`` line
    instead of a column of permission and API fixes that cannot help."""
    unreachable = _unreachable(exc)
    if unreachable is not None:
        raise unreachable from None
    msg = getattr(exc, "message", None) or str(exc)
    return msg.splitlines()[0][:200] if msg else exc.__class__.__name__


def _unreachable(exc: BaseException) -> clients.EndpointUnreachable | None:
    seen: set[int] = set()
    item: BaseException | None = exc
    while item is not None and id(item) not in seen:
        seen.add(id(item))
        if isinstance(item, clients.EndpointUnreachable):
            return item
        translated = clients.as_user_error(item) if not isinstance(item, UserError) else None
        if isinstance(translated, clients.EndpointUnreachable):
            return translated
        item = item.__cause__ or item.__context__
    return None


def check_credentials() -> Check:
    try:
        creds, project = auth.default()
    except auth_exceptions.DefaultCredentialsError:
        if clients.uses_anonymous("storage"):
            return Check("credentials", "pass", "none needed: STORAGE_EMULATOR_HOST points at a local server")
        return Check("credentials", "fail", "no Application Default Credentials found",
                     "gcloud auth application-default login")
    who = getattr(creds, "service_account_email", None) or getattr(creds, "signer_email", None) or "user credentials"
    return Check("credentials", "pass", f"Application Default Credentials ({who}; quota project {project or 'unset'})")


def check_apis(project: str) -> Check:
    client = clients.gapic(service_usage_v1.ServiceUsageClient, "serviceusage")
    names = [service_usage_v1.ServiceUsageClient.service_path(project, s) for s in domain.REQUIRED_APIS]
    try:
        resp = client.batch_get_services(request={"parent": service_usage_v1.ServiceUsageClient.common_project_path(project),
                                                   "names": names})
    except Exception as exc:  # noqa: BLE001 - any API failure is this check's failure
        return Check("apis", "fail", f"cannot read enabled services: {_err(exc)}",
                     f"grant yourself serviceusage.services.get on {project} (roles/serviceusage.serviceUsageViewer)")
    enabled = {s.name.rsplit("/", 1)[-1] for s in resp.services
               if s.state == service_usage_v1.State.ENABLED}
    missing = [s for s in domain.REQUIRED_APIS if s not in enabled]
    if missing:
        return Check("apis", "fail", "not enabled: " + ", ".join(missing),
                     f"gcloud services enable {' '.join(missing)} --project {project}")
    return Check("apis", "pass", f"all {len(domain.REQUIRED_APIS)} required APIs enabled")


def _bindings(policy) -> list[dict]:
    """An ``iam.Policy``'s bindings as the access model reads them (members a set, condition a flag)."""
    return [{"role": b["role"], "members": set(b.get("members") or ()), "condition": bool(b.get("condition"))}
            for b in policy.bindings]


def _grant_fix(project: str | None, bucket: str, purpose: str, principal: str) -> str:
    flag = "--read-bucket" if purpose in domain.READ_BUCKETS else "--write-bucket"
    proj = f"--project {project} " if project else ""
    return f"tpuctl grant-access {proj}{flag} {bucket} --principal {principal} --yes"


def check_hub_cache(client, bucket: str, prefix: str, handles: list[str]) -> Iterator[Check]:
    """One check per hub handle: ``<prefix>/<sha1>/`` is complete — its manifest (written last by
    ``hub-cache add`` and by the Pulumi program) is valid and every file it lists is there with its size
    and crc32c. tensorflow_hub loads any non-empty folder, so an interrupted upload must fail here."""

    try:
        found = hub_status(client, bucket, prefix, handles)
    except Exception as exc:  # noqa: BLE001
        yield Check("hub cache", "fail", f"cannot read gs://{bucket}/{prefix}: {_err(exc)}",
                    f"grant yourself storage.objects.list and storage.objects.get on gs://{bucket}")
        return
    for s in found:
        yield (Check(f"hub cache {s.handle}", "pass", s.detail) if s.complete else
               Check(f"hub cache {s.handle}", "fail", s.detail,
                     f"tpuctl hub-cache add {s.handle} --bucket {bucket} --prefix {prefix}"))


@dataclass(frozen=True)
class Builder:
    """The stack's image builder (``image_builder_service_account``) and the live policies its checks read."""
    email: str
    project_bindings: list[dict] | None          # None: the project policy could not be read
    staging_bucket: str | None = None
    staging_bindings: list[dict] | None = None   # None: the bucket policy could not be read


def check_image_repository(project: str, region: str, repository: str, principals: dict[str, str],
                           client=None, builder: Builder | None = None) -> Iterator[Check]:
    """The trainer image repository exists (Artifact Registry), the principals that run jobs can pull, and the image
    builder has what Cloud Build needs (``domain.IMAGE_BUILDER_ROLES``): push there, write logs, read the context."""
    name = artifactregistry_v1.ArtifactRegistryClient.repository_path(project, region, repository)
    label = f"image repository {repository}"
    client = client or clients.gapic(artifactregistry_v1.ArtifactRegistryClient, "artifactregistry")
    try:
        client.get_repository(name=name)
        policy = client.get_iam_policy(request={"resource": name})
    except api_exceptions.NotFound:
        yield Check(label, "fail", f"{name} does not exist", "pulumi up (the stack creates it)")
        return
    except Exception as exc:  # noqa: BLE001 - any API failure is this check's failure
        yield Check(label, "fail", f"cannot read {name}: {_err(exc)}",
                    f"grant yourself artifactregistry.repositories.get/getIamPolicy on {name}")
        return
    yield Check(label, "pass", name)
    for keyword, where in domain.IMAGE_PULLERS.items():
        email = principals.get(keyword)
        if not email:
            continue
        member = domain.member_for_email(email)
        roles, can = _repository_grant(policy, member, domain.PULL_PERMISSION)
        if can:
            yield Check(f"{keyword} pulls from {repository}", "pass", f"via {', '.join(roles)}, for {where}")
        else:
            yield Check(f"{keyword} pulls from {repository}", "fail",
                        f"{member} cannot pull the trainer image for {where}"
                        + (f" (has: {', '.join(roles)})" if roles else ""),
                        f"gcloud artifacts repositories add-iam-policy-binding {repository} --location {region} "
                        f"--project {project} --member {member} --role roles/artifactregistry.reader")
    if builder is not None:
        yield from _check_builder(project, region, repository, policy, builder)


def _repository_grant(policy, member: str, permission: str) -> tuple[list[str], bool]:
    """The roles ``member`` holds in a repository's IAM policy, and whether one of them grants ``permission``."""
    roles = sorted(b.role for b in policy.bindings if member in b.members)
    return roles, any(permission in domain.ROLE_PERMISSIONS.get(r, ()) for r in roles)


def _log_writer_roles(project_bindings: list[dict], member: str) -> list[str]:
    """The roles ``member`` holds on the project (unconditionally) that let it write log entries."""
    return sorted(b["role"] for b in project_bindings if member in b["members"] and not b["condition"]
                  and domain.LOG_WRITE_PERMISSION in domain.ROLE_PERMISSIONS.get(b["role"], ()))


def check_training_logs(project: str, email: str, project_bindings: list[dict]) -> Check:
    """The training account may write logs on the project (``domain.TRAINING_SA_PROJECT_ROLES``): a warning, not a
    failure, when it may not - the run still trains, but its TPU VM hosts' and Vertex AI jobs' lines never reach
    Cloud Logging (the stack rule ``training-account-writes-logs`` is advisory for the same reason)."""
    member = domain.member_for_email(email)
    name = f"{domain.TRAINING_SA_KEYWORD} writes logs"
    roles = _log_writer_roles(project_bindings, member)
    if roles:
        return Check(name, "pass", f"via {', '.join(roles)} on {project}")
    [(role, why)] = domain.TRAINING_SA_PROJECT_ROLES.items()
    return Check(name, "warn", f"{member} lacks {domain.LOG_WRITE_PERMISSION} on {project}: {why}; without it "
                 "`tpuctl logs` and the cloud live display have nothing to read (the run still trains)",
                 f"gcloud projects add-iam-policy-binding {project} --member {member} --role {role}")


def _check_builder(project: str, region: str, repository: str, repository_policy, builder: Builder) -> Iterator[Check]:
    member = domain.member_for_email(builder.email)
    label = "image builder"
    roles, can = _repository_grant(repository_policy, member, domain.PUSH_PERMISSION)
    if can:
        yield Check(f"{label} pushes to {repository}", "pass", f"via {', '.join(roles)}")
    else:
        yield Check(f"{label} pushes to {repository}", "fail",
                    f"{member} lacks {domain.PUSH_PERMISSION}: `tpuctl image build` cannot push"
                    + (f" (has: {', '.join(roles)})" if roles else ""),
                    f"gcloud artifacts repositories add-iam-policy-binding {repository} --location {region} "
                    f"--project {project} --member {member} --role roles/artifactregistry.writer")
    if builder.project_bindings is not None:
        logs = _log_writer_roles(builder.project_bindings, member)
        if logs:
            yield Check(f"{label} writes build logs", "pass", f"via {', '.join(logs)} on {project}")
        else:
            yield Check(f"{label} writes build logs", "fail",
                        f"{member} lacks {domain.LOG_WRITE_PERMISSION} on {project}: its builds log to Cloud Logging only",
                        f"gcloud projects add-iam-policy-binding {project} --member {member} --role roles/logging.logWriter")
    if builder.staging_bucket and builder.staging_bindings is not None:
        staging = builder.staging_bucket
        model = AccessModel.from_bindings({"staging": staging}, {staging: builder.staging_bindings},
                                          builder.project_bindings)
        lacks = domain.REQUIRED_READ_PERMISSIONS - model.permissions(member, staging)
        if not lacks:
            yield Check(f"{label} reads the build context", "pass", f"gs://{staging}")
        else:
            yield Check(f"{label} reads the build context", "fail",
                        f"{member} lacks {', '.join(f'storage.{p}' for p in sorted(lacks))} on gs://{staging}",
                        f"gcloud storage buckets add-iam-policy-binding gs://{staging} --member {member} "
                        "--role roles/storage.objectViewer")


def run_checks(outputs: StackOutputs | None, project: str | None = None) -> Iterator[Check]:
    project = project or (outputs.project if outputs else None)
    if project is None:
        raise UserError("the stack outputs name no 'project'; pass --project")
    domain.validate_project_id(project)

    credentials = check_credentials()
    yield credentials
    if not credentials.ok:   # every other check would fail on the same missing credentials
        return
    yield check_apis(project)

    # principals: stack outputs, else the keywords resolved from the project number
    principals: dict[str, str] = dict(outputs.principals) if outputs else {}
    if outputs and outputs.training_service_account:
        principals.setdefault(domain.TRAINING_SA_KEYWORD, outputs.training_service_account)
    project_bindings = None
    try:
        project_bindings = _bindings(grants.project_policy(project).read())
    except Exception as exc:  # noqa: BLE001
        yield Check("project policy", "fail", f"cannot read the IAM policy of {project}: {_err(exc)}",
                    f"grant yourself resourcemanager.projects.getIamPolicy on {project} (roles/iam.securityReviewer)")
    if not principals:
        try:
            number = principals_mod.project_number(project, outputs.project_number if outputs else None)
            principals = {k: domain.agent_email(k, number) for k in domain.SERVICE_AGENTS}
            principals[domain.TRAINING_SA_KEYWORD] = domain.training_sa_email(project)
        except UserError as exc:
            yield Check("principals", "fail", _err(exc), f"gcloud projects describe {project}")

    bucket_policies: dict[str, list | None] = {}
    buckets = dict(outputs.buckets) if outputs else {}
    if buckets:
        client = clients.storage_client(project)
        for purpose, name in buckets.items():
            try:
                bucket_policies[name] = _bindings(client.bucket(name).get_iam_policy(requested_policy_version=3))
            except api_exceptions.NotFound:
                bucket_policies[name] = None
                yield Check(f"bucket {purpose}", "fail", f"gs://{name} does not exist", "pulumi up")
            except Exception as exc:  # noqa: BLE001
                bucket_policies[name] = None
                yield Check(f"bucket {purpose}", "fail", f"cannot read the IAM policy of gs://{name}: {_err(exc)}",
                            f"grant yourself storage.buckets.getIamPolicy on gs://{name}")

    # agents / training SA exist
    for keyword, email in sorted(principals.items()):
        member = domain.member_for_email(email)
        if keyword == domain.TRAINING_SA_KEYWORD:
            try:
                exists = principals_mod.service_account_exists(project, email)
            except Exception as exc:  # noqa: BLE001
                yield Check(f"{keyword} exists", "fail", f"cannot look up {email}: {_err(exc)}",
                            f"grant yourself iam.serviceAccounts.get on {project}")
                continue
            yield (Check(f"{keyword} exists", "pass", email) if exists else
                   Check(f"{keyword} exists", "fail", f"{email} does not exist",
                         f"gcloud iam service-accounts create {email.split('@')[0]} --project {project}"))
            if exists and project_bindings is not None:
                yield check_training_logs(project, email, project_bindings)
            continue
        agent = domain.SERVICE_AGENTS.get(keyword)
        if agent is None:
            continue
        seen = any(member in b["members"] for b in (project_bindings or []))
        seen = seen or any(member in b["members"] for bs in bucket_policies.values() for b in (bs or []))
        zone = (outputs.zone if outputs and outputs.zone else None) or domain.DEFAULT_ZONE
        yield from check_agent(keyword, email, agent, project, zone, seen, project_bindings)

    # effective permissions of every principal on every bucket: the policy pack's access model, fed with
    # the live policies instead of the planned resources
    model = AccessModel.from_bindings({p: n for p, n in buckets.items() if bucket_policies.get(n) is not None},
                                      bucket_policies, project_bindings)
    for purpose, name in sorted(buckets.items()):
        if bucket_policies.get(name) is None:
            continue
        for keyword, email in sorted(principals.items()):
            member = domain.member_for_email(email)
            have = model.permissions(member, name)
            # roles that say nothing about storage (service-agent roles, aiplatform.user) are noise here
            roles = {r for r in model.roles(member, name) if domain.ROLE_STORAGE_PERMISSIONS.get(r, frozenset({"?"}))}
            missing = sorted(model.missing(member, name))
            label = f"{keyword} on gs://{name} ({purpose})"
            if missing:
                yield Check(label, "fail", "missing " + ", ".join(f"storage.{p}" for p in missing)
                            + (f" (has: {', '.join(sorted(roles))})" if roles else " (no roles)"),
                            _grant_fix(project, name, purpose, keyword))
            else:
                yield Check(label, "pass", domain.access_summary(have) + f" via {', '.join(sorted(roles))}")

    # hub cache holds every configured handle
    hub_models = list(outputs.hub_models) if outputs else []
    hub_bucket = buckets.get("hub-cache")
    if hub_models and hub_bucket:

        prefix = outputs.hub_cache_prefix or domain.DEFAULT_HUB_CACHE_PREFIX
        yield from check_hub_cache(clients.storage_client(project), hub_bucket, prefix, hub_models)
    elif hub_models:
        yield Check("hub cache", "fail", "hub models are configured but the outputs name no hub-cache bucket", "pulumi up")

    repository = outputs.raw.get("trainer_image_repository") if outputs else None
    if repository and outputs.region:
        builder = None
        if outputs.image_builder_service_account:
            staging = outputs.bucket("staging")
            builder = Builder(outputs.image_builder_service_account, project_bindings, staging,
                              bucket_policies.get(staging) if staging else None)
        else:
            yield Check("image builder", "fail", "the stack outputs name no image_builder_service_account: builds run "
                        "as the training account, which cannot push images or write build logs", "pulumi up")
        yield from check_image_repository(project, outputs.region, str(repository), principals, builder=builder)

    if outputs and outputs.tpu_zone:
        yield from check_tpu_vm_quota(project, outputs.tpu_zone)
    yield from check_quota_preferences(project)


def check_agent(keyword: str, email: str, agent: domain.AgentKind, project: str, zone: str, seen: bool,
                project_bindings: list[dict] | None) -> Iterator[Check]:
    """The agent holds IAM bindings (so it exists) and, when created on request, its own service-agent role.
    The fix is the agent's own creating call: Service Usage for primary agents, the Cloud TPU v2 API for the
    TPU VM agent (``domain.AgentKind.create_command``)."""
    member = domain.member_for_email(email)
    if not seen:
        fix = agent.create_command(project, zone)
        if agent.project_role and agent.created_on_request:
            fix += f", then {principals_mod.role_command(project, email, agent.project_role)}"
        also = f" (Google also creates it with {agent.first_use})" if agent.first_use and agent.created_on_request else ""
        yield Check(f"{keyword} exists", "fail", f"{email} has no IAM binding anywhere; it may not exist yet{also}", fix)
        return
    yield Check(f"{keyword} exists", "pass", f"{email} (holds IAM bindings)")
    if agent.project_role and agent.created_on_request and project_bindings is not None:
        has_role = grants.holds(project_bindings, member, agent.project_role)
        yield (Check(f"{keyword} role", "pass", agent.project_role) if has_role else
               Check(f"{keyword} role", "fail", f"{email} lacks its service-agent role {agent.project_role} "
                                                "(an agent created on request is not granted it automatically)",
                     principals_mod.role_command(project, email, agent.project_role)))


# --------------------------------------------------------------------------------------------
# Quota: what the project may use (bootstrap/quotas.py reads it) and what it has asked for
# --------------------------------------------------------------------------------------------

def check_tpu_vm_quota(project: str, zone: str, client=None) -> Iterator[Check]:
    """The Cloud TPU API's per-zone quota of every TPU generation in ``zone``, on-demand and Spot: one line.
    A zone without any is a warning (only `--target tpu-vm` needs it); quota ids the API does not list are named."""
    name = f"TPU VM quota in {zone}"
    try:
        by_id = {i.quota_id: i for i in quotas.quota_infos(project, domain.TPU_VM_QUOTA_SERVICE, client)}
    except Exception as exc:  # noqa: BLE001 - any API failure is this check's failure
        yield Check(name, "fail", f"cannot list the Cloud TPU quotas: {_err(exc)}",
                    f"gcloud services enable cloudquotas.googleapis.com tpu.googleapis.com --project {project}")
        return
    parts, missing, usable = [], [], False
    for generation, quota in domain.TPU_VM_QUOTAS.items():
        values = []
        for spot in (False, True):
            quota_id = quota.quota_id(spot)
            info = by_id.get(quota_id) if quota_id else None
            if quota_id and info is None:
                missing.append(quota_id)
            limit = quotas.limit_in(info, zone, "zone") if info is not None else None
            usable = usable or limit not in (None, 0)
            values.append("?" if limit is None else "unlimited" if limit == -1 else str(limit))
        parts.append(f"{generation} {values[0]}/{values[1]} {quota.unit}")
    detail = "on-demand/Spot " + ", ".join(parts)
    if missing:
        detail += f"; not listed by the API (renamed? please report): {', '.join(missing)}"
    if usable and not missing:
        yield Check(name, "pass", detail)
        return
    example = domain.TPU_VM_QUOTAS["v5e"]
    fix = quotas.tpu_vm_quota_fix(project, zone, example.spot or "", "v5e", 8, True) if not usable else None
    yield Check(name, "warn", ("no TPU VM quota here (needed by `--target tpu-vm` only): " if not usable else "")
                + detail, fix)


def check_quota_preferences(project: str) -> Iterator[Check]:
    """Accelerator quota preferences (Cloud Quotas API, google-cloud-quotas): granted, pending review, or
    granted below the request."""
    try:
        prefs = list(quotas.quotas_client().list_quota_preferences(parent=quotas.global_location(project)))
    except Exception as exc:  # noqa: BLE001 - any API failure is this check's failure
        yield Check("quota preferences", "fail", f"cannot list quota preferences: {_err(exc)}",
                    f"gcloud services enable cloudquotas.googleapis.com --project {project} (and "
                    "`gcloud auth application-default login`)")
        return
    if not prefs:
        yield Check("quota preferences", "pass", "none requested")
        return
    for p in prefs:
        want = int(p.quota_config.preferred_value)
        granted = p.quota_config.granted_value
        dims = ",".join(f"{k}={v}" for k, v in sorted(p.dimensions.items()))
        label = f"quota {p.service}/{p.quota_id or '?'}" + (f" [{dims}]" if dims else "")
        if p.reconciling:
            yield Check(label, "warn", f"{want} requested, under review (granted so far: {granted or 0})",
                        "wait for Google's review e-mail; nothing to run")
        elif granted < want:
            yield Check(label, "fail", f"{want} requested, only {granted} granted",
                        "lower the request in the stack config (gpuQuotas / tpuQuotas) or ask Google for more "
                        "(the console's quota page, or contact sales)")
        else:
            yield Check(label, "pass", f"{want} granted")
