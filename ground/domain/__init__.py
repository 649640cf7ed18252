"""The catalogue of Google Cloud facts, split by concern; this package exports the facts the layers above use.

Pure Python on purpose: no pulumi, no google-cloud client, no TensorFlow, nothing of tpuctl above
the ground layer. Every function returns a value or raises ``DomainError`` with a one-line message
that says what to fix. Import ``from ground import domain`` and ask ``domain.<fact>``; code
that needs one concern only may import its module (``ground.domain.hub``).

The exports are written out (no star import): a fact used outside its module is listed here once, under the
module that defines it (``EXPORTS``); everything else stays the module's own. A module is imported when one of
its facts is first asked for, so ``tpuctl --help`` does not load the whole catalogue.
"""

from __future__ import annotations

import importlib
from typing import Any

from ground.errors import DomainError

#: Each module's facts used outside it (the package's exports).
EXPORTS: dict[str, tuple[str, ...]] = {
    "accelerators": ("GPU_TYPES", "MIN_VCPUS_PER_GPU", "VERTEX_API_HOST", "VERTEX_CUSTOM_JOB_CONSOLE_URL",
        "VERTEX_JOB_LOG_RESOURCE", "vertex_task_name", "Accelerator", "check_accelerator_region",
        "check_end_of_support", "parse_accelerator", "tpu_vm_accelerator", "vertex_accelerator"),
    "capacity": ("ANY_RESERVATION", "AUTOCHECKPOINT_GENERATIONS", "FLEX_MAX_RUN_DAYS", "PROVISIONING", "TPU_FLEX_PROVISIONING_MODEL",
        "TPU_FLEX_ZONES", "UNVERIFIED_CAPACITY_FACTS", "VERTEX_FLEX_DEFAULT_WAIT_HOURS", "VERTEX_FLEX_GPUS", "VERTEX_RESERVATION_KEY",
        "VERTEX_STRATEGY", "Provisioning", "Reservation", "check_reservation", "CLUSTER_ID", "MAX_CLUSTER_REPLICAS",
        "parse_training_cluster"),
    "apis": ("BOOTSTRAP_APIS", "REQUIRED_APIS"),
    "credentials": ("GCLOUD_CREDENTIAL_FILES", "GCLOUD_CREDENTIAL_FOLDERS", "GCLOUD_TOKEN_TABLES", "PRIVATE_KEY_FIELD",
        "SERVICE_ACCOUNT_TYPE", "STORAGE_LIST_FIELDS", "STORAGE_NUMBER_FIELDS", "STORAGE_TEXT_FIELDS",
        "USER_CREDENTIAL_FIELDS"),
    "frameworks": ("FRAMEWORKS", "IMAGE_VARIANTS", "JAX_TPU_REQUIREMENTS", "UNVERIFIED_FRAMEWORK_FACTS", "ImageVariant",
        "Source", "Support", "backend_support", "check_backend", "default_backend", "image_variant"),
    "hub": ("DEFAULT_HUB_CACHE_PREFIX", "HUB_MANIFEST", "HUB_STAGING", "HubLayout", "hub_cache_key",
        "hub_descriptor", "hub_descriptor_name", "hub_folder", "hub_folder_problem", "hub_layout", "hub_manifest",
        "hub_manifest_name", "hub_object_name", "hub_staging_prefix", "is_hub_cache_key", "parse_hub_manifest",
        "tfhub_cache_dir", "validate_hub_prefix"),
    "names": ("DEFAULT_REGION", "DEFAULT_ZONE", "availability_warning", "bucket_name_from", "default_bucket_name", "split_gs_uri",
        "validate_account_id", "validate_bucket_name", "validate_labels", "validate_project_id", "validate_region",
        "validate_repository_id", "validate_zone"),
    "prediction": ("BATCH_INSTANCES_FORMAT", "BATCH_PREDICTIONS_FORMAT", "BATCHING_FILE_NAME",
        "DEFAULT_PREDICTION_MACHINE", "BATCH_IMAGE_SUFFIXES", "MAX_BATCH_FILES", "SERVING_ENDPOINT_PURPOSE",
        "SERVING_INPUT", "SERVING_SIGNATURE", "TF_SERVING_BATCHING_FILE", "TF_SERVING_GRPC_PORT", "TF_SERVING_IMAGE",
        "TF_SERVING_MODEL_BASE", "TF_SERVING_REST_PORT", "TF_SERVING_VERSION", "VERTEX_PREDICTION_IMAGES",
        "BatchingParameters", "tf_serving_container", "tf_serving_copy_commands", "tf_serving_image_uri",
        "check_display_name", "check_endpoint_name", "check_machine_type", "check_model_name",
        "check_prediction_image", "check_replicas", "model_status_path", "model_version", "parse_endpoint_name",
        "parse_model_name", "predict_path", "serving_endpoint_id", "serving_endpoint_name"),
    "prices": ("ACCELERATOR_HOST_SHAPES_SOURCE", "CATALOG_SERVICES", "CATALOG_SERVICE_IDS", "REFRESH_COMMAND", "SNAPSHOT_FILE", "SPOT_VOLATILE",
        "VERTEX_HOST_SHAPES", "SkuRecord", "SkuWant", "Snapshot", "load_snapshot", "match_sku", "tpu_unit_chips",
        "tpu_vm_want", "vertex_gpu_want", "vertex_host_wants", "vertex_tpu_want", "wanted", "price_problem",
        "MAX_UNIT_USD"),
    "principals": ("DEFAULT_TRAINING_SA_ID", "PRINCIPAL_KEYWORDS", "SERVICE_AGENTS", "TRAINING_SA_KEYWORD",
        "AgentKind", "agent_email", "classify_principal", "member_for_email", "service_account_email",
        "training_sa_email"),
    "quotas": ("DEFAULT_MAX_GPU_QUOTA", "DEFAULT_QUOTA_SERVICE", "QUOTA_SERVICE", "QUOTA_SERVICES",
        "TPU_VM_QUOTA_SERVICE", "TPU_VM_QUOTAS", "UNVERIFIED_QUOTA_FACTS", "VERTEX_TPU_QUOTA", "QuotaRequest",
        "gpu_quota_metric", "job_quota_need", "parse_gpu_quota", "parse_tpu_quota", "parse_tpu_vm_quota",
        "regional_quota_id", "tpu_vm_quota_need", "unverified_metric_fact", "zonal_quota_id"),
    "storage_iam": ("ACCESS_LOG_PURPOSE", "ACCESS_MODES", "ACL_EQUIVALENT_ROLES", "BASIC_ROLE_CONVENIENCE_MEMBERS",
        "BUCKET_PURPOSES", "BUCKET_READ_ROLES", "BUCKET_WRITE_ROLES", "DEFAULT_ACCESS_MODE",
        "DEFAULT_CONVENIENCE_BINDINGS", "DEFAULT_IMAGE_BUILDER_SA_ID", "FORBIDDEN_ROLES", "IMAGE_BUILDER",
        "IMAGE_BUILDER_ROLES", "IMAGE_PULLERS", "IMPERSONATION_ROLES", "LOG_WRITE_PERMISSION", "PUSH_PERMISSION",
        "LEGACY_BUCKET_ROLES", "PROJECT_MODE_ONLY_ROLES", "PROJECT_MODE_ROLES", "PUBLIC_MEMBERS", "PULL_PERMISSION",
        "PURPOSE_LABEL", "READ_BUCKETS", "REQUIRED_READ_PERMISSIONS", "REQUIRED_WRITE_PERMISSIONS",
        "TRAINER_IMAGES_PURPOSE", "TRAINING_SA_PROJECT_ROLES", "WRITE_BUCKETS", "access_summary",
        "convenience_member_type", "is_custom_role",
        "is_predefined_role", "required_permissions", "roles_for", "storage_permissions", "validate_access_mode",
        "validate_role"),
    "tpu": ("TF_PJRT_ENV", "TPU_SLICES", "TPU_VM_GENERATIONS", "UNVERIFIED_TPU_FACTS", "V6E_VERTEX_DERIVED", "TpuSlice",
        "VertexTpu", "find_tpu_slice", "parse_tpu_vm_accelerator", "refused_tpu", "tpu_runtime_env", "tpu_slice_key",
        "tpu_vm_names", "vertex_offer", "vertex_tpu", "vertex_tpu_names"),
    "tpuvm": ("TPU_ONLY_REGIONS", "TPU_VM_MANAGED_LABEL", "TPU_VM_NODE_GONE_HEALTH", "TPU_VM_NODE_GONE_STATES",
        "TPU_VM_PREEMPTED_METADATA_KEY", "PROVISIONING_LABEL", "TPU_VM_ROLE_HINT", "TPU_VM_RUN_LABEL", "UNVERIFIED_TPUVM_FACTS", "is_tpu_vm_zone_refusal",
        "validate_tpu_vm_name", "validate_tpu_vm_zone"),
    "vertexdata": ("MAX_DATA_AGE", "REFRESH_SCRIPT", "TpuTopology", "VertexTables", "vertex_tables"),
}
#: Modules asked for as attributes of the package (``domain.storage_iam.…``).
MODULES = frozenset({"storage_iam"})
_HOME = {name: module for module, names in EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    """An exported fact, from its module (imported on first use); the role facts of the 2 MB predefined-roles
    snapshot (``storage_iam.SNAPSHOT_FACTS``) are read on first use too."""
    if name in MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _HOME.get(name)
    if module is None:
        storage_iam = importlib.import_module(f"{__name__}.storage_iam")
        if name in storage_iam.SNAPSHOT_FACTS:
            return getattr(storage_iam, name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME, *MODULES})


__all__ = ["DomainError", *sorted(_HOME)]
