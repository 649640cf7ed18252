"""``tpuctl predict --batch``: a Vertex AI batch prediction job over images in ``gs://``.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cloud import clients
from cloud.google import aiplatform_v1
from ground import domain
from ground.errors import UserError
from ground.outputs import StackOutputs
from ground.storagepath import GsPath
from tpuctl.services.serving.deploy import prediction_image, stack_location, upload_destination, upload_export
from tpuctl.services.serving.exports import Export, export_files, resolve_export
from tpuctl.services.serving.predict import vertex_client


@dataclass(frozen=True)
class BatchPlan:
    project: str
    region: str
    display_name: str
    source: str                # gs:// folder of images
    file_list: str             # gs://<artifacts>/batch-predictions/<job>/files.txt
    output_prefix: str
    model: str | None          # a Model resource name, or None for the export below
    export: Export | None
    artifact_uri: str | None
    image_uri: str
    machine_type: str
    max_replicas: int
    labels: dict[str, str]
    warning: str | None = None

    @property
    def parent(self) -> str:
        return aiplatform_v1.JobServiceClient.common_location_path(self.project, self.region)


def plan_batch(source: str, ref: str, outputs: StackOutputs | None, *, runs_dir: str = "runs",
               region: str | None = None, machine_type: str = domain.DEFAULT_PREDICTION_MACHINE,
               max_replicas: int = 1, image: str | None = None, today: datetime.date | None = None,
               now: datetime.datetime | None = None, storage_client=None) -> BatchPlan:
    """``ref``: a Vertex AI Model (projects/P/locations/R/models/ID) or a run / export (then the job carries
    the export as an unmanaged container model and no Model is uploaded)."""
    project, region = stack_location(outputs, region)
    assert outputs is not None
    if not re.fullmatch(r"gs://[a-z0-9][a-z0-9._-]{1,220}(/[^\s]*)?", source or ""):
        raise UserError(f"--batch {source!r} must be a gs://bucket/folder of images")
    domain.check_machine_type(machine_type)
    domain.check_replicas(1, max_replicas)
    artifacts = outputs.require("buckets.artifacts", "the batch job's file list and output go there")
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%d-%H%M%S")
    display = f"tpuctl-batch-{stamp}"
    model = export = artifact_uri = None
    image_uri, warning = "", None
    if domain.parse_model_name(ref):
        model = ref                                  # the Model carries its own container
    else:
        image_uri, warning = prediction_image(image, region, today or datetime.date.today())
        export = resolve_export(ref, runs_dir=runs_dir, outputs=outputs, storage_client=storage_client)
        if export.is_local:
            export_files(Path(export.path))
        artifact_uri = upload_destination(export, outputs)
    base = f"{artifacts}/batch-predictions/{display}"
    return BatchPlan(project, region, display, source.rstrip("/"), f"{base}/files.txt", f"{base}/output",
                     model, export, artifact_uri, image_uri, machine_type, max_replicas, dict(outputs.labels),
                     warning)


def build_batch_job(plan: BatchPlan):
    job = aiplatform_v1.BatchPredictionJob(
        display_name=plan.display_name,
        input_config=aiplatform_v1.BatchPredictionJob.InputConfig(
            instances_format=domain.BATCH_INSTANCES_FORMAT,
            gcs_source=aiplatform_v1.GcsSource(uris=[plan.file_list])),
        output_config=aiplatform_v1.BatchPredictionJob.OutputConfig(
            predictions_format=domain.BATCH_PREDICTIONS_FORMAT,
            gcs_destination=aiplatform_v1.GcsDestination(output_uri_prefix=plan.output_prefix)),
        dedicated_resources=aiplatform_v1.BatchDedicatedResources(
            machine_spec=aiplatform_v1.MachineSpec(machine_type=plan.machine_type),
            starting_replica_count=1, max_replica_count=plan.max_replicas),
        labels=plan.labels,
    )
    if plan.model:
        job.model = plan.model
    else:
        job.unmanaged_container_model = aiplatform_v1.UnmanagedContainerModel(
            artifact_uri=plan.artifact_uri,
            container_spec=aiplatform_v1.ModelContainerSpec(image_uri=plan.image_uri))
    return job


def list_batch_images(source: str, *, project: str | None = None, storage_client=None) -> list[str]:

    folder = GsPath.parse(source)
    bucket_name, prefix = folder.bucket, folder.prefix or ""
    client = storage_client or clients.storage_client(project)
    clients.make_fail_fast(client)
    found = []
    with clients.google_errors(f"listing {source}", not_found=f"bucket gs://{bucket_name} does not exist",
                               forbidden=f"permission denied listing {source}: you need storage.objects.list"):
        for blob in client.list_blobs(bucket_name, prefix=prefix):
            if blob.name.lower().endswith(domain.BATCH_IMAGE_SUFFIXES):
                found.append(f"gs://{bucket_name}/{blob.name}")
                if len(found) > domain.MAX_BATCH_FILES:
                    raise UserError(f"{source} holds more than {domain.MAX_BATCH_FILES} images: split it")
    if not found:
        raise UserError(f"{source} holds no images ({', '.join(domain.BATCH_IMAGE_SUFFIXES)})")
    return found


def submit_batch(plan: BatchPlan, *, echo: Callable[[str], None] = lambda _m: None, storage_client=None,
                 job_client=None):
    """List the images, write the file list, upload a local export, create the job; returns the job."""
    images = list_batch_images(plan.source, project=plan.project, storage_client=storage_client)
    client = storage_client or clients.storage_client(plan.project)
    if plan.export is not None and plan.export.is_local and plan.artifact_uri:
        count = upload_export(plan.export, plan.artifact_uri, project=plan.project, storage_client=client)
        echo(f"uploaded {count} file(s) to {plan.artifact_uri}")
    file_list = GsPath.parse(plan.file_list)
    with clients.google_errors(f"writing {plan.file_list}"):
        client.bucket(file_list.bucket).blob(file_list.path).upload_from_string("\n".join(images) + "\n", content_type="text/plain")
    echo(f"{len(images)} image(s) listed in {plan.file_list}")
    job_client = job_client or vertex_client("JobServiceClient", plan.region)
    with clients.google_errors(f"creating batch prediction job {plan.display_name} in {plan.parent}"):
        return job_client.create_batch_prediction_job(parent=plan.parent, batch_prediction_job=build_batch_job(plan))
