"""An overall deadline for every HTTP request tpuctl sends: connecting, sending, the answer's headers and its body.

requests and urllib3 bound each socket read (``REQUEST_TIMEOUT_SECONDS``), never the whole: a server (or a proxy)
that sends one byte every two seconds keeps a download, a listing or an API call going for days. Every session
tpuctl talks through (Google's REST clients, the storage client, hub downloads) sends through ``DeadlineAdapter``:
a request is given ``REQUEST_DEADLINE_SECONDS`` plus a second per ``MIN_BYTES_PER_SECOND`` bytes it sends or its
answer announces (a streamed answer without a length: ``STREAM_DEADLINE_SECONDS``); past it, the socket the request
waits on is shut, and the request ends with one line naming the host (``TooSlow``, which no retry repeats).

How the socket is found: the pools of a ``DeadlineAdapter`` make connections that note, as they send, which thread
sends on them; a watch (a timer) per request shuts that connection's socket, or, once the answer's headers are in,
the socket its body is read from, unless the request is done by then.
"""

from __future__ import annotations

import functools
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

from cloud import endpoints
from cloud.google import requests, requests_adapters, urllib3_connectionpool
from ground.errors import UserError

#: The connection each thread sends on now (thread id -> urllib3 connection), noted by the tracked connections.
_SENDING: dict[int, Any] = {}
#: Threads whose request was given up on (thread id -> the error to raise): a retry in that thread of a request to
#: the same host fails at once, and the error a library raises after the shut socket is told as what it is.
_EXPIRED: dict[int, TooSlow] = {}


class TooSlow(UserError):
    """A request that did not end within its deadline."""

    def __init__(self, url: str, seconds: float):
        self.host = urlsplit(url).netloc
        super().__init__(f"{self.host} did not send its whole answer within {seconds:,.0f} s (the server, or a proxy "
                         "between, answers too slowly); check the endpoint and the network, then try again", 1)


def given_up(thread: int | None = None) -> TooSlow | None:
    """The deadline error of a request this thread (``thread``) gave up on and has not said yet; it is said once."""
    return _EXPIRED.pop(threading.get_ident() if thread is None else thread, None)


@functools.cache
def _tracked_pools() -> dict[str, type]:
    """urllib3 pool classes whose connections note which thread sends on them (``_SENDING``)."""
    cp = urllib3_connectionpool

    def tracked(base: type) -> type:
        class Tracked(base):  # type: ignore[misc, valid-type]
            def request(self, *args: Any, **kwargs: Any) -> Any:
                _SENDING[threading.get_ident()] = self
                return super().request(*args, **kwargs)
        return Tracked

    class HTTPPool(cp.HTTPConnectionPool):
        ConnectionCls = tracked(cp.HTTPConnectionPool.ConnectionCls)

    class HTTPSPool(cp.HTTPSConnectionPool):
        ConnectionCls = tracked(cp.HTTPSConnectionPool.ConnectionCls)

    return {"http": HTTPPool, "https": HTTPSPool}


class _Watch:
    """One request's deadline: at it, the socket the request waits on is shut (unless the request is done). Every
    watch is looked after by one watchdog thread (``_watchdog``), which runs while there are watches."""

    def __init__(self, url: str, seconds: float):
        self.url, self.seconds = url, seconds
        self.thread = threading.get_ident()
        self.started = time.monotonic()
        self.done = False
        self.expired = False
        self.response: weakref.ref | None = None     # a streamed answer, once its headers are in
        with _LOCK:
            _WATCHES.add(self)
            global _WATCHDOG
            if _WATCHDOG is None or not _WATCHDOG.is_alive():
                _WATCHDOG = threading.Thread(target=_watchdog, name="tpuctl-request-deadlines", daemon=True)
                _WATCHDOG.start()
            _WAKE.notify()

    @property
    def deadline(self) -> float:
        return self.started + self.seconds

    def extend(self, seconds: float) -> None:
        """Give the request ``seconds`` more from its start (its answer announced a length to read)."""
        with _LOCK:
            self.seconds += seconds

    def finish(self) -> None:
        with _LOCK:
            self.done = True
            _WATCHES.discard(self)

    @contextmanager
    def told(self, response: Any = None) -> Iterator[None]:
        """Around the request's work: an error ends the watch (and closes ``response``), and an error after the
        deadline shut the socket is said as what it is, ``TooSlow``."""
        try:
            yield
        except BaseException:
            self.finish()
            if response is not None:
                response.close()
            if self.expired:
                raise given_up(self.thread) or TooSlow(self.url, self.seconds) from None
            raise

    def finished(self) -> bool:
        """Done, or a streamed answer read whole or closed (its connection back in the pool); under ``_LOCK``."""
        if self.done:
            return True
        if self.response is None:
            return False
        response = self.response()
        if response is None:               # the caller let go of the answer
            return True
        raw = getattr(response, "raw", None)
        return bool(getattr(raw, "closed", True)) or getattr(raw, "_fp", None) is None

    def expire(self) -> None:
        """Shut the socket the request waits on; under ``_LOCK``."""
        self.expired = True
        _EXPIRED[self.thread] = TooSlow(self.url, self.seconds)
        if self.response is None:
            candidates = [getattr(_SENDING.get(self.thread), "sock", None)]
        else:
            raw = getattr(self.response(), "raw", None)
            # urllib3 keeps the socket on its connection, or (an answer that closes the connection: HTTP/1.0, or
            # "Connection: close") only in the http.client response it reads from
            candidates = [getattr(getattr(raw, "_connection", None), "sock", None),
                          getattr(getattr(getattr(getattr(raw, "_fp", None), "fp", None), "raw", None), "_sock", None)]
        for sock in candidates:
            if isinstance(sock, socket.socket):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


_LOCK = threading.Lock()
_WAKE = threading.Condition(_LOCK)
_WATCHES: set[_Watch] = set()
_WATCHDOG: threading.Thread | None = None
#: How often the watchdog looks at streamed answers whose body is being read (to let go of the finished ones).
_LOOK_EVERY = 1.0


def _watchdog() -> None:
    """Expire each watch at its deadline, forget the finished ones; end when there are none left."""
    with _LOCK:
        while _WATCHES:
            now = time.monotonic()
            for watch in list(_WATCHES):
                if watch.finished():
                    _WATCHES.discard(watch)
                elif now >= watch.deadline:
                    watch.expire()
                    _WATCHES.discard(watch)
            if _WATCHES:
                _WAKE.wait(max(min(min(w.deadline for w in _WATCHES) - now, _LOOK_EVERY), 0.01))


def _body_size(body: Any) -> int:
    if body is None:
        return 0
    with suppress(Exception):
        return int(requests.utils.super_len(body))
    return 0


def _read_whole(response: Any, url: str) -> bytes:
    """An answer's body, at most ``endpoints.MAX_ANSWER_BYTES``: a larger one is one line (an API answer is a page of
    JSON; an endless one filled the memory)."""
    chunks, size = [], 0
    for chunk in response.iter_content(1 << 16):
        size += len(chunk)
        if size > endpoints.MAX_ANSWER_BYTES:
            raise UserError(f"{urlsplit(url).netloc} answered more than {endpoints.MAX_ANSWER_BYTES:,} bytes to one "
                            "request: not an API's answer (check the endpoint and any proxy between)", 1)
        chunks.append(chunk)
    return b"".join(chunks)


def _announced(response: Any) -> int | None:
    text = (getattr(response, "headers", None) or {}).get("Content-Length") or ""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 20 else None


@functools.cache
def adapter_class() -> type:
    """``DeadlineAdapter``: a requests adapter whose every request ends within its deadline (the module docstring);
    made on first use, so importing this module loads no HTTP library."""

    class DeadlineAdapter(requests_adapters.HTTPAdapter):

        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = _tracked_pools()

        def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
            manager = super().proxy_manager_for(proxy, **kwargs)
            manager.pool_classes_by_scheme = _tracked_pools()
            return manager

        def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
            thread = threading.get_ident()
            earlier = given_up(thread)
            if earlier is not None and earlier.host == urlsplit(request.url).netloc:
                raise earlier                              # a library's retry of what was given up on: not again
            watch = _Watch(request.url, endpoints.REQUEST_DEADLINE_SECONDS
                           + _body_size(request.body) / endpoints.MIN_BYTES_PER_SECOND)
            try:
                with watch.told():
                    response = super().send(request, stream=stream, timeout=timeout, verify=verify, cert=cert,
                                            proxies=proxies)
            finally:
                _SENDING.pop(thread, None)
            with watch.told(response):
                if watch.expired:           # the headers came, after the deadline
                    raise TimeoutError
            length = _announced(response)
            with _LOCK:
                watch.response = weakref.ref(response)
            if stream:                  # the body is read by the caller: its time, from its length
                watch.extend(endpoints.STREAM_DEADLINE_SECONDS if length is None
                             else length / endpoints.MIN_BYTES_PER_SECOND)
                return response
            # an answer read whole (requests would read it after this returns, unwatched and unbounded): read here,
            # within the deadline and at most MAX_ANSWER_BYTES
            watch.extend((length or 0) / endpoints.MIN_BYTES_PER_SECOND)
            with watch.told(response):
                response._content = _read_whole(response, request.url)
                response._content_consumed = True
            watch.finish()
            return response

    return DeadlineAdapter


def deadline_session() -> Any:
    """A requests session whose every request has its deadline (for fetches that are not a Google API's)."""
    session = requests.Session()
    adapter = adapter_class()()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
