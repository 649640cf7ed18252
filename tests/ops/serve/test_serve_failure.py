"""`tpuctl serve` ends with one `error:` line when the container runtime or TF Serving fails (issue 28: docker's
exit 125 came with no error line), keeping the exit status."""

from __future__ import annotations

import shutil

import pytest

from clifixtures import invoke


def _fake_docker(tmp_path, script: str) -> str:
    """A folder holding only a ``docker`` that runs ``script`` (sh): the PATH of a serve run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(f"#!/bin/sh\n{script}\n")
    docker.chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize("code, fragment", [
    (125, "docker could not start the TF Serving container (exit 125; its message is above): is the docker daemon "
          "running"),
    (3, "TF Serving exited with code 3 (its log is above); the command: "),
])
def test_a_failed_container_is_one_error_line_with_its_exit_status(fake_export, tmp_path, code, fragment):
    path = _fake_docker(tmp_path, f"echo 'docker: Cannot connect to the Docker daemon.' >&2\nexit {code}")
    r = invoke(["serve", fake_export.run], env={"PATH": path})
    assert r.exit_code == code
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and fragment in errors[0], r.stderr


class _TfServingStatus:
    """The model-status answer of TF Serving's REST API on 127.0.0.1: ``states`` in turn, then the last one."""

    def __init__(self, states):
        import http.server
        import json
        import threading

        self.states, self.asked = list(states), 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                state = outer.states[min(outer.asked, len(outer.states) - 1)]
                outer.asked += 1
                body = json.dumps({"model_version_status": [{"version": "3", "state": state,
                                                             "status": {"error_code": "OK"}}]}).encode()
                self.send_response(200 if self.path == "/v1/models/small_cnn" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("states, ready", [(["LOADING", "LOADING", "AVAILABLE"], True), (["LOADING"], False)])
def test_the_rest_url_is_said_once_the_model_is_available(fake_export, tmp_path, states, ready):
    """Before: "REST: http://…" was printed as soon as docker was started, also when it then failed."""
    path = _fake_docker(tmp_path, f"{shutil.which('sleep')} 2.5\nexit 0")
    status = _TfServingStatus(states)
    try:
        # a proxy in the environment must not see the 127.0.0.1 status reads
        r = invoke(["serve", fake_export.run, "--port", str(status.port), "--grpc-port", "1"],
                   env={"PATH": path, "http_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"})
    finally:
        status.close()
    assert r.exit_code == 0, r.output
    said = [line for line in r.stderr.splitlines() if line.startswith("ready: ")]
    if ready:
        assert said == [f"ready: REST http://127.0.0.1:{status.port}/v1/models/small_cnn:predict (Ctrl-C stops)"]
        assert status.asked >= 3                    # not before the model answered AVAILABLE
    else:
        assert said == [] and status.asked >= 2     # asked while the container ran, never ready


def test_a_container_that_fails_at_once_never_says_ready(fake_export, tmp_path):
    r = invoke(["serve", fake_export.run], env={"PATH": _fake_docker(tmp_path, "exit 125")})
    assert r.exit_code == 125 and "ready:" not in r.stderr and "REST" not in r.stderr, r.stderr
