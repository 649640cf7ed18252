"""Stack rules: plain functions ``check(resources, settings) -> [(message, urn or None), …]``."""

from __future__ import annotations

from collections.abc import Iterable

from ground import domain
from ground import resources as r
from ground import tokens as T
from ground.access import StackResource, check_image_builder, check_training_access, check_training_logs
from ground.settings import StackSettings
from policy.rules import ADVISORY, MANDATORY, Rule


def check_hub_models_complete(resources: Iterable[StackResource], settings: StackSettings) -> list[tuple[str, str | None]]:
    """Every ``<prefix>/<sha1>/`` folder the stack uploads has ``saved_model.pb`` at its root."""
    prefix = settings.hub_cache_prefix + "/"
    folders: dict[tuple[str, str], list[StackResource]] = {}
    for res in resources:
        if res.type != T.BUCKET_OBJECT:
            continue
        name = r.get(res.props, "name")
        bucket = r.strip_bucket(r.get(res.props, "bucket"))
        if not isinstance(name, str) or not name.startswith(prefix):
            continue
        key = name[len(prefix):].split("/", 1)[0]
        if domain.is_hub_cache_key(key):
            folders.setdefault((str(bucket), key), []).append(res)
    out = []
    for (bucket, key), objects in sorted(folders.items()):
        names = {r.get(o.props, "name") for o in objects}
        if f"{prefix}{key}/saved_model.pb" in names:
            continue
        nested = sorted(n for n in names if isinstance(n, str) and n.endswith("/saved_model.pb"))
        hint = (f"; it is at {nested[0]} — upload the model folder's contents, not the folder" if nested
                else "; the folder holds no SavedModel")
        out.append((f"hub model folder gs://{bucket}/{prefix}{key}/ has no saved_model.pb at its root, so "
                    f"tensorflow_hub will ignore it and try to download the model{hint}", objects[0].urn))
    return out


STACK_RULES: tuple[Rule, ...] = (
    Rule("training-principals-storage-access",
         "Every training principal can list and read the data and hub-cache buckets and create, read and delete "
         "objects in the artifacts and staging buckets.",
         MANDATORY, check_training_access, kind="stack",
         config_keys=("existingDataBucket", "existingDataBucketAccess"),
         rationale="The most common TPU job failure is a 403 on storage.objects.list/get minutes into a run. "
                   "Effective permissions are computed from ground.domain's role table over bucket IAM, ACL "
                   "entries and project-level roles; legacyBucketReader/Writer alone lack storage.objects.get."),
    Rule("training-account-writes-logs",
         "The training service account may write log entries (logging.logEntries.create) on the project.",
         ADVISORY, check_training_logs, kind="stack",
         rationale="TPU VM hosts log through Docker's gcplogs driver with the VM's service account (the training "
                   "account; docs.docker.com/engine/logging/drivers/gcplogs, read 2026-11-27), and Vertex AI jobs "
                   "run as it; roles/logging.logWriter holds the permission. Advisory, not mandatory: without it the "
                   "run still trains and writes its results; only `tpuctl logs`, the cloud live display and a failed "
                   "host's last lines are lost, so it must not block `pulumi up` the way a 403 on a bucket does."),
    Rule("image-builder-can-build",
         "The image builder can push to the trainer image repository, write its build logs and read the build "
         "context in the staging bucket; no training principal can push to that repository.",
         MANDATORY, check_image_builder, kind="stack",
         rationale="A user-specified Cloud Build account needs roles/artifactregistry.writer to push and "
                   "roles/logging.logWriter to log to Cloud Logging (cloud.google.com/build/docs/securing-builds/"
                   "configure-user-specified-service-accounts, read 2026-11-27); without them `tpuctl image build` "
                   "stops after the upload. A training job that could push would replace the images jobs run."),
    Rule("hub-cache-complete", "Each uploaded hub model folder has saved_model.pb at its root.", MANDATORY,
         check_hub_models_complete, kind="stack", config_keys=("hubCachePrefix",),
         rationale="tensorflow_hub only uses <TFHUB_CACHE_DIR>/<sha1(handle)>/ when saved_model.pb sits directly in "
                   "it; a model uploaded one folder too deep is silently ignored and the worker tries to download it."),
)
