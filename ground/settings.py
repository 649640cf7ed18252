"""One settings model for a stack: every ``tpuctl:<key>`` with its type, default, range and rule.

The Pulumi program (``infra.config``), the policy pack (``policy.settings``: its settings and the config
schema it declares to the engine) and ``tpuctl plan`` all read a stack through ``StackSettings``.
``Pulumi.yaml`` stays the documented schema the engine enforces; ``tests/ops/infra/test_project_files.py``
keeps the two in step (the same keys, types, defaults and descriptions).

Two spellings of the same values are accepted:
- stack input (``Pulumi.<stack>.yaml`` read offline, or what the engine hands the program): integers may be
  text (``"7"``), arrays may be JSON text (``'["a", "b"]'``), empty text means "not set";
- strict input (``context={"strict": True}``: a policy config object): values must have their JSON type;
  whole-number floats are accepted for integers because the engine sends numbers as doubles.

Every failure is one ``ConfigError`` whose message starts with the key (``tpuctl:region: …``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from ground import domain
from ground.errors import ConfigError, DomainError
from ground.settings_values import (
    SOFT_DELETE_MAX_DAYS,
    Int,
    List,
    Str,
    as_string,
    check_bucket,
    check_contact,
    check_hub_handles,
    check_labels,
    check_name_prefix,
    check_principals,
    check_soft_delete,
    checked,
    label_map,
    unique_quotas,
)

NAMESPACE = "tpuctl"
#: Config key of the name override for each bucket purpose.
BUCKET_KEYS: dict[str, str] = {
    "data": "dataBucket",
    "staging": "stagingBucket",
    "artifacts": "artifactsBucket",
    "hub-cache": "hubCacheBucket",
}
EXISTING_BUCKET_ACCESS: tuple[str, ...] = ("iam", "acl")
#: Our own sanity bounds (not Google's): a staging lifecycle of up to ten years, a quota cap of up to 1000.
STAGING_MAX_DAYS = 3650
MAX_GPU_QUOTA_CAP = 1000


def _key(alias: str, default: Any, description: str, **bounds: int) -> Any:
    """A config key: its camelCase name, default and description; ``ge``/``le`` bounds are written here once
    (they validate, and the JSON schema the policy pack declares carries them as minimum/maximum)."""
    return Field(default, alias=alias, description=description, **bounds)


class StackSettings(BaseModel):
    """A stack's ``tpuctl:`` config, validated. Field order is the order rules are checked and reported."""
    # By field name too, so code and tests can write ``StackSettings(access_mode="project")``; stack input goes
    # through ``from_values``, which accepts the camelCase keys only.
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    project: Annotated[Str, checked(domain.validate_project_id)] = _key(
        "project", "", "Google Cloud project id that owns the buckets, identities and quota preferences "
                       "(default: gcp:project; when both are set they must match).")
    region: Annotated[Str, checked(domain.validate_region)] = _key(
        "region", domain.DEFAULT_REGION, "Region of the buckets and of the training jobs.")
    zone: Str = _key("zone", domain.DEFAULT_ZONE, "Zone for TPU VMs; must lie in `region`.")
    tpu_zone: Annotated[Str, checked(domain.validate_tpu_vm_zone)] = _key(
        "tpuZone", "",
        "Zone of the TPU VM slices (`tpuctl train --target tpu-vm`, `tpuctl tpu`) when they live outside `zone`, "
        "e.g. us-west4-a for v5e or us-central2-b for v4; any region (data read across regions is billed as "
        "egress). Empty: `zone`.")
    name_prefix: Annotated[Str, AfterValidator(check_name_prefix)] = _key(
        "namePrefix", "tpuctl", "Prefix of default bucket names (<prefix>-<project>-<purpose>).")
    access_mode: Annotated[Literal[domain.ACCESS_MODES], BeforeValidator(as_string)] = _key(
        "accessMode", domain.DEFAULT_ACCESS_MODE,
        "bucket (least privilege per bucket) or project (the classic project-wide roles: viewer + storage.admin).")
    principals: Annotated[List, AfterValidator(check_principals)] = _key(
        "principals", domain.PRINCIPAL_KEYWORDS, "Principals to grant; leave a keyword out to switch it off.")
    training_sa_id: Annotated[Str, checked(domain.validate_account_id)] = _key(
        "trainingServiceAccountId", domain.DEFAULT_TRAINING_SA_ID,
        "Account id of the dedicated training service account (principal training-sa).")
    image_builder_sa_id: Annotated[Str, checked(domain.validate_account_id)] = _key(
        "imageBuilderServiceAccountId", domain.DEFAULT_IMAGE_BUILDER_SA_ID,
        "Account id of the service account Cloud Build runs `tpuctl image build` as (pushes to the trainer image "
        "repository, writes build logs, reads the build context in the staging bucket; no training bucket).")
    data_bucket: Annotated[Str, AfterValidator(check_bucket)] = _key(
        "dataBucket", "", "Name of the data bucket to create (default <prefix>-<project>-data).")
    staging_bucket: Annotated[Str, AfterValidator(check_bucket)] = _key(
        "stagingBucket", "", "Name of the staging bucket (default <prefix>-<project>-staging).")
    artifacts_bucket: Annotated[Str, AfterValidator(check_bucket)] = _key(
        "artifactsBucket", "", "Name of the artifacts bucket (default <prefix>-<project>-artifacts).")
    hub_cache_bucket: Annotated[Str, AfterValidator(check_bucket)] = _key(
        "hubCacheBucket", "", "Name of the TF-Hub cache bucket (default <prefix>-<project>-hub-cache).")
    existing_data_bucket: Annotated[Str, AfterValidator(check_bucket)] = _key(
        "existingDataBucket", "", "Use this existing bucket as the data bucket instead of creating one.")
    existing_data_bucket_access: Annotated[Literal[EXISTING_BUCKET_ACCESS], BeforeValidator(as_string)] = _key(
        "existingDataBucketAccess", "iam",
        "How the existing data bucket is shared: iam (bucket IAM members) or acl (READER ACLs, fine-grained "
        "buckets only).")
    staging_retention_days: Int = _key(
        "stagingRetentionDays", 7, "Objects in the staging bucket are deleted after this many days.",
        ge=1, le=STAGING_MAX_DAYS)
    soft_delete_retention_days: Annotated[Int, AfterValidator(check_soft_delete)] = _key(
        "softDeleteRetentionDays", 7, "Soft-delete retention of created buckets in days (0 = off, else 7-90).",
        ge=0, le=SOFT_DELETE_MAX_DAYS)
    gpu_quotas: Annotated[List, AfterValidator(unique_quotas(domain.parse_gpu_quota))] = _key(
        "gpuQuotas", (), "GPU quota preferences, each GPU_TYPE:REGION:COUNT or GPU_TYPE:REGION:COUNT:spot "
                         "(e.g. nvidia-tesla-t4:us-central1:4); quotaService says whose quota.")
    quota_contact_email: Annotated[Str, AfterValidator(check_contact)] = _key(
        "quotaContactEmail", "", "Contact e-mail for quota requests (required when gpuQuotas, tpuQuotas or "
                                 "tpuVmQuotas is not empty).")
    quota_justification: Str = _key(
        "quotaJustification", "TensorFlow model training on Vertex AI (tpuctl)",
        "Justification sent with GPU quota requests.")
    max_gpu_quota: Int = _key(
        "maxGpuQuota", domain.DEFAULT_MAX_GPU_QUOTA,
        "Largest GPU count a single quota preference may ask for (enforced by the tpuctl policy pack).",
        ge=1, le=MAX_GPU_QUOTA_CAP)
    hub_models: Annotated[List, AfterValidator(check_hub_handles)] = _key(
        "hubModels", (), "TF-Hub / Kaggle model handles to upload into the hub cache bucket.")
    hub_cache_source: Str = _key(
        "hubCacheSource", ".tpuctl-cache/hub",
        "Local folder in tensorflow_hub cache layout (<dir>/<sha1(handle)>/saved_model.pb), relative to the project.")
    hub_cache_prefix: Annotated[Str, checked(domain.validate_hub_prefix, skip_empty=False)] = _key(
        "hubCachePrefix", domain.DEFAULT_HUB_CACHE_PREFIX, "Folder in the hub cache bucket that TFHUB_CACHE_DIR points at.")
    labels: Annotated[List, AfterValidator(check_labels)] = _key(
        "labels", ("managed-by=tpuctl",), "Labels (key=value) put on every created bucket.")
    quota_service: Annotated[Literal[tuple(domain.QUOTA_SERVICES)], BeforeValidator(as_string)] = _key(
        "quotaService", domain.DEFAULT_QUOTA_SERVICE,
        "Whose GPU quota gpuQuotas asks for: vertex (Vertex AI custom training, aiplatform.googleapis.com) or "
        "compute (Compute Engine: your own VMs/GKE, compute.googleapis.com).")
    tpu_quotas: Annotated[List, AfterValidator(unique_quotas(domain.parse_tpu_quota))] = _key(
        "tpuQuotas", (), "Vertex AI custom-training TPU quota preferences, each TPU_VERSION:REGION:CORES "
                         "(e.g. v5e:us-central1:8).")
    tpu_vm_quotas: Annotated[List, AfterValidator(unique_quotas(domain.parse_tpu_vm_quota))] = _key(
        "tpuVmQuotas", (), "Cloud TPU (TPU VM) per-zone quota preferences, each GENERATION:ZONE:COUNT or "
                           "GENERATION:ZONE:COUNT:spot (e.g. v5e:us-west4-a:16:spot); COUNT in chips for v5e/v6e, "
                           "TensorCores for v5p/v4.")
    access_log_retention_days: Int = _key(
        "accessLogRetentionDays", 0,
        "Usage and storage logs of every created bucket go to an access-log bucket and are deleted after this many "
        "days (0 = no access logs).", ge=0, le=STAGING_MAX_DAYS)
    access_log_bucket: Annotated[Str, AfterValidator(check_bucket)] = _key(
        "accessLogBucket", "", "Name of the access-log bucket (default <prefix>-<project>-access-logs).")
    versioned_buckets: Annotated[List, AfterValidator(lambda v: _versioned_buckets(v))] = _key(
        "versionedBuckets", ("data", "artifacts"),
        "Buckets that keep old object versions (artifacts always; staging and hub-cache hold rebuildable files).")
    trainer_image_repository: Annotated[Str, checked(domain.validate_repository_id)] = _key(
        "trainerImageRepository", "tpuctl-trainer",
        "Artifact Registry Docker repository (in `region`) for the trainer image that Vertex jobs run.")
    serving_endpoint: Annotated[Str, checked(lambda v: domain.check_display_name(v, "servingEndpoint"))] = _key(
        "servingEndpoint", "",
        "Display name of a Vertex AI Endpoint the stack owns in `region`; `tpuctl deploy` deploys to it "
        "(empty: no endpoint; deploy finds or creates its own).")

    training_cluster: Annotated[Str, checked(domain.parse_training_cluster)] = _key(
        "trainingCluster", "",
        "A Vertex AI persistent resource the stack owns in `region`, NAME:ACCELERATOR[:REPLICAS] (e.g. "
        "team-t4:gpu-t4x2:2; CPU or GPU machines): jobs run on it with `tpuctl train --target vertex --cluster NAME`; "
        "billed while it exists (empty: none).")

    @model_validator(mode="after")
    def _across_keys(self, info: ValidationInfo) -> StackSettings:
        if info.context and info.context.get("partial"):
            return self      # a policy's own subset of keys: the rules across keys belong to the whole stack
        if self.zone:
            try:
                domain.validate_zone(self.zone, self.region)
            except DomainError as exc:
                raise ConfigError("zone", str(exc)) from None
        if self.existing_data_bucket and self.data_bucket:
            raise ConfigError("existingDataBucket", "give either dataBucket (create it) or existingDataBucket (use it), "
                                                    "not both")
        if self.existing_data_bucket_access == "acl" and not self.existing_data_bucket:
            raise ConfigError(
                "existingDataBucketAccess",
                "acl applies only to an existing data bucket (set existingDataBucket); buckets tpuctl creates use "
                "uniform bucket-level access, where ACLs are rejected",
            )
        if (self.gpu_quotas or self.tpu_quotas or self.tpu_vm_quotas) and not self.quota_contact_email:
            raise ConfigError("quotaContactEmail", "is required when gpuQuotas, tpuQuotas or tpuVmQuotas is set "
                                                   "(Google contacts this person about the request)")
        if self.project:
            names = self.buckets()
            log_bucket = self.access_log_bucket_name()
            if log_bucket and log_bucket in names.values():
                raise ConfigError("accessLogBucket", f"bucket {log_bucket!r} is also a training bucket; access logs "
                                                     "need a bucket of their own")
        return self

    # ----------------------------------------------------------------------------------------
    # Derived values
    # ----------------------------------------------------------------------------------------

    @property
    def location(self) -> str:
        """The buckets' location (the region, upper-case as GCS reports it)."""
        return self.region.upper()

    @property
    def created_purposes(self) -> tuple[str, ...]:
        """Bucket purposes this stack creates (an existing data bucket is only referenced)."""
        return tuple(p for p in domain.BUCKET_PURPOSES if not (p == "data" and self.existing_data_bucket))

    @property
    def agents(self) -> tuple[str, ...]:
        """The Google service agents among the principals."""
        return tuple(p for p in self.principals if p in domain.SERVICE_AGENTS)

    @property
    def wants_training_sa(self) -> bool:
        return domain.TRAINING_SA_KEYWORD in self.principals

    def access_log_bucket_name(self) -> str | None:
        """The access-log bucket (None while accessLogRetentionDays is 0: no access logs)."""
        if not self.access_log_retention_days:
            return None
        name = self.access_log_bucket or domain.default_bucket_name(self.name_prefix, self.project,
                                                                    domain.ACCESS_LOG_PURPOSE)
        try:
            return domain.bucket_name_from(name)
        except DomainError as exc:
            raise ConfigError("accessLogBucket" if self.access_log_bucket else "namePrefix", str(exc)) from None

    def buckets(self) -> dict[str, str]:
        """purpose -> bucket name (created or existing); every name valid and used for one purpose only."""
        if not self.project:
            raise ConfigError("project", "is required: `pulumi config set tpuctl:project <project-id>`")
        out: dict[str, str] = {}
        for purpose, key in BUCKET_KEYS.items():
            if purpose == "data" and self.existing_data_bucket:
                out[purpose] = self.existing_data_bucket
                continue
            override = getattr(self, _KEYS[key])
            name = override or domain.default_bucket_name(self.name_prefix, self.project, purpose)
            try:
                out[purpose] = domain.bucket_name_from(name)
            except DomainError as exc:
                raise ConfigError(key if override else "namePrefix", str(exc)) from None
        names = list(out.values())
        for purpose, name in out.items():
            if names.count(name) > 1:
                key = "existingDataBucket" if purpose == "data" and self.existing_data_bucket else BUCKET_KEYS[purpose]
                raise ConfigError(key, f"bucket {name!r} is used for more than one purpose; each purpose needs its "
                                       "own bucket")
        return out

    def gpu_quota_requests(self) -> tuple[domain.QuotaRequest, ...]:
        """Every accelerator quota the stack asks for: gpuQuotas (the quotaService's metric), tpuQuotas
        (Vertex AI's TPU metrics), then tpuVmQuotas (the Cloud TPU API's per-zone quota ids)."""
        return (tuple(domain.parse_gpu_quota(entry, self.quota_service) for entry in self.gpu_quotas)
                + tuple(domain.parse_tpu_quota(entry) for entry in self.tpu_quotas)
                + tuple(domain.parse_tpu_vm_quota(entry) for entry in self.tpu_vm_quotas))


    def label_map(self) -> dict[str, str]:
        return label_map(self.labels)

    # ----------------------------------------------------------------------------------------
    # Reading
    # ----------------------------------------------------------------------------------------

    @classmethod
    def keys(cls) -> dict[str, str]:
        """Config key (camelCase, as in Pulumi.yaml) -> field name."""
        return dict(_KEYS)

    @classmethod
    def from_values(cls, values: Mapping[str, Any], *, strict: bool = False,
                    partial: bool = False) -> StackSettings:
        """Validate bare or ``tpuctl:``-prefixed keys; raise ``ConfigError``.

        Of the other namespaces only ``gcp:project`` (the provider's default project) is read: it is
        validated, ``tpuctl:project`` defaults to it, and when both are set they must be the same project
        (resources would otherwise land in one project and be named and granted after another).

        ``partial``: ``values`` are a subset of a stack (one policy's config): no key is required and the
        rules that relate several keys are not checked.
        """
        given = bare_values(values)
        unknown = sorted(set(given) - set(_KEYS))
        if unknown:
            raise ConfigError(unknown[0], f"unknown config key; known keys: {', '.join(sorted(_KEYS))}")
        if not strict:   # empty text = not set (array keys: an empty list)
            given = {k: v for k, v in given.items()
                     if v is not None and not (isinstance(v, str) and not v.strip() and k not in ARRAY_KEYS)}
        provider_project = _provider_project(values)
        if provider_project is not None:
            mine = given.get("project")
            if isinstance(mine, str) and mine.strip() and mine.strip() != provider_project:
                raise ConfigError("project", f"{mine.strip()!r} differs from gcp:project {provider_project!r}: the "
                                             "provider would create resources in one project while tpuctl names and "
                                             "grants them after the other; set both to the same project id (or "
                                             "leave tpuctl:project out: it defaults to gcp:project)")
            given.setdefault("project", provider_project)
        if not partial and not given.get("project"):
            raise ConfigError("project", "is required: `pulumi config set tpuctl:project <project-id>` "
                                         "(or gcp:project)")
        try:
            return cls.model_validate(given, context={"strict": strict, "partial": partial})
        except ValidationError as exc:
            raise _config_error(exc) from None

    @classmethod
    def json_schema_for(cls, keys: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """JSON schema properties (type, default, description, enum/range) of these config keys."""
        props = cls.model_json_schema(by_alias=True)["properties"]
        out = {}
        for key in keys:
            spec = props[key]
            prop = {"type": spec.get("type", "string"), "default": _jsonable(spec.get("default"))}
            for extra in ("enum", "minimum", "maximum", "description"):
                if extra in spec:
                    prop[extra] = spec[extra]
            out[key] = prop
        return out


_KEYS: dict[str, str] = {f.alias: name for name, f in StackSettings.model_fields.items()}
#: Keys whose values are arrays (Pulumi config type ``array``); the rest are strings or integers.
ARRAY_KEYS = frozenset(alias for alias, name in _KEYS.items()
                       if StackSettings.model_fields[name].annotation is not None
                       and "tuple" in str(StackSettings.model_fields[name].annotation))
INTEGER_KEYS = frozenset(alias for alias, name in _KEYS.items() if StackSettings.model_fields[name].annotation is int)
#: Keys with a fixed set of values (a ``Literal``): config key -> the values, in the order the model declares them.
CHOICES: dict[str, tuple[str, ...]] = {
    alias: get_args(StackSettings.model_fields[name].annotation) for alias, name in _KEYS.items()
    if get_origin(StackSettings.model_fields[name].annotation) is Literal}


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


PROVIDER_PROJECT_KEY = "gcp:project"


def _provider_project(values: Mapping[str, Any]) -> str | None:
    """``gcp:project`` validated (None when not set or empty); raises ``ConfigError`` on a bad value."""
    value = values.get(PROVIDER_PROJECT_KEY)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ConfigError(PROVIDER_PROJECT_KEY, f"must be a string, not {type(value).__name__}")
    project = str(value).strip()
    try:
        domain.validate_project_id(project)
    except DomainError as exc:
        raise ConfigError(PROVIDER_PROJECT_KEY, str(exc)) from None
    return project


def bare_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Keep the ``tpuctl`` namespace (bare or ``tpuctl:``-prefixed keys); ignore ``gcp:`` and others."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        key = str(key)
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


def _config_error(exc: ValidationError) -> ConfigError:
    """The first failure, in field order, as ``tpuctl:<key>: <message>``."""
    error = exc.errors(include_url=False)[0]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):
        return cause
    loc = error.get("loc") or ()
    key = str(loc[0]) if loc else "config"
    ctx, given = error.get("ctx") or {}, error.get("input")
    if cause is not None:
        message = str(cause)
    elif error["type"] == "greater_than_equal":
        message = f"must be at least {ctx['ge']}, not {given}"
    elif error["type"] == "less_than_equal":
        message = f"must be at most {ctx['le']}, not {given}"
    elif error["type"] == "literal_error" and key in CHOICES:
        message = f"{given!r} must be one of: {', '.join(CHOICES[key])}"
    else:
        message = error.get("msg", "is invalid")
    return ConfigError(key, message)


def _versioned_buckets(purposes: tuple[str, ...]) -> tuple[str, ...]:
    """versionedBuckets: bucket purposes, each once, always including artifacts (models are the costly output)."""
    for i, purpose in enumerate(purposes):
        if purpose not in domain.BUCKET_PURPOSES:
            raise ValueError(f"unknown bucket purpose {purpose!r}; use any of {', '.join(domain.BUCKET_PURPOSES)}")
        if purpose in purposes[:i]:
            raise ValueError(f"bucket purpose {purpose!r} is listed twice")
    if "artifacts" not in purposes:
        raise ValueError("must include artifacts: trained models and checkpoints are always versioned")
    return purposes
