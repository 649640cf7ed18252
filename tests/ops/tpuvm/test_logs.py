"""A TPU VM run's logs: every host's trainer container writes to Cloud Logging through Docker's gcplogs driver,
labelled by run and host (script.py); `tpuctl logs RUN --host all` prints them labelled, and a host whose trainer
fails prints its last lines after the one error line. Against the fake Cloud TPU API, the storage emulator and the
stand-in Cloud Logging API (tests/fixtures/loggingfakes.py), fed as the hosts' gcplogs driver would."""

from __future__ import annotations

import time

import pytest
from resultfixtures import trainer_record, write_trainer_result

from clifixtures import error_line, invoke
from loggingfakes import docker_entry

PROJECT = "my-tpu-project"
ARTIFACTS = "tpuctl-my-tpu-project-artifacts"
NAME = "tpuctl-logged"


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
    [request] = [q for q in logs.requests if q["orderBy"] == "timestamp desc"]   # (the others: the live display's)
    # both logs: the container's (gcplogs) and the startup script's own failure lines
    assert (f'logName=("projects/{PROJECT}/logs/gcplogs-docker-driver" OR "projects/{PROJECT}/logs/tpuctl-startup")'
            in request["filter"])
    assert f'jsonPayload.container.metadata.tpuctl_run="{NAME}"' in request["filter"]
    assert 'jsonPayload.container.metadata.tpuctl_worker="1"' in request["filter"]

    # and later, every host's lines, labelled (the run's record was written when its slice was queued)
    shown = invoke(["logs", NAME, "--outputs", str(outputs_file), "--host", "all"])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines() == [f"[host {w}] host {w} says {i}" for i in range(3) for w in (0, 1)]


def test_denied_logging_leaves_the_failure_one_line_and_one_note(outputs_file, tpu_cloud, gcs, logging_api):
    logs = logging_api(deny=True)
    _failing_run(tpu_cloud, gcs, logs)
    r = _train(outputs_file)
    line = error_line(r, 1)
    assert "the trainer failed on the TPU VM (worker-1 exited 3)" in line and "could not be read" in line, line
    assert "logging.logEntries.list" in line                # why, in the error line itself
    notes = [n for n in r.stderr.splitlines() if n.startswith("note: ") and "Cloud Logging" in n]
    assert len(notes) == 1 and "no live progress" in notes[0], r.stderr     # the live display's, once
    assert r.stderr.splitlines()[-1] == line            # nothing after the error line


def test_a_tpu_vm_run_shows_the_live_display_built_from_host_0s_logs(outputs_file, tpu_cloud, gcs, logging_api):
    """Host 0's progress lines (its container's gcplogs entries) make the epoch lines and the run summary a local run
    has; the other hosts' lines drive nothing."""

    logs = logging_api()
    start = time.time() - 30
    lines = []
    for epoch in (1, 2):
        lines += [f"epoch-start: {epoch}/2", "progress: 1/1",
                  f"epoch-end: {epoch}/2 accuracy=0.{5 + epoch}000 loss=0.{9 - epoch}000 val_accuracy=0.{6 + epoch}000"]

    def on_get(fake, state, n):
        if state == "ACTIVE" and n == 1:
            for i, text in enumerate(lines):
                logs.add(docker_entry(PROJECT, NAME, 0, text, start + i, 2 * i))
                logs.add(docker_entry(PROJECT, NAME, 1, "epoch-start: 9/9", start + i, 2 * i + 1))
        if state == "ACTIVE" and n == 4:
            bucket = gcs.bucket(ARTIFACTS)
            for worker in range(4):
                bucket.blob(f"runs/{NAME}/tpuctl/hosts/worker-{worker}.exit").upload_from_string("0\n")
            write_trainer_result(bucket, f"runs/{NAME}", trainer_record(f"gs://{ARTIFACTS}/runs/{NAME}", 0.8))

    tpu_cloud(states=["ACTIVE"], on_get=on_get)
    r = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--name", NAME, "--outputs", str(outputs_file),
                "--image", "us-central1-docker.pkg.dev/my-tpu-project/tpuctl-trainer/trainer-tpu:1",
                "--poll-seconds", "0.2"])
    assert r.exit_code == 0, r.output
    err = r.stderr.splitlines()
    assert [line.split(":")[0] for line in err if line.startswith("epoch ")] == ["epoch 1/2", "epoch 2/2"], r.stderr
    summary = err[err.index("run summary"):]
    assert summary[1].split() == ["best", "val_accuracy", "0.8000", "(epoch", "2)"], summary
    assert any(line.split()[:3] == ["exported", "epoch", "2,"] for line in summary), summary
    assert "9/9" not in r.stderr


def test_follow_prints_lines_as_they_arrive_once_each_until_the_run_ends(logging_api):
    """`logs.follow` (what `tpuctl logs --follow` and the live display run): each read asks from the newest time seen,
    a line that arrives between reads is printed once, and after the run ended one more read ends it."""
    from tpuctl.services.runs import logs as logs_svc

    logs = logging_api()
    start = time.time() - 60
    logs.add(docker_entry(PROJECT, NAME, 0, "first", start, 0))
    reads = {"n": 0}

    def between_reads(_seconds):          # the hosts write while tpuctl waits
        reads["n"] += 1
        if reads["n"] == 1:
            logs.add(docker_entry(PROJECT, NAME, 1, "second", start + 1, 1))
        if reads["n"] == 2:
            logs.add(docker_entry(PROJECT, NAME, 0, "third", start + 2, 2))

    lines = logs_svc.follow(logs_svc.tpu_vm_source(PROJECT, NAME), since=start - 1, done=lambda: reads["n"] >= 3,
                            interval=0, sleep=between_reads)
    assert [(line.host, line.text) for line in lines] == [("host 0", "first"), ("host 1", "second"),
                                                          ("host 0", "third")]
    assert len(logs.requests) == 5        # 4 reads while running, one after it ended
    assert all('timestamp>=' in q["filter"] for q in logs.requests)


def test_a_stalled_read_is_retried_and_one_that_keeps_stalling_is_one_line(logging_api):
    from tpuctl.services.runs import logs as logs_svc

    logs = logging_api(stall=1, stall_seconds=2.0)
    logs.add(docker_entry(PROJECT, NAME, 0, "hello", time.time() - 60, 0))
    source = logs_svc.tpu_vm_source(PROJECT, NAME)
    assert [line.text for line in logs_svc.entries(source, request_seconds=0.5)] == ["hello"]
    assert len(logs.requests) == 2                     # the stalled one, then its retry

    logs.stall = 100
    with pytest.raises(logs_svc.LogsUnavailable) as caught:
        logs_svc.entries(source, request_seconds=0.3, retry_seconds=2.0)
    assert "kept failing for 2 s" in str(caught.value) and "no answer within 0.3 s" in str(caught.value)
