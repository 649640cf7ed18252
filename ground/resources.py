"""What the rules read from a resource: type tokens, IAM grants, ACL entries, bucket purposes.

Pure functions over ``(type, props)`` where props are the camelCase inputs (``Analyze``) or outputs
(``AnalyzeStack``, mocks) of a resource. They accept plain dicts and pulumi_policy's proxies alike:
values are read with ``get``/indexing only, and a value that is unknown during preview comes back as
``UNKNOWN`` instead of raising, so each rule decides what an unknown value means.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ground import domain
from ground import tokens as T

#: Predefined ACLs (bucket or object) that open data to everyone.
PUBLIC_PREDEFINED_ACLS = frozenset({"publicRead", "publicReadWrite", "authenticatedRead"})

#: Terraform type (google provider) of each Pulumi type token: the names checkov and other plan scanners use,
#: and those of policy/exceptions.yaml. pulumi-gcp is bridged from that provider, so each Pulumi resource is
#: one Terraform resource with the same attributes in snake_case.
TERRAFORM_TYPES: dict[str, str] = {
    T.BUCKET: "google_storage_bucket",
    T.BUCKET_OBJECT: "google_storage_bucket_object",
    T.BUCKET_IAM_MEMBER: "google_storage_bucket_iam_member",
    T.BUCKET_IAM_BINDING: "google_storage_bucket_iam_binding",
    T.BUCKET_IAM_POLICY: "google_storage_bucket_iam_policy",
    T.PROJECT_IAM_MEMBER: "google_project_iam_member",
    T.PROJECT_IAM_BINDING: "google_project_iam_binding",
    T.PROJECT_IAM_POLICY: "google_project_iam_policy",
    T.FOLDER_IAM_MEMBER: "google_folder_iam_member",
    T.FOLDER_IAM_BINDING: "google_folder_iam_binding",
    T.FOLDER_IAM_POLICY: "google_folder_iam_policy",
    T.ORG_IAM_MEMBER: "google_organization_iam_member",
    T.ORG_IAM_BINDING: "google_organization_iam_binding",
    T.ORG_IAM_POLICY: "google_organization_iam_policy",
    T.SA_IAM_MEMBER: "google_service_account_iam_member",
    T.SA_IAM_BINDING: "google_service_account_iam_binding",
    T.SA_IAM_POLICY: "google_service_account_iam_policy",
    T.BUCKET_ACL: "google_storage_bucket_acl",
    T.DEFAULT_OBJECT_ACL: "google_storage_default_object_acl",
    T.OBJECT_ACL: "google_storage_object_acl",
    T.BUCKET_ACCESS_CONTROL: "google_storage_bucket_access_control",
    T.DEFAULT_OBJECT_ACCESS_CONTROL: "google_storage_default_object_access_control",
    T.OBJECT_ACCESS_CONTROL: "google_storage_object_access_control",
    T.SERVICE: "google_project_service",
    T.SERVICE_IDENTITY: "google_project_service_identity",
    T.SERVICE_ACCOUNT: "google_service_account",
    T.QUOTA_PREFERENCE: "google_cloud_quotas_quota_preference",
    T.ARTIFACT_REPOSITORY: "google_artifact_registry_repository",
    T.ARTIFACT_REPOSITORY_IAM_MEMBER: "google_artifact_registry_repository_iam_member",
    T.VERTEX_ENDPOINT: "google_vertex_ai_endpoint",
    T.VERTEX_PERSISTENT_RESOURCE: "google_vertex_ai_persistent_resource",
}


# --------------------------------------------------------------------------------------------
# Reading values that may be unknown during preview
# --------------------------------------------------------------------------------------------

class _Unknown:
    """A value the engine does not know yet (preview); never equal to a real value."""
    def __repr__(self) -> str:
        return "<unknown>"

    def __bool__(self) -> bool:
        return False


UNKNOWN: Any = _Unknown()

def get(props: Any, *path: Any, default: Any = None) -> Any:
    """``props[path[0]][path[1]]…`` or ``default`` when missing; ``UNKNOWN`` when unknown at preview (the policy pack
    hands its rules plain values with ``UNKNOWN`` in place of what the engine does not know: ``policy.pack.plain``)."""
    value = props
    for key in path:
        if value is UNKNOWN:
            return UNKNOWN
        if isinstance(value, Mapping):
            if key not in value:
                return default
            value = value[key]
        elif isinstance(value, Sequence) and not isinstance(value, str) and isinstance(key, int):
            if not -len(value) <= key < len(value):
                return default
            value = value[key]
        else:
            return default
    return default if value is None else value


def items(value: Any) -> list[Any]:
    """Elements of a list value (``[]`` when absent); an unknown list gives ``[UNKNOWN]``."""
    if value is UNKNOWN:
        return [UNKNOWN]
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [get(value, i) for i in range(len(value))]
    return []


def strip_bucket(ref: Any) -> Any:
    """Bucket name from what IAM/ACL resources carry: ``name``, ``b/name`` (state) or ``projects/_/buckets/name``."""
    if not isinstance(ref, str):
        return ref
    for prefix in ("projects/_/buckets/", "b/", "gs://"):
        if ref.startswith(prefix):
            return ref[len(prefix):].split("/", 1)[0]
    return ref


# --------------------------------------------------------------------------------------------
# IAM grants and ACL entries
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Grant:
    """One (role, member) a resource grants. ``role`` is an IAM role or an ACL key (``bucket:READER``)."""
    role: Any
    member: Any
    conditional: bool = False


def iam_grants(rtype: str, props: Any) -> list[Grant]:
    """(role, member) pairs of an IAM member/binding/policy resource of any level."""
    if rtype not in T.IAM_TYPES:
        return []
    if rtype.endswith(":IAMMember") or rtype in (T.BUCKET_IAM_MEMBER, T.ARTIFACT_REPOSITORY_IAM_MEMBER):
        conditional = bool(get(props, "condition"))
        return [Grant(get(props, "role"), get(props, "member"), conditional)]
    if rtype.endswith(":IAMBinding") or rtype in (T.BUCKET_IAM_BINDING, T.ARTIFACT_REPOSITORY_IAM_BINDING):
        role = get(props, "role")
        conditional = bool(get(props, "condition"))
        return [Grant(role, m, conditional) for m in items(get(props, "members"))]
    data = get(props, "policyData")
    if data is UNKNOWN:
        return [Grant(UNKNOWN, UNKNOWN)]
    try:
        policy = json.loads(data) if isinstance(data, str) else {}
    except (ValueError, RecursionError):
        return []
    bindings = policy.get("bindings") if isinstance(policy, dict) else None
    out: list[Grant] = []
    for binding in bindings if isinstance(bindings, list) else []:     # a policy of another shape grants nothing
        members = binding.get("members") if isinstance(binding, dict) else None
        for member in members if isinstance(members, list) else []:
            if isinstance(member, str) and isinstance(binding.get("role"), str):
                out.append(Grant(binding["role"], member, bool(binding.get("condition"))))
    return out


def entity_member(entity: Any) -> Any:
    """ACL entity (``user-EMAIL``, ``group-EMAIL``, ``domain-D``, ``project-viewers-N``, ``allUsers``) as an IAM member."""
    if not isinstance(entity, str):
        return entity
    if entity in domain.PUBLIC_MEMBERS:
        return entity
    kind, _, rest = entity.partition("-")
    if kind == "user" and rest:
        try:
            return domain.member_for_email(rest)
        except domain.DomainError:
            return f"user:{rest}"
    if kind in ("group", "domain") and rest:
        return f"{kind}:{rest}"
    if kind == "project" and rest:
        team, _, number = rest.partition("-")
        team_member = {"owners": "projectOwner", "editors": "projectEditor", "viewers": "projectViewer"}.get(team)
        if team_member:
            return f"{team_member}:{number}"
    return entity


def acl_grants(rtype: str, props: Any) -> list[Grant]:
    """ACL entries as grants whose role is a ``domain.ACL_PERMISSIONS`` key (``bucket:READER``…)."""
    scope = {T.BUCKET_ACCESS_CONTROL: "bucket", T.DEFAULT_OBJECT_ACCESS_CONTROL: "defaultObject",
             T.OBJECT_ACCESS_CONTROL: "object"}.get(rtype)
    if scope is not None:     # one ACL entry
        return [Grant(_acl_key(scope, get(props, "role")), entity_member(get(props, "entity")))]
    scope = {T.BUCKET_ACL: "bucket", T.DEFAULT_OBJECT_ACL: "defaultObject", T.OBJECT_ACL: "object"}.get(rtype)
    if scope is None:
        return []
    out = []
    for entry in items(get(props, "roleEntities")):
        if isinstance(entry, str) and ":" in entry:
            role, _, entity = entry.partition(":")
            out.append(Grant(_acl_key(scope, role), entity_member(entity)))
        elif entry is UNKNOWN:
            out.append(Grant(UNKNOWN, UNKNOWN))
    return out


def _acl_key(scope: str, role: Any) -> Any:
    return f"{scope}:{role.upper()}" if isinstance(role, str) else role


def is_public_member(member: Any) -> bool:
    return isinstance(member, str) and (member in domain.PUBLIC_MEMBERS
                                        or member.split(":", 1)[-1] in domain.PUBLIC_MEMBERS)


def is_service_account_member(member: Any) -> bool:
    """True for ``serviceAccount:…`` and for members unknown at preview (tpuctl only grants identities)."""
    return member is UNKNOWN or (isinstance(member, str) and member.startswith("serviceAccount:"))


# --------------------------------------------------------------------------------------------
# Buckets
# --------------------------------------------------------------------------------------------

def bucket_name(props: Any, fallback: str | None = None) -> Any:
    name = get(props, "name")
    return name if name is not None else fallback


def bucket_purpose(props: Any) -> str | None:
    """The ``tpuctl-purpose`` label of a bucket, when it is one of the four training purposes."""
    for key in ("labels", "effectiveLabels"):
        value = get(props, key, domain.PURPOSE_LABEL)
        if isinstance(value, str) and value in domain.BUCKET_PURPOSES:
            return value
    return None


def labelled_purpose(props: Any) -> Any:
    """The ``tpuctl-purpose`` label of a bucket, whatever its value (training purposes and ``access-logs``)."""
    for key in ("labels", "effectiveLabels"):
        value = get(props, key, domain.PURPOSE_LABEL)
        if value is not None:
            return value
    return None
