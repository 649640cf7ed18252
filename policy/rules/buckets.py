"""Bucket rules: public access prevention, uniform access, versioning, force_destroy, access logs, keys, labels."""

from __future__ import annotations

from typing import Any

from ground import domain
from ground import resources as r
from ground import tokens as T
from ground.settings import StackSettings
from policy.exceptions import accepted
from policy.rules.base import ADVISORY, MANDATORY, resource_rule


@resource_rule("bucket-public-access-prevention",
               "Buckets enforce public access prevention.",
               MANDATORY,
               types=frozenset({T.BUCKET}),
               checkov=("CKV_GCP_114",),
               rationale="Training data and models are private; 'enforced' blocks any later public grant, even a mistaken one.")
def check_public_access_prevention(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    value = r.get(props, "publicAccessPrevention")
    if value is r.UNKNOWN or value == "enforced":
        return []
    return [f"bucket {r.bucket_name(props, '?')}: publicAccessPrevention is {value or 'unset'!r}; "
            "set public_access_prevention='enforced'"]


@resource_rule("bucket-uniform-access",
               "Buckets use uniform bucket-level access.",
               MANDATORY,
               types=frozenset({T.BUCKET}),
               checkov=("CKV_GCP_29",),
               rationale="One access system (IAM) per bucket: no per-object ACLs that drift, and IAM grants are what the access map shows.")
def check_uniform_access(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    value = r.get(props, "uniformBucketLevelAccess")
    if value is r.UNKNOWN or value is True:
        return []
    return [f"bucket {r.bucket_name(props, '?')}: uniform bucket-level access is off; "
            "set uniform_bucket_level_access=True (ACLs on created buckets are not allowed)"]


@resource_rule("artifacts-bucket-versioned",
               "The artifacts bucket keeps object versions.",
               MANDATORY,
               types=frozenset({T.BUCKET}),
               checkov=("CKV_GCP_78",),
               rationale="Models and checkpoints are the result of hours of accelerator time; versioning makes an overwrite or delete recoverable.")
def check_artifacts_versioned(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    if r.bucket_purpose(props) != "artifacts":
        return []
    enabled = r.get(props, "versioning", "enabled")
    if enabled is r.UNKNOWN or enabled is True:
        return []
    return [f"artifacts bucket {r.bucket_name(props, '?')}: versioning is off; set versioning={{'enabled': True}} "
            "so an overwritten or deleted model can be restored"]


@resource_rule("no-force-destroy",
               "force_destroy is off on the data and artifacts buckets.",
               MANDATORY,
               types=frozenset({T.BUCKET}),
               rationale="With force_destroy, `pulumi destroy` deletes the training data and trained models along with the bucket.")
def check_force_destroy(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    purpose = r.bucket_purpose(props)
    if purpose not in ("data", "artifacts"):
        return []
    if r.get(props, "forceDestroy") is True:
        return [f"{purpose} bucket {r.bucket_name(props, '?')}: force_destroy is on, so `pulumi destroy` would "
                "delete every object in it; set force_destroy=False"]
    return []


@resource_rule("bucket-access-logs",
               "Buckets log access to the separate access-log bucket.",
               ADVISORY,
               types=frozenset({T.BUCKET}),
               checkov=("CKV_GCP_62", "CKV_GCP_63"),
               rationale="Usage and storage logs tell later who read or changed training data and models. Advisory: "
                         "they cost a bucket and storage, so the stack turns them on with accessLogRetentionDays; the "
                         "log bucket itself is accepted in policy/exceptions.yaml.")
def check_access_logs(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    name = r.bucket_name(props, "?")
    log_bucket = r.get(props, "logging", "logBucket")
    if log_bucket is r.UNKNOWN:
        return []
    if not log_bucket:
        if accepted("CKV_GCP_62", rtype, props, settings):
            return []
        return [f"bucket {name} logs no access (checkov CKV_GCP_62): nobody can tell later who read or changed "
                "the data; set accessLogRetentionDays > 0 so its usage and storage logs go to the access-log bucket"]
    if log_bucket == r.get(props, "name"):
        return [f"bucket {name} logs to itself (checkov CKV_GCP_63): every log write is logged again; log to the "
                "separate access-log bucket"]
    return []


@resource_rule("bucket-versioning",
               "Buckets whose contents cannot be rebuilt keep object versions.",
               ADVISORY,
               types=frozenset({T.BUCKET}),
               checkov=("CKV_GCP_78",),
               rationale="Versioning makes an overwrite or delete of training data recoverable beyond soft delete. "
                         "Advisory: versionedBuckets may leave out data that is a copy; staging, hub-cache and the log "
                         "bucket are accepted in policy/exceptions.yaml (their files are rebuilt or expire).")
def check_bucket_versioning(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    purpose = r.labelled_purpose(props)
    if purpose == "artifacts":      # artifacts-bucket-versioned (mandatory) judges it
        return []
    enabled = r.get(props, "versioning", "enabled")
    if enabled is r.UNKNOWN or enabled is True or accepted("CKV_GCP_78", rtype, props, settings):
        return []
    what = f"{purpose} bucket" if isinstance(purpose, str) else "bucket"
    fix = (f"add {purpose} to versionedBuckets" if purpose in domain.BUCKET_PURPOSES
           else "set versioning={'enabled': True}")
    return [f"{what} {r.bucket_name(props, '?')}: versioning is off (checkov CKV_GCP_78), so an overwritten or "
            f"deleted object is gone once soft delete expires; {fix}, or accept it in policy/exceptions.yaml "
            "with a reason"]


#: checkov's checks of the stack's non-bucket resources (Artifact Registry repository, Vertex AI Endpoint):
#: (type, attribute that must be set, checkov id, what it means).
_CMEK_CHECKS = {
    T.ARTIFACT_REPOSITORY: ("kmsKeyName", "CKV_GCP_84", "repository"),
    T.VERTEX_ENDPOINT: ("encryptionSpec", "CKV2_GCP_24", "Endpoint"),
}


def _display(rtype: str, props: Any) -> str:
    name = r.get(props, "repositoryId") if rtype == T.ARTIFACT_REPOSITORY else r.get(props, "displayName")
    return name if isinstance(name, str) else "?"


@resource_rule("customer-managed-keys",
               "The trainer image repository and the serving Endpoint use a customer-managed "
               "key.",
               ADVISORY,
               types=frozenset(_CMEK_CHECKS),
               checkov=("CKV_GCP_84", "CKV2_GCP_24"),
               rationale="A customer-managed key lets the team revoke access to the stored images and endpoint data. "
                         "Advisory: it needs a Cloud KMS key ring the stack does not own; tpuctl's own repository and "
                         "Endpoint are accepted in policy/exceptions.yaml (they hold no training data).")
def check_customer_managed_key(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    attribute, check, what = _CMEK_CHECKS[rtype]
    value = r.get(props, attribute)
    if value is r.UNKNOWN or value or accepted(check, rtype, props, settings):
        return []
    return [f"{what} {_display(rtype, props)}: encrypted with Google-managed keys, not a customer-managed key "
            f"(checkov {check}); set {attribute}, or accept it in policy/exceptions.yaml with a reason"]


@resource_rule("private-serving-endpoint",
               "The serving Endpoint is reachable only from a peered VPC network.",
               ADVISORY,
               types=frozenset({T.VERTEX_ENDPOINT}),
               checkov=("CKV2_GCP_33",),
               rationale="A private Endpoint cannot be called from outside the network even with stolen credentials. "
                         "Advisory: it needs a VPC peered with Google's service network; tpuctl's Endpoint is called "
                         "through the public API with IAM and is accepted in policy/exceptions.yaml.")
def check_private_endpoint(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    network = r.get(props, "network")
    if network is r.UNKNOWN or network or accepted("CKV2_GCP_33", rtype, props, settings):
        return []
    return [f"Endpoint {_display(rtype, props)}: reachable through Vertex AI's public API (IAM still applies), not "
            "only from a peered VPC network (checkov CKV2_GCP_33); set network, or accept it in "
            "policy/exceptions.yaml with a reason"]


@resource_rule("bucket-labels",
               "Buckets carry labels, including tpuctl-purpose.",
               ADVISORY,
               types=frozenset({T.BUCKET}),
               rationale="Labels attribute storage cost; tpuctl-purpose tells the stack rule and `tpuctl plan` which bucket is data, staging, artifacts or hub-cache.")
def check_labels(rtype: str, props: Any, settings: StackSettings) -> list[str]:
    labels = r.get(props, "labels")
    if labels is r.UNKNOWN:
        return []
    name = r.bucket_name(props, "?")
    if not labels:
        return [f"bucket {name} has no labels; add {domain.PURPOSE_LABEL}=<purpose> and an owner/cost label"]
    purpose = r.get(labels, domain.PURPOSE_LABEL)
    if purpose is r.UNKNOWN:
        return []
    if purpose not in domain.BUCKET_PURPOSES and purpose != domain.ACCESS_LOG_PURPOSE:
        return [f"bucket {name}: label {domain.PURPOSE_LABEL} is {purpose!r}; set it to one of "
                f"{', '.join(domain.BUCKET_PURPOSES)} so policies and `tpuctl plan` know what the bucket is for"]
    return []
