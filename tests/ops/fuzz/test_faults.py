"""Regression tests of the fuzzing trial's findings, one per class: hostile files (outputs JSON, stack
config), numbers without bounds, unreachable Google endpoints (real clients, closed local port, DNS failure),
invalid principals. Each failed on the old code (traceback, hang, 120 s of retries, or an unnamed endpoint)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from clifixtures import error_line, invoke, run_process


def _closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _one_line(result, code=2):
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def offline(tmp_path):
    url = _closed_url()
    return {"STORAGE_EMULATOR_HOST": url, "TPUCTL_VERTEX_ENDPOINT": url, "TPUCTL_CRM_ENDPOINT": url,
            "TPUCTL_IAM_ENDPOINT": url, "TPUCTL_TRAINER_PYTHON": str(tmp_path / "none" / "python"),
            "TPUCTL_CACHE_DIR": str(tmp_path / "cache")}


# --- outputs JSON -------------------------------------------------------------------------------

@pytest.mark.parametrize("data, fragments", [
    (b'{"hub_models": 5}', ["hub_models", "valid list", "got 5"]),
    (b'{"labels": {"team": 7}}', ["labels.team", "valid string"]),
    (b'{"region": ["us-central1"]}', ["region"]),
    (b'{"project_number": -5}', ["project_number", "digits"]),
    (b'{"project_number": true}', ["project_number"]),
    (b'{"principals": {"training-sa": "not-an-email"}}', ["principals", "not an e-mail"]),
    (b'{"training_service_account": "serviceAccount:x"}', ["training_service_account", "not an e-mail"]),
    (b'{"access_map": {"m": {"b": "roles/x"}}}', ["access_map.m.b"]),
    (b"\xff\xfe{}", ["not UTF-8"]),
    (b"[" * 200_000 + b"]" * 200_000, ["nested more than"]),
    (b'{"project_number": 1e999}', ["number"]),
    (b'{"project_number": NaN}', ["NaN"]),
    (b'{"project_number": ' + b"9" * 6000 + b"}", ["number"]),
    (b" " * (5 * 1024 * 1024), ["larger than"]),
    (b'{"serving_endpoint": "projects/x/locations/us-central1/endpoints/abc"}',
     ["serving_endpoint", "projects/P/locations/REGION/endpoints/ID"]),
    (b'{"serving_endpoint": 5}', ["serving_endpoint", "valid string"]),
    (b'{"tpu_zone": "us-central1"}', ["tpu_zone", "not a zone name"]),
    (b'{"trainer_image_repository": "Bad_Repo"}', ["trainer_image_repository", "lowercase"]),
])
def test_bad_outputs_file_is_one_line_naming_file_and_field(tmp_path, offline, data, fragments):
    path = tmp_path / "outputs.json"
    path.write_bytes(data)
    for args in (["train", "--target", "vertex", "--dry-run", "--outputs", str(path)],
                 ["train", "--outputs", str(path)]):
        line = _one_line(invoke(args, env=offline))
        assert f"outputs file {path}" in line
        for fragment in fragments:
            assert fragment in line, line


def test_outputs_folder_and_too_long_path(tmp_path, offline):
    line = _one_line(invoke(["train", "--outputs", str(tmp_path)], env=offline))
    assert "is a folder" in line
    line = _one_line(invoke(["train", "--outputs", "/" + "o" * 5000], env=offline))
    assert "File name too long" in line


# --- stack config files -------------------------------------------------------------------------

@pytest.mark.parametrize("text, fragment", [
    (b"a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
     b"config: {tpuctl:labels: *c}\n", "aliases"),
    (b"config: " + b"[" * 50_000 + b"]" * 50_000 + b"\n", "nested more than"),
    (b"config:\n  tpuctl:k: " + b"{a: " * 500 + b"1" + b"}" * 500 + b"\n", "nested more than"),
    (b"config:\n  1: x\n", "config key 1 must be a string"),
    (b"config:\n  tpuctl:labels:\n    - {1: 2}\n", "non-string key"),
    (b"config:\n  tpuctl:stagingRetentionDays: " + b"9" * 6000 + b"\n", "cannot carry"),
    (b"config:\n  tpuctl:stagingRetentionDays: .nan\n", "not a finite number"),
    (b"\xff\xfeconfig: {}\n", "not UTF-8"),
    (b"config:\n" + b"  # padding\n" * 120_000, "larger than"),
    (b"config:\n  tpuctl:labels: {}\nconfig:\n  tpuctl:budgetUsd: 5\n", "'config' is given twice (line 3"),
    (b"config:\n  tpuctl:region: us-central1\n  tpuctl:region: europe-west4\n", "'tpuctl:region' is given twice"),
])
def test_hostile_stack_file_is_one_line_naming_the_file(tmp_path, offline, text, fragment):
    path = tmp_path / "Pulumi.hostile.yaml"
    path.write_bytes(text)
    t0 = time.monotonic()
    line = _one_line(invoke(["plan", "--config", str(path)], env=offline))
    assert time.monotonic() - t0 < 60   # fails fast: not the client's 120 s of retries (generous: a loaded machine)
    assert fragment in line, line
    assert "Pulumi.hostile.yaml" in line


@pytest.mark.parametrize("entry", ["v5e:us-west4-a:" + "9" * 5000, "v5e:" + "z" * 5000 + ":8", "t" * 9000])
def test_a_huge_value_inside_a_stack_key_is_a_readable_line(tmp_path, offline, entry):
    """The value is echoed in the message; the line stays short enough to read (was 10 KB for a 5,000-digit count)."""
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(f"config:\n  tpuctl:project: my-tpu-project\n  tpuctl:quotaContactEmail: a@example.com\n"
                    f"  tpuctl:tpuVmQuotas: ['{entry}']\n")
    line = _one_line(invoke(["plan", "--config", str(path)], env=offline))
    assert "tpuctl:tpuVmQuotas" in line and len(line) < 700, line
    assert "characters)" in line            # says how long the value was


@pytest.mark.parametrize("args", [["plan", "--stack", "\x00"], ["plan", "--config", "a\x00b"],
                                  ["train", "--outputs", "o\x00"], ["data", "make-tfrecords", "s\x00", "out"],
                                  ["train", "--data-dir", "d\x00"]])
def test_nul_byte_in_a_path_is_one_line(offline, args):
    line = _one_line(invoke(args, env=offline))  # was: ValueError: embedded null byte (a traceback)
    assert "\x00" not in line


def test_stack_file_path_longer_than_the_os_allows(offline):
    line = _one_line(invoke(["plan", "--config", "/" + "c" * 5000 + ".yaml"], env=offline))
    assert "longer than the OS allows" in line or "File name too long" in line


# --- numbers without bounds (checked before anything is built or submitted) ----------------------

@pytest.mark.parametrize("args", [
    ["train", "--target", "vertex", "--dry-run", "--workers", "30000"],
    ["train", "--target", "vertex", "--dry-run", "--epochs", "0"],
    ["train", "--target", "vertex", "--dry-run", "--batch-size", "-1"],
    ["train", "--target", "vertex", "--dry-run", "--poll-seconds", "nan"],
    ["train", "--target", "vertex", "--dry-run", "--poll-seconds", "inf"],
    ["train", "--workers", "30000"],
    ["data", "make-tfrecords", "src", "out", "--shard-mb", "inf"],
    ["data", "make-tfrecords", "src", "out", "--validation-fraction", "nan"],
])
def test_numbers_out_of_range_are_one_line(offline, args):
    line = _one_line(invoke(args, env=offline))
    assert "invalid value for" in line.lower() and args[-2] in line     # the kind and the flag, not the wording


# --- unreachable endpoints: real clients, fail in seconds, name the endpoint --------------------

def test_unreachable_storage_fails_fast_naming_the_endpoint(tmp_path):
    url = _closed_url()
    (tmp_path / "src" / "a").mkdir(parents=True)
    t0 = time.monotonic()
    proc = run_process(["data", "make-tfrecords", str(tmp_path / "src"), "gs://some-bucket/x"],
                       env={"STORAGE_EMULATOR_HOST": url}, timeout=60)
    assert time.monotonic() - t0 < 60   # fails fast: not the client's 120 s of retries (generous: a loaded machine)
    line = error_line(proc, 1, alone=True)     # the kind, the endpoint and what set it, the reason
    assert line.startswith("error: cannot reach ") and url in line and "set by STORAGE_EMULATOR_HOST" in line, line
    assert "connection refused" in line, line


def test_dns_failure_fails_fast_naming_the_endpoint(tmp_path):
    t0 = time.monotonic()
    proc = run_process(["data", "sample", "gs://some-bucket/x"],
                       env={"STORAGE_EMULATOR_HOST": "http://no-such-host.invalid:9"}, timeout=60)
    assert time.monotonic() - t0 < 60   # fails fast: not the client's 120 s of retries (generous: a loaded machine)
    assert proc.returncode == 1
    line = proc.stderr.strip()
    assert "no-such-host.invalid:9" in line and "set by STORAGE_EMULATOR_HOST" in line, line
    assert "DNS lookup failed" in line, line


def test_unreachable_storage_and_crm_in_grant_access_fail_fast(tmp_path):
    url = _closed_url()
    t0 = time.monotonic()
    proc = run_process(["grant-access", "--project", "my-project-1", "--read-bucket", "some-bucket",
                        "--principal", "training-sa", "--dry-run"],
                       env={"STORAGE_EMULATOR_HOST": url, "TPUCTL_CRM_ENDPOINT": url, "TPUCTL_IAM_ENDPOINT": url},
                       timeout=60)
    assert time.monotonic() - t0 < 60   # fails fast: not the client's 120 s of retries (generous: a loaded machine)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and f"cannot reach storage endpoint {url}" in proc.stderr


def test_unreachable_iam_grpc_fails_fast_naming_the_endpoint(monkeypatch):
    from google.cloud import iam_admin_v1

    from cloud import clients

    url = _closed_url()
    monkeypatch.setenv("TPUCTL_IAM_ENDPOINT", url)
    client = iam_admin_v1.IAMClient(**clients.client_kwargs("iam", transport="grpc"))
    t0 = time.monotonic()
    with pytest.raises(clients.EndpointUnreachable) as info:
        client.get_service_account(name="projects/-/serviceAccounts/a@my-project-1.iam.gserviceaccount.com")
    assert time.monotonic() - t0 < 60   # fails fast: not the client's 120 s of retries (generous: a loaded machine)
    msg = str(info.value)
    assert msg.startswith("cannot reach ") and "iam" in msg and url in msg and "set by TPUCTL_IAM_ENDPOINT" in msg
    assert "connection refused" in msg, msg


def _crm(_region):
    from google.cloud import resourcemanager_v3

    from cloud import clients

    return clients.gapic(resourcemanager_v3.ProjectsClient, "crm").get_project(name="projects/my-project-1")


def _serviceusage(_region):
    from bootstrap import state

    return state._usage_client().batch_get_services(request={"parent": "projects/my-project-1", "names": []})


def _cloudquotas(_region):
    from bootstrap import quotas

    return list(quotas.quotas_client().list_quota_preferences(parent="projects/my-project-1/locations/global"))


def _vertex(region):
    from tpuctl.services.runs import vertex

    return vertex.job_client(region).get_custom_job(name=f"projects/p/locations/{region}/customJobs/1")


def _tpu(_region):
    from tpuctl.services.runs.tpuvm import api as tpuvm

    return list(tpuvm.tpu_client().list_queued_resources(parent="projects/p/locations/us-central1-a"))


@pytest.mark.parametrize("variable, call", [
    ("TPUCTL_CRM_ENDPOINT", _crm), ("TPUCTL_SERVICEUSAGE_ENDPOINT", _serviceusage),
    ("TPUCTL_CLOUDQUOTAS_ENDPOINT", _cloudquotas), ("TPUCTL_VERTEX_ENDPOINT", _vertex), ("TPUCTL_TPU_ENDPOINT", _tpu),
])
def test_gapic_rest_clients_give_up_on_a_silent_endpoint_in_seconds(monkeypatch, variable, call):
    """A firewall that drops packets: the REST clients tpuctl builds wait CONNECT_TIMEOUT_SECONDS for a TCP
    answer, then stop with one line naming the endpoint (before: the library's 60-120 s per attempt)."""
    from cloud import clients

    from netfixtures import silent_endpoint

    with silent_endpoint() as url:
        monkeypatch.setenv(variable, url)
        t0 = time.monotonic()
        with pytest.raises(clients.EndpointUnreachable) as info:
            call("europe-west4")
        took = time.monotonic() - t0
    assert clients.CONNECT_TIMEOUT_SECONDS - 0.5 < took < clients.CONNECT_TIMEOUT_SECONDS + 20   # not 120 s
    assert url in str(info.value) and f"set by {variable}" in str(info.value)
    assert f"no answer within {clients.CONNECT_TIMEOUT_SECONDS:g} s" in str(info.value)


def test_server_errors_are_still_retried_and_not_called_unreachable():
    from google.api_core import exceptions
    from google.cloud.storage.retry import DEFAULT_RETRY

    from cloud import clients

    assert clients.unreachable_reason(exceptions.ServiceUnavailable("try again")) is None
    assert clients.unreachable_reason(exceptions.TooManyRequests("slow down")) is None
    assert DEFAULT_RETRY._predicate(exceptions.ServiceUnavailable("try again"))
    assert not DEFAULT_RETRY._predicate(clients.EndpointUnreachable("cannot reach x"))
    assert clients.unreachable_reason(ConnectionRefusedError(111, "Connection refused")) == "connection refused"
    assert clients.unreachable_reason(socket.gaierror(-2, "Name or service not known")) == "DNS lookup failed"


def test_outputs_with_a_bad_service_account_member_is_one_line(tmp_path, offline):
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({"principals": {"training-sa": "serviceAccount:bad@"}}))
    line = _one_line(invoke(["train", "--target", "vertex", "--dry-run", "--outputs", str(path)], env=offline))
    assert "principals" in line and "not an e-mail" in line


def test_unreachable_tls_grpc_endpoint_fails_fast_too(monkeypatch):
    """Not only the loopback test server: the TLS channel a real endpoint gets has the interceptor as well."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import iam_admin_v1

    from cloud import clients

    url = _closed_url().replace("http://", "https://")
    monkeypatch.setenv("TPUCTL_IAM_ENDPOINT", url)
    # a TLS endpoint is a real mirror: it keeps real credentials; anonymous ones stand in for ADC here
    client = iam_admin_v1.IAMClient(credentials=AnonymousCredentials(), **clients.client_kwargs("iam", "grpc"))
    assert client.transport._host == url.split("//", 1)[1]
    t0 = time.monotonic()
    with pytest.raises(clients.EndpointUnreachable) as info:
        client.get_service_account(name="projects/-/serviceAccounts/a@my-project-1.iam.gserviceaccount.com")
    assert time.monotonic() - t0 < 60   # fails fast: not the client's 120 s of retries (generous: a loaded machine)
    msg = str(info.value)
    assert msg.startswith("cannot reach ") and "iam" in msg and url in msg and "set by TPUCTL_IAM_ENDPOINT" in msg
    assert "connection refused" in msg, msg


def test_credentials_in_an_endpoint_variable_are_never_echoed(tmp_path):
    """An endpoint variable with ``user:password@`` (issue 43's hostile trial: echoed with the password)."""
    url = _closed_url().replace("http://", "http://alice:s3cret-pw@")
    (tmp_path / "src" / "a").mkdir(parents=True)
    proc = run_process(["data", "make-tfrecords", str(tmp_path / "src"), "gs://some-bucket/x"],
                       env={"STORAGE_EMULATOR_HOST": url}, timeout=60)
    line = error_line(proc, 1, alone=True)
    assert "s3cret-pw" not in proc.stderr + proc.stdout and "alice" not in line, line
    assert url.split("@")[1] in line and "set by STORAGE_EMULATOR_HOST" in line, line


@pytest.mark.parametrize("variable, args", [
    ("TPUCTL_CLOUDBILLING_ENDPOINT", ["prices", "refresh"]),
    ("STORAGE_EMULATOR_HOST", ["runs", "ls", "--dir", "gs://some-bucket/runs"]),
])
@pytest.mark.parametrize("value, why", [
    ("http://alice:s3cret-pw@[::1", "Invalid IPv6 URL"),     # old: ValueError traceback from urllib
    ("http://[::1]:99999", "Port out of range"),             # old: 'Failed to parse' at the first request
    ("ftp://127.0.0.1:21", "not an endpoint URL"),
    ("http://:8080", "not an endpoint URL"),
])
def test_an_endpoint_variable_that_is_no_url_is_one_line_naming_it(tmp_path, variable, args, value, why):
    """Every parse error one line (issue 43): an endpoint variable is checked where it is read."""
    result = invoke(args, env={variable: value, "TPUCTL_CACHE_DIR": str(tmp_path / "cache")})
    line = _one_line(result)
    assert line.startswith(f"error: {variable}=") and why in line, line
    assert "s3cret-pw" not in result.output, result.output


@pytest.fixture
def html_200():
    """An endpoint that answers every request 200 with an HTML page (a proxy's or a captive portal's)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _answer(self):
            body = b"<html><body>Please log in to the hotel Wi-Fi</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("variable, args", [
    ("TPUCTL_CLOUDBILLING_ENDPOINT", ["prices", "refresh"]),                    # old: ParseError traceback
    ("TPUCTL_TPU_ENDPOINT", ["tpu", "list", "--zone", "us-central1-a", "--project", "my-project-1"]),   # the same
    ("STORAGE_EMULATOR_HOST", ["runs", "ls", "--dir", "gs://some-bucket/runs"]),   # old: 'cannot reach'
])
def test_a_200_that_is_not_the_apis_json_is_one_line(tmp_path, html_200, variable, args):
    """Every parse error one line (issue 43's hostile trial: ParseError from a non-JSON 200)."""
    result = invoke(args, env={variable: html_200, "TPUCTL_CACHE_DIR": str(tmp_path / "cache")})
    line = _one_line(result, 1)
    assert "answer is not its JSON" in line, line
