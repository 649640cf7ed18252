"""``tpuctl predict``: images to a TF Serving REST endpoint or a Vertex AI Endpoint, bounded (images, bytes,
seconds, response size) and with URLs shown without credentials.

Images: every format ``make-tfrecords`` reads (``trainer.flags.IMAGE_FORMATS``, the one list). JPEG and PNG are sent
as they are; the others (GIF, BMP, WebP, TIFF: no TensorFlow decodes TIFF, only recent ones WebP, and the Vertex AI
prediction image runs 2.15) are first converted exactly as ``make-tfrecords`` stores them, by ``python -m
trainer.imaging`` in the trainer environment (Pillow; the ops environment has none), so the model sees them as it
saw them in training.

requests and the Vertex AI client are imported inside the functions that use them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import socket
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from cloud.clients import gapic, google_errors, unreachable_reason
from cloud.google import aiplatform_v1, json_format, requests
from ground import domain
from ground.errors import UserError
from ground.files import printable, read_file
from ground.localtree import user_path
from tpuctl.services.data import run_tool
from tpuctl.services.supervisor import require_trainer_python
from trainer.flags import IMAGE_EXTENSIONS, IMAGE_FORMATS

#: Bounds of `tpuctl predict` (tpuctl's own): images per request, bytes per image, seconds per request.
DEFAULT_BATCH_SIZE = 16


MAX_BATCH_SIZE = 256


DEFAULT_MAX_IMAGE_BYTES = 4 * 1024 * 1024
#: The largest --max-bytes: every image of a request is held in memory and sent base64-encoded (4/3 of its size),
#: so a batch of 16 is about 1.4 GB at this bound (tpuctl's own; TF Serving and Vertex AI take far less per call).
MAX_IMAGE_BYTES = 64 * 1024 * 1024


MAX_IMAGES = 10_000


DEFAULT_TIMEOUT_SECONDS = 30.0


MAX_TIMEOUT_SECONDS = 3600.0


#: An answer larger than this is not a prediction for at most MAX_BATCH_SIZE images.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


_JPEG = b"\xff\xd8\xff"


_PNG = b"\x89PNG\r\n\x1a\n"


_REST_PREDICT = re.compile(r"^/v1/models/([^/:]+)(/versions/[0-9]+|/labels/[^/:]+)?:predict$")


@dataclass(frozen=True)
class Image:
    path: str
    data: bytes


@dataclass
class Prediction:
    path: str
    #: (class id, name, probability; None when the server sent NaN or an infinite number)
    top: list[tuple[int, str | None, float | None]] = field(default_factory=list)
    #: (class id, name) the model itself answered for its top class, when it did
    model_class: tuple[int, str] | None = None


#: What ``tpuctl predict`` reads, in words (the formats and endings of trainer.flags.IMAGE_FORMATS).
ACCEPTED = f"{', '.join(IMAGE_FORMATS)} ({' '.join(IMAGE_EXTENSIONS)})"


def read_images(paths: Sequence[str], max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> list[Image]:
    """Every path an image file of at most ``max_bytes`` in a format ``make-tfrecords`` reads: JPEG or PNG content
    (whatever the name) as it is, a file of another of its formats (by its ending, as ``make-tfrecords`` picks
    them) converted as ``make-tfrecords`` stores it (:func:`as_stored`). A bad one is one line naming it."""
    if not paths:
        raise UserError(f"give at least one image ({ACCEPTED})")
    if len(paths) > MAX_IMAGES:
        raise UserError(f"{len(paths)} images is more than {MAX_IMAGES} per call")
    if not 1 <= max_bytes <= MAX_IMAGE_BYTES:
        raise UserError(f"--max-bytes must be from 1 to {MAX_IMAGE_BYTES} (got {max_bytes})")
    images: list[Image | None] = []
    convert: list[int] = []
    for path in paths:
        data = read_file(user_path(path, "image"), "image", max_bytes,
                         hint=f"give image files of at most {max_bytes} bytes (--max-bytes)")
        if data.startswith(_JPEG) or data.startswith(_PNG):
            images.append(Image(str(path), data))
        elif Path(path).suffix.lower() in IMAGE_EXTENSIONS:
            convert.append(len(images))
            images.append(None)
        else:
            raise UserError(f"{path}: not an image tpuctl reads: JPEG or PNG content, or a file of the formats "
                            f"make-tfrecords reads, {ACCEPTED}")
    if convert:
        for index, data in zip(convert, as_stored([str(paths[i]) for i in convert])):
            images[index] = Image(str(paths[index]), data)
    return [image for image in images if image is not None]


def as_stored(paths: Sequence[str]) -> list[bytes]:
    """The JPEG ``make-tfrecords`` would store for each of ``paths`` (``python -m trainer.imaging`` in the trainer
    environment); one it would skip is one line with its reason."""
    try:
        require_trainer_python()
    except UserError as exc:
        raise UserError(f"{paths[0]}: images other than JPEG and PNG are converted as make-tfrecords stores them, in "
                        f"the trainer environment: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="tpuctl-predict-") as tmp:
        # absolute, after "--": a file named like an option ("-x.webp") stays a file
        results = run_tool("trainer.imaging", [tmp, "--", *(os.path.abspath(p) for p in paths)]).get("images")
        if not isinstance(results, list) or len(results) != len(paths):
            raise UserError(f"trainer.imaging gave {len(results) if isinstance(results, list) else 'no'} results for "
                            f"{len(paths)} images; is the trainer package up to date?", 1)
        converted = []
        for index, (path, result) in enumerate(zip(paths, results)):
            if not isinstance(result, dict) or "reason" in result:
                reason = result.get("reason") if isinstance(result, dict) else None
                raise UserError(f"{path}: {printable(str(reason or 'not converted'), 300)}")
            converted.append((Path(tmp) / f"{index}.jpg").read_bytes())
        return converted


@dataclass(frozen=True)
class Instance:
    """One JSON instance for a model that takes its own named inputs (a plug-in's export, docs/your-code.md):
    ``row`` is sent as it is; ``path`` names it in the output (``FILE#N``)."""
    path: str
    row: Any


#: A JSON instances file is read whole: at most this many bytes and instances.
MAX_INSTANCES_BYTES = 16 * 1024 * 1024


def read_instances(path: str) -> list[Instance]:
    """``--instances FILE``: ``{"instances": [...]}`` (TF Serving's request body) or a bare JSON list, each item one
    example as the model's signature takes it (``{"feature": value, …}``)."""
    file = user_path(path, "--instances file")
    data = read_file(file, "--instances file", MAX_INSTANCES_BYTES, hint="a JSON list of instances")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise UserError(f"{path}: not JSON (give {{\"instances\": [{{\"feature\": value, …}}, …]}})") from None
    rows = doc.get("instances") if isinstance(doc, dict) else doc
    if not isinstance(rows, list) or not rows:
        raise UserError(f"{path}: expected a non-empty list of instances, or {{\"instances\": [...]}}")
    if len(rows) > MAX_IMAGES:
        raise UserError(f"{path}: {len(rows)} instances; at most {MAX_IMAGES} in one call")
    return [Instance(f"{path}#{i}", row) for i, row in enumerate(rows)]


def instances(items: Sequence[Image | Instance]) -> list[Any]:
    """TF Serving's row format: an image as the bytes input (api_rest.md, "Encoding binary values"), a JSON
    instance as given."""
    return [i.row if isinstance(i, Instance) else {domain.SERVING_INPUT: {"b64": base64.b64encode(i.data).decode("ascii")}}
            for i in items]


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
    own = None
    if isinstance(model_name, str) and (number := _number(model_id)) is not None and number in range(len(values)):
        own = (int(number), model_name)
    top = []
    for i in order:
        name = class_names[i] if class_names else None
        if own is not None and own[0] == i:
            name = own[1]
        top.append((i, name, values[i]))
    return Prediction(path, top, own)


def name_every_class(predictions: list[Prediction]) -> list[Prediction]:
    """Name, in every image's row, each class the model named for some image of this call (its ``class_name`` for
    its top class): the model answers only its top class's name, so without ``--manifest`` the other classes of a
    row were unnamed though another row named them. A class the model named in two ways is left as it was."""
    names: dict[int, set[str]] = {}
    for p in predictions:
        if p.model_class is not None:
            names.setdefault(p.model_class[0], set()).add(p.model_class[1])
    known = {i: next(iter(found)) for i, found in names.items() if len(found) == 1}
    for p in predictions:
        p.top = [(i, known.get(i) if name is None else name, v) for i, name, v in p.top]
    return predictions


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
    return name_every_class(out)


def vertex_client(kind: str, region: str):
    return gapic(getattr(aiplatform_v1, kind), "vertex", default_endpoint=domain.VERTEX_API_HOST.format(region=region))


def predict_vertex(endpoint: str, images: Sequence[Image], *, batch_size: int = DEFAULT_BATCH_SIZE,
                   timeout: float = DEFAULT_TIMEOUT_SECONDS, class_names: Sequence[str] | None = None,
                   k: int = 3, client=None) -> list[Prediction]:
    """``PredictionServiceClient.predict`` on a Vertex AI Endpoint with the same instances as TF Serving's."""


    parsed = domain.parse_endpoint_name(endpoint)
    if parsed is None:
        raise UserError(f"{endpoint!r} is not a Vertex AI endpoint name (projects/P/locations/R/endpoints/ID)")
    client = client or vertex_client("PredictionServiceClient", parsed[1])
    out: list[Prediction] = []
    for batch in _batches(list(images), batch_size):
        with google_errors(f"predicting on {endpoint}", not_found=f"endpoint {endpoint} does not exist"):
            request = {"endpoint": endpoint, "instances": instances(batch), "timeout": timeout}
            response = _within(timeout, lambda r=request: client.predict(**r), lambda: None, endpoint)
        predictions = json_format.MessageToDict(type(response).pb(response)).get("predictions", [])
        if len(predictions) != len(batch):
            raise UserError(f"{endpoint} answered {len(predictions)} predictions for {len(batch)} images", 1)
        out += [top_classes(i.path, p, class_names, k, endpoint) for i, p in zip(batch, predictions)]
    return name_every_class(out)
