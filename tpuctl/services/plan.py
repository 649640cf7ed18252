"""``tpuctl plan``: what a stack would create and who could read or write what, with no cloud and no CLI.

Runs the real Pulumi program (``infra/``) under the SDK's mocks with a stack's config
(``infra.mocks.run_program``), derives the access map from the IAM/ACL resources it registers
(``ground.access``) and runs the policy pack's rules on them (``policy.evaluate``). Heavy imports
(pulumi, pulumi_gcp) happen inside ``plan`` so importing this module stays cheap.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ground import domain
from ground import tokens as T
from ground.access import access_rows, build_model
from ground.errors import UserError
from ground.numbers import is_digits
from ground.resources import TERRAFORM_TYPES
from ground.stackfile import find_stack_file, read_stack_config

DEFAULT_STACK = "example"

#: Properties worth showing per resource type (dotted paths into the camelCase outputs).
KEY_PROPERTIES: dict[str, tuple[str, ...]] = {
    T.BUCKET: ("name", "location", f"labels.{domain.PURPOSE_LABEL}", "uniformBucketLevelAccess",
                                  "publicAccessPrevention", "versioning.enabled", "forceDestroy",
                                  "softDeletePolicy.retentionDurationSeconds"),
    T.BUCKET_IAM_MEMBER: ("bucket", "role", "member"),
    T.PROJECT_IAM_MEMBER: ("project", "role", "member"),
    T.BUCKET_ACCESS_CONTROL: ("bucket", "role", "entity"),
    T.DEFAULT_OBJECT_ACCESS_CONTROL: ("bucket", "role", "entity"),
    T.BUCKET_OBJECT: ("bucket", "contentType"),
    T.QUOTA_PREFERENCE: ("quotaId", "dimensions.region", "dimensions.zone", "quotaConfig.preferredValue",
                                                         "contactEmail"),
    T.SERVICE: ("service", "disableOnDestroy"),
    T.SERVICE_IDENTITY: ("service", "email"),
    T.SERVICE_ACCOUNT: ("accountId", "email"),
    T.SA_IAM_MEMBER: ("serviceAccountId", "role", "member"),
    T.ARTIFACT_REPOSITORY: ("repositoryId", "location", "format", "cleanupPolicies.0.condition.tagState"),
    T.ARTIFACT_REPOSITORY_IAM_MEMBER: ("repository", "role", "member"),
    T.VERTEX_PERSISTENT_RESOURCE: ("name", "location", "resourcePools.0.machineSpec.machineType",
                                   "resourcePools.0.machineSpec.acceleratorType",
                                   "resourcePools.0.machineSpec.acceleratorCount", "resourcePools.0.replicaCount"),
}


@dataclass
class PlannedResource:
    type: str
    name: str
    urn: str
    component: str                      # "<component type> <name>" or "stack"
    properties: dict[str, Any]

    @property
    def short_type(self) -> str:
        return short_type(self.type)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "urn": self.urn, "component": self.component,
                "properties": self.properties}


@dataclass
class PlanResult:
    source: str                                   # "stack dev (Pulumi.dev.yaml)" / "config FILE"
    stack: str
    resources: list[PlannedResource]
    access: list[dict[str, Any]]                  # rows: principal, keyword, bucket, purpose, roles, access
    violations: list[Any]                         # policy.evaluate.Violation
    outputs: dict[str, Any]
    policy_checked: bool
    seconds: float = 0.0
    components: list[str] = field(default_factory=list)
    registered: list[Any] = field(default_factory=list)    # ground.access.StackResource of every custom resource
    settings: Any = None                                  # the stack's StackSettings

    @property
    def mandatory(self) -> list[Any]:
        return [v for v in self.violations if v.mandatory]

    @property
    def exit_code(self) -> int:
        return 1 if self.mandatory else 0

    def access_json(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for row in self.access:
            cell = {"purpose": row["purpose"], "roles": row["roles"], "access": row["access"]}
            if row.get("note"):
                cell["note"] = row["note"]
            out.setdefault(row["principal"], {})[row["bucket"]] = cell
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "resources": [r.to_json() for r in self.resources],
            "access": self.access_json(),
            "violations": [v.to_json() for v in self.violations],
            "outputs": self.outputs,
        }


def short_type(token: str) -> str:
    """``gcp:storage/bucketIAMMember:BucketIAMMember`` -> ``storage.BucketIAMMember``."""
    parts = token.split(":")
    if len(parts) == 3 and "/" in parts[1]:
        return f"{parts[1].split('/')[0]}.{parts[2]}"
    return parts[-1]


def _dig(props: Any, path: str) -> Any:
    value = props
    for key in path.split("."):
        if isinstance(value, list) and is_digits(key) and int(key) < len(value):
            value = value[int(key)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            return None
    return value


def key_properties(rtype: str, props: dict[str, Any]) -> dict[str, Any]:
    keys = KEY_PROPERTIES.get(rtype)
    if keys is None:
        keys = tuple(k for k, v in props.items() if isinstance(v, (str, int, float, bool)))[:4]
    values = {key: _dig(props, key) for key in keys}
    return {key: value for key, value in values.items() if value is not None}


def stack_source(stack: str | None, config_file: Path | None) -> tuple[str, Path, str]:
    """The stack's name, its config file and how the plan names it: ``--config FILE`` as given, else the stack's
    ``Pulumi.<NAME>.yaml`` where ``ground.stackfile.find_stack_file`` finds it (default stack: ``example``)."""
    if stack and config_file:
        raise UserError("give either --stack or --config, not both")
    if config_file is not None:
        path = Path(config_file)
        if path.is_dir():
            raise UserError(f"--config {path} is a folder; give a stack config file such as {path}/Pulumi.dev.yaml")
        name = path.name
        derived = name[len("Pulumi."):-len(".yaml")] if name.startswith("Pulumi.") and name.endswith(".yaml") else "plan"
        return derived or "plan", path, f"config {path}"
    stack = stack or DEFAULT_STACK
    path = find_stack_file(stack)
    try:      # the file's path as the user would type it from here
        shown = path.relative_to(Path.cwd())
    except (ValueError, OSError):
        shown = path
    return stack.rsplit("/", 1)[-1], path, f"stack {stack} ({shown})"


def plan(stack: str | None = None, config_file: Path | None = None, *, check_policy: bool = True) -> PlanResult:
    """Run the program offline for a stack (default ``example``) or a stack config file.

    Raises ``DomainError`` (``infra.config.ConfigError`` for a bad value) before anything is shown.
    """
    started = time.perf_counter()
    name, path, source = stack_source(stack, config_file)

    from infra.mocks import run_program
    from policy.evaluate import evaluate, from_mocked

    values = read_stack_config(config_file=path)
    run = run_program(values, stack=name)

    components = {res.urn: f"{res.type.rsplit(':', 1)[-1]} {res.name}" for res in run.resources if not res.custom}
    planned = [
        PlannedResource(res.type, res.name, res.urn, components.get(res.parent or "", "stack"),
                        key_properties(res.type, res.outputs))
        for res in run.resources if res.custom
    ]
    # The mocks register concurrently, so registration order varies run to run; the plan does not.
    planned.sort(key=lambda r: (r.component, r.type, r.name))
    settings = run.config.settings
    stack_resources = from_mocked(run.resources)
    keywords = {domain.member_for_email(email): kw for kw, email in (run.outputs.get("principals") or {}).items()
                if isinstance(email, str) and "@" in email}
    access = [{**row, "keyword": keywords.get(row["principal"])}
              for row in access_rows(build_model(stack_resources, settings))]
    violations = evaluate(stack_resources, settings) if check_policy else []
    violations.sort(key=lambda v: (v.rule, v.urn or "", v.message))
    return PlanResult(
        source=source, stack=name, resources=planned, access=access, violations=violations,
        outputs=run.outputs, policy_checked=check_policy, seconds=time.perf_counter() - started,
        components=sorted(set(components.values())), registered=stack_resources, settings=settings,
    )


# --------------------------------------------------------------------------------------------
# Export as a Terraform plan (`tpuctl plan --format tfplan`) for plan-reading scanners
# --------------------------------------------------------------------------------------------

#: Terraform's JSON plan format (developer.hashicorp.com/terraform/internals/json-format) as scanners read it.
TFPLAN_FORMAT_VERSION = "1.2"
#: Scanners (checkov's plan detection) recognise a plan by this key; tpuctl writes the Terraform release
#: whose plan format it follows. The provider is the google provider pulumi-gcp 10.x is bridged from.
TFPLAN_TERRAFORM_VERSION = "1.9.8"
GOOGLE_PROVIDER = "registry.terraform.io/hashicorp/google"
#: Pulumi property -> Terraform attribute where the bridge renamed more than the case (list blocks are plural
#: in Pulumi, singular in Terraform).
TF_RENAMES = {"lifecycleRules": "lifecycle_rule", "cors": "cors", "customPlacementConfig": "custom_placement_config"}
#: Attributes that are maps in Terraform (keys kept as written, not a nested block).
TF_MAPS = frozenset({"labels", "effectiveLabels", "pulumiLabels", "terraformLabels", "dimensions", "metadata"})
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def _snake(key: str) -> str:
    return TF_RENAMES.get(key) or re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def tf_values(props: dict[str, Any]) -> dict[str, Any]:
    """camelCase Pulumi properties as Terraform attribute values: snake_case, nested objects as one-element
    lists (blocks), maps kept as maps, assets as their path, whole-number floats as integers."""
    def value(key: str, v: Any) -> Any:
        if isinstance(v, dict):
            if {"asset", "path"} <= set(v) or {"archive", "path"} <= set(v):
                return v["path"]
            if "asset" in v and "text" in v:
                return v["text"]
            if key in TF_MAPS:
                return {str(k): value("", x) for k, x in v.items()}
            return [tf_values(v)]
        if isinstance(v, list):
            return [tf_values(x) if isinstance(x, dict) else value("", x) for x in v]
        if isinstance(v, float) and v.is_integer():
            return int(v)
        return v
    return {_snake(k): value(k, v) for k, v in props.items() if v is not None}


def _addresses(result: PlanResult) -> list[tuple[Any, str, str, str]]:
    """(resource, terraform type, name, address) for every registered resource with a google provider type."""
    out, seen = [], set()
    for res in sorted(result.registered, key=lambda x: (x.type, x.name)):
        tf_type = TERRAFORM_TYPES.get(res.type)
        if tf_type is None:
            continue
        base = _NAME_CHARS.sub("_", res.name)
        base = base if re.match(r"[A-Za-z_]", base) else f"_{base}"
        name, i = base, 2
        while f"{tf_type}.{name}" in seen:
            name, i = f"{base}_{i}", i + 1
        seen.add(f"{tf_type}.{name}")
        out.append((res, tf_type, name, f"{tf_type}.{name}"))
    return out


def to_tfplan(result: PlanResult) -> dict[str, Any]:
    """The plan as Terraform's JSON plan: ``planned_values.root_module.resources`` and ``resource_changes``
    (every action ``create``), google provider types, snake_case attributes. Resource types with no google
    provider equivalent (the TPU VM agent's dynamic resource) are left out."""
    resources, changes = [], []
    for res, tf_type, name, address in _addresses(result):
        values = tf_values(dict(res.props))
        common = {"address": address, "mode": "managed", "type": tf_type, "name": name, "provider_name": GOOGLE_PROVIDER}
        resources.append({**common, "schema_version": 0, "values": values, "sensitive_values": {}})
        changes.append({**common, "change": {"actions": ["create"], "before": None, "after": values,
                                             "after_unknown": {}, "before_sensitive": False, "after_sensitive": {}}})
    project = result.outputs.get("project")
    return {
        "format_version": TFPLAN_FORMAT_VERSION,
        "terraform_version": TFPLAN_TERRAFORM_VERSION,
        "planned_values": {"root_module": {"resources": resources}},
        "resource_changes": changes,
        "configuration": {"provider_config": {"google": {
            "name": "google", "full_name": GOOGLE_PROVIDER,
            "expressions": {"project": {"constant_value": project}} if project else {}}},
            "root_module": {}},
    }


def checkov_baseline(result: PlanResult, plan_file: str = "/plan.json") -> dict[str, Any]:
    """checkov ``--baseline`` content accepting exactly the findings of policy/exceptions.yaml on this plan's
    resources (checkov matches a baseline entry by resource address and check id)."""
    from policy.exceptions import accepted_checks

    findings = []
    for res, _tf_type, _name, address in _addresses(result):
        checks = accepted_checks(res.type, res.props, result.settings)
        if checks:
            findings.append({"resource": address, "check_ids": checks})
    return {"failed_checks": [{"file": plan_file, "findings": findings}] if findings else []}
