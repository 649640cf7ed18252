"""Additive IAM grants on buckets (google-cloud-storage) and projects (resource manager v3).

One edit path for both: each target reads its policy as a google-api-core ``iam.Policy`` (version 3,
conditions preserved), ``apply_to_bindings`` edits its bindings, and the target writes it back. Every write is a read-modify-write that carries the etag it read. When another writer got there
first the server answers 409/412; google-api-core's Retry then re-reads the policy and re-applies
only this run's own change (computed afresh against the new policy), so concurrent runs never
drop each other's bindings. Conditional bindings and bindings for other roles/members are never
touched: a grant adds a member to the unconditional binding of a role, a revoke removes only the
named members from the named roles.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cloud import clients
from cloud.google import api_exceptions, api_iam, api_retry, iam_policy_pb2, json_format, resourcemanager_v3
from ground.errors import UserError

#: (member, role) pairs one run wants present (grant) or absent (revoke) on one resource.
Want = tuple[str, str]


@dataclass(frozen=True, order=True)
class Change:
    resource: str   # "gs://bucket" or "projects/ID"
    action: str     # "+" add, "-" remove
    member: str
    role: str

    def line(self) -> str:
        return f"  {self.action} {self.member} {self.role}"


def conflict_retry():
    # Full-jitter backoff: with 16 writers on one policy, fixed delays would collide again.
    return api_retry.Retry(
        predicate=api_retry.if_exception_type(api_exceptions.Conflict, api_exceptions.PreconditionFailed,
                                          api_exceptions.Aborted),
        initial=0.05, maximum=2.0, multiplier=2.0, timeout=300.0,
    )


def compute_changes(resource: str, bindings: Iterable[dict], wanted: Iterable[Want], revoke: bool) -> list[Change]:
    """The changes needed on ``bindings`` (dicts with role/members/condition). Only unconditional
    bindings count: a conditional grant is not the grant this run makes."""
    present: dict[str, set[str]] = {}
    for b in bindings:
        if b.get("condition"):
            continue
        present.setdefault(b["role"], set()).update(b.get("members") or ())
    changes = []
    for member, role in sorted(set(wanted)):
        has = member in present.get(role, ())
        if revoke and has:
            changes.append(Change(resource, "-", member, role))
        elif not revoke and not has:
            changes.append(Change(resource, "+", member, role))
    return changes


def apply_to_bindings(bindings: list[dict], changes: Iterable[Change]) -> list[dict]:
    """Return new bindings with ``changes`` applied; everything else kept exactly as read."""
    out = [dict(b, members=set(b.get("members") or ())) for b in bindings]
    emptied: set[int] = set()
    for c in changes:
        targets = [i for i, b in enumerate(out) if b["role"] == c.role and not b.get("condition")]
        if c.action == "+":
            if targets:
                out[targets[0]]["members"].add(c.member)
            else:
                out.append({"role": c.role, "members": {c.member}})
        else:
            for i in targets:
                if c.member in out[i]["members"]:
                    out[i]["members"].discard(c.member)
                    if not out[i]["members"]:
                        emptied.add(i)
    return [b for i, b in enumerate(out) if i not in emptied]


# --------------------------------------------------------------------------------------------
# Resources: a bucket's IAM policy, a project's IAM policy
# --------------------------------------------------------------------------------------------

@dataclass
class BucketPolicy:
    """Bucket IAM through google-cloud-storage, policy version 3 (conditions preserved)."""
    client: Any
    name: str

    @property
    def resource(self) -> str:
        return f"gs://{self.name}"

    def check_exists(self):
        return clients.get_bucket(self.client, self.name, "storage.buckets.get (e.g. roles/storage.admin)")

    def read(self):
        with clients.google_errors(
            not_found=f"bucket gs://{self.name} does not exist (check the name, or create it first)",
            forbidden=f"permission denied reading the IAM policy of gs://{self.name}: you need "
                      "storage.buckets.getIamPolicy on it (e.g. roles/storage.admin)",
        ):
            return self.client.bucket(self.name).get_iam_policy(requested_policy_version=3)

    write_permission = "storage.buckets.setIamPolicy"

    def changes(self, policy, wanted: Iterable[Want], revoke: bool) -> list[Change]:
        return compute_changes(self.resource, bindings(policy), wanted, revoke)

    def write(self, policy, changes: list[Change]) -> None:
        self.client.bucket(self.name).set_iam_policy(edited(policy, changes))


@dataclass
class ProjectPolicy:
    """Project IAM through google-cloud-resource-manager (ProjectsClient, REST)."""
    client: Any
    project: str

    @property
    def resource(self) -> str:
        return resourcemanager_v3.ProjectsClient.project_path(self.project)

    def check_exists(self):
        return None

    def read(self):
        with clients.google_errors(
            f"reading the IAM policy of project {self.project}",
            not_found=f"project {self.project} does not exist or you cannot see it",
            forbidden=f"permission denied reading the IAM policy of project {self.project}: you need "
                      "resourcemanager.projects.getIamPolicy (e.g. roles/resourcemanager.projectIamAdmin)",
        ):
            pb = self.client.get_iam_policy(
                request={"resource": self.resource, "options": {"requested_policy_version": 3}}
            )
        return api_iam.Policy.from_api_repr(json_format.MessageToDict(pb))

    write_permission = "resourcemanager.projects.setIamPolicy"

    def changes(self, policy, wanted: Iterable[Want], revoke: bool) -> list[Change]:
        return compute_changes(self.resource, bindings(policy), wanted, revoke)

    def write(self, policy, changes: list[Change]) -> None:
        pb = json_format.ParseDict(edited(policy, changes).to_api_repr(), iam_policy_pb2.Policy())
        self.client.set_iam_policy(request={"resource": self.resource, "policy": pb})


def project_policy(project: str, client=None) -> ProjectPolicy:
    """The project's IAM policy target, through ``client`` or a Resource Manager client built by ``clients.gapic``."""
    if client is None:
        client = clients.gapic(resourcemanager_v3.ProjectsClient, "crm")
    return ProjectPolicy(client, project)


def bindings(policy) -> list[dict]:
    """The bindings of an ``iam.Policy`` as plain dicts (role, members, condition)."""
    return [dict(b) for b in policy.bindings]


def holds(bindings: Iterable[dict], member: str, role: str) -> bool:
    """``member`` has ``role`` without a condition among ``bindings`` (plain dicts: role, members, condition)."""
    return any(b["role"] == role and member in (b.get("members") or ()) and not b.get("condition") for b in bindings)


def edited(policy, changes: Iterable[Change]):
    """``policy`` (an ``iam.Policy``) with ``changes`` applied, as version 3; its etag is kept."""
    policy.bindings = apply_to_bindings(bindings(policy), changes)
    policy.version = 3
    return policy


def plan(target, wanted: Iterable[Want], revoke: bool, *, unread: bool = False) -> list[Change]:
    """Read once (errors become one-line UserErrors) and return the changes this run would make.

    ``target``: a ``BucketPolicy``, ``ProjectPolicy`` or ``acl.BucketAcl`` (read/changes/write). ``unread`` (an
    offline dry run): nothing is read and every wanted pair is a change (a run skips those already in place).
    """
    if unread:
        return [Change(target.resource, "-" if revoke else "+", m, r) for m, r in sorted(set(wanted))]
    target.check_exists()
    return target.changes(target.read(), wanted, revoke)


def apply(target, wanted: Iterable[Want], revoke: bool) -> list[Change]:
    """Read-modify-write with the etag (or metageneration) read; on conflict re-read and re-apply this
    run's change. Returns the changes actually written (empty when everything was already as wanted).
    """

    wanted = list(wanted)
    sent: list[Change] = []      # the changes of the last write that left without a clear answer

    def attempt() -> list[Change]:
        state = target.read()
        changes = target.changes(state, wanted, revoke)
        if not changes:
            # Nothing left to do: either nothing was needed, or an earlier write of this run landed although its
            # answer was lost (a 503 after the commit, then a retry that found the etag changed): those are ours.
            return list(sent)
        sent[:] = changes
        target.write(state, changes)
        return changes

    try:
        return conflict_retry()(attempt)()
    except api_exceptions.Forbidden as exc:
        raise UserError(f"permission denied writing {target.resource}: you need {target.write_permission} "
                        f"({exc.message})", exit_code=1) from None
    except api_exceptions.BadRequest as exc:
        raise UserError(f"{target.resource} rejected the change: {exc.message}", exit_code=1) from None
    except api_exceptions.RetryError as exc:
        cause = exc.cause
        if cause is None or isinstance(cause, (api_exceptions.Conflict, api_exceptions.PreconditionFailed,
                                               api_exceptions.Aborted)):
            raise UserError(f"{target.resource}: it kept changing under us for 5 minutes; run again",
                            exit_code=1) from None
        # The client library's own retry gave up on an error that is not a conflict (503, 429, a timeout): an
        # outage, not a concurrent writer. What this run wrote before is in place; the rest is not.
        code = getattr(cause, "code", None)
        status = f"HTTP {int(code)}" if isinstance(code, int) else type(cause).__name__
        raise UserError(f"{target.resource}: Google's API kept failing ({status}: "
                        f"{getattr(cause, 'message', None) or cause}) until the client gave up; nothing more was "
                        "written, run the same command again later", exit_code=1) from None
