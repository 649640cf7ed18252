"""A TPU VM run's logs: every host's trainer container writes to Cloud Logging through Docker's gcplogs driver,
labelled by run and host (script.py); `tpuctl logs RUN --host all` prints them labelled, and a host whose trainer
fails prints its last lines after the one error line. Against the fake Cloud TPU API, the storage emulator and the
stand-in Cloud Logging API (tests/fixtures/loggingfakes.py), fed as the hosts' gcplogs driver would."""

from __future__ import annotations

import time

import pytest

from clifixtures import error_line, invoke
from loggingfakes import FakeLogging, docker_entry

PROJECT = "my-tpu-project"
ARTIFACTS = "tpuctl-my-tpu-project-artifacts"
NAME = "tpuctl-logged"


@pytest.fixture
def logging_api(monkeypatch):
    fakes = []

    def make(**kw):
        fake = FakeLogging(**kw)
        fakes.append(fake)
        monkeypatch.setenv("TPUCTL_LOGGING_ENDPOINT", fake.url)
        return fake

    yield make
    for fake in fakes:
        fake.stop()


def _failing_run(tpu_cloud, gcs, logs):
    """A slice whose hosts 0 and 1 print three lines each; host 1's trainer then exits 3."""
    start = time.time() - 60

    def on_get(fake, state, n):
        if state == "ACTIVE" and n == 1:
            for i in range(3):
                for worker in (0, 1):
                    logs.add(docker_entry(PROJECT, NAME, worker, f"host {worker} says {i}", start + i,
                                          len(logs.entries)))
            gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/tpuctl/hosts/worker-1.exit").upload_from_string("3\n")

    tpu_cloud(states=["ACTIVE"], on_get=on_get)


def _train(outputs_file):
    return invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--name", NAME, "--outputs", str(outputs_file),
                   "--image", "us-central1-docker.pkg.dev/my-tpu-project/tpuctl-trainer/trainer-tpu:1",
                   "--poll-seconds", "0.01"])


def test_a_failed_host_prints_its_last_lines_after_the_error_line(outputs_file, tpu_cloud, gcs, logging_api):
    logs = logging_api()
    _failing_run(tpu_cloud, gcs, logs)
    r = _train(outputs_file)
    line = error_line(r, 1)
    assert "the trainer failed on the TPU VM (worker-1 exited 3)" in line and "host 1 follow" in line, line
    assert "serial console" not in r.stderr
    after = r.stderr.splitlines()[r.stderr.splitlines().index(line) + 1:]
    assert after == [f"  host 1 says {i}" for i in range(3)], r.stderr
    # the newest lines of that host, asked newest first: jsonPayload.container.metadata labels of the run and host
    request = logs.requests[-1]
    assert request["orderBy"] == "timestamp desc"
    assert f'logName="projects/{PROJECT}/logs/gcplogs-docker-driver"' in request["filter"]
    assert f'jsonPayload.container.metadata.tpuctl_run="{NAME}"' in request["filter"]
    assert 'jsonPayload.container.metadata.tpuctl_worker="1"' in request["filter"]

    # and later, every host's lines, labelled (the run's record was written when its slice was queued)
    shown = invoke(["logs", NAME, "--outputs", str(outputs_file), "--host", "all"])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines() == [f"[host {w}] host {w} says {i}" for i in range(3) for w in (0, 1)]


def test_denied_logging_leaves_the_failure_one_line_with_one_note(outputs_file, tpu_cloud, gcs, logging_api):
    logs = logging_api(deny=True)
    _failing_run(tpu_cloud, gcs, logs)
    r = _train(outputs_file)
    line = error_line(r, 1)
    assert "the trainer failed on the TPU VM (worker-1 exited 3)" in line and "could not be read" in line, line
    notes = [n for n in r.stderr.splitlines() if n.startswith("note: the failed host's log lines cannot be read")]
    assert len(notes) == 1 and "logging.logEntries.list" in notes[0], r.stderr
    assert r.stderr.splitlines()[-1] == line            # nothing after the error line
