"""Stack rules: plain functions ``check(resources, settings) -> [(message, urn or None), …]``."""

from __future__ import annotations

from policy.access import check_training_access
from policy.rules import MANDATORY, Rule

STACK_RULES: tuple[Rule, ...] = (
    Rule("training-principals-storage-access",
         "Every training principal can list and read the data and hub-cache buckets and create, read and delete "
         "objects in the artifacts and staging buckets.",
         MANDATORY, check_training_access, kind="stack",
         config_keys=("existingDataBucket", "existingDataBucketAccess"),
         rationale="The most common TPU job failure is a 403 on storage.objects.list/get minutes into a run. "
                   "Effective permissions are computed from tpuctl.domain's role table over bucket IAM, ACL "
                   "entries and project-level roles; legacyBucketReader/Writer alone lack storage.objects.get."),
)
