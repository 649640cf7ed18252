"""Serving a trained export: TF Serving locally (``tpuctl serve``), predictions over REST or from a Vertex AI
Endpoint (``tpuctl predict``), a Vertex AI Model + Endpoint deployment (``tpuctl deploy``) and a batch
prediction job (``tpuctl predict --batch``).

The export is the trainer's (trainer/export.py, docs/trainer.md): ``<model_dir>/export/<model>/<version>/``
with ``saved_model.pb`` and a ``serving_default`` signature taking ``image_bytes`` (encoded JPEG/PNG, tf.string
[None]) and returning ``probabilities`` [None, C], ``class_id`` and ``class_name``. Facts about TF Serving
and Vertex AI prediction (ports, layout, images, formats) come from ``tpuctl.ground.domain`` (prediction.py).

google-cloud clients and requests are imported inside the functions that use them.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import math
import os
import re
import shlex
import shutil
import stat
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tpuctl.ground import domain
from tpuctl.ground.errors import DomainError, UserError
from tpuctl.ground.files import printable, read_file
from tpuctl.ground.outputs import StackOutputs

#: Bounds of `tpuctl predict` (tpuctl's own): images per request, bytes per image, seconds per request.
DEFAULT_BATCH_SIZE = 16
MAX_BATCH_SIZE = 256
DEFAULT_MAX_IMAGE_BYTES = 4 * 1024 * 1024
MAX_IMAGES = 10_000
DEFAULT_TIMEOUT_SECONDS = 30.0
MAX_TIMEOUT_SECONDS = 3600.0
#: An answer larger than this is not a prediction for at most MAX_BATCH_SIZE images.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
#: A data manifest names a few thousand classes at most.
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
#: Files and bytes of one export upload (the trainer's exports are a few files, a few MB to ~100 MB).
MAX_EXPORT_FILES = 10_000
MAX_EXPORT_BYTES = 20 * 1024**3
#: How long deploy waits for each long-running operation (deploying a model can take 15+ minutes).
OPERATION_TIMEOUT_SECONDS = 3600.0

_JPEG = b"\xff\xd8\xff"
_PNG = b"\x89PNG\r\n\x1a\n"
_REST_PREDICT = re.compile(r"^/v1/models/([^/:]+)(/versions/[0-9]+|/labels/[^/:]+)?:predict$")


# --------------------------------------------------------------------------------------------
# The export: where it is, and whether it is one
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Export:
    path: str                  # the version folder (local path or gs:// URL)
    model_name: str            # the folder above it (the trainer's --model), or --model-name
    version: int
    run: Any = None            # tpuctl.services.runs.Run when the export came from a run

    @property
    def is_local(self) -> bool:
        return not self.path.startswith("gs://")


def check_export_dir(path: str, model_name: str | None = None, run: Any = None) -> Export:
    """Validate an export folder at the edge: a version folder named by an integer, with saved_model.pb
    (local: checked on disk; gs://: by name only, the upload or Vertex AI reads it)."""
    text = path.rstrip("/")
    name = text.rsplit("/", 1)[-1]
    parent = text.rsplit("/", 2)[-2] if text.count("/") >= 1 else ""
    try:
        version = domain.model_version(name)
        if text.startswith("gs://"):
            domain.bucket_name_from(text)      # the bucket's naming rules, before any request
    except DomainError as exc:
        raise UserError(f"{path}: {exc}") from None
    if not text.startswith("gs://"):
        folder = Path(text).expanduser()
        if not folder.is_dir():
            raise UserError(f"{path}: no such export folder")
        if not (folder / "saved_model.pb").is_file():
            raise UserError(f"{path}: no saved_model.pb in it (not a SavedModel export; "
                            "the trainer writes <model_dir>/export/<model>/<version>/)")
        text = str(folder.resolve())
        parent = folder.resolve().parent.name
    chosen = model_name or parent
    try:
        domain.check_model_name(chosen)
    except DomainError as exc:
        hint = "" if model_name else " (the export's model folder); pass --model-name"
        raise UserError(f"{exc}{hint}") from None
    return Export(text, chosen, version, run)


def resolve_export(ref: str, *, runs_dir: str = "runs", model_name: str | None = None,
                   outputs: StackOutputs | None = None, storage_client=None) -> Export:
    """``ref``: an export version folder, a run folder (with result.json), a gs:// export URL, or a run name
    (a unique prefix is enough) under ``runs_dir`` or, with ``outputs``, the stack's artifacts bucket."""
    from tpuctl.services import runs

    if ref.startswith("gs://"):
        return check_export_dir(ref, model_name)
    local = Path(ref).expanduser()
    if local.is_dir() and ((local / "saved_model.pb").exists() or local.name.isdigit()):
        return check_export_dir(ref, model_name)
    if local.is_dir() and (local / runs.RESULT_FILE).is_file():
        run = runs._read_local(local)
        if run is None or run.problem is not None:
            raise UserError(f"{ref}: its {runs.RESULT_FILE} is not a trainer result"
                            + (f" ({run.problem})" if run is not None else ""))
        return _run_export(run, model_name)
    if local.is_dir():
        if any(p.is_dir() and p.name.isdigit() for p in local.iterdir()):
            raise UserError(f"{ref} is a model folder: name one of its version folders (…/{ref.rstrip('/').rsplit('/', 1)[-1]}/N)")
        raise UserError(f"{ref}: neither an export (no saved_model.pb) nor a run folder (no {runs.RESULT_FILE})")
    found = runs.list_runs(runs_dir)
    try:
        return _run_export(runs.find_run(found, ref), model_name)
    except UserError:
        if outputs is None:
            raise
    return _run_export(runs.find_run(runs.list_runs(outputs=outputs, storage_client=storage_client), ref), model_name)


def _run_export(run, model_name: str | None) -> Export:
    if run.problem is not None:
        raise UserError(f"run {run.name} has a bad record: {run.problem}")
    export_dir = run.result.get("export_dir")
    if not isinstance(export_dir, str) or not export_dir:
        raise UserError(f"run {run.name} names no export_dir in its result.json")
    return check_export_dir(export_dir, model_name, run)


# --------------------------------------------------------------------------------------------
# tpuctl serve: TF Serving in docker or podman
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ServePlan:
    argv: list[str]
    runtime: str | None                 # path of docker/podman, None when neither is installed
    batching_file: Path | None = None
    batching_text: str | None = None

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


def container_runtime(which: Callable[[str], str | None] = shutil.which) -> str | None:
    """docker if on PATH, else podman, else None."""
    return which("docker") or which("podman")


def _check_port(port: int, flag: str) -> None:
    if not 1 <= port <= 65535:
        raise UserError(f"{flag} {port} is not a TCP port (1-65535)")


def plan_serve(export: Export, *, port: int = domain.TF_SERVING_REST_PORT,
               grpc_port: int = domain.TF_SERVING_GRPC_PORT, batching: bool = False,
               image: str = domain.TF_SERVING_IMAGE, runtime: str | None = None,
               parameters: domain.BatchingParameters | None = None) -> ServePlan:
    """The docker/podman command serving ``export`` (its version folder mounted read-only at
    ``/models/<name>/<version>``), REST and gRPC published on 127.0.0.1 only."""
    if not export.is_local:
        raise UserError(f"{export.path} is in Cloud Storage: `tpuctl serve` mounts a local export "
                        "(copy it first: gcloud storage cp -r URL DIR) or use `tpuctl deploy`")
    _check_port(port, "--port")
    _check_port(grpc_port, "--grpc-port")
    if port == grpc_port:
        raise UserError(f"--port and --grpc-port are both {port}")
    if not image or any(c.isspace() for c in image):
        raise UserError(f"--image {image!r} is not an image reference")
    source = export.path
    if "," in source or "=" in source:
        raise UserError(f"{source}: a path with ',' or '=' cannot be given to `--mount` (move the export)")
    tool = Path(runtime).name if runtime else "docker"
    name = export.model_name
    target = f"{domain.TF_SERVING_MODEL_BASE}/{name}/{export.version}"
    argv = [tool, "run", "--rm", "--name", f"tpuctl-serve-{name}-{port}",
            "-p", f"127.0.0.1:{port}:{domain.TF_SERVING_REST_PORT}",
            "-p", f"127.0.0.1:{grpc_port}:{domain.TF_SERVING_GRPC_PORT}",
            "--mount", f"type=bind,source={source},target={target},readonly"]
    batching_file = batching_text = None
    if batching:
        batching_file = Path(source).parent / domain.BATCHING_FILE_NAME
        batching_text = (parameters or domain.BatchingParameters()).text()
        argv += ["--mount", f"type=bind,source={batching_file},target={domain.TF_SERVING_BATCHING_FILE},readonly"]
    argv += ["-e", f"MODEL_NAME={name}", image]
    if batching:
        argv += ["--enable_batching", f"--batching_parameters_file={domain.TF_SERVING_BATCHING_FILE}"]
    return ServePlan(argv, runtime, batching_file, batching_text)


def run_serve(plan: ServePlan, on_start: Callable[[], None] = lambda: None) -> int:
    """Write the batching file (if any), then run the container in the foreground; its exit status.
    Without docker or podman nothing is written."""
    if plan.runtime is None:
        raise UserError("neither docker nor podman is installed (on PATH): install one, or run the command "
                        "above on a machine that has one", 1)
    if plan.batching_file is not None and plan.batching_text is not None:
        tmp = plan.batching_file.with_name(plan.batching_file.name + ".tmp")
        tmp.write_text(plan.batching_text)
        os.replace(tmp, plan.batching_file)
    argv = [plan.runtime, *plan.argv[1:]]
    proc = subprocess.Popen(argv)
    on_start()
    try:
        return proc.wait()
    except KeyboardInterrupt:
        try:  # the container got the same Ctrl-C (one process group); give it time to stop
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


# --------------------------------------------------------------------------------------------
# tpuctl predict: images in, top classes out
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Image:
    path: str
    data: bytes


@dataclass
class Prediction:
    path: str
    #: (class id, name, probability; None when the server sent NaN or an infinite number)
    top: list[tuple[int, str | None, float | None]] = field(default_factory=list)


def read_images(paths: Sequence[str], max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> list[Image]:
    """Every path a JPEG or PNG file of at most ``max_bytes``; a bad one is one line naming it."""
    if not paths:
        raise UserError("give at least one image (JPEG or PNG)")
    if len(paths) > MAX_IMAGES:
        raise UserError(f"{len(paths)} images is more than {MAX_IMAGES} per call")
    if max_bytes < 1:
        raise UserError(f"--max-bytes must be positive (got {max_bytes})")
    images = []
    for path in paths:
        data = read_file(Path(path).expanduser(), "image", max_bytes,
                         hint=f"give JPEG or PNG files of at most {max_bytes} bytes (--max-bytes)")
        if not (data.startswith(_JPEG) or data.startswith(_PNG)):
            raise UserError(f"{path}: not a JPEG or PNG image")
        images.append(Image(str(path), data))
    return images


def instances(images: Sequence[Image]) -> list[dict[str, Any]]:
    """TF Serving's row format for the bytes input (api_rest.md, "Encoding binary values")."""
    return [{domain.SERVING_INPUT: {"b64": base64.b64encode(i.data).decode("ascii")}} for i in images]


def _batches(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    if not 1 <= size <= MAX_BATCH_SIZE:
        raise UserError(f"--batch-size must be 1-{MAX_BATCH_SIZE} (got {size})")
    return [items[i:i + size] for i in range(0, len(items), size)]


def shown_url(url: str) -> str:
    """``url`` as tpuctl prints it: credentials (``user:pass@``) never echoed, control characters stripped."""
    try:
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            url = urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))
    except ValueError:
        url = url.rsplit("@", 1)[-1] if "@" in url else url
    return printable(url, 300)


def check_predict_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        ok = (parts.scheme in ("http", "https") and bool(parts.hostname) and bool(_REST_PREDICT.match(parts.path))
              and (parts.port is None or parts.port > 0))
    except ValueError:          # 'http://[::1' (an unclosed IPv6 address), a port past 65535
        ok = False
    if not ok:
        raise UserError(f"{shown_url(url)!r} is neither a TF Serving predict URL (http://HOST:8501/v1/models/NAME:predict) "
                        "nor a Vertex AI endpoint (projects/P/locations/R/endpoints/ID)")
    return url


def _scrub(text: str, url: str) -> str:
    """A library's error text about ``url``, without the URL's password or user name."""
    try:
        parts = urlsplit(url)
        secrets = [s for s in (parts.password, parts.username) if s]
    except ValueError:
        secrets = []
    for secret in secrets:
        text = text.replace(secret, "***")
    return printable(text, 200)


def _post(url: str, body: dict[str, Any], timeout: float) -> Any:
    """POST ``body``; ``timeout`` bounds the WHOLE request (connect, headers and every byte of the answer), so a
    server that drips its answer cannot keep tpuctl waiting: the request runs in a worker thread and is abandoned
    (its socket shut down) at the deadline."""
    if not 0 < timeout <= MAX_TIMEOUT_SECONDS:
        raise UserError(f"--timeout must be more than 0 and at most {MAX_TIMEOUT_SECONDS:g} seconds (got {timeout:g})")
    outcome: dict[str, Any] = {}
    live: dict[str, Any] = {}
    _within(timeout, lambda: _post_worker(url, body, timeout, outcome, live), lambda: _abandon(live), shown_url(url))
    if "error" in outcome:
        raise outcome["error"]
    status, text = outcome["answer"]
    return _predictions(url, status, text)


def _within(timeout: float, work: Callable[[], Any], abandon: Callable[[], None], where: str) -> Any:
    """``work()`` with one total deadline: it runs in a daemon worker thread; past ``timeout`` seconds ``abandon()``
    is called (to shut its socket) and the wait ends in one line. ``work``'s exceptions are raised here."""
    import threading

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True, name="tpuctl-predict")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        abandon()
        raise UserError(f"no answer from {where} within {timeout:g} s (--timeout bounds the whole request)", 1)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _abandon(live: dict[str, Any]) -> None:
    """Shut the socket of a request past its deadline, so its worker thread stops reading too."""
    import socket

    live["abandoned"] = True
    raw = getattr(live.get("response"), "raw", None)
    # urllib3 keeps the socket on its connection, or (a response that closes the connection) only in the
    # http.client response it reads from
    candidates = (getattr(getattr(raw, "connection", None), "sock", None),
                  getattr(getattr(getattr(getattr(raw, "_fp", None), "fp", None), "raw", None), "_sock", None))
    for sock in candidates:
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _post_worker(url: str, body: dict[str, Any], timeout: float, outcome: dict[str, Any], live: dict[str, Any]) -> None:
    import requests

    from bootstrap.clients import unreachable_reason

    try:
        with requests.post(url, json=body, timeout=(min(5.0, timeout), timeout), stream=True) as response:
            live["response"] = response
            chunks, size = [], 0
            for chunk in response.iter_content(1 << 16):
                if live.get("abandoned"):   # past the deadline (a response that came after it): stop reading
                    return
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise UserError(f"{shown_url(url)} answered more than {MAX_RESPONSE_BYTES} bytes: not a prediction", 1)
                chunks.append(chunk)
            outcome["answer"] = (response.status_code, b"".join(chunks))
    except UserError as exc:
        outcome["error"] = exc
    except requests.exceptions.Timeout:
        outcome["error"] = UserError(f"no answer from {shown_url(url)} within {timeout:g} s (--timeout)", 1)
    except (requests.exceptions.RequestException, ValueError) as exc:
        reason = unreachable_reason(exc) or _scrub((str(exc).splitlines() or ["request failed"])[0], url)
        outcome["error"] = UserError(f"cannot reach {shown_url(url)}: {reason}", 1)
    except Exception as exc:  # noqa: BLE001 - reported by the waiting thread as one line, never a traceback
        outcome["error"] = UserError(f"the request to {shown_url(url)} failed: {_scrub(str(exc), url)}", 1)


def _predictions(url: str, status: int, text: bytes) -> list[Any]:
    """The ``predictions`` list of a TF Serving answer; anything else (an HTTP error, not JSON, nested past
    Python's recursion limit, a number too long to convert) is one line."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    if status != 200:
        detail = doc.get("error") if isinstance(doc, dict) else None
        detail = detail or text[:200].decode("utf-8", "replace").strip() or "no detail"
        raise UserError(f"{shown_url(url)} answered HTTP {status}: {printable(' '.join(str(detail).split()), 300)}", 1)
    if not isinstance(doc, dict) or not isinstance(doc.get("predictions"), list):
        raise UserError(f"{shown_url(url)} did not answer with a JSON object holding \"predictions\"", 1)
    return doc["predictions"]


def _number(value: Any) -> float | None:
    """A JSON number as a float (a 400-digit integer is infinite); None for anything else."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


def top_classes(path: str, prediction: Any, class_names: Sequence[str] | None, k: int, where: str) -> Prediction:
    """The ``k`` most probable classes of one prediction (an object with ``probabilities`` and maybe
    ``class_id``/``class_name``, or a bare probability list). Names: the model's own ``class_name`` for its
    top class, else ``class_names`` (the data manifest) when known."""
    model_id = model_name = None
    probs = prediction
    if isinstance(prediction, dict):
        probs = prediction.get("probabilities")
        model_id = prediction.get("class_id")
        model_name = prediction.get("class_name")
    numbers = [_number(v) for v in probs] if isinstance(probs, list) else None
    if not numbers or any(v is None for v in numbers):
        raise UserError(f"{printable(where, 300)}: a prediction without a list of probabilities ({path})", 1)
    # NaN or infinite is no probability: it ranks last and is shown as unknown (None, null in JSON)
    values = [v if v is not None and math.isfinite(v) else None for v in numbers]
    if class_names is not None and len(class_names) != len(values):
        class_names = None  # another model's manifest: do not guess
    order = sorted(range(len(values)), key=lambda i: (values[i] is None, -(values[i] or 0.0), i))[:k]
    top = []
    for i in order:
        name = class_names[i] if class_names else None
        if isinstance(model_name, str) and _number(model_id) == i:
            name = model_name
        top.append((i, name, values[i]))
    return Prediction(path, top)


def predict_rest(url: str, images: Sequence[Image], *, batch_size: int = DEFAULT_BATCH_SIZE,
                 timeout: float = DEFAULT_TIMEOUT_SECONDS, class_names: Sequence[str] | None = None,
                 k: int = 3) -> list[Prediction]:
    """POST the images to a TF Serving ``:predict`` URL, ``batch_size`` per request."""
    check_predict_url(url)
    out: list[Prediction] = []
    for batch in _batches(list(images), batch_size):
        body = {"signature_name": domain.SERVING_SIGNATURE, "instances": instances(batch)}
        predictions = _post(url, body, timeout)
        if len(predictions) != len(batch):
            raise UserError(f"{shown_url(url)} answered {len(predictions)} predictions for {len(batch)} images", 1)
        out += [top_classes(i.path, p, class_names, k, shown_url(url)) for i, p in zip(batch, predictions)]
    return out


def _vertex_client(kind: str, region: str):
    from google.cloud import aiplatform_v1

    from bootstrap.clients import gapic

    return gapic(getattr(aiplatform_v1, kind), "vertex", default_endpoint=domain.VERTEX_API_HOST.format(region=region))


def predict_vertex(endpoint: str, images: Sequence[Image], *, batch_size: int = DEFAULT_BATCH_SIZE,
                   timeout: float = DEFAULT_TIMEOUT_SECONDS, class_names: Sequence[str] | None = None,
                   k: int = 3, client=None) -> list[Prediction]:
    """``PredictionServiceClient.predict`` on a Vertex AI Endpoint with the same instances as TF Serving's."""
    from google.protobuf.json_format import MessageToDict

    from bootstrap.clients import google_errors

    parsed = domain.parse_endpoint_name(endpoint)
    if parsed is None:
        raise UserError(f"{endpoint!r} is not a Vertex AI endpoint name (projects/P/locations/R/endpoints/ID)")
    client = client or _vertex_client("PredictionServiceClient", parsed[1])
    out: list[Prediction] = []
    for batch in _batches(list(images), batch_size):
        with google_errors(f"predicting on {endpoint}", not_found=f"endpoint {endpoint} does not exist"):
            request = {"endpoint": endpoint, "instances": instances(batch), "timeout": timeout}
            response = _within(timeout, lambda r=request: client.predict(**r), lambda: None, endpoint)
        predictions = MessageToDict(type(response).pb(response)).get("predictions", [])
        if len(predictions) != len(batch):
            raise UserError(f"{endpoint} answered {len(predictions)} predictions for {len(batch)} images", 1)
        out += [top_classes(i.path, p, class_names, k, endpoint) for i, p in zip(batch, predictions)]
    return out


def read_class_names(manifest: str) -> list[str]:
    """``classes`` of a data folder's manifest.json (local); the order is the model's class ids."""
    path = Path(manifest).expanduser()
    if path.is_dir():
        path = path / "manifest.json"
    data = read_file(path, "data manifest", MAX_MANIFEST_BYTES,
                     hint="give a data folder's manifest.json (or the folder), as `tpuctl data make-tfrecords` wrote it")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise UserError(f"{manifest}: not valid JSON") from None
    classes = doc.get("classes") if isinstance(doc, dict) else None
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
        raise UserError(f"{manifest}: no \"classes\" list of names")
    return classes


# --------------------------------------------------------------------------------------------
# tpuctl deploy: Model upload, Endpoint, deployment (Vertex AI)
# --------------------------------------------------------------------------------------------

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

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"


def _stack_location(outputs: StackOutputs | None, region: str | None) -> tuple[str, str]:
    if outputs is None:
        raise UserError("give --stack NAME or --outputs FILE (the project, region and artifacts bucket)")
    if not outputs.project:
        raise UserError("the stack outputs name no project")
    region = region or outputs.region
    if not region:
        raise UserError("the stack outputs name no region; pass --region")
    try:
        domain.validate_region(region)
        domain.validate_project_id(outputs.project)
    except DomainError as exc:
        raise UserError(str(exc)) from None
    return outputs.project, region


def upload_destination(export: Export, outputs: StackOutputs) -> str:
    """Where a local export goes in the artifacts bucket: ``gs://<artifacts>/models/<run>/<model>/<version>``."""
    if not export.is_local:
        return export.path
    artifacts = outputs.bucket_url("artifacts")
    if not artifacts:
        raise UserError("the stack outputs name no artifacts bucket to upload the export to")
    run = export.run.name if export.run is not None else Path(export.path).parent.parent.parent.name or "export"
    return f"{artifacts}/models/{run}/{export.model_name}/{export.version}"


def _prediction_image(image: str | None, region: str, today: datetime.date) -> tuple[str, str | None]:
    if image:
        if any(c.isspace() for c in image) or "/" not in image:
            raise UserError(f"--image {image!r} is not a container image URI (REGION-docker.pkg.dev/P/REPO/IMAGE:TAG)")
        return image, None
    entry = domain.VERTEX_PREDICTION_IMAGES["cpu"]
    warning = domain.check_prediction_image(entry, today)
    return entry.uri(region), warning


def plan_deploy(export: Export, outputs: StackOutputs | None, *, region: str | None = None,
                machine_type: str = domain.DEFAULT_PREDICTION_MACHINE, min_replicas: int = 1,
                max_replicas: int = 1, endpoint: str | None = None, image: str | None = None,
                today: datetime.date | None = None) -> DeployPlan:
    """Validate everything and assemble the deployment; nothing is uploaded or created here."""
    project, region = _stack_location(outputs, region)
    assert outputs is not None
    domain.check_machine_type(machine_type)
    domain.check_replicas(min_replicas, max_replicas)
    image_uri, warning = _prediction_image(image, region, today or datetime.date.today())
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
                      owned)


def build_model(plan: DeployPlan):
    from google.cloud import aiplatform_v1

    return aiplatform_v1.Model(
        display_name=plan.model_display_name,
        artifact_uri=plan.artifact_uri,
        container_spec=aiplatform_v1.ModelContainerSpec(image_uri=plan.image_uri),
        labels=plan.labels,
    )


def build_endpoint(plan: DeployPlan):
    from google.cloud import aiplatform_v1

    return aiplatform_v1.Endpoint(display_name=plan.endpoint_display_name, labels=plan.labels)


def build_deployed_model(plan: DeployPlan, model_name: str):
    from google.cloud import aiplatform_v1

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
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(type(message).pb(message))


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


def export_files(root: Path) -> list[Path]:
    """The regular files of an export folder, walked without following symlinks: a symlink (to a file or a folder,
    inside or out) or a FIFO/device in it is refused in one line, so an upload never carries files from outside
    the folder (or blocks on a FIFO)."""
    files: list[Path] = []
    for top, dirs, names in os.walk(root):          # never descends into a symlinked folder
        for name in sorted([*dirs, *names]):
            path = Path(top) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise UserError(f"{root} holds a symbolic link ({path}); an export is uploaded as it is, without "
                                "following links: replace it with the file")
            if name in names:
                if not stat.S_ISREG(mode):
                    raise UserError(f"{path} in {root} is not a regular file (a FIFO, device or socket)")
                files.append(path)
                if len(files) > MAX_EXPORT_FILES:
                    raise UserError(f"{root} holds more than {MAX_EXPORT_FILES} files: not a trainer export")
    return sorted(files)


def upload_export(export: Export, destination: str, *, project: str | None = None, storage_client=None) -> int:
    """Copy a local export folder to ``destination`` (gs://); returns the number of files."""
    from bootstrap import clients

    root = Path(export.path)
    files = export_files(root)
    total = sum(p.stat().st_size for p in files)
    if total > MAX_EXPORT_BYTES:
        raise UserError(f"{export.path} holds {total} bytes, more than {MAX_EXPORT_BYTES}: not a trainer export")
    bucket_name, _, prefix = destination[len("gs://"):].partition("/")
    client = storage_client or clients.storage_client(project)
    clients.make_fail_fast(client)
    bucket = client.bucket(bucket_name)
    with clients.google_errors(f"uploading {export.path} to {destination}",
                               not_found=f"bucket gs://{bucket_name} does not exist",
                               forbidden=f"permission denied writing to gs://{bucket_name}: you need "
                                         "storage.objects.create on it"):
        for path in files:
            bucket.blob(f"{prefix}/{path.relative_to(root).as_posix()}").upload_from_filename(str(path))
    return len(files)


@dataclass
class Deployment:
    model: str
    endpoint: str
    deployed_model_id: str


def _wait(operation, what: str):
    from bootstrap.clients import google_errors

    with google_errors(what):
        return operation.result(timeout=OPERATION_TIMEOUT_SECONDS)


def find_endpoint(client, parent: str, display_name: str) -> str | None:
    from bootstrap.clients import google_errors

    with google_errors(f"listing endpoints in {parent}"):
        from google.cloud import aiplatform_v1

        request = aiplatform_v1.ListEndpointsRequest(parent=parent, filter=f'display_name="{display_name}"')
        for endpoint in client.list_endpoints(request=request):
            if endpoint.display_name == display_name:
                return endpoint.name
    return None


def deploy(plan: DeployPlan, *, echo: Callable[[str], None] = lambda _m: None, storage_client=None,
           model_client=None, endpoint_client=None) -> Deployment:
    """Upload (local export), upload the Model, reuse or create the Endpoint, deploy with 100% traffic."""
    from bootstrap.clients import google_errors

    if plan.export.is_local:
        count = upload_export(plan.export, plan.artifact_uri, project=plan.project, storage_client=storage_client)
        echo(f"uploaded {count} file(s) to {plan.artifact_uri}")
    model_client = model_client or _vertex_client("ModelServiceClient", plan.region)
    endpoint_client = endpoint_client or _vertex_client("EndpointServiceClient", plan.region)
    with google_errors(f"uploading model {plan.model_display_name} to {plan.parent}"):
        operation = model_client.upload_model(parent=plan.parent, model=build_model(plan))
    model_name = _wait(operation, f"uploading model {plan.model_display_name}").model
    echo(f"model: {model_name}")
    endpoint_name = plan.endpoint_name or find_endpoint(endpoint_client, plan.parent, plan.endpoint_display_name)
    created = endpoint_name is None
    if created:
        with google_errors(f"creating endpoint {plan.endpoint_display_name}"):
            operation = endpoint_client.create_endpoint(parent=plan.parent, endpoint=build_endpoint(plan))
        endpoint_name = _wait(operation, f"creating endpoint {plan.endpoint_display_name}").name
    how = "created" if created else "the stack's" if plan.endpoint_name else "reused"
    echo(f"endpoint: {endpoint_name} ({how})")
    with google_errors(f"deploying {model_name} to {endpoint_name}"):
        operation = endpoint_client.deploy_model(endpoint=endpoint_name,
                                                 deployed_model=build_deployed_model(plan, model_name),
                                                 traffic_split={NEW_DEPLOYMENT: 100})
    deployed = _wait(operation, f"deploying {model_name} to {endpoint_name}").deployed_model
    return Deployment(model_name, endpoint_name, deployed.id)


# --------------------------------------------------------------------------------------------
# tpuctl predict --batch: a batch prediction job over a gs:// folder of images
# --------------------------------------------------------------------------------------------

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
        return f"projects/{self.project}/locations/{self.region}"


def plan_batch(source: str, ref: str, outputs: StackOutputs | None, *, runs_dir: str = "runs",
               region: str | None = None, machine_type: str = domain.DEFAULT_PREDICTION_MACHINE,
               max_replicas: int = 1, image: str | None = None, today: datetime.date | None = None,
               now: datetime.datetime | None = None, storage_client=None) -> BatchPlan:
    """``ref``: a Vertex AI Model (projects/P/locations/R/models/ID) or a run / export (then the job carries
    the export as an unmanaged container model and no Model is uploaded)."""
    project, region = _stack_location(outputs, region)
    assert outputs is not None
    if not re.fullmatch(r"gs://[a-z0-9][a-z0-9._-]{1,220}(/[^\s]*)?", source or ""):
        raise UserError(f"--batch {source!r} must be a gs://bucket/folder of images")
    domain.check_machine_type(machine_type)
    domain.check_replicas(1, max_replicas)
    artifacts = outputs.bucket_url("artifacts")
    if not artifacts:
        raise UserError("the stack outputs name no artifacts bucket (the batch job's file list and output go there)")
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%d-%H%M%S")
    display = f"tpuctl-batch-{stamp}"
    model = export = artifact_uri = None
    image_uri, warning = "", None
    if domain.parse_model_name(ref):
        model = ref                                  # the Model carries its own container
    else:
        image_uri, warning = _prediction_image(image, region, today or datetime.date.today())
        export = resolve_export(ref, runs_dir=runs_dir, outputs=outputs, storage_client=storage_client)
        if export.is_local:
            export_files(Path(export.path))
        artifact_uri = upload_destination(export, outputs)
    base = f"{artifacts}/batch-predictions/{display}"
    return BatchPlan(project, region, display, source.rstrip("/"), f"{base}/files.txt", f"{base}/output",
                     model, export, artifact_uri, image_uri, machine_type, max_replicas, dict(outputs.labels),
                     warning)


def build_batch_job(plan: BatchPlan):
    from google.cloud import aiplatform_v1

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
    from bootstrap import clients

    bucket_name, _, prefix = source[len("gs://"):].partition("/")
    prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    client = storage_client or clients.storage_client(project)
    clients.make_fail_fast(client)
    found = []
    with clients.google_errors(f"listing {source}", not_found=f"bucket gs://{bucket_name} does not exist",
                               forbidden=f"permission denied listing {source}: you need storage.objects.list"):
        for blob in client.list_blobs(bucket_name, prefix=prefix):
            if blob.name.lower().endswith(domain.IMAGE_SUFFIXES):
                found.append(f"gs://{bucket_name}/{blob.name}")
                if len(found) > domain.MAX_BATCH_FILES:
                    raise UserError(f"{source} holds more than {domain.MAX_BATCH_FILES} images: split it")
    if not found:
        raise UserError(f"{source} holds no images ({', '.join(domain.IMAGE_SUFFIXES)})")
    return found


def submit_batch(plan: BatchPlan, *, echo: Callable[[str], None] = lambda _m: None, storage_client=None,
                 job_client=None):
    """List the images, write the file list, upload a local export, create the job; returns the job."""
    from bootstrap import clients

    images = list_batch_images(plan.source, project=plan.project, storage_client=storage_client)
    client = storage_client or clients.storage_client(plan.project)
    if plan.export is not None and plan.export.is_local and plan.artifact_uri:
        count = upload_export(plan.export, plan.artifact_uri, project=plan.project, storage_client=client)
        echo(f"uploaded {count} file(s) to {plan.artifact_uri}")
    bucket_name, _, name = plan.file_list[len("gs://"):].partition("/")
    with clients.google_errors(f"writing {plan.file_list}"):
        client.bucket(bucket_name).blob(name).upload_from_string("\n".join(images) + "\n", content_type="text/plain")
    echo(f"{len(images)} image(s) listed in {plan.file_list}")
    job_client = job_client or _vertex_client("JobServiceClient", plan.region)
    with clients.google_errors(f"creating batch prediction job {plan.display_name} in {plan.parent}"):
        return job_client.create_batch_prediction_job(parent=plan.parent, batch_prediction_job=build_batch_job(plan))
