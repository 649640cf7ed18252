"""The program's view of a stack: the shared settings model (``tpuctl.ground.settings``) plus the hub
models' local files, as a typed, frozen ``InfraConfig`` that components receive.

Every rule is checked before the first resource is registered, and a broken rule raises ``ConfigError``
whose message starts with the config key (``tpuctl:region: …``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tpuctl.ground import domain
from tpuctl.ground.envs import REPO_ROOT
from tpuctl.ground.errors import ConfigError, UserError
from tpuctl.ground.localtree import scan_tree
from tpuctl.ground.settings import ARRAY_KEYS, NAMESPACE, PROVIDER_PROJECT_KEY, StackSettings, bare_values


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
    versioned_buckets: tuple[str, ...] = ("data", "artifacts")   # purposes that keep object versions
    access_log_bucket: str | None = None                         # None: no access logs
    access_log_retention_days: int = 0
    trainer_image_repository: str = "tpuctl-trainer"         # Artifact Registry Docker repository id
    serving_endpoint: str | None = None                      # display name of the stack's Vertex AI Endpoint
    tpu_zone: str | None = None                              # TPU VM zone when not `zone`
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


def _hub_models(handles: tuple[str, ...], source: Path) -> tuple[HubModel, ...]:
    """The local files of each handle (the settings model has checked the handles themselves)."""
    if not handles:
        return ()
    seen = {handle: domain.hub_cache_key(handle) for handle in handles}
    models = []
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
        try:   # the same walk as `tpuctl hub-cache add`: nothing from outside the folder is uploaded
            tree = scan_tree(folder, f"hub model folder {folder}")
        except UserError as exc:
            raise ConfigError("hubModels", str(exc)) from None
        files = tuple((f.rel, f.path.absolute()) for f in tree)
        models.append(HubModel(handle, key, folder, files))
    return tuple(models)


def load_config(values: Mapping[str, Any], base_dir: Path | None = None) -> InfraConfig:
    """Validate stack config ``values`` (bare or ``tpuctl:`` keys) through the settings model, then find
    the hub models' files.

    ``base_dir`` anchors relative paths (hubCacheSource); default: the project (repository) root.
    Raises ``ConfigError`` naming the key and the rule; nothing is registered before this returns.
    """
    s = StackSettings.from_values(values)
    base = Path(base_dir) if base_dir is not None else REPO_ROOT
    source = Path(s.hub_cache_source).expanduser()
    if not source.is_absolute():
        source = base / source
    return InfraConfig(
        project=s.project,
        region=s.region,
        zone=s.zone,
        name_prefix=s.name_prefix,
        access_mode=s.access_mode,
        principals=s.principals,
        training_sa_id=s.training_sa_id,
        buckets=s.buckets(),
        existing_data_bucket=s.existing_data_bucket or None,
        existing_data_bucket_access=s.existing_data_bucket_access,
        staging_retention_days=s.staging_retention_days,
        soft_delete_retention_days=s.soft_delete_retention_days,
        gpu_quotas=s.gpu_quota_requests(),
        quota_contact_email=s.quota_contact_email or None,
        quota_justification=s.quota_justification or None,
        max_gpu_quota=s.max_gpu_quota,
        hub_models=_hub_models(s.hub_models, source),
        hub_cache_source=source,
        hub_cache_prefix=s.hub_cache_prefix,
        labels=s.label_map(),
        versioned_buckets=tuple(s.versioned_buckets),
        access_log_bucket=s.access_log_bucket_name(),
        access_log_retention_days=s.access_log_retention_days,
        trainer_image_repository=s.trainer_image_repository,
        serving_endpoint=s.serving_endpoint or None,
        tpu_zone=s.tpu_zone or None,
        raw=bare_values(values),
    )


# --------------------------------------------------------------------------------------------
# Values as the engine hands them
# --------------------------------------------------------------------------------------------

def from_pulumi_config() -> InfraConfig:
    """Config as the engine hands it to the program (defaults from Pulumi.yaml already applied).

    Relative paths are anchored at the project root (the folder of Pulumi.yaml), not at the
    engine's working directory, which is ``main`` (infra/).
    """
    import pulumi
    from pulumi.runtime.config import CONFIG, get_config_env

    cfg = pulumi.Config(NAMESPACE)
    known = StackSettings.keys()
    values: dict[str, Any] = {}
    for name in known:
        value = cfg.get_object(name) if name in ARRAY_KEYS else cfg.get(name)
        if value is not None:
            values[name] = value
    # Keys the model does not declare (typos like tpuctl:regoin) are still passed on, so
    # load_config can name them instead of silently ignoring them.
    for key, value in {**get_config_env(), **CONFIG.get()}.items():
        ns, _, bare = key.partition(":")
        if ns == NAMESPACE and bare not in values and bare not in known:
            values[bare] = value
    # The provider's project: tpuctl:project defaults to it, and the two must agree when both are set.
    provider_project = pulumi.Config("gcp").get("project")
    if provider_project is not None:
        values[PROVIDER_PROJECT_KEY] = provider_project
    return load_config(values, base_dir=REPO_ROOT)
