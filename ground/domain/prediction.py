"""Serving facts: TF Serving (the docker image, its ports and model layout, batching) and Vertex AI prediction
(the prebuilt TensorFlow prediction image, deploy bounds, batch-prediction formats).

Sources (read 2026-11-22):

- TF Serving docker: github.com/tensorflow/serving ``tensorflow_serving/g3doc/docker.md`` and
  ``tensorflow_serving/tools/docker/Dockerfile`` at commit 9d981c5 (2026-07-30): port 8500 gRPC, 8501 REST,
  ``MODEL_NAME`` (default ``model``), ``MODEL_BASE_PATH`` (default ``/models``); the entrypoint runs
  ``tensorflow_model_server --port=8500 --rest_api_port=8501 --model_name=${MODEL_NAME}
  --model_base_path=${MODEL_BASE_PATH}/${MODEL_NAME} "$@"``, so extra arguments after the image name are
  passed to the server. The model base path holds integer version folders (``<base>/<name>/<version>/``).
- Batching: ``g3doc/serving_config.md`` (``--enable_batching``, ``--batching_parameters_file``, the text-proto
  example) and ``tensorflow_serving/batching/README.md`` ("CPU-only: One Approach": ``num_batch_threads`` =
  CPU cores, ``batch_timeout_micros`` 0 to start with, then 1000–10000).
- REST predict: ``g3doc/api_rest.md``: ``POST /v1/models/${MODEL_NAME}[/versions/${VERSION}]:predict`` with
  ``{"signature_name": …, "instances": […]}``; binary values as ``{"b64": …}``; tensors whose name ends in
  ``_bytes`` are binary; with one named input an instance may be the bare value; the answer is
  ``{"predictions": […]}`` (a list of objects when the signature has several outputs) or ``{"error": …}``.
- Vertex AI prebuilt prediction images: cloud.google.com/vertex-ai/docs/predictions/pre-built-containers
  (stored copies read 2026-11-22): ``tf2-cpu.2-15`` is the newest TensorFlow CPU image listed, end of
  availability Jan 14, 2027 (copies disagree on its end-of-patch date: Jan 14 or Jul 14, 2026). Only
  ``:latest`` tags work. A newer image (2.16+) could not be verified: the catalogue is refreshed by hand.
"""

from __future__ import annotations

import datetime
import hashlib
import re
from dataclasses import dataclass

from ground.domain.names import availability_warning, nearest_multi_region
from ground.errors import DomainError

# --------------------------------------------------------------------------------------------
# TF Serving (local docker / podman)
# --------------------------------------------------------------------------------------------

#: The TF Serving image. ``docker.io/`` spelled out so podman (which asks about short names) pulls the same
#: one. Tag 2.20.0: the newest release tag in github.com/tensorflow/serving (2026-04-23); that Docker Hub
#: publishes it under this tag [unverified: tf-serving-tag] (``tpuctl serve --image`` overrides).
TF_SERVING_IMAGE = "docker.io/tensorflow/serving:2.20.0"
#: Facts of this module that no source confirmed (``[unverified: id]`` where used; listed in docs/vertex.md).
UNVERIFIED_PREDICTION_FACTS: dict[str, str] = {
    "tf-serving-tag": "Docker Hub publishes tensorflow/serving under the tag 2.20.0",
    "tf215-loads-export": "TensorFlow 2.15 (the prediction image) loads the SavedModel TensorFlow 2.21 exports",
}
#: Ports inside the container (Dockerfile ``EXPOSE``); tpuctl publishes them on 127.0.0.1 only.
TF_SERVING_GRPC_PORT = 8500
TF_SERVING_REST_PORT = 8501
#: ``MODEL_BASE_PATH`` default inside the image; a model is served from ``/models/<name>/<version>/``.
TF_SERVING_MODEL_BASE = "/models"
#: Where ``tpuctl serve --batching`` mounts its batching parameters file inside the container.
TF_SERVING_BATCHING_FILE = "/models/batching_parameters.txt"
#: The file ``tpuctl serve --batching`` writes next to the export (in the model folder, beside the versions;
#: TF Serving only loads integer-named folders from there).
BATCHING_FILE_NAME = "batching_parameters.txt"
#: The signature tpuctl's trainer exports (trainer/export.py) and its bytes input.
SERVING_SIGNATURE = "serving_default"
SERVING_INPUT = "image_bytes"

#: Model names tpuctl accepts (its own rule: the name is a URL path segment and a folder name).
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: TF Serving versions are int64; a folder name beyond that is not a version.
MAX_MODEL_VERSION = 2**63 - 1


def check_model_name(name: str) -> str:
    if not _MODEL_NAME.match(name or ""):
        raise DomainError(f"model name {name!r} must be 1-64 letters, digits, '_', '.' or '-', starting with a "
                          "letter or digit (it becomes part of the URL /v1/models/<name>:predict)")
    return name


def model_version(folder_name: str) -> int:
    """The integer version of an export folder (``<base>/<name>/<version>``), or DomainError."""
    if not re.fullmatch(r"[0-9]{1,19}", folder_name or "") or int(folder_name) > MAX_MODEL_VERSION:
        raise DomainError(f"export folder {folder_name!r} is not a version: TF Serving loads only folders named by "
                          "an integer (<model>/<version>/saved_model.pb)")
    return int(folder_name)


@dataclass(frozen=True)
class BatchingParameters:
    """TF Serving's ``BatchingParameters`` text proto (serving_config.md); defaults follow the batching
    README's CPU-only starting point, with a 1 ms timeout so single requests are not held back."""

    max_batch_size: int = 32
    batch_timeout_micros: int = 1000
    max_enqueued_batches: int = 100
    num_batch_threads: int = 2

    def text(self) -> str:
        for key, value in vars(self).items():
            if not isinstance(value, int) or value < (0 if key == "batch_timeout_micros" else 1):
                raise DomainError(f"batching parameter {key} must be a positive integer (got {value!r})")
        return (f"max_batch_size {{ value: {self.max_batch_size} }}\n"
                f"batch_timeout_micros {{ value: {self.batch_timeout_micros} }}\n"
                f"max_enqueued_batches {{ value: {self.max_enqueued_batches} }}\n"
                f"num_batch_threads {{ value: {self.num_batch_threads} }}\n")


def predict_path(model_name: str) -> str:
    """REST predict path of a model on TF Serving (api_rest.md)."""
    return f"/v1/models/{check_model_name(model_name)}:predict"


def model_status_path(model_name: str) -> str:
    """REST model-status path of a model on TF Serving: ``GET /v1/models/NAME`` answers
    ``{"model_version_status": [{"version": "1", "state": "AVAILABLE", …}]}`` once a version is loaded (TF Serving's
    REST API, "Model status API"; states from tensorflow_serving/apis/get_model_status.proto, read 2026-11-24)."""
    return f"/v1/models/{check_model_name(model_name)}"


# --------------------------------------------------------------------------------------------
# Vertex AI prediction
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PredictionImage:
    """A Vertex AI prebuilt prediction container (Model.containerSpec.imageUri)."""
    name: str                       # under <area>-docker.pkg.dev/vertex-ai/prediction/
    tensorflow: str
    end_of_availability: datetime.date | None
    source: str
    checked: str

    def uri(self, region: str | None = None) -> str:
        """The same image in the Artifact Registry multi-region nearest ``region`` (us / europe / asia)."""
        return f"{nearest_multi_region(region)}-docker.pkg.dev/vertex-ai/prediction/{self.name}:latest"


_PREBUILT_SOURCE = "https://cloud.google.com/vertex-ai/docs/predictions/pre-built-containers"

#: The prebuilt TF2 prediction images tpuctl deploys with (CPU: the trainer's SavedModel needs no GPU).
#: The export is written by TensorFlow 2.21 and served by 2.15: the signature uses only long-standing ops
#: (decode_image, resize, conv/dense, softmax, argmax, gather) [unverified: tf215-loads-export].
VERTEX_PREDICTION_IMAGES: dict[str, PredictionImage] = {
    "cpu": PredictionImage("tf2-cpu.2-15", "2.15", datetime.date(2027, 1, 14), _PREBUILT_SOURCE, "2026-11-22"),
}


#: Serving from a container tpuctl controls (issue 42): Google publishes no TensorFlow prediction image newer than
#: ``tf2-cpu.2-15`` (above), so ``tpuctl deploy`` can serve with TF Serving itself - the same server and version as
#: ``tpuctl serve`` (``TF_SERVING_IMAGE``) - from a copy in the stack's Artifact Registry repository. Facts (read
#: 2026-11-27): ``ModelContainerSpec.imageUri`` "must identify an image in Artifact Registry"; ``command`` overrides
#: the ENTRYPOINT; in ``args`` "you can reference environment variables set by Vertex AI ... using the following
#: syntax: $(VARIABLE_NAME)" (cloud.google.com/vertex-ai/docs/reference/rest/v1/ModelContainerSpec); the server
#: listens on ``ports[0]`` and may be "ML serving software ... such as TensorFlow Serving"; ``AIP_STORAGE_URI`` is the
#: Cloud Storage copy of the Model's ``artifactUri`` (cloud.google.com/vertex-ai/docs/predictions/custom-container-
#: requirements). TF Serving reads ``--model_base_path`` as a folder of numeric version folders and serves the
#: highest, so the Model's ``artifactUri`` is the export's model folder (the parent of its version folder); its REST
#: API answers ``POST /v1/models/NAME:predict`` with the ``{"instances": …}`` body Vertex AI forwards and
#: ``GET /v1/models/NAME`` for health (github.com/tensorflow/serving, REST API docs).
TF_SERVING_REPOSITORY_IMAGE = "tf-serving"
TF_SERVING_VERSION = TF_SERVING_IMAGE.rsplit(":", 1)[1]


def tf_serving_image_uri(repository_url: str) -> str:
    """The stack's copy of TF Serving: ``<region>-docker.pkg.dev/<project>/<repository>/tf-serving:<version>``."""
    return f"{repository_url.rstrip('/')}/{TF_SERVING_REPOSITORY_IMAGE}:{TF_SERVING_VERSION}"


def tf_serving_copy_commands(image_uri: str) -> str:
    """How to put TF Serving into the stack's repository (Vertex AI pulls from Artifact Registry only)."""
    return f"docker pull {TF_SERVING_IMAGE} && docker tag {TF_SERVING_IMAGE} {image_uri} && docker push {image_uri}"


def tf_serving_container(image_uri: str, model_name: str) -> dict:
    """The ModelContainerSpec fields that run TF Serving on the Model's artifacts (REST on TF_SERVING_REST_PORT)."""
    check_model_name(model_name)
    return {
        "image_uri": image_uri,
        "command": ["tensorflow_model_server"],
        "args": [f"--model_name={model_name}", "--model_base_path=$(AIP_STORAGE_URI)",
                 f"--rest_api_port={TF_SERVING_REST_PORT}", f"--port={TF_SERVING_GRPC_PORT}"],
        "ports": [TF_SERVING_REST_PORT],
        "predict_route": f"/v1/models/{model_name}:predict",
        "health_route": f"/v1/models/{model_name}",
    }


def check_prediction_image(image: PredictionImage, today: datetime.date) -> str | None:
    """DomainError past the image's end of availability; a warning line within 90 days of it; else None."""
    return availability_warning(f"the Vertex AI prediction image {image.name}", image.end_of_availability, today,
                                past=f"({image.source}); Google publishes no newer TensorFlow prediction image: "
                                     "serve with TF Serving from the stack's repository (tpuctl deploy --tf-serving)",
                                soon="Google publishes no newer TensorFlow one: from that date deploy serves with TF "
                                     "Serving from the stack's repository (--tf-serving now; docs/serving.md)")


#: Default machine for an online-prediction replica. n1-standard-2 is in Vertex AI's list of prediction
#: machine types (cloud.google.com/vertex-ai/docs/predictions/configure-compute); not re-read on 2026-11-22.
DEFAULT_PREDICTION_MACHINE = "n1-standard-2"
#: tpuctl's own guard on --max-replicas (a typo should not buy a hundred machines).
MAX_PREDICTION_REPLICAS = 100
_MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")


def check_replicas(min_replicas: int, max_replicas: int) -> None:
    if min_replicas < 1:
        raise DomainError(f"--min-replicas must be at least 1 (got {min_replicas}): a dedicated deployment keeps "
                          "at least one replica")
    if max_replicas < min_replicas:
        raise DomainError(f"--max-replicas ({max_replicas}) must be at least --min-replicas ({min_replicas})")
    if max_replicas > MAX_PREDICTION_REPLICAS:
        raise DomainError(f"--max-replicas {max_replicas} is above tpuctl's limit of {MAX_PREDICTION_REPLICAS}")


def check_machine_type(machine_type: str) -> str:
    if not _MACHINE_TYPE.match(machine_type or ""):
        raise DomainError(f"machine type {machine_type!r} is not a Compute Engine machine type name "
                          "(like n1-standard-2)")
    return machine_type


#: Batch prediction input: ``file-list`` (a text file of gs:// URIs; each file becomes ``{"b64": …}``) and
#: output ``jsonl`` (google.cloud.aiplatform_v1 BatchPredictionJob.InstanceConfig docs, client 2.7.0). With
#: one named input (``image_bytes``) TF Serving accepts the bare value as an instance (api_rest.md).
BATCH_INSTANCES_FORMAT = "file-list"
BATCH_PREDICTIONS_FORMAT = "jsonl"
#: Images tpuctl puts in one batch-prediction file list (its own bound).
MAX_BATCH_FILES = 100_000
#: The formats tpuctl sends to a served model as they are: JPEG and PNG, which ``tf.io.decode_image`` (the export's
#: signature, trainer/export.py) decodes in every TensorFlow the export is served with (TF Serving 2.20, the Vertex
#: AI prediction image's 2.15). ``tpuctl predict IMAGE…`` takes every format ``make-tfrecords`` reads
#: (trainer.flags.IMAGE_FORMATS) and converts the others first; a batch job's files go to the server unconverted,
#: so ``--batch`` takes only these endings.
BATCH_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")

_ENDPOINT = re.compile(r"^projects/([^/]+)/locations/([a-z0-9-]+)/endpoints/([^/]+)$")
_MODEL = re.compile(r"^projects/([^/]+)/locations/([a-z0-9-]+)/models/([^/]+)$")


def parse_endpoint_name(name: str) -> tuple[str, str, str] | None:
    """(project, region, id) of ``projects/P/locations/R/endpoints/ID``, else None."""
    m = _ENDPOINT.match(name or "")
    return (m.group(1), m.group(2), m.group(3)) if m else None


def parse_model_name(name: str) -> tuple[str, str, str] | None:
    m = _MODEL.match(name or "")
    return (m.group(1), m.group(2), m.group(3)) if m else None


_DISPLAY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_display_name(name: str, what: str) -> str:
    """tpuctl's rule for the display names it creates (Vertex allows up to 128 UTF-8 characters)."""
    if not _DISPLAY_NAME.match(name or ""):
        raise DomainError(f"{what} {name!r} must be 1-128 letters, digits, '_', '.' or '-'")
    return name


#: Label value (``PURPOSE_LABEL``) of the Endpoint a stack owns (``servingEndpoint``).
SERVING_ENDPOINT_PURPOSE = "serving"
_ENDPOINT_NAME = re.compile(r"^projects/[^/]+/locations/[a-z0-9-]+/endpoints/[1-9][0-9]{0,9}$")


def serving_endpoint_id(project: str, display_name: str) -> str:
    """The Endpoint ID the stack gives its ``servingEndpoint``: 10 digits, no leading zero, the same for the
    same project and display name (pulumi-gcp 10.2 ``gcp.vertex.AiEndpoint.name``: "must be numeric with no
    leading zeros and can be at most 10 digits"; Pulumi's own auto-naming would not be numeric)."""
    digest = hashlib.sha256(f"{project}/{display_name}".encode()).digest()
    return str(1_000_000_000 + int.from_bytes(digest[:8], "big") % 9_000_000_000)


def serving_endpoint_name(project: str, region: str, display_name: str) -> str:
    return f"projects/{project}/locations/{region}/endpoints/{serving_endpoint_id(project, display_name)}"


def check_endpoint_name(name: str, what: str = "endpoint") -> str:
    if not _ENDPOINT_NAME.match(name or ""):
        raise DomainError(f"{what} {name!r} must be projects/P/locations/REGION/endpoints/ID (ID: 1-10 digits)")
    return name
