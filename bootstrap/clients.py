"""Build Google API clients that honour endpoint redirects (tests, air-gapped mirrors).

Every service tpuctl talks to can be pointed elsewhere with an environment variable:

    storage       STORAGE_EMULATOR_HOST          (google-cloud-storage reads it itself)
    crm           TPUCTL_CRM_ENDPOINT            Cloud Resource Manager v3
    iam           TPUCTL_IAM_ENDPOINT            IAM admin v1 (gRPC only in google-cloud-iam)
    serviceusage  TPUCTL_SERVICEUSAGE_ENDPOINT   Service Usage (v1 client, v1beta1 REST)
    cloudquotas   TPUCTL_CLOUDQUOTAS_ENDPOINT    Cloud Quotas v1 (REST)
    vertex        TPUCTL_VERTEX_ENDPOINT         Vertex AI (aiplatform)

An endpoint that is a loopback ``http://`` URL (127.0.0.1, ::1, localhost) gets anonymous
credentials; any other endpoint keeps Application Default Credentials.

    from bootstrap.clients import client_kwargs
    ProjectsClient(**client_kwargs("crm"))                  # REST transport, redirect honoured
    IAMClient(**client_kwargs("iam", transport="grpc"))     # insecure channel on loopback
"""

from __future__ import annotations

import ipaddress
import os
from typing import Any
from urllib.parse import urlsplit

#: service -> (environment variable, default base URL for raw REST calls)
SERVICES: dict[str, tuple[str, str]] = {
    "storage": ("STORAGE_EMULATOR_HOST", "https://storage.googleapis.com"),
    "crm": ("TPUCTL_CRM_ENDPOINT", "https://cloudresourcemanager.googleapis.com"),
    "iam": ("TPUCTL_IAM_ENDPOINT", "https://iam.googleapis.com"),
    "serviceusage": ("TPUCTL_SERVICEUSAGE_ENDPOINT", "https://serviceusage.googleapis.com"),
    "cloudquotas": ("TPUCTL_CLOUDQUOTAS_ENDPOINT", "https://cloudquotas.googleapis.com"),
    "vertex": ("TPUCTL_VERTEX_ENDPOINT", ""),  # regional: https://REGION-aiplatform.googleapis.com
}

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def _service(service: str) -> tuple[str, str]:
    try:
        return SERVICES[service]
    except KeyError:
        raise ValueError(f"unknown service {service!r}; known: {', '.join(SERVICES)}") from None


def env_var_for(service: str) -> str:
    return _service(service)[0]


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
    kwargs: dict[str, Any] = {}
    if endpoint is None:
        kwargs["transport"] = transport
        return kwargs
    if transport == "rest":
        kwargs["transport"] = "rest"
        kwargs["client_options"] = {"api_endpoint": endpoint}
        creds = credentials_for(service)
        if creds is not None:
            kwargs["credentials"] = creds
        return kwargs
    if transport == "grpc":
        host = urlsplit(endpoint).netloc or endpoint
        if is_loopback_http(endpoint):
            kwargs["transport"] = lambda **_gapic_kwargs: _insecure_grpc_transport(service, host)
        else:
            kwargs["transport"] = "grpc"
            kwargs["client_options"] = {"api_endpoint": host}
        return kwargs
    raise ValueError(f"transport {transport!r} must be 'rest' or 'grpc'")


def _insecure_grpc_transport(service: str, host: str):
    """Transport for a loopback test server: GAPIC's own kwargs are dropped for a plaintext channel."""
    import grpc
    from google.auth.credentials import AnonymousCredentials

    transport_cls = _GRPC_TRANSPORTS[service]()
    return transport_cls(host=host, credentials=AnonymousCredentials(),
                         channel=grpc.insecure_channel(host))


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
    return AuthorizedSession(creds)


def get_bucket(client: Any, name: str, needs: str = "storage.buckets.get"):
    """``client.get_bucket(name)`` with a missing bucket or a 403 turned into a one-line UserError.

    ``needs``: the permission(s) the caller's next steps require, named in the 403 message.
    """
    with google_errors(not_found=f"bucket gs://{name} does not exist (check the name, or create it first)",
                       forbidden=f"permission denied reading bucket gs://{name}: you need {needs} on it"):
        return client.get_bucket(name)


# --------------------------------------------------------------------------------------------
# Google errors -> one line: the single translation every caller (and the CLI boundary) uses
# --------------------------------------------------------------------------------------------

def as_user_error(exc: BaseException, doing: str | None = None) -> Exception | None:
    """The one-line ``UserError`` for a Google client / auth / transport failure, or None when ``exc``
    is not one. ``doing`` names what was being done ("reading bucket gs://x") for the message."""
    from tpuctl.ground.errors import UserError

    if isinstance(exc, UserError):
        return exc
    where = f"{doing}: " if doing else ""
    mod = type(exc).__module__
    first = (str(exc).splitlines() or [""])[0][:300]
    if type(exc).__name__ == "DefaultCredentialsError":
        return UserError(f"{where}no Google credentials ({first}); run `gcloud auth application-default login`")
    if mod.startswith("google.api_core.exceptions"):
        message = (getattr(exc, "message", None) or str(exc)).splitlines()
        return UserError(f"{where}Google API error {getattr(exc, 'code', '')}: {(message or [''])[0][:300]}",
                         exit_code=1)
    if mod.startswith(("requests.", "urllib3.", "google.auth.exceptions")):
        return UserError(f"{where}cannot reach a Google API: {first}", exit_code=1)
    return None


class google_errors:
    """``with google_errors("reading bucket gs://x"):`` — Google failures inside become one-line UserErrors.

    ``not_found`` / ``forbidden`` / ``bad_request``: the exact line for a 404 / a 403 / a 400 (what to check, which permission is
    needed); ``exit_code`` for those lines (default 2: the user fixes a name or a grant). Other failures get
    the generic translation of ``as_user_error``. Usable as a decorator too (``@google_errors()``);
    anything that is not a Google failure passes through.
    """

    def __init__(self, doing: str | None = None, *, not_found: str | None = None, forbidden: str | None = None,
                 bad_request: str | None = None, exit_code: int = 2):
        self.doing = doing
        self.not_found = not_found
        self.forbidden = forbidden
        self.bad_request = bad_request
        self.exit_code = exit_code

    def __enter__(self) -> google_errors:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            return False
        from google.api_core import exceptions

        from tpuctl.ground.errors import UserError

        if self.not_found and isinstance(exc, exceptions.NotFound):
            raise UserError(self.not_found, self.exit_code) from None
        if self.forbidden and isinstance(exc, (exceptions.Forbidden, exceptions.PermissionDenied)):
            raise UserError(self.forbidden, self.exit_code) from None
        if self.bad_request and isinstance(exc, exceptions.BadRequest):
            raise UserError(self.bad_request, self.exit_code) from None
        translated = as_user_error(exc, self.doing)
        if translated is None or translated is exc:
            return False
        raise translated from None

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with google_errors(self.doing):
                return fn(*args, **kwargs)

        return wrapper
