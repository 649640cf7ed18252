"""`tpuctl logs RUN` for a Vertex AI run: the job's entries in Cloud Logging (resource ml_job, its job id; one replica
by its task name), labelled by host, every page, a throttled read retried, a denied one one line. Against the
stand-in Vertex AI API, the storage emulator (the run's record) and the stand-in Cloud Logging API
(tests/fixtures/loggingfakes.py), fed by the test as the job's replicas would write."""

from __future__ import annotations

import json
import time

import pytest
from resultfixtures import trainer_record

from clifixtures import error_line, invoke, invoke_as_process
from loggingfakes import vertex_entry

PROJECT = "my-project-1"
ARTIFACTS, STAGING = "tpuctl-my-project-1-artifacts", "tpuctl-my-project-1-staging"
OUTPUTS = {"project": PROJECT, "region": "us-central1",
           "buckets": {"data": "tpuctl-my-project-1-data", "staging": STAGING, "artifacts": ARTIFACTS},
           "training_service_account": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com"}
NAME = "logged-job"


@pytest.fixture
def vertex_run(gcs, fake_vertex, tools, tmp_path, logging_api):
    """A two-replica Vertex AI run, finished; its replicas' lines in the stand-in Cloud Logging (``n`` per replica)."""
    url, storage = gcs
    for bucket in (ARTIFACTS, STAGING):
        storage.create_bucket(bucket)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))

    def run(n: int = 3, during: dict | None = None, **after):
        """``during``: how the stand-in answers while the run goes (its live display reads it); ``after``: how it
        answers the `tpuctl logs` of the test (its requests are the test's only)."""
        logs = logging_api(**(during or {}))
        start = time.time() - 600

        def on_state(fake, name, state):
            if state == "JOB_STATE_RUNNING" and not logs.entries:
                job_id = name.rsplit("/", 1)[-1]
                for i in range(n):
                    for task in ("workerpool0-0", "workerpool1-0"):
                        logs.add(vertex_entry(PROJECT, job_id, task, f"{task} line {i}", start + i, len(logs.entries)))

        fake = fake_vertex(on_state=on_state)
        image = "us-docker.pkg.dev/my-project-1/team-images/trainer:7"
        proc = invoke_as_process(["train", "--target", "vertex", "--outputs", str(outputs), "--poll-seconds", "0.01",
                                  "--image", image, "--name", NAME, "--workers", "2"],
                                 env={"TPUCTL_VERTEX_ENDPOINT": fake.url, "STORAGE_EMULATOR_HOST": url}, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        [job] = fake.jobs
        logs.run_stderr, logs.run_requests = proc.stderr, list(logs.requests)
        logs.requests.clear()
        for key, value in after.items():
            setattr(logs, key, value)
        return outputs, logs, job

    return run


def test_logs_prints_every_replicas_lines_labelled_by_host(vertex_run):
    outputs, logs, job = vertex_run()
    r = invoke(["logs", NAME, "--outputs", str(outputs)])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"[host {h}] workerpool{p}-0 line {i}" for i in range(3)
                                     for h, p in ((0, 0), (1, 1))]
    [request] = logs.requests
    assert request["resourceNames"] == [f"projects/{PROJECT}"] and request["orderBy"] == "timestamp asc"
    assert 'resource.type="ml_job"' in request["filter"]
    assert f'resource.labels.job_id="{job.rsplit("/", 1)[-1]}"' in request["filter"]


def test_one_host_is_its_replicas_task(vertex_run):
    outputs, logs, _ = vertex_run()
    r = invoke(["logs", NAME, "--outputs", str(outputs), "--host", "1"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"[host 1] workerpool1-0 line {i}" for i in range(3)]
    assert 'resource.labels.task_name="workerpool1-0"' in logs.requests[-1]["filter"]


def test_every_page_is_read_and_a_throttled_read_is_retried(vertex_run):
    outputs, logs, _ = vertex_run(n=600, throttle=2)      # 1200 lines: two pages of at most 1000
    r = invoke(["logs", NAME, "--outputs", str(outputs), "--host", "all"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) == 1200 and lines[0] == "[host 0] workerpool0-0 line 0" and lines[-1].endswith("line 599")
    # two 429 answers, then the first page, then the second (asked with the first's token)
    assert len(logs.requests) == 4 and logs.requests[-1]["pageToken"] == "1000"


def test_since_and_follow(vertex_run):
    outputs, logs, _ = vertex_run()
    r = invoke(["logs", NAME, "--outputs", str(outputs), "--since", "2m"])   # every line is 10 minutes old
    assert r.exit_code == 0 and r.stdout == "" and "no log lines" in r.stderr, r.output
    assert 'timestamp>="' in logs.requests[-1]["filter"]
    # The run has ended (its record says so): --follow prints what is there and stops after one more read.
    r = invoke(["logs", NAME, "--outputs", str(outputs), "--follow", "--poll-seconds", "0.01"])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 6, r.output


def test_denied_logging_is_one_line(vertex_run):
    outputs, _, _ = vertex_run(deny=True)
    line = error_line(invoke(["logs", NAME, "--outputs", str(outputs)]), 1)
    assert "permission denied" in line and "logging.logEntries.list" in line, line


@pytest.mark.parametrize("args, needle", [(["--host", "x"], "--host"), (["--since", "40d"], "--since"),
                                          (["--since", "soon"], "--since"),
                                          (["--host", "¹"], "--host"), (["--host", "٣"], "--host")])   # issue 56
def test_bad_options_are_one_line(vertex_run, args, needle):
    outputs, logs, _ = vertex_run()
    before = len(logs.requests)
    line = error_line(invoke(["logs", NAME, "--outputs", str(outputs), *args]), 2)
    assert needle in line and len(logs.requests) == before


def test_an_unknown_run_is_one_line(vertex_run):
    outputs, _, _ = vertex_run()
    line = error_line(invoke(["logs", "nope", "--outputs", str(outputs)]), 2)
    assert "no cloud run nope" in line


def test_a_run_name_is_looked_up_in_the_named_place_only(tmp_path):
    """A run is one folder of --dir (issue 56, class 6): `..` or a path read a record outside it (here: the run
    folder's parent holds a record of its own). Refused before anything is read or asked."""
    runs = tmp_path / "place" / "runs"
    runs.mkdir(parents=True)
    (tmp_path / "place" / "tpuctl-run.json").write_text('{"target": "vertex", "project": "p", "job": "1"}')
    for name in ("..", ".", "../runs/" + NAME, f"x/../{NAME}", "", "a\\b"):
        for base in (str(runs), "gs://some-bucket/runs"):
            line = error_line(invoke(["logs", name, "--dir", base]), 2)
            assert "is not a run's name" in line, (name, line)


@pytest.mark.parametrize("base", ["gs://", "gs:///runs"])
def test_a_gs_folder_without_a_bucket_is_one_line(base):
    """Issue 56 (a fresh trial): `--dir gs://` said there was no such run in it."""
    assert "bucket name is empty" in error_line(invoke(["logs", NAME, "--dir", base]), 2)


def _protocol_lines() -> list[str]:
    """What the trainer's chief prints on a two-epoch run (trainer/protocol.py)."""
    lines = []
    for epoch in (1, 2):
        lines += [f"epoch-start: {epoch}/2", "Epoch noise from Keras", "progress: 1/2", "progress: 2/2",
                  *(["warning: the input is slow \x1b[31mred\x1b[0m"] if epoch == 1 else []),
                  f"epoch-end: {epoch}/2 accuracy=0.{5 + epoch}000 examples_per_second=12{epoch}.0000 "
                  f"loss=0.{9 - epoch}000 val_accuracy=0.{6 + epoch}000 val_loss=0.{8 - epoch}000"]
    return lines


def test_a_vertex_run_shows_the_live_display_built_from_its_logs(gcs, fake_vertex, tools, tmp_path, logging_api):
    """The chief's progress lines, read back from Cloud Logging while the job runs, make the same epoch lines (a pipe:
    one line per epoch) and the same run summary a local run has; the other lines are not shown without -v."""
    url, storage = gcs
    for bucket in (ARTIFACTS, STAGING):
        storage.create_bucket(bucket)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))
    logs = logging_api()

    def on_state(fake, name, state):
        if state == "JOB_STATE_RUNNING" and not logs.entries:
            job_id, start = name.rsplit("/", 1)[-1], time.time() - 30
            for i, text in enumerate(_protocol_lines()):
                logs.add(vertex_entry(PROJECT, job_id, "workerpool0-0", text, start + i * 0.1, i))

    # the record: the exported epoch measured exactly (0.875), Keras' epoch-end figure 0.8
    fake = fake_vertex(states=["JOB_STATE_PENDING", *["JOB_STATE_RUNNING"] * 5, "JOB_STATE_SUCCEEDED"],
                       on_state=on_state, result=lambda folder, args: trainer_record(
                           folder, 0.875, best_val_accuracy=0.8, last_val_accuracy=0.8))
    image = "us-docker.pkg.dev/my-project-1/team-images/trainer:7"
    proc = invoke_as_process(["train", "--target", "vertex", "--outputs", str(outputs), "--poll-seconds", "0.05",
                              "--image", image, "--name", NAME],
                             env={"TPUCTL_VERTEX_ENDPOINT": fake.url, "STORAGE_EMULATOR_HOST": url,
                                  "TPUCTL_LOGGING_ENDPOINT": logs.url}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.splitlines()
    epochs = [line for line in err if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["epoch 1/2", "epoch 2/2"], proc.stderr
    assert "loss=0.8000" in epochs[0] and "121 examples/s" in epochs[0], epochs
    summary = err[err.index("run summary"):]
    assert summary[1].split() == ["best", "val_accuracy", "0.8000", "(epoch", "2)"], summary
    assert "Epoch noise" not in proc.stderr and "progress:" not in proc.stderr
    assert "[host 0] warning: the input is slow red" in err           # the trainer's warning, without its escapes
    assert "JOB_STATE_SUCCEEDED" in proc.stdout


def test_denied_logs_leave_a_vertex_run_unaffected_with_one_note(vertex_run):
    outputs, logs, _ = vertex_run(during={"deny": True})     # vertex_run asserts the run succeeded
    assert logs.run_requests                                   # the live display asked, and was refused
    notes = [line for line in logs.run_stderr.splitlines() if "no live progress from the run's logs" in line]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "logging.logEntries.list" in notes[0], notes
    assert "error:" not in logs.run_stderr
