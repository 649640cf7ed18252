"""Prediction server replies from hypothesis (issue 27): whatever a TF Serving URL answers — any bytes, any JSON,
NaN/Infinity, 500-digit integers, any status — `predict` gives finite probabilities (or unknown) or one line
without escape sequences, never a traceback. The server is local (127.0.0.1)."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ground.errors import UserError
from tpuctl.services import serving

from clifixtures import error_line, invoke
from httpfakes import FakeServer, JsonHandler


class Replies(FakeServer):
    """Answers every POST and GET with ``reply`` and ``status``."""

    def __init__(self):
        self.reply, self.status = b"{}", 200
        fake = self

        class Handler(JsonHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(fake.status)
                self.send_header("Content-Length", str(len(fake.reply)))
                self.end_headers()
                self.wfile.write(fake.reply)

            do_GET = do_POST
        self.serve(Handler)


@pytest.fixture(scope="module")
def server():
    fake = Replies()
    yield fake
    fake.stop()


_JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**500), max_value=10**500),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=20)
_REPLIES = st.one_of(
    st.binary(max_size=64),
    _JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.lists(st.one_of(st.lists(_JSON_VALUES, max_size=5), st.dictionaries(
        st.sampled_from(["probabilities", "class_id", "class_name"]), _JSON_VALUES), _JSON_VALUES),
        min_size=1, max_size=1).map(lambda p: json.dumps({"predictions": p}).encode()),
)


def test_any_server_reply_is_predictions_or_one_line(server):
    images = [serving.Image("x.jpg", b"\xff\xd8\xff")]

    @given(reply=_REPLIES, status=st.sampled_from([200, 200, 200, 404, 500]))
    def check(reply, status):
        server.reply, server.status = reply, status
        try:
            found = serving.predict_rest(server.url + "/v1/models/digits:predict", images, timeout=5)
        except UserError as exc:
            assert "\n" not in str(exc) and "\x1b" not in str(exc)
            return
        for _, _, value in found[0].top:
            assert value is None or (isinstance(value, float) and value == value and abs(value) != float("inf"))

    check()


# ------------------------------------------------------------------- issue 56, class 7: answers of the wrong shape

@pytest.mark.parametrize("reply, key", [
    (b"null", "answered null instead of a JSON object"),                         # old: AttributeError traceback
    (b"[]", "answered list instead of a JSON object"),
    (b'{"items": null}', "'items' that is not a list of objects"),
    (b'{"items": [1]}', "'items' that is not a list of objects"),
    (b'{"prefixes": [{}]}', "'prefixes' that is not a list of names"),
    (b'{"items": [{"name": "runs/a/result.json", "size": "12x"}]}', "'size' that is not a whole number"),
    (b'{"items": [{"name": 5}]}', "'name' that is not text"),
    (b'{"nextPageToken": 7}', "nextPageToken that is not a string"),
])
def test_a_storage_answer_of_another_shape_is_one_line(server, reply, key):
    """Every answer is validated by shape before the storage library reads it (cloud.clients.answer_problem, under
    every storage client: a listing, an object's metadata, the hub cache's listing)."""
    server.reply, server.status = reply, 200
    for args in (["runs", "ls", "--dir", "gs://some-bucket/runs"], ["logs", "a-run", "--dir", "gs://some-bucket/runs"],
                 ["hub-cache", "ls", "--bucket", "some-bucket"]):
        line = error_line(invoke(args, env={"STORAGE_EMULATOR_HOST": server.url}), 1)
        assert "the storage API at" in line and key in line, (args, line)


class Drips(FakeServer):
    """Answers slowly, every byte within the per-read timeout: ``headers`` drips the status line and headers,
    ``body`` sends JSON metadata at once and drips a media download's body (Content-Length 1000), ``json-body``
    drips every answer's JSON body; ``endless`` sends a JSON answer without end, as fast as it can."""

    def __init__(self, mode: str):
        self.mode = mode
        fake = self

        class Handler(JsonHandler):
            def do_GET(self):
                try:
                    if fake.mode == "headers":
                        for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}":
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                            time.sleep(0.1)
                    elif fake.mode in ("json-body", "endless"):
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        if fake.mode == "json-body":
                            self.send_header("Content-Length", "1000")
                        self.end_headers()
                        self.wfile.write(b'{"items": [')
                        for _ in range(1000 if fake.mode == "json-body" else 10**9):
                            self.wfile.write(b" " if fake.mode == "json-body" else b" " * 65536)
                            self.wfile.flush()
                            time.sleep(0.1 if fake.mode == "json-body" else 0)
                    elif "alt=media" not in self.path:
                        self.send(200, {"name": "runs/a-run/tpuctl-run.json", "bucket": "some-bucket", "size": "1000",
                                        "generation": "1"})
                    else:
                        self.send_response(200)
                        self.send_header("Content-Length", "1000")
                        self.end_headers()
                        for _ in range(1000):
                            self.wfile.write(b" ")
                            self.wfile.flush()
                            time.sleep(0.1)
                except OSError:
                    pass
        self.serve(Handler)


@pytest.mark.parametrize("mode, args", [
    ("headers", ["runs", "ls", "--dir", "gs://some-bucket/runs"]),
    ("body", ["logs", "a-run", "--dir", "gs://some-bucket/runs"]),
    ("headers", ["hub-cache", "fetch", "{url}/models/drip/1", "--dest", "{tmp}/cache"]),
    ("json-body", ["runs", "ls", "--dir", "gs://some-bucket/runs"]),     # an API answer read whole, dripped
    ("json-body", ["tpu", "list", "--zone", "us-central1-a", "--project", "my-project-1"]),
])
def test_a_server_that_drips_is_given_up_on_at_the_requests_deadline(monkeypatch, tmp_path, mode, args):
    """Every download and remote read has an overall deadline (cloud.deadlines), not only a per-read one: before,
    each of these went on for as long as the server dripped (the storage library also retried it)."""
    from cloud import endpoints

    monkeypatch.setattr(endpoints, "REQUEST_DEADLINE_SECONDS", 0.5)
    fake = Drips(mode)
    try:
        started = time.monotonic()
        result = invoke([a.format(url=fake.url, tmp=tmp_path) for a in args],
                        env={"STORAGE_EMULATOR_HOST": fake.url, "TPUCTL_TPU_ENDPOINT": fake.url})
        line = error_line(result, 1)
        assert "did not send its whole answer within" in line and "127.0.0.1" in line, line
        assert time.monotonic() - started < 30
    finally:
        fake.stop()


def test_an_endless_api_answer_is_bounded_in_bytes(monkeypatch):
    """An answer read whole (a listing's page) stops at endpoints.MAX_ANSWER_BYTES: before, an endless one was read
    into memory until the machine ran out of it."""
    from cloud import endpoints

    monkeypatch.setattr(endpoints, "MAX_ANSWER_BYTES", 1 << 20)
    fake = Drips("endless")
    try:
        line = error_line(invoke(["runs", "ls", "--dir", "gs://some-bucket/runs"],
                                 env={"STORAGE_EMULATOR_HOST": fake.url}), 1)
        assert "answered more than 1,048,576 bytes" in line, line
    finally:
        fake.stop()
