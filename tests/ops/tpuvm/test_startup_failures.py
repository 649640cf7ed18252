"""A TPU VM host's startup script writes its own failures to Cloud Logging (script.failure_logger): Docker's login, a
trainer container that does not start (docker exits 125, with and without the gcplogs driver), the exit report. The
generated script RUNS here in bash with stand-in `gcloud`, `docker` and `curl` on PATH (small scripts that record
their arguments); the `gcloud logging write` calls it makes are then stored by the stand-in Cloud Logging API as
Google stores them (loggingfakes.gcloud_write_entry), and tpuctl reads them back beside the containers' lines: a failed
host's last lines after the error line, and `tpuctl logs RUN --host all`, labelled by host."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from ground.outputs import read_outputs_file
from tpuctl.services.runs.tpuvm.script import HOST_STATUS_DIR, startup_script

from clifixtures import error_line, invoke
from loggingfakes import docker_entry, gcloud_write_entry
from runfixtures import planned

PROJECT = "my-tpu-project"
ARTIFACTS = "tpuctl-my-tpu-project-artifacts"
NAME = "tpuctl-startfail"
IMAGE = "us-central1-docker.pkg.dev/my-tpu-project/tpuctl-trainer/trainer-tpu:1"

#: Each stand-in records its call as one line of NUL-separated words in $STUBS/calls (its name first); it behaves as
#: $STUBS/<name>.<subcommand> says when that file exists (an exit status), else succeeds.
GCLOUD = r"""#!/bin/bash
{ printf '%s\0' gcloud "$@"; echo; } >> "$STUBS/calls"
case "$1 $2" in
  "auth configure-docker")
    if [ -s "$STUBS/gcloud.login" ]; then
      echo "ERROR: (gcloud.auth.configure-docker) There was a problem refreshing your current auth tokens" >&2
      exit "$(cat "$STUBS/gcloud.login")"
    fi ;;
  "storage cp")
    cat > "$STUBS/report.tmp"
    if [ -s "$STUBS/gcloud.report" ]; then
      echo "ERROR: (gcloud.storage.cp) HTTPError 403: does not have storage.objects.create access" >&2
      exit "$(cat "$STUBS/gcloud.report")"
    fi
    printf '%s' "$4" > "$STUBS/report.uri"
    mv "$STUBS/report.tmp" "$STUBS/report" ;;
  "logging write") ;;
  *) echo "unexpected: gcloud $*" >&2; exit 2 ;;
esac
exit 0
"""
#: docker run: the image cannot be pulled (Docker's own failure, exit 125), with the log driver and without it.
DOCKER = r"""#!/bin/bash
{ printf '%s\0' docker "$@"; echo; } >> "$STUBS/calls"
echo "Unable to find image '${@: -1}' locally" >&2
echo 'docker: Error response from daemon: pull access denied for us-central1-docker.pkg.dev/my-tpu-project/x, "repository does not exist"' >&2
exit "$(cat "$STUBS/docker.run" 2>/dev/null || echo 0)"
"""
#: the metadata server: this host is worker 1 (or $STUB_WORKER)
CURL = r"""#!/bin/bash
{ printf '%s\0' curl "$@"; echo; } >> "$STUBS/calls"
printf '%s' "${STUB_WORKER:-1}"
"""


def _host(tmp_path: Path) -> tuple[dict[str, str], Path]:
    stubs = tmp_path / "stubs"
    (stubs / "bin").mkdir(parents=True)
    for name, text in (("gcloud", GCLOUD), ("docker", DOCKER), ("curl", CURL)):
        (stubs / "bin" / name).write_text(text)
        (stubs / "bin" / name).chmod(0o755)
    return {**os.environ, "PATH": f"{stubs / 'bin'}:{os.environ['PATH']}", "STUBS": str(stubs)}, stubs


def _run_host(outputs_file, tmp_path: Path, worker: int = 1,
              **failing: str) -> tuple[subprocess.CompletedProcess, list[list[str]], Path]:
    """The startup script of run NAME, run by bash on a stand-in host (``worker``) whose ``failing`` stand-ins exit as
    given (``docker_run="125"``, ``gcloud_login="1"``, ``gcloud_report="1"``): (bash's result, the calls, the stubs)."""
    env, stubs = _host(tmp_path)
    env["STUB_WORKER"] = str(worker)
    for key, status in failing.items():
        (stubs / key.replace("_", ".", 1)).write_text(status)
    run = planned("tpu-vm", read_outputs_file(outputs_file), accelerator="v5litepod-16", name=NAME, image=IMAGE)
    script = tmp_path / "startup.sh"
    script.write_text(startup_script(run))
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    calls = [record.split("\0") for record in (stubs / "calls").read_text().split("\0\n")[:-1]]
    return done, calls, stubs


def _writes(calls: list[list[str]]) -> list[list[str]]:
    """The `gcloud logging write` calls (the words after `gcloud`)."""
    return [call[1:] for call in calls if call[:3] == ["gcloud", "logging", "write"]]


def _message(write: list[str]) -> str:
    return gcloud_write_entry(write, time.time(), 0)["jsonPayload"]["message"]


def _replay(logs, gcs, writes, stubs, start: float, *, worker: int, report_at: int):
    """The fake TPU API's `on_get`: at the first ACTIVE poll the host's `gcloud logging write` lines reach the Cloud
    Logging fake; at poll `report_at` its exit report reaches the bucket."""
    def on_get(fake, state, n):
        if state == "ACTIVE" and n == 1:
            for i, write in enumerate(writes):
                logs.add(gcloud_write_entry(write, start + i, i))
        if state == "ACTIVE" and n == report_at:
            gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/{HOST_STATUS_DIR}/worker-{worker}.exit").upload_from_string(
                (stubs / "report").read_text())
    return on_get


def test_a_container_that_never_starts_is_a_failure_line_in_cloud_logging(outputs_file, tmp_path, tpu_cloud, gcs,
                                                                          logging_api):
    done, calls, stubs = _run_host(outputs_file, tmp_path, docker_run="125")
    assert done.returncode == 0, done.stderr[-2000:]
    tools = [call[0] for call in calls if call[0] != "curl"]
    # the login, both docker runs (with the gcplogs driver, then without), a failure line after each, the report last
    assert tools == ["gcloud", "docker", "gcloud", "docker", "gcloud", "gcloud"], calls
    assert "--log-driver" in calls[2] and "--log-driver" not in calls[4]
    writes = _writes(calls)
    assert len(writes) == 2
    for write in writes:
        entry = gcloud_write_entry(write, time.time(), 0)        # what gcloud sends, as Google keeps it
        assert entry["logName"] == f"projects/{PROJECT}/logs/tpuctl-startup" and entry["severity"] == "ERROR"
        # the run and this host, under the same keys as the trainer container's entries
        assert entry["jsonPayload"]["container"]["metadata"] == {"tpuctl_run": NAME, "tpuctl_worker": "1"}
    first, second = (_message(w) for w in writes)
    assert "(exit 125)" in first and "starting it without" in first
    assert "(exit 125)" in second and "did not start" in second
    # Docker's own reason, quotes and all, in the line (the JSON was escaped)
    assert 'pull access denied for us-central1-docker.pkg.dev/my-tpu-project/x, "repository does not exist"' in second
    # the exit report is still written, after the failure lines
    assert (stubs / "report").read_text() == "125\n"
    assert (stubs / "report.uri").read_text() == f"gs://{ARTIFACTS}/runs/{NAME}/{HOST_STATUS_DIR}/worker-1.exit"

    # tpuctl: host 1 reports 125; its last lines are the startup script's, next to host 0's container lines
    logs = logging_api()
    start = time.time() - 60

    logs.add(docker_entry(PROJECT, NAME, 0, "epoch-start: 1/2", start, 0))
    tpu_cloud(states=["ACTIVE"], on_get=_replay(logs, gcs, writes, stubs, start + 1, worker=1, report_at=1))
    r = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--name", NAME, "--outputs", str(outputs_file),
                "--image", IMAGE, "--poll-seconds", "0.01"])
    line = error_line(r, 1)
    assert "worker-1 exited 125" in line and "host 1 follow" in line, line
    after = r.stderr.splitlines()[r.stderr.splitlines().index(line) + 1:]
    assert after == [f"  {first}", f"  {second}"], r.stderr

    shown = invoke(["logs", NAME, "--outputs", str(outputs_file), "--host", "all"])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines() == ["[host 0] epoch-start: 1/2", f"[host 1] {first}", f"[host 1] {second}"]


def test_a_failed_login_and_an_unwritten_report_are_failure_lines_too(outputs_file, tmp_path):
    """Docker's login fails (the run goes on: the image may be there already) and the report cannot be written:
    each is one line in Cloud Logging, with the command's own last stderr line."""
    done, calls, _ = _run_host(outputs_file, tmp_path, gcloud_login="1", gcloud_report="1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert [call[0] for call in calls if call[0] != "curl"] == ["gcloud", "gcloud", "docker", "gcloud", "gcloud"]
    login, report = (_message(w) for w in _writes(calls))
    assert "login to the image's registry failed" in login and "us-central1-docker.pkg.dev" in login
    assert "(exit 1)" in login and "problem refreshing your current auth tokens" in login
    assert f"gs://{ARTIFACTS}/runs/{NAME}/{HOST_STATUS_DIR}/worker-1.exit could not be written" in report
    assert "(exit 1)" in report and "storage.objects.create" in report
    # the host's journal has the same lines
    assert sum("tpuctl: " in line for line in done.stderr.splitlines()) == 2, done.stderr


def test_cloud_logging_refused_leaves_the_journal_line_and_the_report(outputs_file, tmp_path):
    """`gcloud logging write` itself failing (the service account lacks roles/logging.logWriter) is one more line in
    the host's journal; the script goes on and reports."""
    env, stubs = _host(tmp_path)
    (stubs / "docker.run").write_text("125")
    gcloud = stubs / "bin" / "gcloud"
    gcloud.write_text(GCLOUD.replace('"logging write") ;;', '"logging write") echo "PERMISSION_DENIED" >&2; exit 1 ;;'))
    run = planned("tpu-vm", read_outputs_file(outputs_file), accelerator="v5litepod-16", name=NAME, image=IMAGE)
    done = subprocess.run(["bash", "-c", startup_script(run)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("could not be written to Cloud Logging") == 2, done.stderr
    assert (stubs / "report").read_text() == "125\n"


def test_the_chiefs_startup_failure_is_shown_live(outputs_file, tmp_path, tpu_cloud, gcs, logging_api):
    """Host 0's container never starts: the live display shows its startup lines (`[host 0] tpuctl: …`) as they are
    logged, as it shows the trainer's own error lines, then the run ends with host 0's failure."""
    done, calls, stubs = _run_host(outputs_file, tmp_path, worker=0, docker_run="125")
    assert done.returncode == 0, done.stderr[-2000:]
    writes = _writes(calls)
    logs = logging_api()
    start = time.time() - 30

    # the report comes after the lines (the script writes them first)
    tpu_cloud(states=["ACTIVE"], on_get=_replay(logs, gcs, writes, stubs, start, worker=0, report_at=3))
    r = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--name", NAME, "--outputs", str(outputs_file),
                "--image", IMAGE, "--poll-seconds", "0.2"])
    line = error_line(r, 1)
    assert "worker-0 exited 125" in line, line
    live = r.stderr.splitlines()[:r.stderr.splitlines().index(line)]
    assert [x for x in live if x.startswith("[host 0] tpuctl: ")] == [f"[host 0] {_message(w)}" for w in writes], \
        r.stderr
