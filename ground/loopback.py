"""Asking a server tpuctl started on 127.0.0.1 (TensorBoard, TF Serving) whether it is up.

A proxy named in the environment (``http_proxy``) is never used for these reads: urllib would send a request for
127.0.0.1 to the proxy unless ``no_proxy`` lists it, and the server would then never seem to answer.
"""

from __future__ import annotations

import urllib.request


def get_local(url: str, *, timeout: float, limit: int = 1 << 20) -> bytes | None:
    """The body (at most ``limit`` bytes) of ``GET url`` on this machine; None when nothing answers yet, the
    connection fails or the server answers an HTTP error."""

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(url, timeout=timeout) as reply:
            return reply.read(limit)
    except OSError:          # URLError, HTTPError, refused, reset, timeout
        return None
