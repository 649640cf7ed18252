"""``tpuctl grant-access``: the imperative twin of infra/'s additive IAM.

Two phases so bad input never leaves a half-done job: ``plan_grants`` validates every name and
reads every policy (nothing written; errors are one line, exit 2), ``execute`` makes sure the
agents / training SA exist and then writes each resource's change with the etag it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bootstrap import acl as acl_mod
from bootstrap import grants
from bootstrap import principals as principals_mod
from cloud import clients
from ground import domain
from ground.errors import UserError
from ground.outputs import StackOutputs


@dataclass
class GrantRequest:
    project: str | None = None
    read_buckets: list[str] = field(default_factory=list)
    write_buckets: list[str] = field(default_factory=list)
    principals: list[str] = field(default_factory=list)
    mode: str | None = None           # bucket | project (default: outputs' access_mode, else bucket)
    via: str = "iam"                  # iam | acl
    roles: list[str] = field(default_factory=list)   # override the mode's role set
    revoke: bool = False
    existing_objects: bool = False
    outputs: StackOutputs | None = None
    #: grant each agent that is created on request its own service-agent role on the project (additive)
    agent_roles: bool = True


@dataclass
class Step:
    target: Any                       # grants.BucketPolicy | grants.ProjectPolicy | acl.BucketAcl
    wanted: list[tuple[str, str]]
    changes: list[grants.Change]


@dataclass
class GrantPlan:
    request: GrantRequest
    project: str | None
    mode: str
    principals: list[principals_mod.Principal]
    steps: list[Step]
    object_acl_buckets: list[str] = field(default_factory=list)
    #: why no policy was read (an offline dry run): every binding is then shown as a change
    unread: str | None = None

    @property
    def changes(self) -> list[grants.Change]:
        return [c for s in self.steps for c in s.changes]


def _bucket_names(values: list[str]) -> list[str]:
    return list(dict.fromkeys(domain.bucket_name_from(v) for v in values))


def _defaults_from_outputs(req: GrantRequest) -> tuple[str | None, list[str], list[str], list[str], dict[str, str]]:
    o = req.outputs
    project = req.project or (o.project if o else None)
    reads, writes, principals = list(req.read_buckets), list(req.write_buckets), list(req.principals)
    known: dict[str, str] = {}
    if o is not None:
        if not reads and not writes:
            reads = [o.buckets[p] for p in domain.READ_BUCKETS if p in o.buckets]
            writes = [o.buckets[p] for p in domain.WRITE_BUCKETS if p in o.buckets]
        if not principals:
            principals = list(o.principals)
        known = dict(o.principals)
        if o.training_service_account:
            known.setdefault(domain.TRAINING_SA_KEYWORD, o.training_service_account)
    return project, reads, writes, principals, known


def plan_grants(req: GrantRequest, client=None, crm_client=None, *, unread: str | None = None) -> GrantPlan:
    """Validate everything and read every policy. Raises UserError/DomainError; writes nothing. ``unread``: why
    nothing can be read (an offline dry run): the input is still checked, no policy, bucket or custom role is read,
    and every binding the run would make is listed."""
    project, reads, writes, principal_values, known = _defaults_from_outputs(req)
    mode = req.mode or (req.outputs.access_mode if req.outputs and req.outputs.access_mode else domain.DEFAULT_ACCESS_MODE)
    domain.validate_access_mode(mode)
    if req.via not in ("iam", "acl"):
        raise UserError(f"--via {req.via!r} must be 'iam' or 'acl'")
    if project is not None:
        domain.validate_project_id(project)
    reads, writes = _bucket_names(reads), _bucket_names(writes)
    if not principal_values:
        raise UserError("name at least one --principal (tpu-agent, tpu-vm-agent, vertex-agent, training-sa, "
                        "an e-mail or a member string), or pass --stack/--outputs")
    principals_mod.classify_all(principal_values)   # offline: unknown keyword -> exit 2 before any call
    if mode == "project":
        if project is None:
            raise UserError("--mode project needs --project (or --stack/--outputs)")
        if req.via == "acl":
            raise UserError("--via acl grants bucket ACL entries; it does not combine with --mode project")
    elif not reads and not writes:
        raise UserError("name at least one --read-bucket or --write-bucket (or pass --stack/--outputs)")
    if req.existing_objects and req.via != "acl":
        raise UserError("--existing-objects adds object ACL entries; use it with --via acl")
    for role in req.roles:
        domain.validate_role(role)
        if domain.is_predefined_role(role) and role in domain.FORBIDDEN_ROLES:
            raise UserError(f"tpuctl never grants {role} to a training principal")
        if mode == "bucket" and role in domain.PROJECT_MODE_ONLY_ROLES:
            raise UserError(f"{role} is granted only in --mode project")

    custom = [r for r in req.roles if domain.is_custom_role(r)]
    if custom and unread is None:
        iam = principals_mod.iam_client()
        for role in custom:
            principals_mod.check_custom_role(role, iam)

    number = req.outputs.project_number if req.outputs else None
    if unread is not None and number is None and any(
            kind == "keyword" and value in domain.SERVICE_AGENTS and value not in known
            for kind, value in principals_mod.classify_all(principal_values)):
        raise UserError(f"a service agent's e-mail needs the project number, which cannot be read ({unread}): pass "
                        "--stack/--outputs, or name the agent by its e-mail")
    resolved = principals_mod.resolve(principal_values, project, number=number, known=known)
    members = [p.member for p in resolved]

    # An agent created on request (tpu-agent, tpu-vm-agent) does not get its service-agent role by itself:
    # execute() creates it, and this project step grants the role (never revoked: the service needs it). The
    # training account gets what the stack gives it on the project (domain.TRAINING_SA_PROJECT_ROLES: the Logs
    # Writer its TPU VM hosts and Vertex AI jobs log with) in the same step.
    agent_roles = [] if req.revoke or not req.agent_roles or project is None else [
        (p.member, p.agent.project_role) for p in resolved
        if p.agent is not None and p.agent.created_on_request and p.agent.project_role] + [
        (p.member, role) for p in resolved if p.keyword == domain.TRAINING_SA_KEYWORD
        for role in domain.TRAINING_SA_PROJECT_ROLES]

    steps: list[Step] = []
    if mode == "project":
        roles = req.roles or list(domain.PROJECT_MODE_ROLES)
        target = grants.ProjectPolicy(None, project) if unread else grants.project_policy(project, crm_client)
        wanted = [(m, r) for m in members for r in roles] + agent_roles
        steps.append(Step(target, wanted, grants.plan(target, wanted, req.revoke, unread=bool(unread))))
        if (reads or writes) and unread is None:
            client = client or clients.storage_client(project)
            for name in dict.fromkeys(reads + writes):
                grants.BucketPolicy(client, name).check_exists()
        return GrantPlan(req, project, mode, resolved, steps, unread=unread)

    if unread is None:
        client = client or clients.storage_client(project)
    object_acl_buckets: list[str] = []
    for name in dict.fromkeys(reads + writes):
        is_write = name in writes
        if req.via == "acl":
            entities = [acl_mod.acl_entity(m) for m in members]
            for kind, role in (("acl", "WRITER" if is_write else "READER"), ("defaultObjectAcl", "READER")):
                acl_target = acl_mod.BucketAcl(client, name, kind)
                wanted = [(e, role) for e in entities]
                steps.append(Step(acl_target, wanted, grants.plan(acl_target, wanted, req.revoke,
                                                                  unread=bool(unread))))
            if req.existing_objects:
                object_acl_buckets.append(name)
            continue
        roles = list(req.roles) or list(
            dict.fromkeys((domain.BUCKET_READ_ROLES if name in reads else ()) + (domain.BUCKET_WRITE_ROLES if is_write else ()))
        )
        target = grants.BucketPolicy(client, name)
        wanted = [(m, r) for m in members for r in roles]
        steps.append(Step(target, wanted, grants.plan(target, wanted, req.revoke, unread=bool(unread))))
    if agent_roles:
        target = grants.ProjectPolicy(None, project) if unread else grants.project_policy(project, crm_client)
        try:
            changes = grants.plan(target, agent_roles, False, unread=bool(unread))
        except UserError as exc:
            roles = ", ".join(sorted({r for _, r in agent_roles}))
            raise UserError(f"{exc} (to grant {roles} on the project: the agents' service-agent roles, the "
                            "training account's log writer); or leave the project alone with --no-agent-roles",
                            exc.exit_code) from None
        steps.append(Step(target, agent_roles, changes))
    return GrantPlan(req, project, mode, resolved, steps, object_acl_buckets, unread)


def render_diff(plan: GrantPlan) -> list[str]:
    """One header line per resource, then ``+ member role`` / ``- member role`` lines."""
    lines: list[str] = []
    if plan.unread is not None:
        lines.append(f"policies not read ({plan.unread}): every binding the run would "
                     f"{'remove' if plan.request.revoke else 'add'} is listed; a run with credentials changes "
                     "only those not already as wanted")
    for step in plan.steps:
        if step.changes:
            lines.append(step.target.resource)
            lines.extend(c.line() for c in step.changes)
        else:
            lines.append(f"{step.target.resource}: {'nothing to revoke' if plan.request.revoke else 'already granted'}")
    for name in plan.object_acl_buckets:
        verb = "remove" if plan.request.revoke else "add"
        lines.append(f"gs://{name} (existing objects): {verb} READER for "
                     + ", ".join(acl_mod.acl_entity(p.member) for p in plan.principals))
    return lines


def execute(plan: GrantPlan, log: Callable[[str], None],
            object_progress: Callable[[str], Any] | None = None, ensure_accounts: bool = True) -> list[grants.Change]:
    """Write the plan. Returns the changes written (re-computed per resource at write time)."""
    if ensure_accounts and not plan.request.revoke:
        zone = plan.request.outputs.zone if plan.request.outputs and plan.request.outputs.zone else domain.DEFAULT_ZONE
        principals_mod.ensure_exists(plan.principals, plan.project, log=log, zone=zone)
    written: list[grants.Change] = []
    for step in plan.steps:
        if not step.changes:
            continue   # already as wanted at plan time: no write (idempotent runs make zero calls)
        done = grants.apply(step.target, step.wanted, plan.request.revoke)
        written.extend(done)
        if done:
            log(f"{step.target.resource}: {len(done)} binding change(s) written")
        else:
            log(f"{step.target.resource}: already as wanted (changed concurrently), nothing written")
    for name in plan.object_acl_buckets:
        client = plan.steps[0].target.client
        entities = [acl_mod.acl_entity(p.member) for p in plan.principals]
        ctx = object_progress(name) if object_progress else None
        if ctx is None:
            n = acl_mod.grant_existing_objects(client, name, entities, plan.request.revoke)
        else:
            with ctx as (advance, set_total):
                n = acl_mod.grant_existing_objects(client, name, entities, plan.request.revoke,
                                                   progress=advance, on_total=set_total)
        log(f"gs://{name}: {n} existing object(s) updated")
    return written
