"""The fixture that puts the storage emulator where TensorFlow's GCS client looks (tests/fixtures/tfgcsfixtures.py),
asked the way that client asks (its requests as the front recorded them from TF 2.21), with the standard library's
HTTP client through the same proxy and test CA. Fast: the trainer's own gs:// I/O is tested end to end in
tests/ops/runs/test_gcs_runs.py."""

from __future__ import annotations

import http.client
import json
import ssl
from urllib.parse import urlsplit

import pytest

import tfgcsfixtures
from tfgcsfixtures import tf_storage


def _ask(storage, host: str, method: str, target: str, body: bytes | None = None, headers: dict | None = None,
         *, trusted: bool = True):
    """One request through the front's proxy to ``host`` over TLS; (status, headers, body)."""
    proxy = urlsplit(storage.front.url)
    context = ssl.create_default_context(cafile=str(storage.front.ca.ca_file)) if trusted else \
        ssl.create_default_context()
    conn = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=context, timeout=30)
    conn.set_tunnel(host, 443)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


@pytest.fixture(params=["cryptography", "openssl"])
def storage(request, tmp_path, monkeypatch):
    """The emulator behind its front, the test CA made by each of the two makers."""
    if request.param == "openssl":      # what the trainer environment (no cryptography package) uses
        monkeypatch.setattr(tfgcsfixtures, "_make_with_cryptography",
                            lambda ca, hosts: tfgcsfixtures._make_with_openssl(ca, hosts, ca.ca_file.parent))
    with tf_storage(tmp_path / "ca", ["bkt"]) as storage:
        yield storage


def test_what_tensorflow_asks_is_answered_as_google_answers(storage):
    api = "www.googleapis.com"
    # a resumable upload as TF sends it: the session first, then the bytes as chunks under a Content-Length too
    status, headers, _ = _ask(storage, api, "POST", "/upload/storage/v1/b/bkt/o?uploadType=resumable&name=d%2Fx.txt",
                              b"", {"X-Upload-Content-Length": "5"})
    session = urlsplit(headers["Location"])
    assert status == 200 and (session.scheme, session.hostname) == ("https", api)   # back through the front
    status, _, body = _ask(storage, api, "PUT", f"{session.path}?{session.query}", b"5\r\nhello\r\n0\r\n\r\n",
                           {"Transfer-Encoding": "chunked", "Content-Length": "5", "Content-Range": "bytes 0-4/5"})
    assert status == 200 and json.loads(body)["size"] == "5"
    # the ops side reads it back through google-cloud-storage, following the object's stored links
    assert storage.client.bucket("bkt").get_blob("d/x.txt").download_as_bytes() == b"hello"
    # media reads with a range; one past the end is a 416 with the size
    status, _, body = _ask(storage, "storage.googleapis.com", "GET", "/bkt/d%2Fx.txt", headers={"Range": "bytes=1-99"})
    assert (status, body) == (206, b"ello")
    status, headers, _ = _ask(storage, "storage.googleapis.com", "GET", "/bkt/d%2Fx.txt",
                              headers={"Range": "bytes=5-99"})
    assert (status, headers["Content-Range"]) == (416, "bytes */5")
    # a folder marker: an empty media upload, refused with 412 once it exists
    marker = "/upload/storage/v1/b/bkt/o?uploadType=media&name=d%2Fsub%2F&ifGenerationMatch=0"
    assert _ask(storage, api, "POST", marker, b"")[0] == 200
    assert storage.client.bucket("bkt").get_blob("d/sub/").size == 0
    assert _ask(storage, api, "POST", marker, b"")[0] == 412
    # the layout TF 2.21 asks before renaming a folder: a flat bucket's; an unknown bucket's is a 404
    status, _, body = _ask(storage, api, "GET", "/storage/v1/b/bkt/storageLayout")
    layout = json.loads(body)
    assert status == 200 and layout["kind"] == "storage#storageLayout" and layout["bucket"] == "bkt"
    assert not layout.get("hierarchicalNamespace", {}).get("enabled")
    assert _ask(storage, api, "GET", "/storage/v1/b/nope/storageLayout")[0] == 404
    assert [(s.method, s.status) for s in storage.front.seen][-3:] == [("POST", 412), ("GET", 200), ("GET", 404)]
    assert not storage.front.refused and not storage.front.failed


def test_only_the_storage_hosts_and_only_clients_trusting_the_test_ca_get_through(storage):
    with pytest.raises(OSError, match="403"):      # the tunnel is refused: nothing leaves the machine through it
        _ask(storage, "example.com", "GET", "/")
    assert storage.front.refused == ["example.com:443"]
    with pytest.raises(ssl.SSLCertVerificationError):
        _ask(storage, "www.googleapis.com", "GET", "/storage/v1/b/bkt", trusted=False)
    assert storage.front.seen == []
