"""Google Cloud APIs the setup enables.
"""

from __future__ import annotations

#: APIs the training setup needs. Enabled by infra/ and bootstrap/, never disabled on destroy.
REQUIRED_APIS: tuple[str, ...] = (
    "tpu.googleapis.com",
    "aiplatform.googleapis.com",
    "storage.googleapis.com",
    "iam.googleapis.com",
    "cloudquotas.googleapis.com",
    "serviceusage.googleapis.com",
    "compute.googleapis.com",
    # the trainer image: pushed to Artifact Registry, built by Cloud Build (`tpuctl image build`)
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    # the list prices of `tpuctl prices refresh` and every estimate: the Cloud Billing Catalog API is served by
    # cloudbilling.googleapis.com and answers only in a project that has it enabled (shared/REFERENCE.md, learned
    # turn 4, 2026-11-26; issue 42)
    "cloudbilling.googleapis.com",
)
#: APIs Pulumi itself needs before the first `pulumi up` (state bucket, resource manager, usage), and
#: Cloud Quotas: the program looks quota ids up from their metrics (gcp.cloudquota.get_s_quota_infos)
#: while it plans, before it could enable the API itself.
BOOTSTRAP_APIS: tuple[str, ...] = (
    "cloudresourcemanager.googleapis.com",
    "serviceusage.googleapis.com",
    "storage.googleapis.com",
    "iam.googleapis.com",
    "cloudquotas.googleapis.com",
)
