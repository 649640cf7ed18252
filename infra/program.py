"""Wire the components together for one validated ``InfraConfig`` and return the stack outputs."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp

from ground import domain
from ground.numbers import is_digits
from ground.outputs import OUTPUT_KEYS
from ground.settings import PROVIDER_PROJECT_KEY, StackSettings
from infra.access import AccessGrants, AccessGrantsArgs
from infra.buckets import BucketOptions, TrainingBuckets, TrainingBucketsArgs
from infra.builder import ImageBuilder, ImageBuilderArgs
from infra.cluster import training_cluster
from infra.config import ConfigError, InfraConfig
from infra.hub_cache import HubModelCache, HubModelCacheArgs, HubModelFiles
from infra.identities import ServiceIdentities, ServiceIdentitiesArgs
from infra.quota import GpuQuota, GpuQuotaArgs, resolve_quota_ids
from infra.registry import TrainerImageRepository, TrainerImageRepositoryArgs
from infra.serving import serving_endpoint


def _project_number(project: str) -> str:
    try:
        result = gcp.organizations.get_project(project_id=project)
    except Exception as exc:  # noqa: BLE001 - the provider's error text varies: not found, no permission, no credentials
        raise ConfigError("project", f"cannot read project {project!r}: {str(exc).splitlines()[0]}") from None
    number = str(result.number or "")
    if not is_digits(number):
        raise ConfigError("project", f"project {project!r} has no project number (does it exist?)")
    return number


def _check_existing_data_bucket(cfg: StackSettings) -> None:
    """The ACL route needs fine-grained access: GCS rejects ACLs on uniform buckets (HTTP 400)."""
    name = cfg.existing_data_bucket
    if not name or cfg.existing_data_bucket_access != "acl":
        return
    try:
        bucket = gcp.storage.get_bucket(name=name)
    except Exception as exc:  # noqa: BLE001 - any failure to read it is a config error naming the bucket
        raise ConfigError("existingDataBucket", f"cannot read bucket {name!r}: {str(exc).splitlines()[0]}") from None
    if bucket.uniform_bucket_level_access:
        raise ConfigError(
            "existingDataBucketAccess",
            f"bucket {name!r} uses uniform bucket-level access, which rejects ACLs; use "
            "existingDataBucketAccess: iam (bucket IAM works on every bucket)",
        )


def _check_provider_project(cfg: StackSettings) -> None:
    """The provider's default project (``gcp:project``) is the stack's project, or unset: the settings model's
    rule, applied again to what the engine hands the provider (the program config carries tpuctl keys only)."""
    provider = pulumi.Config("gcp").get("project")
    if provider:
        StackSettings.from_values({"project": cfg.project, PROVIDER_PROJECT_KEY: provider}, partial=True)


def build(infra: InfraConfig) -> dict[str, pulumi.Output | Any]:
    """Register every resource for ``infra``; returns the stack outputs keyed by ``OUTPUT_KEYS``."""
    cfg = infra.settings
    bucket_names, quotas, labels = cfg.buckets(), cfg.gpu_quota_requests(), cfg.label_map()
    # Lookups that can still reject the config run before the first resource is registered.
    _check_provider_project(cfg)
    number = _project_number(cfg.project)
    _check_existing_data_bucket(cfg)
    quota_ids = resolve_quota_ids(cfg.project, quotas) if quotas else {}

    identities = ServiceIdentities(
        "identities",
        ServiceIdentitiesArgs(
            project=cfg.project,
            project_number=number,
            apis=domain.REQUIRED_APIS,
            agents=cfg.agents,
            zone=cfg.zone,
            training_sa_id=cfg.training_sa_id if cfg.wants_training_sa else None,
        ),
    )
    storage_api = [identities.apis["storage.googleapis.com"]]
    created = {p: bucket_names[p] for p in cfg.created_purposes}
    existing = {p: bucket_names[p] for p in domain.BUCKET_PURPOSES if p not in created}
    buckets = TrainingBuckets(
        "buckets",
        TrainingBucketsArgs(
            project=cfg.project,
            location=cfg.location,
            names=created,
            staging_retention_days=cfg.staging_retention_days,
            soft_delete_retention_days=cfg.soft_delete_retention_days,
            labels=dict(labels),
            existing=existing,
            depends_on=storage_api,
            options=BucketOptions(cfg.versioned_buckets, cfg.access_log_bucket_name() or "",
                                  cfg.access_log_retention_days),
        ),
    )
    access = AccessGrants(
        "access",
        AccessGrantsArgs(
            project=cfg.project,
            access_mode=cfg.access_mode,
            emails=identities.emails,
            members=identities.members,
            bucket_names=dict(bucket_names),
            bucket_refs=buckets.names,
            existing=tuple(existing),
            acl=("data",) if cfg.existing_data_bucket and cfg.existing_data_bucket_access == "acl" else (),
            ready=identities.ready,
        ),
    )
    if quotas:
        GpuQuota(
            "gpu-quota",
            GpuQuotaArgs(
                project=cfg.project,
                requests=quotas,
                quota_ids=quota_ids,
                contact_email=cfg.quota_contact_email or "",
                justification=cfg.quota_justification or None,
                depends_on=[identities.apis["cloudquotas.googleapis.com"]],
            ),
        )
    images = TrainerImageRepository(
        "trainer-images",
        TrainerImageRepositoryArgs(
            project=cfg.project,
            region=cfg.region,
            repository_id=cfg.trainer_image_repository,
            labels=dict(labels),
            members=identities.members,
            depends_on=[identities.apis["artifactregistry.googleapis.com"]],
            ready=identities.ready,
        ),
    )
    builder = ImageBuilder(
        "image-builder",
        ImageBuilderArgs(
            project=cfg.project,
            region=cfg.region,
            account_id=cfg.image_builder_sa_id,
            repository=images.repository_id,
            staging_bucket=buckets.names["staging"],
            staging_bucket_name=bucket_names["staging"],
            depends_on=[identities.apis[a] for a in ("iam.googleapis.com",) if a in identities.apis],
        ),
    )
    endpoint = serving_endpoint(
        project=cfg.project, region=cfg.region, display_name=cfg.serving_endpoint, labels=dict(labels),
        depends_on=[identities.apis["aiplatform.googleapis.com"]],
    ) if cfg.serving_endpoint else None
    if cfg.training_cluster:
        training_cluster(project=cfg.project, region=cfg.region, spec=cfg.training_cluster, labels=dict(labels),
                         depends_on=[identities.apis["aiplatform.googleapis.com"]])
    if infra.hub_models:
        HubModelCache(
            "hub-cache",
            HubModelCacheArgs(
                bucket=buckets.names["hub-cache"],
                prefix=cfg.hub_cache_prefix,
                models=[HubModelFiles(m.handle, m.files) for m in infra.hub_models],
            ),
        )

    outputs: dict[str, Any] = {
        "project": cfg.project,
        "project_number": number,
        "region": cfg.region,
        "zone": cfg.zone,
        "tpu_zone": cfg.tpu_zone or cfg.zone,
        "access_mode": cfg.access_mode,
        "buckets": dict(buckets.names),
        "bucket_urls": dict(buckets.urls),
        "principals": dict(identities.emails),
        "training_service_account": identities.training_sa.email if identities.training_sa else None,
        "image_builder_service_account": builder.email,
        "tfhub_cache_dir": buckets.names["hub-cache"].apply(lambda b: domain.tfhub_cache_dir(b, cfg.hub_cache_prefix)),
        "hub_cache_prefix": cfg.hub_cache_prefix,
        "hub_models": [m.handle for m in infra.hub_models],
        "access_map": {**access.access_map, **builder.access_map},
        "labels": dict(labels),
        "trainer_image_repository": cfg.trainer_image_repository,
        "trainer_image_url": images.url,
        "serving_endpoint": endpoint,
    }
    assert tuple(outputs) == OUTPUT_KEYS, "stack outputs drifted from OUTPUT_KEYS"
    return outputs
