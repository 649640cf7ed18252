"""Ctrl-C / SIGTERM during `tpuctl data make-tfrecords`, locally and while uploading to gs:// (real process,
real signal, gcp-storage-emulator behind a proxy that slows uploads): exit 130 promptly, submit nothing
more, remove what this run uploaded, and a re-run works."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ground.envs import ops_python

from procfixtures import read_complete, wait_for

FAKE_TOOL = Path(__file__).with_name("fake_tool.py")


class SlowProxy:
    """Forwards to the emulator; every upload request waits ``delay`` s first. Counts upload requests."""

    def __init__(self, upstream: str, delay: float):
        self.uploads = 0
        self.closed = threading.Event()   # set by close(): sleeping uploads wake up and forward nothing
        proxy = self
        host, port = upstream[len("http://"):].split(":")

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if "/upload/" in self.path:
                    proxy.uploads += 1
                    if proxy.closed.wait(delay):  # the test is over: never create an object in a later test
                        self.close_connection = True
                        return
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

        class QuietServer(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # a client gone after the test: not this test's output
                pass

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.closed.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_env(tmp_path):
    wrapper = tmp_path / "fake-python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_TOOL} \"$@\"\n")
    wrapper.chmod(0o755)
    src = tmp_path / "src" / "cat"
    src.mkdir(parents=True)
    return {"TPUCTL_TRAINER_PYTHON": str(wrapper), "FAKE_PID_FILE": str(tmp_path / "tool.pid")}, src.parent


def _start(args, env, cwd):
    return subprocess.Popen([str(ops_python()), "-m", "tpuctl.cli", *args], env={**os.environ, **env}, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_during_upload_stops_cleans_and_rerun_works(gcs, fake_env, tmp_path, sig):
    url, client = gcs
    client.create_bucket("fuzz-data")
    env, src = fake_env
    proxy = SlowProxy(url, delay=0.4)
    try:
        env = {**env, "STORAGE_EMULATOR_HOST": proxy.url, "FAKE_FILES": "40"}
        proc = _start(["data", "make-tfrecords", str(src), "gs://fuzz-data/pets", "--json"], env, tmp_path)
        wait_for(lambda: any(True for _ in client.list_blobs("fuzz-data")), "the first uploaded object", proc=proc)
        proc.send_signal(sig)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 20   # not after every upload (40 x 0.4 s, one at a time at the proxy)
        assert proc.returncode == 130, err
        last = err.strip().splitlines()[-1]
        assert last.startswith("error: interrupted") and sig.name in last and "gs://fuzz-data/pets" in last, err
        assert "removed the" in last
        assert proxy.uploads < 41  # stopped submitting: not every file was sent
        time.sleep(0.5)
        assert [b.name for b in client.list_blobs("fuzz-data")] == []  # what this run uploaded is gone

        rerun = _start(["data", "make-tfrecords", str(src), "gs://fuzz-data/pets", "--json"],
                       {**env, "STORAGE_EMULATOR_HOST": url}, tmp_path)
        out, err = rerun.communicate(timeout=120)
        assert rerun.returncode == 0, err
        assert json.loads(out)["uploaded"] == 41
        names = sorted(b.name for b in client.list_blobs("fuzz-data"))
        assert len(names) == 41 and "pets/manifest.json" in names
    finally:
        proxy.close()


@contextlib.contextmanager
def _uploading(gcs, fake_env, tmp_path, bucket: str, *, delay: float, files: int):
    """``data make-tfrecords`` to gs://BUCKET/pets through a SlowProxy of ``delay`` s per upload; yields
    (process, its bucket's client) once the first upload reached the proxy."""
    url, client = gcs
    client.create_bucket(bucket)
    env, src = fake_env
    proxy = SlowProxy(url, delay=delay)
    try:
        env = {**env, "STORAGE_EMULATOR_HOST": proxy.url, "FAKE_FILES": str(files)}
        proc = _start(["data", "make-tfrecords", str(src), f"gs://{bucket}/pets", "--json"], env, tmp_path)
        wait_for(lambda: proxy.uploads > 0, "the first upload request at the proxy", proc=proc)
        yield proc, client
    finally:
        proxy.close()


def test_an_upload_still_in_flight_is_waited_for_before_the_cleanup(gcs, fake_env, tmp_path):
    """Uploads slower than the 3 s grace: the cleanup waits for them (with a notice), so no object they create
    appears after it (before: deleted while still in flight, then created, and left behind)."""
    with _uploading(gcs, fake_env, tmp_path, "slow-data", delay=5.0, files=20) as (proc, client):
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=60)
        assert time.monotonic() - t0 < 25   # the uploads in flight (5 s), not the 30 s limit of the wait
        assert proc.returncode == 130, err
        [stopping] = [line for line in err.splitlines() if line.startswith("stopping:")]
        assert "in flight" in stopping and "30 s" in stopping, err        # what it waits for, how long at most
        last = err.strip().splitlines()[-1]
        assert last.startswith("error: interrupted") and "SIGINT" in last and "gs://slow-data/pets" in last, err
        assert "may yet appear" not in last
        time.sleep(1.0)
        assert [b.name for b in client.list_blobs("slow-data")] == []


def test_a_second_ctrl_c_stops_waiting_and_names_what_may_appear(gcs, fake_env, tmp_path):
    with _uploading(gcs, fake_env, tmp_path, "stuck-data", delay=60.0, files=3) as (proc, _):
        proc.send_signal(signal.SIGINT)
        lines: list[str] = []
        wait_for(lambda: lines.append(proc.stderr.readline()) or "stopping:" in lines[-1], "the 'stopping:' notice",
                 proc=proc)
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 20   # not the 30 s wait for the (60 s) uploads in flight
        assert proc.returncode == 130, err
        last = err.strip().splitlines()[-1]
        assert "may yet appear" in last and "`gcloud storage rm gs://stuck-data/pets/" in last, err


def test_a_second_ctrl_c_within_the_grace_period_stops_waiting_at_once(gcs, fake_env, tmp_path):
    """Ctrl-C twice in a row: the second one also cuts the quiet grace period short (no notice, no 3 s wait)."""
    with _uploading(gcs, fake_env, tmp_path, "twice-data", delay=60.0, files=3) as (proc, _):
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)   # two SIGINTs before the process runs again would be one; 1 s is well inside the 3 s grace
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 20, err   # not the 30 s wait for the (60 s) uploads in flight
        assert proc.returncode == 130, err
        assert "stopping:" not in err   # said at the end of the 3 s grace: the grace was cut short
        last = err.strip().splitlines()[-1]
        assert "may yet appear" in last and "`gcloud storage rm gs://twice-data/pets/" in last, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_of_a_local_conversion_stops_the_tool(fake_env, tmp_path, sig):
    env, src = fake_env
    proc = _start(["data", "make-tfrecords", str(src), str(tmp_path / "out")], {**env, "FAKE_MODE": "hang"}, tmp_path)
    pid = wait_for(lambda: read_complete(env["FAKE_PID_FILE"], int), "the tool's pid in FAKE_PID_FILE", proc=proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: interrupted") and sig.name in last and "trainer.make_tfrecords" in last, err
    wait_for(lambda: read_complete(f"/proc/{pid}/stat", lambda stat: stat.rsplit(")", 1)[1].split()[0] in "ZX")
             if Path(f"/proc/{pid}").exists() else True, f"the tool (pid {pid}) to end")

    rerun = _start(["data", "make-tfrecords", str(src), str(tmp_path / "out"), "--json"], env, tmp_path)
    out, err = rerun.communicate(timeout=60)
    assert rerun.returncode == 0, err
