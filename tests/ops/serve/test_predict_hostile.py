"""`tpuctl predict` against hostile prediction servers (issue 27, classes 4, 7, 8, 9): --timeout bounds the whole
request (a slow-drip server), credentials in the URL are never echoed, NaN/Infinity never printed nor emitted as
JSON, deep or huge-number replies and broken URLs are one line (tests/ops/fuzz/test_hostile_replies.py generates
replies with hypothesis). Local servers on 127.0.0.1 only."""

from __future__ import annotations

import json
import threading
import time

import pytest

from ground.errors import UserError
from tpuctl.services import serving

from clifixtures import invoke
from httpfakes import FakeServer, JsonHandler


class Replies(FakeServer):
    """Answers every POST with ``self.reply`` (bytes, status); ``drip``: one byte every ``drip`` seconds."""

    def __init__(self):
        self.reply, self.status, self.drip = b"{}", 200, 0.0
        fake = self

        class Handler(JsonHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = fake.reply
                self.send_response(fake.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    if not fake.drip:
                        self.wfile.write(body)
                        return
                    for i in range(len(body)):
                        self.wfile.write(body[i:i + 1])
                        self.wfile.flush()
                        time.sleep(fake.drip)
                except OSError:
                    pass                # the client gave up: expected
        self.serve(Handler)

    def predict_url(self, userinfo: str = "") -> str:
        return self.url.replace("http://", f"http://{userinfo}") + "/v1/models/digits:predict"


@pytest.fixture(scope="module")
def server():
    fake = Replies()
    yield fake
    fake.stop()


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "x.jpg"
    path.write_bytes(b"\xff\xd8\xff" + bytes(16))
    return path


def _one_line(result, code=1):
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_timeout_bounds_the_whole_request_against_a_slow_drip_server(server, image):
    server.reply = json.dumps({"predictions": [[0.5, 0.5]], "pad": "x" * 200}).encode()
    server.drip, server.status = 0.05, 200          # ~12 s in all, a byte every 50 ms: never a read timeout
    try:
        started = time.monotonic()
        line = _one_line(invoke(["predict", server.predict_url(), str(image), "--timeout", "1"]))
        assert time.monotonic() - started < 4, "the deadline was not kept"
        assert "within 1 s" in line
    finally:
        server.drip = 0.0


def test_credentials_in_the_url_are_never_echoed(server, image):
    server.reply, server.status = b'{"error": "nope"}', 500
    url = server.predict_url("alice:s3cret-pw@")
    result = invoke(["predict", url, str(image)])
    assert "s3cret-pw" not in result.output and "alice" not in result.output
    assert "HTTP 500" in _one_line(result)
    bad = "http://alice:s3cret-pw@[::1/v1/models/m:predict"
    result = invoke(["predict", bad, str(image)])
    assert "s3cret-pw" not in result.output and "TF Serving predict URL" in _one_line(result, 2)


@pytest.mark.parametrize("url", ["http://[::1", "http://[::1]:99999/v1/models/m:predict", "http://h:0/v1/models/m:predict"])
def test_broken_urls_are_one_line(image, url):
    assert "TF Serving predict URL" in _one_line(invoke(["predict", url, str(image)]), 2)


@pytest.mark.parametrize("reply", [b"[" * 100_000 + b"]" * 100_000,
                                   b'{"predictions": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}",
                                   b'{"predictions": [[' + b"9" * 5000 + b"]]}"])
def test_deep_or_huge_number_replies_are_one_line(server, image, reply):
    server.reply, server.status = reply, 200
    assert "predictions" in _one_line(invoke(["predict", server.predict_url(), str(image)]))


def test_nan_and_infinity_are_never_printed_as_probabilities(server, image):
    server.reply = b'{"predictions": [{"probabilities": [NaN, 0.25, Infinity, 1' + b"0" * 400 + b', 0.5]}]}'
    server.status = 200
    text = invoke(["predict", server.predict_url(), str(image), "--top", "5"])
    assert text.exit_code == 0, text.output
    ranked = text.stdout.split(": ", 1)[1]
    assert "nan" not in ranked.lower() and "inf" not in ranked.lower()
    assert ranked.index("0.500") < ranked.index("0.250") < ranked.index("?")
    doc = invoke(["predict", server.predict_url(), str(image), "--top", "5", "--json"])
    parsed = json.loads(doc.stdout, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
    assert [t["probability"] for t in parsed[0]["top"]] == [0.5, 0.25, None, None, None]


def test_server_text_reaches_the_terminal_without_escape_sequences(server, image):
    server.reply = json.dumps({"predictions": [{"probabilities": [0.9, 0.1], "class_id": 0,
                                                "class_name": "\x1b]0;owned\x07cat\x1b[2J"}]}).encode()
    server.status = 200
    result = invoke(["predict", server.predict_url(), str(image)])
    assert result.exit_code == 0 and "\x1b" not in result.stdout and "cat (class 0) 0.900" in result.stdout
    server.reply, server.status = b'{"error": "\x1b[31mred\x1b[0m"}', 503
    line = _one_line(invoke(["predict", server.predict_url(), str(image)]))
    assert "\x1b" not in line and "red" in line


def test_the_deadline_leaves_no_reader_behind(server, image):
    server.reply = json.dumps({"predictions": [[1.0]], "pad": "x" * 100}).encode()
    server.drip = 0.05
    try:
        before = {t.name for t in threading.enumerate()}
        with pytest.raises(UserError, match="within 0.5 s"):
            serving.predict_rest(server.predict_url(), [serving.Image("x.jpg", b"\xff\xd8\xff")], timeout=0.5)
        time.sleep(0.3)
        assert [t for t in threading.enumerate() if t.name == "tpuctl-predict" and t.name not in before] == []
    finally:
        server.drip = 0.0


def test_a_vertex_endpoint_gets_the_same_total_deadline():
    class SlowClient:
        def predict(self, **_kw):
            time.sleep(3)          # a REST transport's per-read timeout would not end this drip

    started = time.monotonic()
    with pytest.raises(UserError, match="within 0.3 s"):
        serving.predict_vertex("projects/p/locations/us-central1/endpoints/1",
                               [serving.Image("x.jpg", b"\xff\xd8\xff")], timeout=0.3, client=SlowClient())
    assert time.monotonic() - started < 2
