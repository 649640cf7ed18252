"""``tpuctl grant-access``, ``tpuctl doctor``, ``tpuctl bootstrap``: thin wrappers over bootstrap/."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from bootstrap import access, state
from bootstrap import doctor as doctor_mod
from cloud import clients
from ground import domain
from ground.errors import UserError
from ground.outputs import load_outputs
from tpuctl.commands.options import say, stderr_bar
from tpuctl.commands.options import stack_outputs as options_stack_outputs

_STACK_HELP = "Take project, buckets and principals from this Pulumi stack's outputs."
_OUTPUTS_HELP = "Take project, buckets and principals from this JSON file (`pulumi stack output --json`)."


def _confirm_or_refuse(yes: bool, what: str) -> None:
    """Without --yes we ask on a terminal; with no terminal (CI) we refuse rather than guess."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise UserError(f"stdin is not a terminal, so tpuctl cannot ask before it {what}; "
                        "review with --dry-run, then re-run with --yes")
    if not typer.confirm(f"Apply: {what}?", default=False):
        raise UserError("cancelled; nothing was written", exit_code=1)


def grant_access(
    project: Optional[str] = typer.Option(None, "--project", help="Google Cloud project id."),
    read_bucket: List[str] = typer.Option([], "--read-bucket", help="Bucket the job reads (name or gs://); repeatable."),
    write_bucket: List[str] = typer.Option([], "--write-bucket", help="Bucket the job writes (name or gs://); repeatable."),
    principal: List[str] = typer.Option(
        [], "--principal",
        help="tpu-agent, tpu-vm-agent, vertex-agent, training-sa, an e-mail or a member string; repeatable."),
    mode: Optional[str] = typer.Option(None, "--mode", help="bucket (least privilege, default) or project."),
    role: List[str] = typer.Option([], "--role", help="Grant this role instead of the mode's role set (predefined or projects/P/roles/R); repeatable."),
    via: str = typer.Option("iam", "--via", help="iam (default) or acl (fine-grained buckets without uniform access)."),
    existing_objects: bool = typer.Option(False, "--existing-objects", help="With --via acl: also add READER to objects already in the bucket."),
    stack: Optional[str] = typer.Option(None, "--stack", help=_STACK_HELP),
    outputs: Optional[Path] = typer.Option(None, "--outputs", help=_OUTPUTS_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the binding diff per resource and write nothing."),
    revoke: bool = typer.Option(False, "--revoke", help="Remove the named members from the named roles (only those)."),
    agent_roles: bool = typer.Option(
        True, "--agent-roles/--no-agent-roles",
        help="Also grant tpu-agent / tpu-vm-agent their own service-agent role on the project (default; they "
             "do not get it when created on request), and training-sa roles/logging.logWriter (its TPU VM hosts' "
             "and Vertex AI jobs' logs). --no-agent-roles touches buckets only."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation (required when stdin is not a terminal)."),
) -> None:
    """Grant (or revoke) training principals access to buckets, additively and safely."""
    planned = options_stack_outputs(stack, outputs, dry_run=dry_run)
    req = access.GrantRequest(
        project=project, read_buckets=list(read_bucket), write_buckets=list(write_bucket),
        principals=list(principal), mode=mode, via=via, roles=list(role), revoke=revoke,
        existing_objects=existing_objects, outputs=planned, agent_roles=agent_roles,
    )
    plan = access.plan_grants(req, unread=clients.missing_credentials("storage", "crm") if dry_run else None)
    for line in access.render_diff(plan):
        say(line)
    pending = plan.changes or plan.object_acl_buckets
    if not pending:
        say("nothing to revoke: none of the named members hold the named roles" if revoke
                   else "everything is already granted; nothing written")
        return
    if dry_run:
        say(f"dry run: {len(plan.changes)} change(s) shown, nothing written")
        return
    _confirm_or_refuse(yes, f"writes {len(plan.changes)} change(s)")
    written = access.execute(plan, log=say,
                             object_progress=lambda bucket: stderr_bar(f"gs://{bucket} objects", data=False))
    say(f"done: {len(written)} change(s) written")


def doctor(
    project: Optional[str] = typer.Option(None, "--project", help="Google Cloud project id."),
    stack: Optional[str] = typer.Option(None, "--stack", help="Check what this Pulumi stack set up."),
    outputs: Optional[Path] = typer.Option(None, "--outputs", help="Check what these stack outputs describe."),
) -> None:
    """Check credentials, APIs, agents, bucket permissions, hub cache and quota preferences."""
    stack_outputs = load_outputs(stack=stack, outputs_file=outputs)
    if stack_outputs is None and project is None:
        raise UserError("give --stack NAME or --outputs FILE (or at least --project)")
    failed = 0
    for check in doctor_mod.run_checks(stack_outputs, project=project):
        say(check.line())
        failed += not check.ok
    if failed:
        raise UserError(f"{failed} check(s) failed", exit_code=1)
    say("all checks passed")


def bootstrap(
    project: str = typer.Option(..., "--project", help="Google Cloud project id."),
    bucket: Optional[str] = typer.Option(None, "--bucket", help="State bucket name (default: <project>-pulumi-state)."),
    location: str = typer.Option("US", "--location", help="State bucket location (region or multi-region)."),
    agents: bool = typer.Option(
        False, "--agents",
        help="Also create the Cloud TPU service agents that exist only on request (tpu-agent through Service "
             "Usage, tpu-vm-agent through the Cloud TPU v2 API) and grant each its service-agent role; for "
             "grant-access without the Pulumi program, which does this itself."),
    zone: str = typer.Option(domain.DEFAULT_ZONE, "--zone", help="With --agents: zone for the Cloud TPU v2 API call."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be created or enabled; change nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation (required when stdin is not a terminal)."),
) -> None:
    """Create the Pulumi state bucket and enable the APIs Pulumi needs before the first `pulumi up`."""
    unread = clients.missing_credentials("serviceusage", "storage") if dry_run else None
    plan = state.plan_bootstrap(project, bucket=bucket, location=location, agents=agents, zone=zone, unread=unread)
    for line in plan.lines():
        say(line)
    if not plan.pending:
        say("already bootstrapped; nothing to do")
    elif dry_run:
        say("dry run: nothing changed")
        return
    else:
        _confirm_or_refuse(yes, "creates/enables the items marked +")
        state.execute(plan, log=say)
    say(f"pulumi login {plan.backend_url}")


def register(app: typer.Typer) -> None:
    app.command("grant-access")(grant_access)
    app.command("doctor")(doctor)
    app.command("bootstrap")(bootstrap)
