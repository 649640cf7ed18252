"""Stack outputs: what `pulumi up` exported, read from a stack (Pulumi CLI) or a JSON file.

The shape is the one infra/ exports (keys in ``OUTPUT_KEYS``) and the one
``tpuctl plan --json`` prints under ``outputs``; every ``--outputs FILE`` option accepts it.

This is the edge where outputs enter: the bytes are checked (size, UTF-8, JSON, nesting, finite numbers)
and the document is validated into a typed object (``StackOutputs``, a pydantic model). Anything
wrong is one ``UserError`` line naming the file and the field; nothing downstream sees an unchecked value.
"""

from __future__ import annotations

import json
import math
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator

from ground import domain
from ground.envs import REPO_ROOT
from ground.errors import UserError
from ground.files import read_head
from ground.numbers import is_digits
from ground.stackfile import stack_file_name

#: Keys of the stack outputs (`pulumi stack output --json`), documented in docs/stack-outputs.md.
OUTPUT_KEYS: tuple[str, ...] = (
    "project", "project_number", "region", "zone",
    "tpu_zone",            # where TPU VM slices run (tpuctl:tpuZone, else zone)
    "access_mode",
    "buckets",             # {purpose: bucket name}
    "bucket_urls",         # {purpose: gs://name}
    "principals",          # {keyword: e-mail}
    "training_service_account",
    "image_builder_service_account",   # Cloud Build's account for `tpuctl image build` (infra/builder.py)
    "tfhub_cache_dir", "hub_cache_prefix", "hub_models",
    "access_map",          # {member: {bucket name: [roles]}}
    "labels",
    "trainer_image_repository",   # Artifact Registry repository id of the trainer image
    "trainer_image_url",          # <region>-docker.pkg.dev/<project>/<repository>
    "serving_endpoint",           # projects/P/locations/R/endpoints/ID of tpuctl:servingEndpoint, or null
)

#: Stack outputs are a few KB; anything far bigger is not an outputs file.
MAX_OUTPUTS_BYTES = 4 * 1024 * 1024
#: Deepest nesting a valid document has is 4 (access_map); JSON deeper than this is refused unparsed.
MAX_NESTING = 32
#: Longest string value accepted (hub handles and gs:// URLs are the longest legitimate values).
MAX_STRING = 2048
#: Most entries in any list or mapping (hub models, principals, access map).
MAX_ITEMS = 1000
#: How long `pulumi stack output` may take (it reads the state backend, maybe over the network).
PULUMI_TIMEOUT_SECONDS = 120


#: Single string values checked by the catalogue's own validators (its DomainError message is the error).
_DOMAIN_CHECKS = {
    "tpu_zone": domain.validate_tpu_vm_zone,
    "serving_endpoint": lambda value: domain.check_endpoint_name(value, "serving_endpoint"),
    "trainer_image_repository": domain.validate_repository_id,
    "access_mode": domain.validate_access_mode,
    "training_service_account": domain.member_for_email,
    "image_builder_service_account": domain.member_for_email,
}


def _str() -> Any:
    return Field(default=None, max_length=MAX_STRING)


def _many(factory: Any, most: int) -> Any:
    return Field(default_factory=factory, max_length=most)


class StackOutputs(BaseModel):
    """The typed stack outputs document (``raw``: the document as read). Unknown keys are allowed (newer
    stacks may export more); a missing or null mapping or list is empty."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    project: str | None = _str()
    project_number: str | int | None = None     # digits (a JSON integer becomes text)
    region: str | None = _str()
    zone: str | None = _str()
    tpu_zone: str | None = _str()           # TPU VM slices' zone (tpuctl:tpuZone, else zone)
    access_mode: str | None = None
    buckets: dict[str, str] = _many(dict, len(domain.BUCKET_PURPOSES))        # purpose -> bucket name
    bucket_urls: dict[str, str] = _many(dict, len(domain.BUCKET_PURPOSES))
    principals: dict[str, str] = _many(dict, MAX_ITEMS)                        # keyword -> e-mail
    training_service_account: str | None = _str()
    image_builder_service_account: str | None = _str()
    tfhub_cache_dir: str | None = _str()
    hub_cache_prefix: str | None = _str()
    hub_models: list[str] = _many(list, MAX_ITEMS)
    access_map: dict[str, dict[str, list[str]]] = _many(dict, MAX_ITEMS)
    labels: dict[str, str] = _many(dict, 64)
    trainer_image_repository: str | None = _str()
    trainer_image_url: str | None = _str()
    serving_endpoint: str | None = _str()   # the stack's Vertex AI Endpoint (tpuctl:servingEndpoint)
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def raw(self) -> dict[str, Any]:
        return self._raw

    def bucket(self, purpose: str) -> str | None:
        return self.buckets.get(purpose)

    def bucket_url(self, purpose: str) -> str | None:
        name = self.bucket(purpose)
        return f"gs://{name}" if name else None

    def require(self, key: str, fix: str | None = None) -> str:
        """The output ``key`` (a field such as ``project``, or ``buckets.<purpose>`` for a bucket's gs:// URL),
        or the one error every command words the same way: ``the stack outputs name no 'KEY'; FIX``."""
        if key.startswith("buckets."):
            value = self.bucket_url(key.removeprefix("buckets."))
        else:
            value = getattr(self, key)
        if not value:
            raise UserError(f"the stack outputs name no {key!r}" + (f"; {fix}" if fix else ""))
        return value

    @field_validator("buckets", "bucket_urls", "principals", "hub_models", "access_map", "labels", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return [] if info.field_name == "hub_models" else {}
        return value

    @field_validator(*_DOMAIN_CHECKS)
    @classmethod
    def _domain_checked(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            _DOMAIN_CHECKS[info.field_name](value)
        return value

    @field_validator("project_number")
    @classmethod
    def _number(cls, value: str | int | None) -> str | None:
        if value is None:
            return None
        if isinstance(value, bool):
            raise ValueError("must be a string of digits")
        text = str(value)
        if not is_digits(text) or len(text) > 20 or (isinstance(value, int) and value < 0):
            raise ValueError(f"must be a string of at most 20 digits (got {_show(value)})")
        return text

    @field_validator("buckets")
    @classmethod
    def _buckets(cls, value: dict[str, str]) -> dict[str, str]:
        for purpose, name in value.items():
            if purpose not in domain.BUCKET_PURPOSES:
                raise ValueError(f"unknown bucket purpose {_show(purpose)}; expected {', '.join(domain.BUCKET_PURPOSES)}")
            try:
                domain.validate_bucket_name(name)
            except domain.DomainError as exc:
                raise ValueError(f"{purpose}: {exc}") from None
        return value

    @field_validator("principals")
    @classmethod
    def _principals(cls, value: dict[str, str]) -> dict[str, str]:
        for keyword, email in value.items():
            try:
                domain.member_for_email(email)
            except domain.DomainError as exc:
                raise ValueError(f"{_show(keyword)}: {exc}") from None
        return value

    @field_validator("hub_models", "bucket_urls", "labels", "access_map")
    @classmethod
    def _bounded_strings(cls, value: Any) -> Any:
        for text in _strings(value):
            if len(text) > MAX_STRING:
                raise ValueError(f"has a value of {len(text)} characters (at most {MAX_STRING})")
        return value


def require_outputs(outputs: StackOutputs | None, who: str) -> StackOutputs:
    """``outputs``, or the one error for a command that cannot run without them (``who``: e.g. "--target vertex")."""
    if outputs is None:
        raise UserError(f"{who} needs the stack's outputs: pass --stack NAME or --outputs FILE")
    return outputs


def _strings(node: Any):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _validation_line(source: str, exc: ValidationError) -> str:
    """The first problem of a ValidationError as ``SOURCE: field.path: what is wrong (got VALUE)``."""
    error = exc.errors(include_url=False)[0]
    loc = ".".join(str(part) for part in error.get("loc", ())) or "(document)"
    message = str(error.get("msg", "is invalid"))
    message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    got = "" if error.get("type") in ("value_error", "assertion_error") else f" (got {_show(error.get('input'))})"
    more = len(exc.errors()) - 1
    tail = f"; and {more} more problem(s)" if more > 0 else ""
    return f"{source}: {loc}: {message}{got}{tail}"


def parse_outputs(raw: Any, source: str = "stack outputs") -> StackOutputs:
    """Validate a decoded outputs document into ``StackOutputs``; a bad one is a UserError naming the field."""
    if not isinstance(raw, dict):
        raise UserError(f"{source}: expected a JSON object of stack outputs (got {type(raw).__name__})")
    try:
        outputs = StackOutputs.model_validate(raw)
    except ValidationError as exc:
        raise UserError(_validation_line(source, exc)) from None
    except RecursionError:
        raise UserError(f"{source}: nested too deeply to be stack outputs") from None
    outputs._raw = raw
    return outputs


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _nesting(text: str) -> int:
    """Deepest bracket nesting of a JSON text, outside strings (cheap, before json.loads recurses)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_NESTING:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def decode_json(data: bytes, source: str) -> Any:
    """Bytes of an outputs document -> Python values, or a one-line UserError naming ``source``."""
    if len(data) > MAX_OUTPUTS_BYTES:
        raise UserError(f"{source} is {len(data)} bytes; stack outputs are a few KB (at most {MAX_OUTPUTS_BYTES})")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{source} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    if _nesting(text) > MAX_NESTING:
        raise UserError(f"{source} is nested more than {MAX_NESTING} levels deep; it is not stack outputs")
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise UserError(f"{source} is not JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise UserError(f"{source} is nested too deeply; it is not stack outputs") from None
    except ValueError as exc:  # NaN/Infinity, 1e999, integers longer than Python's digit limit
        first = (str(exc).splitlines() or ["bad number"])[0][:120]
        raise UserError(f"{source} has a number JSON cannot carry: {first}") from None


def read_outputs_file(path: Path) -> StackOutputs:
    path = Path(path)
    source = f"outputs file {path}"
    data = read_head(path, "outputs file", MAX_OUTPUTS_BYTES,
                     folder_hint="give the JSON file `pulumi stack output --json` wrote",
                     missing_hint=f"write it with `pulumi stack output --json > {path}`")
    if len(data) > MAX_OUTPUTS_BYTES:
        raise UserError(f"{source} is larger than {MAX_OUTPUTS_BYTES} bytes; stack outputs are a few KB")
    return parse_outputs(decode_json(data, source), source)


#: The Pulumi CLI's install script for Linux and macOS (https://www.pulumi.com/docs/install/, read 2026-11-24;
#: Homebrew: `brew install pulumi/tap/pulumi`, Windows: an MSI there).
PULUMI_INSTALL = "curl -fsSL https://get.pulumi.com | sh"


def pulumi_cli() -> str | None:
    """The Pulumi CLI on PATH, or None."""
    return shutil.which("pulumi")


def _program_folder() -> str:
    """`` --cwd CHECKOUT`` for a `pulumi` line a user runs from another folder (a team's own): the stack belongs to
    the bundled program's project (Pulumi.yaml in tpuctl's checkout); empty in the checkout itself."""
    try:
        here = Path.cwd().resolve()
    except OSError:
        here = None
    return "" if here == REPO_ROOT else f" --cwd {shlex.quote(str(REPO_ROOT))}"


def read_stack_outputs(stack: str) -> StackOutputs:
    stack_file_name(stack)         # a name Pulumi takes, checked before any process starts
    pulumi = pulumi_cli()
    if pulumi is None:
        raise UserError(
            f"--stack {stack} reads the deployed stack's outputs with the Pulumi CLI, which is not on PATH: install "
            f"it (`{PULUMI_INSTALL}`), or where it is installed run `pulumi stack output --json --show-secrets "
            f"--stack {stack}{_program_folder()} > outputs.json` and pass --outputs outputs.json"
        )
    try:
        proc = subprocess.run(
            [pulumi, "stack", "output", "--json", "--show-secrets", "--stack", stack, "--non-interactive"],
            cwd=REPO_ROOT, capture_output=True, timeout=PULUMI_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"`pulumi stack output` for stack {stack!r} did not finish within {PULUMI_TIMEOUT_SECONDS} s "
                        "(is its state backend reachable? `pulumi whoami -v` says which it is); or pass --outputs FILE"
                        ) from None
    if proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", "replace")
        detail = (stderr.strip().splitlines() or ["unknown error"])[-1]
        raise UserError(f"cannot read outputs of stack {stack!r}: {detail}")
    source = f"`pulumi stack output --json` for stack {stack!r}"
    return parse_outputs(decode_json(proc.stdout, source), f"stack {stack}")


def load_outputs(stack: str | None = None, outputs_file: Path | None = None) -> StackOutputs | None:
    """Outputs from ``--stack`` or ``--outputs``; None when neither was given."""
    if stack and outputs_file:
        raise UserError("give either --stack or --outputs, not both")
    if outputs_file:
        return read_outputs_file(outputs_file)
    if stack:
        return read_stack_outputs(stack)
    return None
