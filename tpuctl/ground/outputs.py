"""Stack outputs: what `pulumi up` exported, read from a stack (Pulumi CLI) or a JSON file.

The shape is the one infra/ exports (keys in ``OUTPUT_KEYS``) and the one
``tpuctl plan --json`` prints under ``outputs``; every ``--outputs FILE`` option accepts it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuctl.ground import domain
from tpuctl.ground.envs import REPO_ROOT
from tpuctl.ground.errors import UserError

#: Keys of the stack outputs (`pulumi stack output --json`), documented in docs/stack-outputs.md.
OUTPUT_KEYS: tuple[str, ...] = (
    "project", "project_number", "region", "zone", "access_mode",
    "buckets",             # {purpose: bucket name}
    "bucket_urls",         # {purpose: gs://name}
    "principals",          # {keyword: e-mail}
    "training_service_account",
    "tfhub_cache_dir", "hub_cache_prefix", "hub_models",
    "access_map",          # {member: {bucket name: [roles]}}
    "labels",
)


@dataclass(frozen=True)
class StackOutputs:
    raw: dict[str, Any]
    project: str | None = None
    project_number: str | None = None
    region: str | None = None
    zone: str | None = None
    access_mode: str | None = None
    buckets: dict[str, str] = field(default_factory=dict)          # purpose -> bucket name
    principals: dict[str, str] = field(default_factory=dict)       # keyword -> e-mail
    training_service_account: str | None = None
    tfhub_cache_dir: str | None = None
    hub_cache_prefix: str | None = None
    hub_models: list[str] = field(default_factory=list)
    access_map: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def bucket(self, purpose: str) -> str | None:
        return self.buckets.get(purpose)

    def bucket_url(self, purpose: str) -> str | None:
        name = self.bucket(purpose)
        return f"gs://{name}" if name else None


def parse_outputs(raw: Any, source: str = "stack outputs") -> StackOutputs:
    if not isinstance(raw, dict):
        raise UserError(f"{source}: expected a JSON object of stack outputs")
    buckets = raw.get("buckets") or {}
    if not isinstance(buckets, dict):
        raise UserError(f"{source}: 'buckets' must be an object of purpose -> bucket name")
    for purpose, name in buckets.items():
        if purpose not in domain.BUCKET_PURPOSES:
            raise UserError(f"{source}: unknown bucket purpose {purpose!r} in 'buckets'")
        try:
            domain.validate_bucket_name(name)
        except domain.DomainError as exc:
            raise UserError(f"{source}: buckets.{purpose}: {exc}") from None
    principals = raw.get("principals") or {}
    if not isinstance(principals, dict):
        raise UserError(f"{source}: 'principals' must be an object of keyword -> e-mail")
    number = raw.get("project_number")
    return StackOutputs(
        raw=raw,
        project=raw.get("project"),
        project_number=str(number) if number is not None else None,
        region=raw.get("region"),
        zone=raw.get("zone"),
        access_mode=raw.get("access_mode"),
        buckets=dict(buckets),
        principals=dict(principals),
        training_service_account=raw.get("training_service_account"),
        tfhub_cache_dir=raw.get("tfhub_cache_dir"),
        hub_cache_prefix=raw.get("hub_cache_prefix"),
        hub_models=list(raw.get("hub_models") or []),
        access_map=dict(raw.get("access_map") or {}),
        labels=dict(raw.get("labels") or {}),
    )


def read_outputs_file(path: Path) -> StackOutputs:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise UserError(f"outputs file {path} does not exist (write it with `pulumi stack output --json > {path}`)") from None
    except OSError as exc:
        raise UserError(f"cannot read outputs file {path}: {exc.strerror}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"outputs file {path} is not JSON (line {exc.lineno}: {exc.msg})") from None
    return parse_outputs(raw, str(path))


def read_stack_outputs(stack: str) -> StackOutputs:
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise UserError(
            "--stack needs the Pulumi CLI, which is not on PATH; where it is installed run "
            f"`pulumi stack output --json --show-secrets --stack {stack} > outputs.json` and pass --outputs outputs.json"
        )
    proc = subprocess.run(
        [pulumi, "stack", "output", "--json", "--show-secrets", "--stack", stack, "--non-interactive"],
        cwd=REPO_ROOT, capture_output=True, text=True,
    )
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise UserError(f"cannot read outputs of stack {stack!r}: {detail}")
    try:
        raw = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise UserError(f"`pulumi stack output --json` for stack {stack!r} did not print JSON") from None
    return parse_outputs(raw, f"stack {stack}")


def load_outputs(stack: str | None = None, outputs_file: Path | None = None) -> StackOutputs | None:
    """Outputs from ``--stack`` or ``--outputs``; None when neither was given."""
    if stack and outputs_file:
        raise UserError("give either --stack or --outputs, not both")
    if outputs_file:
        return read_outputs_file(outputs_file)
    if stack:
        return read_stack_outputs(stack)
    return None
