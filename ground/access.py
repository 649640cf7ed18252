"""Effective storage access: who can do what on which training bucket, computed from the stack.

Input is the list of resources a stack registers (type, name, urn, props); output is, per principal
and bucket, the roles and ACL entries that apply and the storage permissions they add up to
(``ground.domain.ROLE_STORAGE_PERMISSIONS`` / ``ACL_PERMISSIONS``, from the checked-in snapshot of
Google's role definitions). Project-level roles count on every bucket. The stack rule
``training-principals-storage-access``, ``tpuctl plan``'s access map and ``tpuctl doctor`` all use this
module, so what the plan shows is what the policy checked.

Basic roles (roles/viewer, roles/editor, roles/owner) carry no ``storage.objects.*`` permission; their
holders reach objects through the bucket's *convenience bindings* (members ``projectViewer:P``,
``projectEditor:P``, ``projectOwner:P``). The model keeps those per bucket (``convenience``) and gives a
principal holding a basic role at project level the roles its convenience member holds on that bucket.
Assumption, stack side: a bucket the stack creates carries Google's default convenience bindings
(``domain.DEFAULT_CONVENIENCE_BINDINGS``) unless the stack replaces them (an authoritative bucket IAM
policy drops all of them, an authoritative binding for a role drops that role's); a bucket the stack
does not create is assumed to have none (unknown; ``tpuctl doctor`` reads its live policy). Live side
(``from_bindings``): the convenience members found in the bucket's real policy. Convenience access
alone does not make anyone a training principal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ground import domain
from ground import resources as r
from ground import tokens as T
from ground.settings import StackSettings


@dataclass
class StackResource:
    """A resource as the stack rule sees it. ``sources`` maps a property to the URNs it was computed from."""
    type: str
    name: str
    urn: str
    props: Any
    parent: str | None = None
    sources: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Bucket:
    key: str                 # bucket name, or the bucket resource URN while its name is unknown
    purpose: str | None
    created: bool
    urn: str | None = None

    @property
    def label(self) -> str:
        return f"{self.purpose or 'other'} ({self.key})"


@dataclass
class AccessModel:
    buckets: dict[str, Bucket] = field(default_factory=dict)
    #: principal -> bucket key -> roles / ACL keys granted on that bucket (unconditional)
    bucket_roles: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    #: principal -> project-level roles (unconditional)
    project_roles: dict[str, set[str]] = field(default_factory=dict)
    #: principal -> descriptions of conditional grants, which the rule does not count
    conditional: dict[str, list[str]] = field(default_factory=dict)
    #: bucket key -> convenience member type (projectViewer/projectEditor/projectOwner) -> roles it holds there
    convenience: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    #: the image builder's member names (infra/builder.py): it builds images, it is never a training principal
    builders: set[str] = field(default_factory=set)
    #: the training service account's member names (infra/identities.py): the account TPU VMs and Vertex AI jobs
    #: run as, which also needs ``domain.TRAINING_SA_PROJECT_ROLES`` on the project
    trainers: set[str] = field(default_factory=set)

    @property
    def principals(self) -> list[str]:
        return sorted(set(self.bucket_roles) | set(self.project_roles) | set(self.conditional))

    @property
    def training_buckets(self) -> list[Bucket]:
        order = {p: i for i, p in enumerate(domain.BUCKET_PURPOSES)}
        return sorted((b for b in self.buckets.values() if b.purpose in domain.BUCKET_PURPOSES),
                      key=lambda b: (order[b.purpose], b.key))

    def roles(self, principal: str, bucket: str) -> set[str]:
        """Roles and ACL keys that apply on ``bucket``: its own, project roles that carry storage permissions,
        and the bucket's convenience-binding roles of the basic roles the principal holds."""
        project = {role for role in self.project_roles.get(principal, set()) if domain.storage_permissions([role])}
        return set(self.bucket_roles.get(principal, {}).get(bucket, set())) | project | self.via_convenience(principal, bucket)

    def via_convenience(self, principal: str, bucket: str) -> set[str]:
        """Roles ``principal`` holds on ``bucket`` only through its convenience bindings (basic role at project level)."""
        per_member = self.convenience.get(bucket, {})
        out: set[str] = set()
        for role in self.project_roles.get(principal, set()):
            member_type = domain.BASIC_ROLE_CONVENIENCE_MEMBERS.get(role)
            if member_type:
                out |= per_member.get(member_type, set())
        return out

    def grant_convenience(self, bucket: str, member: str, role: str) -> bool:
        """Record ``role`` for a convenience member (``projectViewer:P``…) on ``bucket``; False for other members."""
        member_type = domain.convenience_member_type(member)
        if member_type is None:
            return False
        self.convenience.setdefault(bucket, {}).setdefault(member_type, set()).add(role)
        return True

    def add_grant(self, principal: str, bucket: str | None, role: str, conditional: bool = False) -> None:
        """Record ``role`` for ``principal`` on ``bucket`` (None: at project level); a conditional grant is
        only noted, never counted."""
        if conditional:
            where = "the project" if bucket is None else bucket
            self.conditional.setdefault(principal, []).append(f"{role} on {where}")
        elif bucket is None:
            self.project_roles.setdefault(principal, set()).add(role)
        elif not self.grant_convenience(bucket, principal, role):
            self.bucket_roles.setdefault(principal, {}).setdefault(bucket, set()).add(role)

    def permissions(self, principal: str, bucket: str) -> frozenset[str]:
        return domain.storage_permissions(self.roles(principal, bucket))

    def missing(self, principal: str, bucket: str) -> frozenset[str]:
        """What the training job needs on ``bucket`` (by its purpose) that ``principal`` does not have."""
        purpose = self.buckets[bucket].purpose
        if purpose is None:
            return frozenset()
        return domain.required_permissions(purpose) - self.permissions(principal, bucket)

    @classmethod
    def from_bindings(cls, buckets: Mapping[str, str], bucket_bindings: Mapping[str, Iterable[Mapping] | None],
                      project_bindings: Iterable[Mapping] | None) -> AccessModel:
        """The same model from live IAM policies (``tpuctl doctor``): ``buckets`` is purpose -> bucket name,
        ``bucket_bindings`` bucket name -> bindings, ``project_bindings`` the project's bindings; a binding is a
        mapping with ``role``, ``members`` and an optional ``condition``."""
        model = cls()
        for purpose, name in buckets.items():
            model.buckets[name] = Bucket(name, purpose, False)
        for bucket, bindings in [*bucket_bindings.items(), (None, project_bindings)]:
            for b in bindings or ():
                for member in b.get("members") or ():
                    model.add_grant(member, bucket, b["role"], bool(b.get("condition")))
        return model

    def training_principals(self) -> list[str]:
        """Principals granted anything on a training bucket, or object access at project level."""
        training = {b.key for b in self.training_buckets}
        out: set[str] = set()
        for principal, per_bucket in self.bucket_roles.items():
            if any(key in training and roles for key, roles in per_bucket.items()):
                out.add(principal)
        for principal, roles in self.project_roles.items():
            if any(p.startswith("objects.") for p in domain.storage_permissions(roles)):
                out.add(principal)
        out.update(self.conditional)
        return sorted(out - self.builders)

    def repository_permissions(self, principal: str) -> frozenset[str]:
        """Every permission ``principal`` holds on the trainer image repositories (their own grants)."""
        out: set[str] = set()
        for key, bucket in self.buckets.items():
            if bucket.purpose == domain.TRAINER_IMAGES_PURPOSE:
                for role in self.bucket_roles.get(principal, {}).get(key, ()):
                    out |= domain.ROLE_PERMISSIONS.get(role, frozenset())
        return frozenset(out)

    def project_permissions(self, principal: str) -> frozenset[str]:
        out: set[str] = set()
        for role in self.project_roles.get(principal, ()):
            out |= domain.ROLE_PERMISSIONS.get(role, frozenset())
        return frozenset(out)

    def project_roles_granting(self, principal: str, permission: str) -> list[str]:
        """The project-level roles of ``principal`` (unconditional) that hold ``permission``."""
        return sorted(role for role in self.project_roles.get(principal, ())
                      if permission in domain.ROLE_PERMISSIONS.get(role, frozenset()))


def _account_members(res: StackResource) -> set[str]:
    """The member names a service account resource goes by in the model: its e-mail once known (or built from its
    account id and project), and ``<member of NAME>`` while the engine has not computed it."""
    out = {f"<member of {res.urn.rsplit('::', 1)[-1]}>"}
    email, account, project = (r.get(res.props, k) for k in ("email", "accountId", "project"))
    if not isinstance(email, str) and isinstance(account, str) and isinstance(project, str):
        email = f"{account}@{project}.iam.gserviceaccount.com"
    if isinstance(email, str):
        out.add(f"serviceAccount:{email}")
    return out


def _principal(grant: r.Grant, res: StackResource) -> str:
    if isinstance(grant.member, str):
        return grant.member
    source = (res.sources.get("member") or res.sources.get("members") or res.sources.get("entity") or [None])[0]
    if source:
        return f"<member of {source.rsplit('::', 1)[-1]}>"
    return f"<member of {res.name}>"


def build_model(resources: Iterable[StackResource], settings: StackSettings) -> AccessModel:
    resources = list(resources)
    model = AccessModel()
    by_urn: dict[str, Bucket] = {}
    for res in resources:
        if res.type != T.BUCKET:
            continue
        name = r.bucket_name(res.props)
        key = name if isinstance(name, str) else res.urn
        bucket = Bucket(key, r.bucket_purpose(res.props), True, res.urn)
        model.buckets[key] = bucket
        by_urn[res.urn] = bucket
    if settings.existing_data_bucket and settings.existing_data_bucket not in model.buckets:
        model.buckets[settings.existing_data_bucket] = Bucket(settings.existing_data_bucket, "data", False)
    # Google's default convenience bindings on every bucket the stack creates (see the module docstring).
    for bucket in by_urn.values():
        for member_type, roles in domain.DEFAULT_CONVENIENCE_BINDINGS.items():
            model.convenience.setdefault(bucket.key, {})[member_type] = set(roles)

    for res in resources:     # the image builder (ImageBuilder's account) and the training service account
        if res.type == T.SERVICE_ACCOUNT and f"{T.IMAGE_BUILDER}$" in res.urn:
            model.builders |= _account_members(res)
        elif res.type == T.SERVICE_ACCOUNT and res.name == domain.TRAINING_SA_KEYWORD:
            model.trainers |= _account_members(res)

    def bucket_key(res: StackResource) -> str | None:
        ref = r.strip_bucket(r.get(res.props, "bucket"))
        if isinstance(ref, str):
            if ref not in model.buckets:
                model.buckets[ref] = Bucket(ref, None, False)
            return ref
        for urn in res.sources.get("bucket", ()):
            if urn in by_urn:
                return by_urn[urn].key
        return None

    for res in resources:
        if res.type in T.REPOSITORY_IAM_TYPES:
            repo = r.get(res.props, "repository")
            key = repo if isinstance(repo, str) else res.urn
            model.buckets.setdefault(key, Bucket(key, domain.TRAINER_IMAGES_PURPOSE, True))
            for grant in r.iam_grants(res.type, res.props):
                if isinstance(grant.role, str) and not grant.conditional:
                    model.bucket_roles.setdefault(_principal(grant, res), {}).setdefault(key, set()).add(grant.role)
            continue
        if res.type in T.BUCKET_IAM_TYPES | T.ACL_TYPES:
            key = bucket_key(res)
            if key is None:
                continue
            _drop_replaced_defaults(model, key, res)
            grants = r.iam_grants(res.type, res.props) + r.acl_grants(res.type, res.props)
        elif res.type in T.PROJECT_IAM_TYPES:
            key = None    # project-level: counts on every bucket
            grants = r.iam_grants(res.type, res.props)
        else:
            continue
        for grant in grants:
            if isinstance(grant.role, str):
                model.add_grant(_principal(grant, res), key, grant.role, grant.conditional)
    return model


def _drop_replaced_defaults(model: AccessModel, key: str, res: StackResource) -> None:
    """An authoritative bucket IAM resource replaces the default convenience bindings it covers."""
    defaults = model.convenience.get(key)
    if not defaults:
        return
    if res.type == T.BUCKET_IAM_POLICY:
        defaults.clear()
    elif res.type == T.BUCKET_IAM_BINDING:
        role = r.get(res.props, "role")
        if isinstance(role, str):
            for roles in defaults.values():
                roles.discard(role)


def _fix_for(purpose: str) -> str:
    roles = domain.BUCKET_READ_ROLES if purpose in domain.READ_BUCKETS else domain.BUCKET_WRITE_ROLES
    return roles[0]


def _short(permissions: Iterable[str]) -> str:
    return ", ".join(f"storage.{p}" for p in sorted(permissions))


def check_training_access(resources: Iterable[StackResource], settings: StackSettings) -> list[tuple[str, str | None]]:
    """The stack rule: every training principal can read its inputs and write its outputs.

    Returns ``(message, urn or None)`` per problem.
    """
    model = build_model(resources, settings)
    buckets = model.training_buckets
    if not buckets:
        return []
    principals = model.training_principals()
    if not principals:
        return [("no principal is granted access to the training buckets "
                 f"({', '.join(b.label for b in buckets)}); the training job would fail with 403", None)]
    out: list[tuple[str, str | None]] = []
    for principal in principals:
        for bucket in buckets:
            assert bucket.purpose is not None
            missing = model.missing(principal, bucket.key)
            if not missing:
                continue
            have = model.permissions(principal, bucket.key)
            roles = sorted(model.roles(principal, bucket.key))
            held = (f"it holds {', '.join(roles)} ({domain.access_summary(have)})" if roles
                    else "it holds no role there")
            note = ""
            if principal in model.conditional:
                note = f" (conditional grants are not counted: {'; '.join(model.conditional[principal])})"
            out.append((
                f"{principal} lacks {_short(missing)} on the {bucket.purpose} bucket {bucket.key}: {held}"
                f"{note}; grant {_fix_for(bucket.purpose)} on that bucket",
                bucket.urn,
            ))
    return out


def check_training_logs(resources: Iterable[StackResource], settings: StackSettings) -> list[tuple[str, str | None]]:
    """The stack rule ``training-account-writes-logs``: the training service account the stack creates holds
    ``domain.TRAINING_SA_PROJECT_ROLES``' permission to write logs (``logging.logEntries.create``) on the project."""
    model = build_model(resources, settings)
    # one account, maybe under two names (its e-mail, and <member of training-sa> where a grant's member is unknown)
    if not model.trainers or any(domain.LOG_WRITE_PERMISSION in model.project_permissions(m) for m in model.trainers):
        return []
    trainer = next((m for m in sorted(model.trainers) if m.startswith("serviceAccount:")), min(model.trainers))
    return [(f"the training service account {trainer} lacks {domain.LOG_WRITE_PERMISSION} on the project (grant "
             f"{role}: {why}); without it `tpuctl logs` and the cloud live display have nothing to read, the run "
             "itself still trains", None)
            for role, why in domain.TRAINING_SA_PROJECT_ROLES.items()]


def check_image_builder(resources: Iterable[StackResource], settings: StackSettings) -> list[tuple[str, str | None]]:
    """The stack rule for ``tpuctl image build``: the image builder can push to the trainer image repository, write
    its build logs and read the build context in the staging bucket (``domain.IMAGE_BUILDER_ROLES``), and no training
    principal can push to that repository (a job would overwrite the images jobs run)."""
    model = build_model(resources, settings)
    repositories = [b for b in model.buckets.values() if b.purpose == domain.TRAINER_IMAGES_PURPOSE]
    out: list[tuple[str, str | None]] = []
    if not repositories:
        return out
    staging = [b for b in model.training_buckets if b.purpose == "staging"]
    for builder in sorted(model.builders & set(model.principals)):
        missing = []
        if domain.PUSH_PERMISSION not in model.repository_permissions(builder):
            missing.append(f"{domain.PUSH_PERMISSION} on the trainer image repository (roles/artifactregistry.writer)")
        if domain.LOG_WRITE_PERMISSION not in model.project_permissions(builder):
            missing.append(f"{domain.LOG_WRITE_PERMISSION} on the project (roles/logging.logWriter: its builds log to "
                           "Cloud Logging only)")
        for bucket in staging:
            lacks = domain.REQUIRED_READ_PERMISSIONS - model.permissions(builder, bucket.key)
            if lacks:
                missing.append(f"{_short(lacks)} on the staging bucket {bucket.key} (roles/storage.objectViewer: the "
                               "build context)")
        if missing:
            out.append((f"the image builder {builder} lacks {'; '.join(missing)}; `tpuctl image build` would fail",
                        None))
    for principal in model.training_principals():
        if domain.PUSH_PERMISSION in model.repository_permissions(principal):
            out.append((f"training principal {principal} can push to the trainer image repository "
                        f"({domain.PUSH_PERMISSION}): a job could replace the images jobs run; only the image builder "
                        "pushes, training principals get roles/artifactregistry.reader", None))
    return out


#: The access map's cell for what a principal may do on the project itself (not a bucket: no bucket name has
#: parentheses): ``LOGS_ACCESS`` where it may write log entries (``domain.LOG_WRITE_PERMISSION``).
PROJECT_CELL = "(project)"
LOGS_ACCESS = "logs"


def access_rows(model: AccessModel) -> list[dict[str, Any]]:
    """Principal x bucket matrix for display: roles and the read/list/write summary of each cell, and a
    ``PROJECT_CELL`` for a principal that may write logs to the project (the training account, the image builder)."""
    rows = []
    buckets = model.training_buckets + sorted(
        (b for b in model.buckets.values() if b.purpose not in domain.BUCKET_PURPOSES), key=lambda b: b.key)
    for principal in model.principals:
        writers = model.project_roles_granting(principal, domain.LOG_WRITE_PERMISSION)
        if writers:
            rows.append({"principal": principal, "bucket": PROJECT_CELL, "purpose": "project", "roles": writers,
                         "access": LOGS_ACCESS, "note": None})
        for bucket in buckets:
            if bucket.purpose == domain.TRAINER_IMAGES_PURPOSE:    # a repository: its own grants, pull or not
                own = sorted(model.bucket_roles.get(principal, {}).get(bucket.key, set()))
                if own:
                    perms = set().union(*(domain.ROLE_PERMISSIONS.get(role, frozenset()) for role in own))
                    access = ("pull,push" if domain.PUSH_PERMISSION in perms else
                              "pull" if domain.PULL_PERMISSION in perms else "-")
                    rows.append({"principal": principal, "bucket": bucket.key, "purpose": bucket.purpose,
                                 "roles": own, "access": access, "note": None})
                continue
            roles = model.roles(principal, bucket.key)
            if not roles:
                continue
            perms = domain.storage_permissions(roles)
            without_default = domain.storage_permissions(r for r in roles if not r.startswith("defaultObject:"))
            notes = []
            if "objects.get" in perms and "objects.get" not in without_default:
                notes.append("objects.get comes only from the default object ACL: objects written before the grant "
                             "stay unreadable until they get their own ACL entry")
            derived = model.via_convenience(principal, bucket.key) - set(model.bucket_roles.get(principal, {})
                                                                          .get(bucket.key, set()))
            if derived:
                basic = sorted(role for role in model.project_roles.get(principal, set())
                               if role in domain.BASIC_ROLE_CONVENIENCE_MEMBERS)
                notes.append(f"{', '.join(sorted(derived))} through the bucket's convenience bindings "
                             f"(project-level {', '.join(basic)})")
            note = "; ".join(notes) or None
            rows.append({
                "principal": principal,
                "bucket": bucket.key,
                "purpose": bucket.purpose,
                "roles": sorted(roles),
                "access": domain.access_summary(perms),
                "note": note,
            })
    return rows
