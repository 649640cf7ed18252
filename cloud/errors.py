"""Google failures -> one line: the single translation every caller (and the CLI boundary) uses.

An endpoint that cannot be reached at all (connection refused, DNS failure, no answer within
``endpoints.CONNECT_TIMEOUT_SECONDS``) is ``EndpointUnreachable`` naming it and the variable that set it; a Google
API error is its code and first line; ``with google_errors(not_found=…, forbidden=…)`` gives a 404 or 403 the exact
line that says what to fix.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator
from typing import Any

from cloud.deadlines import given_up
from cloud.endpoints import CONNECT_TIMEOUT_SECONDS, describe_endpoint
from cloud.google import api_exceptions
from ground.errors import UserError


class EndpointUnreachable(UserError):
    """An endpoint could not be connected to at all. A UserError, so no Google retry predicate retries it."""
    def __init__(self, message: str):
        super().__init__(message, exit_code=1)


_REFUSED = ("connection refused", "failed to connect to remote host", "errno 111", "connect call failed")
_NO_ROUTE = ("network is unreachable", "errno 101", "no route to host", "errno 113")
_DNS = ("name or service not known", "temporary failure in name resolution", "nodename nor servname",
        "failed to resolve", "dns resolution failed", "getaddrinfo failed", "no address associated",
        "name does not resolve", "nameresolutionerror")
_CONNECT_TIMEOUT = ("connecttimeout", "connection to", "timed out. (connect timeout")


def unreachable_reason(exc: BaseException | None) -> str | None:
    """``"connection refused"``, ``"DNS lookup failed"`` or ``"no answer"`` when ``exc`` (or what caused it)
    is a failure to connect at all; None for anything else (a 5xx, a reset mid-transfer, a read timeout)."""

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


def unreachable_error(url: str | None, reason: str, doing: str | None = None) -> EndpointUnreachable:
    where = f"{doing}: " if doing else ""
    return EndpointUnreachable(f"{where}cannot reach {describe_endpoint(url)}: {reason} "
                               "(check the endpoint, network, proxy or firewall)")


def as_user_error(exc: BaseException, doing: str | None = None) -> Exception | None:
    """The one-line ``UserError`` for a Google client / auth / transport failure, or None when ``exc``
    is not one. ``doing`` names what was being done ("reading bucket gs://x") for the message."""
    if isinstance(exc, UserError):
        return exc
    slow = given_up()
    if slow is not None:         # the error a library raised after the request's deadline shut its socket
        return UserError(f"{doing}: {slow}" if doing else str(slow), slow.exit_code)
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
        return unreachable_error(url, reason, doing)
    if type(exc).__name__ == "DefaultCredentialsError":
        return UserError(f"{where}no Google credentials ({first}); run `gcloud auth application-default login`")
    if mod.startswith("google.api_core.exceptions"):
        message = (getattr(exc, "message", None) or str(exc)).splitlines()
        return UserError(f"{where}Google API error {getattr(exc, 'code', '')}: {(message or [''])[0][:300]}",
                         exit_code=1)
    if mod.startswith("google.protobuf") and type(exc).__name__ == "ParseError" or (
            mod.startswith("requests.") and type(exc).__name__ == "JSONDecodeError"):
        # a 200 whose body is not the API's JSON (an HTML page of a proxy or captive portal, a truncated answer)
        return UserError(f"{where}the API's answer is not its JSON ({first}); check the endpoint and any proxy "
                         "between, then try again", exit_code=1)
    if mod.startswith(("requests.", "urllib3.", "google.auth.exceptions")):
        return UserError(f"{where}cannot reach a Google API: {first}", exit_code=1)
    return None


def _url_in(text: str) -> str | None:
    """The endpoint a transport error names: ``host='h', port=p`` (urllib3) or ``ipv4:h:p`` (gRPC)."""
    match = re.search(r"host='([^']+)', port=(\d+)", text)
    if match:
        return f"http://{match.group(1)}:{match.group(2)}"
    match = re.search(r"ipv[46]:\[?([0-9a-fA-F:.]+?)\]?:(\d+)", text)
    if match:
        return f"http://{match.group(1)}:{match.group(2)}"
    match = re.search(r"https?://[^\s/'\"]+", text)
    return match.group(0) if match else None


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
        if not_found and isinstance(exc, api_exceptions.NotFound):
            raise UserError(not_found, exit_code) from None
        if forbidden and isinstance(exc, (api_exceptions.Forbidden, api_exceptions.PermissionDenied)):
            raise UserError(forbidden, exit_code) from None
        if bad_request and isinstance(exc, api_exceptions.BadRequest):
            raise UserError(bad_request, exit_code) from None
        translated = as_user_error(exc, doing)
        if translated is None or translated is exc:
            raise
        raise translated from None
