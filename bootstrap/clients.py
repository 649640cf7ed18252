"""Build Google API clients that honour endpoint redirects (tests, air-gapped mirrors).

Every service tpuctl talks to can be pointed elsewhere with an environment variable:

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

An endpoint that is a loopback ``http://`` URL (127.0.0.1, ::1, localhost) gets anonymous
credentials; any other endpoint keeps Application Default Credentials.

An endpoint that cannot be reached (connection refused, DNS failure, no answer within
``CONNECT_TIMEOUT_SECONDS``) fails at once with one line naming it and the variable that set it;
throttling (429) and server errors (5xx) keep their retries. ``storage_client()`` builds a storage
client with that behaviour (the library would otherwise retry a refused connection for 120 s).

    from bootstrap.clients import gapic
    gapic(ProjectsClient, "crm")                  # REST transport, redirect honoured, fails fast
    gapic(IAMClient, "iam", transport="grpc")     # insecure channel on loopback, fails fast
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from tpuctl.ground.errors import UserError

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
}

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"

#: Seconds to wait for a TCP connection to an endpoint; a request gets ``REQUEST_TIMEOUT_SECONDS`` to answer.
CONNECT_TIMEOUT_SECONDS = 5.0
REQUEST_TIMEOUT_SECONDS = 60.0


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
    return value.rstrip("/")


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


def credentials_for(service: str):
    """AnonymousCredentials for a loopback endpoint, else None (the client then uses ADC)."""
    if uses_anonymous(service):
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()
    return None


def client_kwargs(service: str, transport: str = "rest") -> dict[str, Any]:
    """Keyword arguments for a GAPIC client (``ProjectsClient(**client_kwargs("crm"))``).

    ``transport="rest"`` (default): REST transport; a redirect becomes ``client_options.api_endpoint``
    (scheme kept, so ``http://`` works). ``transport="grpc"``: for clients without REST (IAM admin);
    a loopback redirect gets an insecure gRPC channel, since a local test server has no TLS.
    """
    endpoint = endpoint_for(service)
    if endpoint is None:
        if transport == "grpc" and service in _GRPC_TRANSPORTS:   # Google itself, over TLS: fail fast too
            host = urlsplit(SERVICES[service][1]).netloc
            return {"transport": lambda **gapic_kwargs: _secure_grpc_transport(service, host, gapic_kwargs)}
        return {"transport": transport}
    if transport == "rest":
        kwargs: dict[str, Any] = {"transport": "rest", "client_options": {"api_endpoint": endpoint}}
        creds = credentials_for(service)
        if creds is not None:
            kwargs["credentials"] = creds
        return kwargs
    if transport == "grpc":
        host = urlsplit(endpoint).netloc or endpoint
        if is_loopback_http(endpoint):
            return {"transport": lambda **_gapic_kwargs: _insecure_grpc_transport(service, host)}
        return {"client_options": {"api_endpoint": host},
                "transport": (lambda **gapic_kwargs: _secure_grpc_transport(service, host, gapic_kwargs)
                              ) if service in _GRPC_TRANSPORTS else "grpc"}
    raise ValueError(f"transport {transport!r} must be 'rest' or 'grpc'")


def gapic(client_cls: Any, service: str, *, transport: str = "rest", default_endpoint: str | None = None) -> Any:
    """A GAPIC client of ``client_cls`` for ``service``: the redirect honoured (``client_kwargs``), and an
    endpoint that cannot be reached (refused, DNS, or silently dropped: no TCP answer within
    ``CONNECT_TIMEOUT_SECONDS``) fails at once with ``EndpointUnreachable`` naming it. REST: the fail-fast
    adapter is mounted on the transport's requests session; gRPC on loopback: the fail-fast interceptor.
    ``default_endpoint``: the API host when no redirect is set (Vertex AI's regional hosts)."""
    kwargs = client_kwargs(service, transport)
    if default_endpoint:
        kwargs.setdefault("client_options", {"api_endpoint": default_endpoint})
    client = client_cls(**kwargs)
    session = getattr(client.transport, "_session", None)  # REST transports keep their AuthorizedSession here
    if session is not None:
        fail_fast(session)
    return client


def _insecure_grpc_transport(service: str, host: str):
    """Transport for a loopback test server: GAPIC's own kwargs are dropped for a plaintext channel."""
    import grpc
    from google.auth.credentials import AnonymousCredentials

    transport_cls = _GRPC_TRANSPORTS[service]()
    channel = grpc.intercept_channel(grpc.insecure_channel(host), _fail_fast_interceptor(f"http://{host}"))
    return transport_cls(host=host, credentials=AnonymousCredentials(), channel=channel)


def _secure_grpc_transport(service: str, host: str, gapic_kwargs: dict):
    """The client's own TLS channel (credentials, scopes, options as GAPIC makes them) with the fail-fast
    interceptor in front, so a real endpoint that cannot be reached fails at once as a loopback one does."""
    import grpc

    transport_cls = _GRPC_TRANSPORTS[service]()

    def channel(target, **channel_kwargs):
        return grpc.intercept_channel(transport_cls.create_channel(target, **channel_kwargs),
                                      _fail_fast_interceptor(f"https://{host}"))

    return transport_cls(channel=channel, **gapic_kwargs)


def _fail_fast_interceptor(url: str):
    """A gRPC interceptor raising ``EndpointUnreachable`` when a call could not connect at all: gRPC reports
    that as UNAVAILABLE, which GAPIC's default retry would retry for a minute. A server's own UNAVAILABLE
    (overload) carries other details and is still retried."""
    import grpc

    class FailFast(grpc.UnaryUnaryClientInterceptor):
        def intercept_unary_unary(self, continuation, client_call_details, request):
            outcome = continuation(client_call_details, request)
            error = outcome.exception() if hasattr(outcome, "exception") else None
            if isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.UNAVAILABLE:
                reason = unreachable_reason(Exception(error.details() or ""))
                if reason is not None:
                    raise _unreachable_error(url, reason)
            return outcome

    return FailFast()


def _iam_grpc_transport():
    from google.cloud.iam_admin_v1.services.iam.transports.grpc import IAMGrpcTransport

    return IAMGrpcTransport


_GRPC_TRANSPORTS = {"iam": _iam_grpc_transport}


def authorized_session(service: str):
    """A requests session for raw REST calls (APIs without a client library method, e.g.
    serviceusage v1beta1 ``generateServiceIdentity``): anonymous on loopback, ADC otherwise."""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    creds = credentials_for(service)
    if creds is None:
        creds, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    return fail_fast(AuthorizedSession(creds))


# --------------------------------------------------------------------------------------------
# Unreachable endpoints: fail fast and say which one
# --------------------------------------------------------------------------------------------

class EndpointUnreachable(UserError):
    """An endpoint could not be connected to at all. A UserError, so no Google retry predicate retries it."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=1)


def describe_endpoint(url: str | None) -> str:
    """``storage endpoint http://127.0.0.1:9 (STORAGE_EMULATOR_HOST)`` for a redirected service,
    ``storage.googleapis.com`` for Google's own, else the URL's host."""
    if not url:
        return "a Google API endpoint"
    parts = urlsplit(url if "://" in url else "http://" + url)
    origin = f"{parts.scheme}://{parts.netloc}"
    for service, (variable, _default) in SERVICES.items():
        redirected = endpoint_for(service)
        if redirected and urlsplit(redirected).netloc == parts.netloc:
            return f"{service} endpoint {origin} (set by {variable})"
    for service, (variable, default) in SERVICES.items():
        if default and urlsplit(default).netloc == parts.netloc:
            return f"{parts.netloc} ({service}; redirect it with {variable})"
    return parts.netloc or url


_REFUSED = ("connection refused", "failed to connect to remote host", "errno 111", "connect call failed")
_NO_ROUTE = ("network is unreachable", "errno 101", "no route to host", "errno 113")
_DNS = ("name or service not known", "temporary failure in name resolution", "nodename nor servname",
        "failed to resolve", "dns resolution failed", "getaddrinfo failed", "no address associated",
        "name does not resolve", "nameresolutionerror")
_CONNECT_TIMEOUT = ("connecttimeout", "connection to", "timed out. (connect timeout")


def unreachable_reason(exc: BaseException | None) -> str | None:
    """``"connection refused"``, ``"DNS lookup failed"`` or ``"no answer"`` when ``exc`` (or what caused it)
    is a failure to connect at all; None for anything else (a 5xx, a reset mid-transfer, a read timeout)."""
    import socket

    seen: set[int] = set()
    stack: list[Any] = [exc]
    while stack:
        item = stack.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, ConnectionRefusedError):
            return "connection refused"
        if isinstance(item, OSError) and item.errno in (101, 113):   # ENETUNREACH, EHOSTUNREACH
            return "no network route (offline?)"
        name = type(item).__name__
        if isinstance(item, socket.gaierror) or name == "NameResolutionError":
            return "DNS lookup failed"
        if name in ("ConnectTimeoutError", "ConnectTimeout"):
            return f"no answer within {CONNECT_TIMEOUT_SECONDS:g} s"
        if isinstance(item, BaseException):
            text = str(item).lower()
            if any(marker in text for marker in _DNS):
                return "DNS lookup failed"
            if any(marker in text for marker in _REFUSED):
                return "connection refused"
            if any(marker in text for marker in _NO_ROUTE):
                return "no network route (offline?)"
            if "connecttimeouterror" in text or "(connect timeout=" in text:
                return f"no answer within {CONNECT_TIMEOUT_SECONDS:g} s"
            stack.extend([item.__cause__, item.__context__, getattr(item, "reason", None),
                          getattr(item, "cause", None), *[a for a in item.args if isinstance(a, BaseException)]])
    return None


def _unreachable_error(url: str | None, reason: str, doing: str | None = None) -> EndpointUnreachable:
    where = f"{doing}: " if doing else ""
    return EndpointUnreachable(f"{where}cannot reach {describe_endpoint(url)}: {reason} "
                               "(check the endpoint, network, proxy or firewall)")



def _timeouts(timeout: Any) -> Any:
    """A (connect, read) pair whose connect part is at most ``CONNECT_TIMEOUT_SECONDS``."""
    if timeout is None:
        return (CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS)
    if isinstance(timeout, (int, float)):
        return (min(CONNECT_TIMEOUT_SECONDS, float(timeout)), float(timeout))
    if isinstance(timeout, tuple) and len(timeout) == 2:
        connect, read = timeout
        return (min(CONNECT_TIMEOUT_SECONDS, connect) if connect is not None else CONNECT_TIMEOUT_SECONDS, read)
    return timeout


def fail_fast_adapter():
    """A requests adapter that bounds the connect time and turns "cannot connect at all" into
    ``EndpointUnreachable`` naming the endpoint, which no retry predicate retries. Other failures pass
    through unchanged, so throttling and server errors are still retried by the client library."""
    import requests
    from requests.adapters import HTTPAdapter

    class FailFastAdapter(HTTPAdapter):
        def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
            try:
                return super().send(request, stream=stream, timeout=_timeouts(timeout), verify=verify,
                                    cert=cert, proxies=proxies)
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
                reason = unreachable_reason(exc)
                if reason is None:
                    raise
                raise _unreachable_error(request.url, reason) from exc

    return FailFastAdapter()


def fail_fast(session):
    """Mount the fail-fast adapter on a requests session (``AuthorizedSession``); returns the session.

    An ``AuthorizedSession`` refreshes its token through a second session of its own (oauth2.googleapis.com,
    three connect retries): it gets the adapter too. Without it an offline token refresh raised a
    ``TransportError`` that the storage library's default retry repeated for its whole 120 s deadline
    (88-108 s before ``hub-cache ls`` or ``runs ls --dir gs://`` said anything)."""
    adapter = fail_fast_adapter()
    auth_session = getattr(session, "_auth_request_session", None)
    for target in (session, auth_session):
        if target is not None and hasattr(target, "mount"):
            target.mount("http://", adapter)
            target.mount("https://", adapter)
    return session


def make_fail_fast(client: Any) -> Any:
    """Give an existing google-cloud client (storage and other ``google.cloud.client.Client``s) the fail-fast
    adapter; anything without a requests session (a test double) is returned unchanged."""
    import requests

    try:
        session = getattr(client, "_http", None)
    except Exception:  # noqa: BLE001 - e.g. no credentials yet: the real call will say so
        return client
    if isinstance(session, requests.Session):
        fail_fast(session)
    return client


def storage_client(project: str | None = None):
    """A google-cloud-storage client that fails fast on an unreachable endpoint (see ``fail_fast``).

    Honours ``STORAGE_EMULATOR_HOST`` as the library does (anonymous on a loopback emulator)."""
    from google.cloud import storage

    # project=None, not the library's default: no project is inferred (reads, lists and uploads name their
    # bucket), so credentials without a project (`gcloud auth application-default login`) work and nothing
    # asks gcloud for one; a caller that creates buckets passes its project.
    client = storage.Client(project=project or None)
    return make_fail_fast(client)  # mounts on the client's own AuthorizedSession


def get_bucket(client: Any, name: str, needs: str = "storage.buckets.get"):
    """``client.get_bucket(name)`` with a missing bucket or a 403 turned into a one-line UserError.

    ``needs``: the permission(s) the caller's next steps require, named in the 403 message.
    """
    make_fail_fast(client)
    with google_errors(not_found=f"bucket gs://{name} does not exist (check the name, or create it first)",
                       forbidden=f"permission denied reading bucket gs://{name}: you need {needs} on it"):
        return client.get_bucket(name)


# --------------------------------------------------------------------------------------------
# Google errors -> one line: the single translation every caller (and the CLI boundary) uses
# --------------------------------------------------------------------------------------------

def as_user_error(exc: BaseException, doing: str | None = None) -> Exception | None:
    """The one-line ``UserError`` for a Google client / auth / transport failure, or None when ``exc``
    is not one. ``doing`` names what was being done ("reading bucket gs://x") for the message."""
    if isinstance(exc, UserError):
        return exc
    where = f"{doing}: " if doing else ""
    mod = type(exc).__module__
    first = (str(exc).splitlines() or [""])[0][:300]
    if type(exc).__name__ == "RetryError" and getattr(exc, "cause", None) is not None:
        return as_user_error(exc.cause, doing) or UserError(f"{where}{first}", 1)
    reason = unreachable_reason(exc) if mod.startswith(
        ("requests.", "urllib3.", "google.auth.exceptions", "google.api_core.exceptions")) else None
    if reason is not None:
        request = getattr(exc, "request", None)
        url = getattr(request, "url", None) or _url_in(str(exc))
        return _unreachable_error(url, reason, doing)
    if type(exc).__name__ == "DefaultCredentialsError":
        return UserError(f"{where}no Google credentials ({first}); run `gcloud auth application-default login`")
    if mod.startswith("google.api_core.exceptions"):
        message = (getattr(exc, "message", None) or str(exc)).splitlines()
        return UserError(f"{where}Google API error {getattr(exc, 'code', '')}: {(message or [''])[0][:300]}",
                         exit_code=1)
    if mod.startswith(("requests.", "urllib3.", "google.auth.exceptions")):
        return UserError(f"{where}cannot reach a Google API: {first}", exit_code=1)
    return None


def _url_in(text: str) -> str | None:
    """The endpoint a transport error names: ``host='h', port=p`` (urllib3) or ``ipv4:h:p`` (gRPC)."""
    import re

    match = re.search(r"host='([^']+)', port=(\d+)", text)
    if match:
        return f"http://{match.group(1)}:{match.group(2)}"
    match = re.search(r"ipv[46]:\[?([0-9a-fA-F:.]+?)\]?:(\d+)", text)
    if match:
        return f"http://{match.group(1)}:{match.group(2)}"
    match = re.search(r"https?://[^\s/'\"]+", text)
    return match.group(0) if match else None


def download_bounded(blob, limit: int, where: str, what: str, exit_code: int = 2) -> bytes:
    """The object's bytes, never more than ``limit + 1`` of them read: a larger object is one UserError line naming
    ``where`` and saying ``what`` it is not (``download_as_bytes``'s ``end`` is inclusive, so one byte over tells)."""
    data = blob.download_as_bytes(start=0, end=limit)
    if len(data) > limit:
        raise UserError(f"{where} is larger than {limit} bytes: {what}", exit_code)
    return data


@contextlib.contextmanager
def google_errors(doing: str | None = None, *, not_found: str | None = None, forbidden: str | None = None,
                  bad_request: str | None = None, exit_code: int = 2) -> Iterator[None]:
    """``with google_errors("reading bucket gs://x"):`` — Google failures inside become one-line UserErrors.

    ``not_found`` / ``forbidden`` / ``bad_request``: the exact line for a 404 / a 403 / a 400 (what to check, which permission is
    needed); ``exit_code`` for those lines (default 2: the user fixes a name or a grant). Other failures get
    the generic translation of ``as_user_error``; anything that is not a Google failure passes through.
    """
    try:
        yield
    except Exception as exc:
        from google.api_core import exceptions

        if not_found and isinstance(exc, exceptions.NotFound):
            raise UserError(not_found, exit_code) from None
        if forbidden and isinstance(exc, (exceptions.Forbidden, exceptions.PermissionDenied)):
            raise UserError(forbidden, exit_code) from None
        if bad_request and isinstance(exc, exceptions.BadRequest):
            raise UserError(bad_request, exit_code) from None
        translated = as_user_error(exc, doing)
        if translated is None or translated is exc:
            raise
        raise translated from None
