"""Read and validate the stack config in one place; components get a typed, frozen ``InfraConfig``.

Every rule is checked here, before the first resource is registered, and a broken rule raises
``ConfigError`` whose message starts with the config key (``tpuctl:region: …``). The types and
defaults come from ``Pulumi.yaml`` itself, so the schema the engine enforces and the one this
module applies cannot drift apart.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tpuctl import domain
from tpuctl.domain import DomainError

NAMESPACE = "tpuctl"
REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT_FILE = REPO_ROOT / "Pulumi.yaml"

#: Config key of the name override for each bucket purpose.
BUCKET_KEYS: dict[str, str] = {
    "data": "dataBucket",
    "staging": "stagingBucket",
    "artifacts": "artifactsBucket",
    "hub-cache": "hubCacheBucket",
}
EXISTING_BUCKET_ACCESS: tuple[str, ...] = ("iam", "acl")
#: GCS accepts a soft-delete retention of 0 (off) or 7-90 days.
SOFT_DELETE_MIN_DAYS, SOFT_DELETE_MAX_DAYS = 7, 90


class ConfigError(DomainError):
    """A stack config value breaks a rule. ``str()`` names the key: ``tpuctl:<key>: <rule>``."""

    def __init__(self, key: str, message: str):
        self.key = key if ":" in key else f"{NAMESPACE}:{key}"
        super().__init__(f"{self.key}: {message}")


@dataclass(frozen=True)
class HubModel:
    """One hub handle and the local files that go to ``<prefix>/<sha1(handle)>/<relative path>``."""

    handle: str
    cache_key: str                          # sha1 hex of the handle
    folder: Path                            # <hubCacheSource>/<cache_key>
    files: tuple[tuple[str, Path], ...]     # (posix path relative to folder, absolute path), sorted


@dataclass(frozen=True)
class InfraConfig:
    project: str
    region: str
    zone: str
    name_prefix: str
    access_mode: str
    principals: tuple[str, ...]
    training_sa_id: str
    buckets: Mapping[str, str]                      # purpose -> bucket name (created or existing)
    existing_data_bucket: str | None
    existing_data_bucket_access: str                # iam | acl
    staging_retention_days: int
    soft_delete_retention_days: int
    gpu_quotas: tuple[domain.GpuQuotaRequest, ...]
    quota_contact_email: str | None
    quota_justification: str | None
    max_gpu_quota: int
    hub_models: tuple[HubModel, ...]
    hub_cache_source: Path
    hub_cache_prefix: str
    labels: Mapping[str, str]
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def location(self) -> str:
        return self.region.upper()

    @property
    def created_purposes(self) -> tuple[str, ...]:
        """Bucket purposes this stack creates (an existing data bucket is only referenced)."""
        return tuple(p for p in domain.BUCKET_PURPOSES if not (p == "data" and self.existing_data_bucket))

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(p for p in self.principals if p in domain.SERVICE_AGENTS)

    @property
    def wants_training_sa(self) -> bool:
        return domain.TRAINING_SA_KEYWORD in self.principals

    @property
    def training_sa_email(self) -> str:
        return domain.training_sa_email(self.project, self.training_sa_id)

    @property
    def tfhub_cache_dir(self) -> str:
        return domain.tfhub_cache_dir(self.buckets["hub-cache"], self.hub_cache_prefix)


# --------------------------------------------------------------------------------------------
# Schema (from Pulumi.yaml)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeySpec:
    name: str
    type: str                 # string | integer | boolean | array
    default: Any = None
    has_default: bool = False
    description: str = ""


@functools.lru_cache(maxsize=None)
def _schema_from(path: str) -> dict[str, KeySpec]:
    import yaml

    with open(path, encoding="utf8") as fh:
        doc = yaml.safe_load(fh)
    out: dict[str, KeySpec] = {}
    for name, decl in (doc.get("config") or {}).items():
        if not isinstance(decl, dict):  # shorthand `key: value` = string default
            out[name] = KeySpec(name, type(decl).__name__, decl, True)
            continue
        out[name] = KeySpec(name, decl.get("type", "string"), decl.get("default"), "default" in decl,
                            decl.get("description", ""))
    return out


def schema() -> dict[str, KeySpec]:
    """Config keys declared in Pulumi.yaml (bare names), with their types and defaults."""
    return _schema_from(str(PROJECT_FILE))


# --------------------------------------------------------------------------------------------
# Reading values
# --------------------------------------------------------------------------------------------

def _bare_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Keep the ``tpuctl`` namespace (bare or ``tpuctl:``-prefixed keys); ignore ``gcp:`` and others."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if ":" in key:
            ns, _, bare = key.partition(":")
            if ns != NAMESPACE:
                continue
        else:
            bare = key
        if bare in out:
            raise ConfigError(bare, "given twice (bare and namespaced)")
        out[bare] = value
    return out


def _as_string(key: str, value: Any) -> str:
    if isinstance(value, dict) and "secure" in value:
        raise ConfigError(key, "is a secret; tpuctl does not read secrets offline (and this key needs none)")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ConfigError(key, f"must be a string, not {type(value).__name__}")
    return str(value).strip()


def _as_int(key: str, value: Any) -> int:
    if isinstance(value, dict) and "secure" in value:
        raise ConfigError(key, "is a secret; tpuctl does not read secrets offline (and this key needs none)")
    if isinstance(value, bool):
        raise ConfigError(key, f"must be a whole number, not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ConfigError(key, f"must be a whole number, not {value!r}")


def _as_list(key: str, value: Any) -> list[str]:
    """Arrays come as lists (YAML) or as JSON text (what the engine hands the program)."""
    if isinstance(value, dict) and "secure" in value:
        raise ConfigError(key, "is a secret; tpuctl does not read secrets offline (and this key needs none)")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ConfigError(key, f"must be a list, e.g. [\"a\", \"b\"]; got {value!r}") from None
    if not isinstance(value, (list, tuple)):
        raise ConfigError(key, f"must be a list, not {type(value).__name__}")
    items = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise ConfigError(key, f"items must be strings, not {item!r}")
        items.append(str(item).strip())
    return items


def _typed(spec: KeySpec, value: Any) -> Any:
    if spec.type == "integer":
        return _as_int(spec.name, value)
    if spec.type == "array":
        return _as_list(spec.name, value)
    if spec.type == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise ConfigError(spec.name, f"must be true or false, not {value!r}")
    return _as_string(spec.name, value)


def _domain(key: str, fn, *args):
    """Run a domain check and re-raise its message under the config key."""
    try:
        return fn(*args)
    except ConfigError:
        raise
    except DomainError as exc:
        raise ConfigError(key, str(exc)) from None


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------

def _labels(items: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition("=")
        k, v = k.strip(), v.strip()
        if not sep or not k:
            raise ConfigError("labels", f"label {item!r} must be key=value, e.g. team=vision")
        if k in labels:
            raise ConfigError("labels", f"label key {k!r} is given twice")
        if k == domain.PURPOSE_LABEL:
            raise ConfigError("labels", f"label key {k!r} is set by tpuctl on each bucket; choose another key")
        labels[k] = v
    _domain("labels", domain.validate_labels, labels)
    return labels


def _hub_models(handles: list[str], source: Path) -> tuple[HubModel, ...]:
    seen: dict[str, str] = {}
    models = []
    for handle in handles:
        key = _domain("hubModels", domain.hub_cache_key, handle)
        if handle in seen:
            raise ConfigError("hubModels", f"hub handle {handle!r} is listed twice")
        seen[handle] = key
    if not handles:
        return ()
    if not source.is_dir():
        raise ConfigError(
            "hubCacheSource",
            f"hub cache folder {source} does not exist; fetch the models into it first "
            "(`tpuctl hub-cache fetch HANDLE`, or `--from DIR` for a SavedModel on disk), point hubCacheSource "
            "at a folder in tensorflow_hub cache layout, or remove hubModels",
        )
    for handle, key in seen.items():
        folder = source / key
        if not (folder / "saved_model.pb").is_file():
            raise ConfigError(
                "hubModels",
                f"hub model {handle!r} is not in the cache folder: {folder}/saved_model.pb is missing "
                "(tensorflow_hub needs <cache>/<sha1(handle)>/saved_model.pb; `tpuctl hub-cache fetch HANDLE` "
                "puts it there)",
            )
        files = tuple(
            sorted((p.relative_to(folder).as_posix(), p.absolute()) for p in folder.rglob("*") if p.is_file())
        )
        models.append(HubModel(handle, key, folder, files))
    return tuple(models)


def load_config(values: Mapping[str, Any], base_dir: Path | None = None) -> InfraConfig:
    """Validate stack config ``values`` (bare or ``tpuctl:`` keys) and apply Pulumi.yaml's defaults.

    ``base_dir`` anchors relative paths (hubCacheSource); default: the project (repository) root.
    Raises ``ConfigError`` naming the key and the rule; nothing is registered before this returns.
    """
    spec = schema()
    given = _bare_values(values)
    unknown = sorted(set(given) - set(spec))
    if unknown:
        raise ConfigError(unknown[0], f"unknown config key; known keys: {', '.join(sorted(spec))}")

    v: dict[str, Any] = {}
    for name, s in spec.items():
        raw = given.get(name)
        if raw is None or (isinstance(raw, str) and not raw.strip() and s.type != "array"):
            v[name] = _typed(s, s.default) if s.has_default and s.default is not None else None
        else:
            v[name] = _typed(s, raw)

    project = v["project"]
    if not project:
        raise ConfigError("project", "is required: `pulumi config set tpuctl:project <project-id>`")
    _domain("project", domain.validate_project_id, project)
    region = v["region"]
    _domain("region", domain.validate_region, region)
    zone = v["zone"]
    _domain("zone", domain.validate_zone, zone, region)

    prefix = v["namePrefix"]
    if not prefix or not prefix[0].isalpha() or not all(c.islower() or c.isdigit() or c == "-" for c in prefix) \
            or prefix.endswith("-") or len(prefix) > 20:
        raise ConfigError(
            "namePrefix",
            f"name prefix {prefix!r} must be 1-20 lowercase letters, digits or '-', start with a letter "
            "and not end with '-'",
        )
    access_mode = v["accessMode"]
    _domain("accessMode", domain.validate_access_mode, access_mode)

    principals = v["principals"]
    for p in principals:
        if p not in domain.PRINCIPAL_KEYWORDS:
            raise ConfigError(
                "principals", f"unknown principal {p!r}; use any of {', '.join(domain.PRINCIPAL_KEYWORDS)}"
            )
    if len(set(principals)) != len(principals):
        dup = next(p for p in principals if principals.count(p) > 1)
        raise ConfigError("principals", f"principal {dup!r} is listed twice")
    sa_id = v["trainingServiceAccountId"]
    _domain("trainingServiceAccountId", domain.validate_account_id, sa_id)

    existing = v["existingDataBucket"] or None
    if existing:
        existing = _domain("existingDataBucket", domain.bucket_name_from, existing)
        if v["dataBucket"]:
            raise ConfigError("existingDataBucket", "give either dataBucket (create it) or existingDataBucket (use it), not both")
    access = v["existingDataBucketAccess"]
    if access not in EXISTING_BUCKET_ACCESS:
        raise ConfigError("existingDataBucketAccess", f"{access!r} must be one of: {', '.join(EXISTING_BUCKET_ACCESS)}")
    if access == "acl" and not existing:
        raise ConfigError(
            "existingDataBucketAccess",
            "acl applies only to an existing data bucket (set existingDataBucket); buckets tpuctl creates use "
            "uniform bucket-level access, where ACLs are rejected",
        )

    buckets: dict[str, str] = {}
    for purpose, key in BUCKET_KEYS.items():
        if purpose == "data" and existing:
            buckets[purpose] = existing
            continue
        name = v[key] or domain.default_bucket_name(prefix, project, purpose)
        buckets[purpose] = _domain(key if v[key] else "namePrefix", domain.bucket_name_from, name)
    names = list(buckets.values())
    for purpose, name in buckets.items():
        if names.count(name) > 1:
            raise ConfigError(BUCKET_KEYS[purpose] if purpose != "data" or not existing else "existingDataBucket",
                              f"bucket {name!r} is used for more than one purpose; each purpose needs its own bucket")

    staging_days = v["stagingRetentionDays"]
    if staging_days < 1:
        raise ConfigError("stagingRetentionDays", f"must be at least 1 day, not {staging_days}")
    soft_days = v["softDeleteRetentionDays"]
    if soft_days != 0 and not SOFT_DELETE_MIN_DAYS <= soft_days <= SOFT_DELETE_MAX_DAYS:
        raise ConfigError(
            "softDeleteRetentionDays",
            f"must be 0 (off) or {SOFT_DELETE_MIN_DAYS}-{SOFT_DELETE_MAX_DAYS} days (GCS limits), not {soft_days}",
        )

    quotas = []
    seen_quota: dict[tuple[str, str], str] = {}
    for entry in v["gpuQuotas"]:
        req = _domain("gpuQuotas", domain.parse_gpu_quota, entry)
        ident = (req.gpu.name, req.region)
        if ident in seen_quota:
            raise ConfigError("gpuQuotas", f"{entry!r} repeats {req.gpu.name} in {req.region} (already {seen_quota[ident]!r})")
        seen_quota[ident] = entry
        quotas.append(req)
    contact = v["quotaContactEmail"] or None
    if contact:
        member = _domain("quotaContactEmail", domain.member_for_email, contact)
        if member.startswith("serviceAccount:"):
            raise ConfigError("quotaContactEmail", f"{contact!r} is a service account; Google needs a person to contact")
    elif quotas:
        raise ConfigError("quotaContactEmail", "is required when gpuQuotas is set (Google contacts this person about the request)")
    max_quota = v["maxGpuQuota"]
    if max_quota < 1:
        raise ConfigError("maxGpuQuota", f"must be at least 1, not {max_quota}")

    prefix_hub = v["hubCachePrefix"]
    _domain("hubCachePrefix", domain.validate_hub_prefix, prefix_hub)
    base = Path(base_dir) if base_dir is not None else REPO_ROOT
    source = Path(v["hubCacheSource"]).expanduser()
    if not source.is_absolute():
        source = base / source
    hub = _hub_models(v["hubModels"], source)

    labels = _labels(v["labels"])

    return InfraConfig(
        project=project,
        region=region,
        zone=zone,
        name_prefix=prefix,
        access_mode=access_mode,
        principals=tuple(principals),
        training_sa_id=sa_id,
        buckets=buckets,
        existing_data_bucket=existing,
        existing_data_bucket_access=access,
        staging_retention_days=staging_days,
        soft_delete_retention_days=soft_days,
        gpu_quotas=tuple(quotas),
        quota_contact_email=contact,
        quota_justification=v["quotaJustification"] or None,
        max_gpu_quota=max_quota,
        hub_models=hub,
        hub_cache_source=source,
        hub_cache_prefix=prefix_hub,
        labels=labels,
        raw=dict(given),
    )


# --------------------------------------------------------------------------------------------
# Sources of values: stack files (offline) and the engine
# --------------------------------------------------------------------------------------------

def read_stack_config(stack: str | None = None, config_file: Path | None = None,
                      root: Path = REPO_ROOT) -> dict[str, Any]:
    """The ``config:`` section of ``Pulumi.<stack>.yaml`` (or ``config_file``), values as written.

    Secure values cannot be decrypted without the engine; they raise ``ConfigError`` naming the key.
    """
    import yaml

    if config_file is None:
        if not stack:
            raise DomainError("give a stack name or a stack config file")
        config_file = Path(root) / f"Pulumi.{stack}.yaml"
    path = Path(config_file)
    try:
        text = path.read_text(encoding="utf8")
    except FileNotFoundError:
        raise DomainError(
            f"stack config file {path} does not exist (create it with `pulumi stack init` or copy Pulumi.example.yaml)"
        ) from None
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise DomainError(f"stack config file {path} is not valid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(doc, dict):
        raise DomainError(f"stack config file {path} must be a YAML mapping with a 'config:' section")
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise DomainError(f"stack config file {path}: 'config:' must be a mapping of key: value")
    out: dict[str, Any] = {}
    for key, value in config.items():
        key = str(key)
        if isinstance(value, dict) and "secure" in value:
            raise ConfigError(key, f"is a secret in {path.name}; secrets can't be read offline (tpuctl needs no secret config)")
        out[key] = value
    return out


def from_pulumi_config() -> InfraConfig:
    """Config as the engine hands it to the program (defaults from Pulumi.yaml already applied).

    Relative paths are anchored at the project root (the folder of Pulumi.yaml), not at the
    engine's working directory, which is ``main`` (infra/).
    """
    import pulumi
    from pulumi.runtime.config import CONFIG, get_config_env

    cfg = pulumi.Config(NAMESPACE)
    values: dict[str, Any] = {}
    for name, s in schema().items():
        value = cfg.get_object(name) if s.type == "array" else cfg.get(name)
        if value is not None:
            values[name] = value
    # Keys the schema does not declare (typos like tpuctl:regoin) are still passed on, so
    # load_config can name them instead of silently ignoring them.
    for key, value in {**get_config_env(), **CONFIG.get()}.items():
        ns, _, bare = key.partition(":")
        if ns == NAMESPACE and bare not in values and bare not in schema():
            values[bare] = value
    return load_config(values, base_dir=REPO_ROOT)
