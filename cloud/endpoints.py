"""Where each Google API tpuctl talks to is: Google's own endpoint, or a redirect (tests, air-gapped mirrors).

Every service can be pointed elsewhere with an environment variable:

    storage       STORAGE_EMULATOR_HOST          (google-cloud-storage reads it itself)
    crm           TPUCTL_CRM_ENDPOINT            Cloud Resource Manager v3
    iam           TPUCTL_IAM_ENDPOINT            IAM admin v1 (gRPC only in google-cloud-iam)
    serviceusage  TPUCTL_SERVICEUSAGE_ENDPOINT   Service Usage (v1 client, v1beta1 REST)
    cloudquotas   TPUCTL_CLOUDQUOTAS_ENDPOINT    Cloud Quotas v1 (REST)
    vertex        TPUCTL_VERTEX_ENDPOINT         Vertex AI (aiplatform)
    tpu           TPUCTL_TPU_ENDPOINT            Cloud TPU v2 (google-cloud-tpu, REST)
    cloudbuild    TPUCTL_CLOUDBUILD_ENDPOINT     Cloud Build v1 (REST)
    artifactregistry TPUCTL_ARTIFACTREGISTRY_ENDPOINT  Artifact Registry v1 (REST)
    cloudbilling  TPUCTL_CLOUDBILLING_ENDPOINT   Cloud Billing Catalog v1 (REST; `tpuctl prices refresh`)
    logging       TPUCTL_LOGGING_ENDPOINT        Cloud Logging v2 (gRPC; `tpuctl logs`, the live display of cloud runs)

An endpoint that is a loopback ``http://`` URL (127.0.0.1, ::1, localhost) gets anonymous credentials
(``cloud.clients``); any other endpoint keeps Application Default Credentials.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

from ground.errors import UserError

#: service -> (environment variable, default base URL for raw REST calls)
SERVICES: dict[str, tuple[str, str]] = {
    "storage": ("STORAGE_EMULATOR_HOST", "https://storage.googleapis.com"),
    "crm": ("TPUCTL_CRM_ENDPOINT", "https://cloudresourcemanager.googleapis.com"),
    "iam": ("TPUCTL_IAM_ENDPOINT", "https://iam.googleapis.com"),
    "serviceusage": ("TPUCTL_SERVICEUSAGE_ENDPOINT", "https://serviceusage.googleapis.com"),
    "cloudquotas": ("TPUCTL_CLOUDQUOTAS_ENDPOINT", "https://cloudquotas.googleapis.com"),
    "vertex": ("TPUCTL_VERTEX_ENDPOINT", ""),  # regional: https://REGION-aiplatform.googleapis.com
    "tpu": ("TPUCTL_TPU_ENDPOINT", "https://tpu.googleapis.com"),
    "cloudbuild": ("TPUCTL_CLOUDBUILD_ENDPOINT", "https://cloudbuild.googleapis.com"),
    "artifactregistry": ("TPUCTL_ARTIFACTREGISTRY_ENDPOINT", "https://artifactregistry.googleapis.com"),
    "cloudbilling": ("TPUCTL_CLOUDBILLING_ENDPOINT", "https://cloudbilling.googleapis.com"),
    "logging": ("TPUCTL_LOGGING_ENDPOINT", "https://logging.googleapis.com"),
}

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"

#: Seconds to wait for a TCP connection to an endpoint; a request gets ``REQUEST_TIMEOUT_SECONDS`` to answer.
CONNECT_TIMEOUT_SECONDS = 5.0
REQUEST_TIMEOUT_SECONDS = 60.0
#: The whole of one HTTP request (connecting, sending, the answer's headers and body) ends within this many seconds,
#: plus one second for every ``MIN_BYTES_PER_SECOND`` bytes it sends or its answer announces (``cloud.deadlines``): a
#: server that sends a byte every few seconds never trips the per-read timeout above, and is given up on here.
REQUEST_DEADLINE_SECONDS = 120.0
MIN_BYTES_PER_SECOND = 64 * 1024
#: An answer read as a stream without an announced length (a download the caller bounds itself) gets this long.
STREAM_DEADLINE_SECONDS = 2 * 3600.0
#: An answer read whole (an API's JSON: a page of a listing, a resource) is at most this big.
MAX_ANSWER_BYTES = 256 * 1024 * 1024


def _service(service: str) -> tuple[str, str]:
    try:
        return SERVICES[service]
    except KeyError:
        raise ValueError(f"unknown service {service!r}; known: {', '.join(SERVICES)}") from None


def endpoint_for(service: str) -> str | None:
    """The redirected endpoint for ``service`` (``http://127.0.0.1:8080``), or None for Google's."""
    value = os.environ.get(_service(service)[0], "").strip()
    if not value:
        return None
    if "://" not in value:  # STORAGE_EMULATOR_HOST is often given as host:port
        value = "http://" + value
    _check_url(value, _service(service)[0])
    return value.rstrip("/")


def _check_url(value: str, variable: str) -> None:
    """An endpoint variable is an ``http(s)://HOST[:PORT]`` URL, or one line naming the variable (``http://[::1``
    raised urllib's ValueError deep in a client; a port out of range failed at the first request). The value is
    shown without any ``user:password@``."""
    try:
        parts = urlsplit(value)
        port = parts.port              # a port that is not a number from 0 to 65535 raises here
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and not any(c.isspace() for c in value)
    except ValueError as exc:
        ok, port = False, str(exc)
    if not ok or port == 0:
        shown = value.partition("://")[0] + "://" + value.partition("://")[2].rpartition("@")[2]
        why = f" ({port})" if isinstance(port, str) else ""
        raise UserError(f"{variable}={shown!r} is not an endpoint URL{why}: give http(s)://HOST[:PORT] or unset it")


def base_url(service: str, region: str | None = None) -> str:
    """Base URL for raw REST calls: the redirect if set, else Google's public endpoint."""
    redirected = endpoint_for(service)
    if redirected:
        return redirected
    if service == "vertex":
        return f"https://{region or 'us-central1'}-aiplatform.googleapis.com"
    return _service(service)[1]


def is_loopback_http(url: str | None) -> bool:
    if not url:
        return False
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


def uses_anonymous(service: str) -> bool:
    return is_loopback_http(endpoint_for(service))


def _host(netloc: str) -> str:
    """``host[:port]`` of a URL's network location, without any ``user:password@`` (never echoed)."""
    return netloc.rpartition("@")[2]


def describe_endpoint(url: str | None) -> str:
    """``storage endpoint http://127.0.0.1:9 (STORAGE_EMULATOR_HOST)`` for a redirected service,
    ``storage.googleapis.com`` for Google's own, else the URL's host. Credentials in a URL are never shown."""
    if not url:
        return "a Google API endpoint"
    parts = urlsplit(url if "://" in url else "http://" + url)
    host = _host(parts.netloc)
    for service, (variable, _default) in SERVICES.items():
        redirected = endpoint_for(service)
        if redirected and _host(urlsplit(redirected).netloc) == host:
            return f"{service} endpoint {parts.scheme}://{host} (set by {variable})"
    for service, (variable, default) in SERVICES.items():
        if default and urlsplit(default).netloc == host:
            return f"{host} ({service}; redirect it with {variable})"
    return host or "a Google API endpoint"
