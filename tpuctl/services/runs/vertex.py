"""Vertex AI CustomJob for the bundled trainer: plan, request builder, trainer sdist and staging (submitting and
following the job: ``tpuctl.services.targets.vertex``).

This replaces the seeds' ``gcloud ai-platform jobs submit training --scale-tier BASIC_TPU`` (AI Platform
Training was shut down on 2025-01-31). The job runs ``python -m trainer.task`` from a source
distribution of ``trainer/`` on a Vertex AI prebuilt TensorFlow image; its worker pools come from the
accelerator catalogue in ``tpuctl.ground.domain``.

google-cloud-aiplatform and google-cloud-storage are imported inside the functions that need them.
"""

from __future__ import annotations

import datetime
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuctl.ground import domain
from tpuctl.ground.errors import UserError
from tpuctl.ground.outputs import StackOutputs, require_outputs
from tpuctl.services.trainer_package import TRAINER_MODULE, build_trainer_sdist, sdist_filename
from tpuctl.services.training import TrainOptions, check_common, model_args, timestamp

#: States after which a CustomJob no longer changes (google.cloud.aiplatform_v1.JobState names).
TERMINAL_STATES = frozenset({
    "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
})
_DISPLAY_NAME = re.compile(r"^[a-z][a-z0-9-]{0,127}$")


@dataclass(frozen=True)
class VertexJob:
    """Everything a CustomJob request is built from, validated."""

    project: str
    region: str
    display_name: str
    accelerator: domain.Accelerator
    workers: int
    image_uri: str
    package_uri: str
    trainer_args: list[str]
    env: dict[str, str]
    service_account: str | None
    base_output_dir: str
    labels: dict[str, str] = field(default_factory=dict)
    #: Parameter-server training: pool 1 holds ``workers`` workers, pool 2 this many ps replicas.
    parameter_servers: int = 0
    #: True: the trainer's own image (containerSpec, `tpuctl image build`); False: the trainer as a Python
    #: package on Google's prebuilt TensorFlow image (pythonPackageSpec, --python-package).
    container: bool = True

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"


def strategy_for(accel: domain.Accelerator, workers: int, parameter_servers: int = 0) -> str:
    """The trainer's --distribution_strategy on Vertex for this accelerator and worker count."""
    if parameter_servers:
        return "parameter_server"
    if workers > 1:
        return "multi_worker"
    if accel.kind == "cpu":
        return "auto"
    return accel.strategy


def check_accelerator(accel: domain.Accelerator, workers: int, region: str) -> None:
    """Raise DomainError/UserError before anything is built or uploaded."""
    if workers < 1:
        raise UserError(f"--workers must be at least 1 (got {workers})")
    if accel.kind == "tpu" and workers > 1:
        raise UserError(
            f"--workers {workers} cannot be combined with {accel.name}: a Vertex AI TPU job has exactly one "
            "replica (pick a larger TPU, e.g. tpu-v5e-8, instead)"
        )
    domain.check_accelerator_region(accel, region)


def machine_spec(accel: domain.Accelerator) -> dict[str, Any]:
    """MachineSpec fields (proto field names) for one replica of ``accel``."""
    spec: dict[str, Any] = {"machine_type": accel.machine_type}
    if accel.kind == "gpu":
        assert accel.gpu is not None
        spec["accelerator_type"] = accel.gpu.vertex_accelerator
        spec["accelerator_count"] = accel.gpu_count
    elif accel.kind == "tpu":
        assert accel.tpu is not None
        assert accel.tpu.vertex is not None
        if accel.tpu.vertex.accelerator_type:
            spec["accelerator_type"] = accel.tpu.vertex.accelerator_type
            spec["accelerator_count"] = accel.tpu.vertex.accelerator_count
        if accel.tpu.topology:
            spec["tpu_topology"] = accel.tpu.topology
    return spec


def worker_pool_specs(job: VertexJob) -> list[dict[str, Any]]:
    """Pool 0: the chief (one replica). With --workers N, pool 1: N-1 identical workers.

    The trainer image's ENTRYPOINT is ``python -m trainer.task`` (container/Dockerfile), so a container pool
    passes only the trainer's arguments: the same args and env as the Python-package route."""
    env = [{"name": k, "value": v} for k, v in sorted(job.env.items())]
    if job.container:
        code = {"container_spec": {"image_uri": job.image_uri, "args": list(job.trainer_args), "env": env}}
    else:
        code = {"python_package_spec": {
            "executor_image_uri": job.image_uri,
            "package_uris": [job.package_uri],
            "python_module": TRAINER_MODULE,
            "args": list(job.trainer_args),
            "env": env,
        }}
    pool = {"machine_spec": machine_spec(job.accelerator), "replica_count": 1, **code}
    pools = [pool]
    if job.parameter_servers:
        # Vertex sets TF_CONFIG "chief" / "worker" / "ps" for pools 0 / 1 / 2
        # (cloud.google.com/vertex-ai/docs/training/distributed-training#cluster-spec-format, checked 2026-11-22).
        pools.append({**pool, "replica_count": job.workers})
        pools.append({**pool, "replica_count": job.parameter_servers})
    elif job.workers > 1:
        pools.append({**pool, "replica_count": job.workers - 1})
    return pools


def build_custom_job(job: VertexJob):
    """The real ``google.cloud.aiplatform_v1.CustomJob`` message for ``job``."""
    from google.cloud import aiplatform_v1

    return aiplatform_v1.CustomJob(
        display_name=job.display_name,
        labels=dict(job.labels),
        job_spec=aiplatform_v1.CustomJobSpec(
            worker_pool_specs=worker_pool_specs(job),
            service_account=job.service_account or "",
            base_output_directory=aiplatform_v1.GcsDestination(output_uri_prefix=job.base_output_dir),
        ),
    )


def job_to_dict(custom_job) -> dict[str, Any]:
    """The CustomJob as the REST API spells it (camelCase, enum names): what --dry-run prints."""
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(type(custom_job).pb(custom_job))


# --------------------------------------------------------------------------------------------
# Cloud calls
# --------------------------------------------------------------------------------------------

def upload_package(path: Path, gs_uri: str, project: str | None) -> None:
    from bootstrap import clients

    bucket, name = domain.split_gs_uri(gs_uri)
    client = clients.storage_client(project)
    client.bucket(bucket).blob(name).upload_from_filename(str(path), content_type="application/gzip")


def job_client(region: str):
    """JobServiceClient over REST: TPUCTL_VERTEX_ENDPOINT if set (anonymous on loopback http), else
    the regional endpoint with Application Default Credentials."""
    from google.cloud import aiplatform_v1

    from bootstrap.clients import gapic

    return gapic(aiplatform_v1.JobServiceClient, "vertex", default_endpoint=domain.VERTEX_API_HOST.format(region=region))


def console_url(job_name: str) -> str:
    parts = job_name.split("/")
    # projects/P/locations/R/customJobs/ID
    fields = dict(zip(parts[0::2], parts[1::2]))
    return domain.VERTEX_CUSTOM_JOB_CONSOLE_URL.format(
        region=fields.get("locations", "?"), job_id=fields.get("customJobs", "?"),
        project=fields.get("projects", "?"))


def state_name(custom_job) -> str:
    from google.cloud import aiplatform_v1

    return aiplatform_v1.JobState(custom_job.state).name


# --------------------------------------------------------------------------------------------
# `tpuctl train --target vertex`: defaults from the stack, then build / upload / submit / follow
# --------------------------------------------------------------------------------------------

def plan_job(opts: TrainOptions, outputs: StackOutputs | None, *, region: str | None = None,
             job_name: str | None = None, image: str | None = None, python_package: bool = False,
             today: datetime.date | None = None, echo: Callable[[str], None] | None = None) -> VertexJob:
    """Validate everything and assemble the job; nothing is built or uploaded here.

    Default: the trainer's own image for the accelerator family (`tpuctl image build`), tagged by the hash
    of the current sources. ``python_package``: the trainer as a package on Google's prebuilt TensorFlow
    image, refused once the catalogue says the image is past its end of availability (a warning within
    90 days of it)."""
    check_common(opts)
    accel = domain.parse_accelerator(opts.accelerator or "cpu")
    outputs = require_outputs(outputs, "--target vertex")
    project = outputs.require("project")
    region = region or outputs.require("region", "pass --region")
    check_accelerator(accel, opts.workers, region)
    if opts.parameter_servers and accel.kind == "tpu":
        raise UserError("--parameter-servers cannot be combined with a TPU (one TPU host per Vertex job)")
    name = job_name or f"tpuctl-train-{timestamp()}"
    if not _DISPLAY_NAME.match(name):
        raise UserError(
            f"job name {name!r} must start with a lowercase letter and contain only lowercase letters, "
            "digits and '-' (max 128); it also names the staging and output folders"
        )

    staging = domain.bucket_name_from(outputs.require("buckets.staging", "the trainer package is staged there"))
    base_output = opts.model_dir
    if base_output:
        if not base_output.startswith("gs://"):
            raise UserError(f"--model-dir {base_output}: a Vertex AI job writes to Cloud Storage; use gs://BUCKET/PATH")
        domain.bucket_name_from(base_output)
        base_output = base_output.rstrip("/")
    else:
        base_output = f"{outputs.require('buckets.artifacts', 'pass --model-dir gs://BUCKET/PATH')}/runs/{name}"
    data_dir = opts.data_dir or outputs.bucket_url("data")
    if not data_dir:
        raise UserError("no training data: the stack has no data bucket; pass --data-dir gs://BUCKET/PATH")
    if not data_dir.startswith("gs://"):
        raise UserError(f"--data-dir {data_dir}: a Vertex AI job reads from Cloud Storage; upload it with "
                        "`tpuctl data make-tfrecords SRC gs://BUCKET/PATH` and pass that")
    domain.bucket_name_from(data_dir)

    service_account = outputs.training_service_account or outputs.principals.get(domain.TRAINING_SA_KEYWORD)
    labels = {**outputs.labels, "tpuctl-command": "train", "accelerator": accel.name,
              "model": opts.model or ("hub" if opts.hub_handle else "small_cnn")}
    domain.validate_labels(labels)

    if python_package:
        if image is None:
            try:
                training_image = domain.prebuilt_training_image(accel)
            except domain.DomainError as exc:
                raise UserError(str(exc)) from None
            check_availability(training_image, today or datetime.date.today(), echo)
            image = training_image.uri(region)
        image_uri = image
    else:
        from tpuctl.services import image as trainer_image

        image_uri = image or trainer_image.image_ref(outputs, accel.kind, region=region).uri
    args = ["--distribution_strategy", strategy_for(accel, opts.workers, opts.parameter_servers)]
    if accel.kind == "gpu":
        args += ["--num_gpus", str(accel.gpu_count)]
    args += ["--data_dir", data_dir.rstrip("/"), "--model_dir", base_output, *model_args(opts),
             *opts.extra]
    env = {"TF_USE_LEGACY_KERAS": "1"}
    hub_cache = opts.hub_cache_dir or outputs.tfhub_cache_dir
    if hub_cache:
        if not hub_cache.startswith("gs://"):
            raise UserError(f"--hub-cache-dir {hub_cache}: a Vertex AI job reads hub models from Cloud Storage; "
                            "use the stack's hub cache (tpuctl hub-cache) or a gs:// folder")
        env["TFHUB_CACHE_DIR"] = hub_cache
    if accel.kind == "tpu":
        # On a Vertex AI TPU VM the TPU is attached to the host the trainer runs on.
        env["TPU_NAME"] = "local"
        if accel.tpu is not None:
            env.update(domain.tpu_runtime_env(accel.tpu.generation))
    return VertexJob(
        project=project, region=region, display_name=name, accelerator=accel, workers=opts.workers,
        parameter_servers=opts.parameter_servers,
        image_uri=image_uri,
        package_uri=f"gs://{staging}/tpuctl/packages/{name}/{sdist_filename()}",
        trainer_args=args, env=env, service_account=service_account, base_output_dir=base_output,
        labels=labels, container=not python_package,
    )


def check_availability(training_image: domain.TrainingImage, today: datetime.date,
                       echo: Callable[[str], None] | None = None) -> None:
    """Refuse a prebuilt image past its end of availability; warn within 90 days of it."""
    try:
        warning = domain.availability_warning(
            f"Vertex AI's prebuilt image {training_image.name}", training_image.end_of_availability, today,
            past="(jobs using it are rejected); drop --python-package to run the trainer's own image "
                 "(`tpuctl image build`), or name an executor image with --image",
            soon="move to the trainer's own image (drop --python-package)")
    except domain.DomainError as exc:
        raise UserError(str(exc)) from None
    if warning and echo is not None:
        echo(warning)


# --------------------------------------------------------------------------------------------
# Quota: does the region's Vertex AI quota for the accelerator cover the job? (bootstrap/quotas.py)
# --------------------------------------------------------------------------------------------

def check_quota(job: VertexJob, *, client=None, echo: Callable[[str], None] = print, spot: bool = False) -> int | None:
    """The pre-flight of ``bootstrap.quotas.check_vertex_room`` for this job (before anything is built)."""
    from bootstrap import quotas

    return quotas.check_vertex_room(job.project, job.region, job.accelerator, job.workers, spot=spot, client=client,
                                    echo=echo)


def require_image(job: VertexJob, image_exists=None) -> None:
    from tpuctl.services import image as trainer_image

    ref = trainer_image.parse_uri(job.image_uri)
    if ref is None:            # an image tpuctl did not build (--image): Vertex itself will say if it is missing
        return
    exists = image_exists(job.image_uri) if image_exists else trainer_image.tag_exists(ref)
    if not exists:
        raise UserError(f"the trainer image {job.image_uri} is not built yet: run `tpuctl image build --variant "
                        f"{ref.variant} --project {ref.project} --region {ref.region} --repository {ref.repository}` "
                        "(or with --stack), then train again")


def stage_trainer(job: VertexJob, echo: Callable[[str], None], image_exists=None) -> None:
    """Container route: the image must exist (``image_exists(uri)``, default an Artifact Registry lookup of a
    tpuctl-built image); otherwise the one command that builds it is the error. Python-package route: the
    sdist is built and uploaded to staging."""
    from google.api_core import exceptions

    if job.container:
        require_image(job, image_exists)
        return
    tensorflow = domain.VERTEX_TRAINING_IMAGES[job.accelerator.kind].tensorflow
    with tempfile.TemporaryDirectory(prefix="tpuctl-package-") as tmp:
        sdist = build_trainer_sdist(Path(tmp), tensorflow)
        try:
            upload_package(sdist, job.package_uri, job.project)
        except exceptions.GoogleAPICallError as exc:
            raise UserError(f"uploading the trainer package to {job.package_uri} failed: {exc.message or exc}", 1) from None
    echo(f"uploaded trainer package: {job.package_uri}")
