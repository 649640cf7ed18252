"""The one wait loop (ground.polling.poll), on a fake clock: states said once, deadlines, errors."""

from __future__ import annotations

import pytest

from ground.errors import UserError
from ground.polling import poll


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_it_reads_until_done_and_says_each_state_once():
    states = iter(["QUEUED", "QUEUED", "RUNNING", "RUNNING", "RUNNING", "SUCCEEDED"])
    said: list[str] = []
    clock = FakeClock()
    final = poll(lambda: next(states), lambda s: s == "SUCCEEDED", interval=5, key=str, on_change=said.append,
                 sleep=clock.sleep, clock=clock)
    assert final == "SUCCEEDED"
    assert said == ["QUEUED", "RUNNING", "SUCCEEDED"]
    assert clock.sleeps == [5] * 5        # one sleep between reads, none after the last


def test_the_deadline_ends_the_wait_with_the_last_value_read():
    clock = FakeClock()
    reads = iter(range(1000))
    with pytest.raises(UserError) as caught:
        poll(lambda: next(reads), lambda _: False, interval=10, timeout=35, sleep=clock.sleep, clock=clock,
             expired=lambda last: f"still at read {last}")
    assert str(caught.value) == "still at read 4"   # reads at 0, 10, 20, 30, 40 s; 40 >= 35
    assert caught.value.exit_code == 1


def test_done_may_end_the_wait_with_its_own_error():
    def done(state: str) -> bool:
        if state == "FAILED":
            raise UserError("the job FAILED: out of memory", 1)
        return state == "SUCCEEDED"

    clock = FakeClock()
    states = iter(["RUNNING", "FAILED", "SUCCEEDED"])
    with pytest.raises(UserError, match="out of memory"):
        poll(lambda: next(states), done, interval=1, timeout=100, expired=str, sleep=clock.sleep, clock=clock)


def test_a_deadline_without_its_message_is_a_programming_error():
    with pytest.raises(ValueError, match="expired"):
        poll(lambda: 1, lambda _: True, interval=1, timeout=5)


def test_one_display_form_for_durations_and_one_exact_form_for_limits():
    from datetime import timedelta

    from ground.durations import format_duration, format_exact

    shown = {None: "-", -3: "0s", 0.4: "0s", 42: "42s", 59.6: "1m00s", 605: "10m05s", 3599.4: "59m59s",
             3600: "1h00m", 7620: "2h07m", 86399: "1d00h", 3 * 86400 + 4 * 3600: "3d04h"}
    assert {k: format_duration(k) for k in shown} == shown
    assert [format_exact(timedelta(seconds=s)) for s in (0, 600, 5400, 7 * 86400, 86400 + 61)] == [
        "0s", "10m", "1h30m", "7d", "1d1m1s"]


def test_a_local_readiness_read_never_goes_through_a_proxy(monkeypatch):
    """TensorBoard's and TF Serving's readiness reads of 127.0.0.1 (ground/loopback.get_local): with http_proxy
    set, urllib would send them to the proxy, and the server would never seem to answer."""
    import http.server
    import threading

    from ground.loopback import get_local

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"up" if self.path == "/ready" else b"no"
            self.send_response(200 if self.path == "/ready" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    try:
        assert get_local(f"{base}/ready", timeout=5) == b"up"
        assert get_local(f"{base}/missing", timeout=5) is None          # an HTTP error is "not ready"
    finally:
        server.shutdown()
        server.server_close()
    assert get_local(f"{base}/ready", timeout=5) is None                # nothing listens any more


@pytest.mark.parametrize("text", ["١h", "²m", "1h٣0m", "٩"])
def test_a_duration_takes_ascii_digits_only(text):
    """Issue 56 (a fresh trial): `--max-run-time ١h` (an Arabic-Indic digit) was taken for an hour; every number read
    from text is ASCII digits (ground.numbers' rule). One line naming the flag."""
    from datetime import timedelta

    from ground.durations import parse_duration
    from ground.errors import UserError

    with pytest.raises(UserError, match="--max-run-time .*expected a duration"):
        parse_duration(text, "--max-run-time", timedelta(0), timedelta(days=7))
