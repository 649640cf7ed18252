"""``tpuctl deploy``: the export uploaded to the stack's artifacts bucket, a Vertex AI Model and an Endpoint
(the stack's, found or created) with the model deployed to it; ``--dry-run`` prints the request documents.

The google-cloud clients are imported inside the functions that use them.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloud import clients
from cloud.clients import google_errors
from cloud.google import aiplatform_v1, json_format
from cloud.uploads import Upload
from ground import domain
from ground.errors import UserError
from ground.numbers import is_digits
from ground.outputs import StackOutputs, require_outputs
from ground.storagepath import GsPath
from tpuctl.services.serving.exports import MAX_EXPORT_BYTES, Export, export_files
from tpuctl.services.serving.predict import vertex_client

#: How long deploy waits for each long-running operation (deploying a model can take 15+ minutes).
OPERATION_TIMEOUT_SECONDS = 3600.0


@dataclass(frozen=True)
class DeployPlan:
    project: str
    region: str
    export: Export
    artifact_uri: str          # gs:// folder with saved_model.pb
    image_uri: str
    model_display_name: str
    endpoint_display_name: str
    machine_type: str
    min_replicas: int
    max_replicas: int
    labels: dict[str, str]
    warning: str | None = None
    #: the stack's own Endpoint (``serving_endpoint`` output): deployed to as it is, never looked up or created
    endpoint_name: str | None = None
    #: TF Serving from a container tpuctl controls (``domain.tf_serving_container``) instead of a prebuilt image
    tf_serving: bool = False

    @property
    def model_artifact_uri(self) -> str:
        """The Model's ``artifactUri``: the SavedModel folder for a prebuilt image; for TF Serving the folder of
        version folders above it (``--model_base_path`` reads numeric versions)."""
        return self.artifact_uri.rstrip("/").rsplit("/", 1)[0] if self.tf_serving else self.artifact_uri

    @property
    def parent(self) -> str:
        return aiplatform_v1.ModelServiceClient.common_location_path(self.project, self.region)


def stack_location(outputs: StackOutputs | None, region: str | None) -> tuple[str, str]:
    outputs = require_outputs(outputs, "a Vertex AI model, endpoint or batch job")
    outputs.require("project")
    region = region or outputs.require("region", "pass --region")
    domain.validate_region(region)
    domain.validate_project_id(outputs.project)
    return outputs.project, region


def upload_destination(export: Export, outputs: StackOutputs) -> str:
    """Where a local export goes in the artifacts bucket: ``gs://<artifacts>/models/<run>/<model>/<version>``."""
    if not export.is_local:
        return export.path
    artifacts = outputs.require("buckets.artifacts", "the export is uploaded there")
    run = export.run.name if export.run is not None else Path(export.path).parent.parent.parent.name or "export"
    return f"{artifacts}/models/{run}/{export.model_name}/{export.version}"


def prediction_image(image: str | None, region: str, today: datetime.date) -> tuple[str, str | None]:
    if image:
        if any(c.isspace() for c in image) or "/" not in image:
            raise UserError(f"--image {image!r} is not a container image URI (REGION-docker.pkg.dev/P/REPO/IMAGE:TAG)")
        return image, None
    entry = domain.VERTEX_PREDICTION_IMAGES["cpu"]
    warning = domain.check_prediction_image(entry, today)
    return entry.uri(region), warning


def serving_container(image: str | None, tf_serving: bool, outputs: StackOutputs, region: str,
                      today: datetime.date) -> tuple[str, str | None, bool]:
    """(image URI, warning or note, TF Serving?) of a deployment. The prebuilt TF2 CPU image until its end of
    availability; from then on, or with ``tf_serving``, TF Serving from the stack's repository (``--image`` names
    another copy of it)."""
    note = None
    if not tf_serving and image is None:
        try:
            return (*prediction_image(None, region, today), False)
        except domain.DomainError as past:
            note = f"note: {str(past).split(' (', 1)[0]}: serving with TF Serving instead"
    if image is None:
        repository = outputs.trainer_image_url
        if not repository:
            raise UserError("TF Serving is served from the stack's image repository, and the stack outputs name no "
                            "trainer_image_url: pass --image with your copy of TF Serving in Artifact Registry "
                            f"({domain.TF_SERVING_IMAGE})")
        image = domain.tf_serving_image_uri(repository)
        push = f"push it once if it is not there: {domain.tf_serving_copy_commands(image)}"
        note = f"{note}; {push}" if note else f"note: TF Serving {domain.TF_SERVING_VERSION} from {image} ({push})"
    elif any(c.isspace() for c in image) or "/" not in image:
        raise UserError(f"--image {image!r} is not a container image URI (REGION-docker.pkg.dev/P/REPO/IMAGE:TAG)")
    return image, note, True


def plan_deploy(export: Export, outputs: StackOutputs | None, *, region: str | None = None,
                machine_type: str = domain.DEFAULT_PREDICTION_MACHINE, min_replicas: int = 1,
                max_replicas: int = 1, endpoint: str | None = None, image: str | None = None,
                today: datetime.date | None = None, tf_serving: bool = False) -> DeployPlan:
    """Validate everything and assemble the deployment; nothing is uploaded or created here."""
    project, region = stack_location(outputs, region)
    assert outputs is not None
    domain.check_machine_type(machine_type)
    domain.check_replicas(min_replicas, max_replicas)
    image_uri, warning, tf_serving = serving_container(image, tf_serving, outputs, region,
                                                       today or datetime.date.today())
    if tf_serving:
        domain.check_model_name(export.model_name)
    if export.is_local:
        export_files(Path(export.path))      # what would be uploaded, checked before anything is
    run = export.run.name if export.run is not None else f"v{export.version}"
    model_display = domain.check_display_name(f"tpuctl-{export.model_name}-{run}"[:128], "model display name")
    endpoint_display = domain.check_display_name(endpoint or f"tpuctl-{export.model_name}", "--endpoint")
    owned = outputs.serving_endpoint if endpoint is None else None   # --endpoint picks another one
    if owned and f"/locations/{region}/" not in owned:
        raise UserError(f"the stack's serving endpoint {owned} is not in {region}; deploy there (--region) or "
                        "name another endpoint with --endpoint")
    return DeployPlan(project, region, export, upload_destination(export, outputs), image_uri, model_display,
                      endpoint_display, machine_type, min_replicas, max_replicas, dict(outputs.labels), warning,
                      owned, tf_serving)


def build_model(plan: DeployPlan):
    if plan.tf_serving:
        spec = domain.tf_serving_container(plan.image_uri, plan.export.model_name)
        container = aiplatform_v1.ModelContainerSpec(
            image_uri=spec["image_uri"], command=spec["command"], args=spec["args"],
            ports=[aiplatform_v1.Port(container_port=port) for port in spec["ports"]],
            predict_route=spec["predict_route"], health_route=spec["health_route"])
    else:
        container = aiplatform_v1.ModelContainerSpec(image_uri=plan.image_uri)
    return aiplatform_v1.Model(
        display_name=plan.model_display_name,
        artifact_uri=plan.model_artifact_uri,
        container_spec=container,
        labels=plan.labels,
    )


def build_endpoint(plan: DeployPlan):
    return aiplatform_v1.Endpoint(display_name=plan.endpoint_display_name, labels=plan.labels)


def build_deployed_model(plan: DeployPlan, model_name: str):
    return aiplatform_v1.DeployedModel(
        model=model_name,
        display_name=plan.model_display_name,
        dedicated_resources=aiplatform_v1.DedicatedResources(
            machine_spec=aiplatform_v1.MachineSpec(machine_type=plan.machine_type),
            min_replica_count=plan.min_replicas,
            max_replica_count=plan.max_replicas,
        ),
    )


#: DeployModelRequest.traffic_split key for "the model being deployed" (aiplatform_v1 docs, client 2.7.0).
NEW_DEPLOYMENT = "0"


def as_rest(message) -> dict[str, Any]:
    return json_format.MessageToDict(type(message).pb(message))


def dry_run_document(plan: DeployPlan) -> dict[str, Any]:
    """What deploy would send, as the REST API spells it."""
    model_placeholder = f"{plan.parent}/models/<uploaded>"
    return {
        "upload": {"from": plan.export.path, "to": plan.artifact_uri} if plan.export.is_local else None,
        "uploadModel": {"parent": plan.parent, "model": as_rest(build_model(plan))},
        "endpoint": {"reuseOrCreate": as_rest(build_endpoint(plan))},
        "deployModel": {"deployedModel": as_rest(build_deployed_model(plan, model_placeholder)),
                        "trafficSplit": {NEW_DEPLOYMENT: 100}},
    }


def upload_export(export: Export, destination: str, *, project: str | None = None, storage_client=None) -> int:
    """Copy a local export folder to ``destination`` (gs://); returns the number of files. A failed upload removes
    what it had uploaded and says so (an export in the bucket is whole or not there)."""
    root = Path(export.path)
    files = export_files(root)
    total = sum(p.stat().st_size for p in files)
    if total > MAX_EXPORT_BYTES:
        raise UserError(f"{export.path} holds {total} bytes, more than {MAX_EXPORT_BYTES}: not a trainer export")
    folder = GsPath.parse(destination)
    bucket_name = folder.bucket
    client = storage_client or clients.storage_client(project)
    clients.make_fail_fast(client)
    bucket = client.bucket(bucket_name)
    upload = Upload(bucket, [(path, folder.join(path.relative_to(root).as_posix()).path) for path in files])
    try:
        with clients.google_errors(f"uploading {export.path} to {destination}",
                                   not_found=f"bucket gs://{bucket_name} does not exist",
                                   forbidden=f"permission denied writing to gs://{bucket_name}: you need "
                                             "storage.objects.create on it"):
            upload.run()
    except UserError as err:
        removed, kept = upload.remove()
        left = (f"; could not remove {len(kept)} object(s) (e.g. gs://{bucket_name}/{kept[0]}): remove them before "
                "deploying from there" if kept else "")
        raise UserError(f"{err}; removed the {removed} object(s) this upload had written, nothing was deployed"
                        f"{left}", err.exit_code) from None
    return len(files)


def check_remote_export(uri: str, storage_client=None, project: str | None = None) -> None:
    """A gs:// export is whole before Vertex AI is asked to serve it: ``saved_model.pb``, ``variables/variables.index``
    and every ``variables.data-NNNNN-of-MMMMM`` shard the names promise (an interrupted copy leaves some out).
    One line naming what is missing."""
    folder = GsPath.parse(uri)
    client = storage_client or clients.storage_client(project)
    prefix = folder.prefix or ""
    with clients.google_errors(f"listing {uri}", not_found=f"bucket gs://{folder.bucket} does not exist",
                               forbidden=f"permission denied listing gs://{folder.bucket}: you need "
                                         "storage.objects.list on it"):
        names = {b.name[len(prefix):] for b in client.list_blobs(folder.bucket, prefix=prefix)}
    missing = [name for name in ("saved_model.pb", "variables/variables.index") if name not in names]
    shards = [n for n in names if n.startswith("variables/variables.data-")]
    for shard in shards:
        count = shard.rsplit("-of-", 1)[-1]
        if is_digits(count) and len(count) <= 5:
            missing += [want for i in range(int(count))
                        if (want := f"variables/variables.data-{i:05d}-of-{count}") not in names]
            break
    else:
        missing.append("variables/variables.data-*")
    if missing:
        raise UserError(f"{uri} is not a whole export: {', '.join(sorted(set(missing))[:3])} missing (an interrupted "
                        "copy?); deploy the local export or run again to write it whole")


@dataclass
class Deployment:
    model: str
    endpoint: str
    deployed_model_id: str


def wait_operation(operation, what: str):
    with google_errors(what):
        return operation.result(timeout=OPERATION_TIMEOUT_SECONDS)


def find_endpoint(client, parent: str, display_name: str) -> str | None:

    with google_errors(f"listing endpoints in {parent}"):
        request = aiplatform_v1.ListEndpointsRequest(parent=parent, filter=f'display_name="{display_name}"')
        for endpoint in client.list_endpoints(request=request):
            if endpoint.display_name == display_name:
                return endpoint.name
    return None


def deploy(plan: DeployPlan, *, echo: Callable[[str], None] = lambda _m: None, storage_client=None,
           model_client=None, endpoint_client=None) -> Deployment:
    """Upload (local export), upload the Model, reuse or create the Endpoint, deploy with 100% traffic."""
    if plan.export.is_local:
        count = upload_export(plan.export, plan.artifact_uri, project=plan.project, storage_client=storage_client)
        echo(f"uploaded {count} file(s) to {plan.artifact_uri}")
    else:
        check_remote_export(plan.artifact_uri, storage_client, plan.project)
    model_client = model_client or vertex_client("ModelServiceClient", plan.region)
    endpoint_client = endpoint_client or vertex_client("EndpointServiceClient", plan.region)
    with google_errors(f"uploading model {plan.model_display_name} to {plan.parent}"):
        operation = model_client.upload_model(parent=plan.parent, model=build_model(plan))
    model_name = wait_operation(operation, f"uploading model {plan.model_display_name}").model
    echo(f"model: {model_name}")
    endpoint_name = plan.endpoint_name or find_endpoint(endpoint_client, plan.parent, plan.endpoint_display_name)
    created = endpoint_name is None
    if created:
        with google_errors(f"creating endpoint {plan.endpoint_display_name}"):
            operation = endpoint_client.create_endpoint(parent=plan.parent, endpoint=build_endpoint(plan))
        endpoint_name = wait_operation(operation, f"creating endpoint {plan.endpoint_display_name}").name
    how = "created" if created else "the stack's" if plan.endpoint_name else "reused"
    echo(f"endpoint: {endpoint_name} ({how})")
    with google_errors(f"deploying {model_name} to {endpoint_name}"):
        operation = endpoint_client.deploy_model(endpoint=endpoint_name,
                                                 deployed_model=build_deployed_model(plan, model_name),
                                                 traffic_split={NEW_DEPLOYMENT: 100})
    deployed = wait_operation(operation, f"deploying {model_name} to {endpoint_name}").deployed_model
    return Deployment(model_name, endpoint_name, deployed.id)
