"""Build Google API clients that honour endpoint redirects (``cloud.endpoints``) and fail fast.

An endpoint that cannot be reached (connection refused, DNS failure, no answer within
``CONNECT_TIMEOUT_SECONDS``) fails at once with one line naming it and the variable that set it;
throttling (429) and server errors (5xx) keep their retries. ``storage_client()`` builds a storage
client with that behaviour (the library would otherwise retry a refused connection for 120 s).

    from cloud.clients import gapic
    gapic(ProjectsClient, "crm")                  # REST transport, redirect honoured, fails fast
    gapic(IAMClient, "iam", transport="grpc")     # insecure channel on loopback, fails fast

Callers reach the whole of talking to Google through this module: it also exports the endpoint helpers
(``cloud.endpoints``) and the error translation (``cloud.errors``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from cloud.deadlines import adapter_class as deadline_adapter
from cloud.deadlines import deadline_session
from cloud.endpoints import (
    CLOUD_PLATFORM_SCOPE,
    CONNECT_TIMEOUT_SECONDS,
    REQUEST_TIMEOUT_SECONDS,
    SERVICES,
    base_url,
    endpoint_for,
    is_loopback_http,
    uses_anonymous,
)
from cloud.errors import (
    EndpointUnreachable,
    as_user_error,
    google_errors,
    unreachable_error,
    unreachable_reason,
)
from cloud.google import (
    auth,
    auth_credentials,
    auth_exceptions,
    auth_requests,
    grpc,
    iam_grpc_transport,
    logging_v2,
    requests,
    storage,
)
from ground import domain
from ground.errors import UserError
from ground.numbers import whole_number

__all__ = [
    "CLOUD_PLATFORM_SCOPE", "CONNECT_TIMEOUT_SECONDS", "REQUEST_TIMEOUT_SECONDS", "EndpointUnreachable", "as_user_error", "authorized_session",
    "base_url", "client_kwargs", "credentials_for", "deadline_session", "download_bounded", "endpoint_for", "fail_fast",
    "fail_fast_adapter", "gapic", "get_bucket", "google_errors", "make_fail_fast", "storage_client",
    "missing_credentials", "unreachable_reason", "uses_anonymous",
]


def missing_credentials(*services: str) -> str | None:
    """Why requests to ``services`` cannot be sent from here, or None when they can (each redirected to an
    endpoint by ``cloud.endpoints``, or Application Default Credentials found): what a dry run says instead of
    reading Google's state when there is nothing to read it with."""
    if services and all(endpoint_for(s) for s in services):
        return None
    try:
        auth.default()
    except auth_exceptions.DefaultCredentialsError:
        return "no Google credentials (`gcloud auth application-default login`)"
    return None


def credentials_for(service: str):
    """AnonymousCredentials for a loopback endpoint, else None (the client then uses ADC)."""
    if uses_anonymous(service):
        return auth_credentials.AnonymousCredentials()
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
    transport_cls = _GRPC_TRANSPORTS[service]()
    channel = grpc.intercept_channel(grpc.insecure_channel(host), _fail_fast_interceptor(f"http://{host}"))
    return transport_cls(host=host, credentials=auth_credentials.AnonymousCredentials(), channel=channel)


def _secure_grpc_transport(service: str, host: str, gapic_kwargs: dict):
    """The client's own TLS channel (credentials, scopes, options as GAPIC makes them) with the fail-fast
    interceptor in front, so a real endpoint that cannot be reached fails at once as a loopback one does."""
    transport_cls = _GRPC_TRANSPORTS[service]()

    def channel(target, **channel_kwargs):
        return grpc.intercept_channel(transport_cls.create_channel(target, **channel_kwargs),
                                      _fail_fast_interceptor(f"https://{host}"))

    return transport_cls(channel=channel, **gapic_kwargs)


def _fail_fast_interceptor(url: str):
    """A gRPC interceptor raising ``EndpointUnreachable`` when a call could not connect at all: gRPC reports
    that as UNAVAILABLE, which GAPIC's default retry would retry for a minute. A server's own UNAVAILABLE
    (overload) carries other details and is still retried."""
    class FailFast(grpc.UnaryUnaryClientInterceptor):
        def intercept_unary_unary(self, continuation, client_call_details, request):
            outcome = continuation(client_call_details, request)
            error = outcome.exception() if hasattr(outcome, "exception") else None
            if isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.UNAVAILABLE:
                reason = unreachable_reason(Exception(error.details() or ""))
                if reason is not None:
                    raise unreachable_error(url, reason)
            return outcome

    return FailFast()


def _iam_grpc_transport():
    return iam_grpc_transport.IAMGrpcTransport


def _logging_grpc_transport():
    return logging_v2.services.logging_service_v2.transports.LoggingServiceV2GrpcTransport


_GRPC_TRANSPORTS = {"iam": _iam_grpc_transport, "logging": _logging_grpc_transport}


def authorized_session(service: str):
    """A requests session for raw REST calls (APIs without a client library method, e.g.
    serviceusage v1beta1 ``generateServiceIdentity``): anonymous on loopback, ADC otherwise."""

    creds = credentials_for(service)
    if creds is None:
        creds, _ = auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    return fail_fast(auth_requests.AuthorizedSession(creds))


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
    ``EndpointUnreachable`` naming the endpoint, which no retry predicate retries, and gives every request its
    overall deadline (``cloud.deadlines``). Other failures pass through unchanged, so throttling and server errors
    are still retried by the client library."""
    class FailFastAdapter(deadline_adapter()):  # type: ignore[misc, valid-type]
        def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
            try:
                return super().send(request, stream=stream, timeout=_timeouts(timeout), verify=verify,
                                    cert=cert, proxies=proxies)
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
                reason = unreachable_reason(exc)
                if reason is None:
                    raise
                raise unreachable_error(request.url, reason) from exc

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
    adapter and answers checked by shape (``answer_problem``); anything without a requests session (a test double)
    is returned unchanged."""
    try:
        session = getattr(client, "_http", None)
    except Exception:  # noqa: BLE001 - e.g. no credentials yet: the real call will say so
        return client
    if isinstance(session, requests.Session):
        fail_fast(session)
        _check_answers(client)
    return client


def storage_client(project: str | None = None):
    """A google-cloud-storage client that fails fast on an unreachable endpoint (see ``fail_fast``).

    Honours ``STORAGE_EMULATOR_HOST`` as the library does (anonymous on a loopback emulator)."""

    # project=None, not the library's default: no project is inferred (reads, lists and uploads name their
    # bucket), so credentials without a project (`gcloud auth application-default login`) work and nothing
    # asks gcloud for one; a caller that creates buckets passes its project.
    endpoint_for("storage")        # STORAGE_EMULATOR_HOST is read by the library; checked here first (one line)
    client = storage.Client(project=project or None)
    return make_fail_fast(client)  # mounts on the client's own AuthorizedSession


def answer_problem(answer: Any) -> str | None:
    """Why a storage JSON API answer cannot be used (the library would fail on it with a traceback), or None: an
    answer is an object (or empty, for a delete), its list fields are lists of their kind, its page token a string."""
    if answer in (b"", "") or isinstance(answer, bytes):
        return None
    if not isinstance(answer, dict):
        return f"answered {type(answer).__name__ if answer is not None else 'null'} instead of a JSON object"
    for key, kind in domain.STORAGE_LIST_FIELDS.items():
        value = answer.get(key)
        if key in answer and (not isinstance(value, list) or not all(isinstance(v, kind) for v in value)):
            return f"answered a {key!r} that is not a list of {'objects' if kind is dict else 'names'}"
    if "nextPageToken" in answer and not isinstance(answer["nextPageToken"], str):
        return "answered a nextPageToken that is not a string"
    for item in [answer, *answer.get("items", ())]:        # an object's (or a bucket's) resource: its scalars
        for key, value in item.items():
            if key in domain.STORAGE_NUMBER_FIELDS and whole_number(str(value) if isinstance(value, int) else value) is None:
                return f"answered a {key!r} that is not a whole number"
            if key in domain.STORAGE_TEXT_FIELDS and not isinstance(value, str):
                return f"answered a {key!r} that is not text"
    return None


def _check_answers(client: Any) -> None:
    """Make the storage client's every JSON answer pass ``answer_problem`` before the library reads it: one line
    naming the endpoint and the request instead of the library's AttributeError on a ``null``."""
    connection = getattr(client, "_connection", None)
    request = getattr(connection, "api_request", None)
    if request is None or getattr(request, "checked", False):
        return

    def checked(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        answer = request(method, path, *args, **kwargs)   # a body that is not JSON: as_user_error says so
        problem = answer_problem(answer)
        if problem is not None:
            where = base_url("storage")
            raise UserError(f"the storage API at {where} {problem} to {method} {path[:200]}; check the endpoint "
                            "and any proxy between, then try again", 1)
        return answer

    checked.checked = True  # type: ignore[attr-defined]
    connection.api_request = checked


def get_bucket(client: Any, name: str, needs: str = "storage.buckets.get"):
    """``client.get_bucket(name)`` with a missing bucket or a 403 turned into a one-line UserError.

    ``needs``: the permission(s) the caller's next steps require, named in the 403 message.
    """
    make_fail_fast(client)
    with google_errors(not_found=f"bucket gs://{name} does not exist (check the name, or create it first)",
                       forbidden=f"permission denied reading bucket gs://{name}: you need {needs} on it"):
        return client.get_bucket(name)


def download_bounded(blob, limit: int, where: str, what: str, exit_code: int = 2) -> bytes:
    """The object's bytes, never more than ``limit + 1`` of them read: a larger object is one UserError line naming
    ``where`` and saying ``what`` it is not (``download_as_bytes``'s ``end`` is inclusive, so one byte over tells)."""
    data = blob.download_as_bytes(start=0, end=limit)
    if len(data) > limit:
        raise UserError(f"{where} is larger than {limit} bytes: {what}", exit_code)
    return data
