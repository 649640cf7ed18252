"""Prediction server replies from hypothesis (issue 27): whatever a TF Serving URL answers — any bytes, any JSON,
NaN/Infinity, 500-digit integers, any status — `predict` gives finite probabilities (or unknown) or one line
without escape sequences, never a traceback. The server is local (127.0.0.1)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ground.errors import UserError
from tpuctl.services import serving

from httpfakes import FakeServer, JsonHandler


class Replies(FakeServer):
    """Answers every POST with ``reply`` and ``status``."""

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
