"""A Vertex AI run's timings in its run record (``<model_dir>/tpuctl-run.json``, from the job's own createTime /
startTime / endTime) and in `runs show`: submitted → provisioned (first RUNNING) → the trainer's first step → end,
the steady step time, examples/s, goodput and the spend. Against the stand-in Vertex AI API (real JobServiceClient)
and the storage emulator, where the test writes the trainer's result.json as the job runs."""

from __future__ import annotations

import json
import time

import pytest
from resultfixtures import trainer_record, write_trainer_result

from tpuctl.services.runs import records as runs

from clifixtures import invoke, invoke_as_process, shown_rows

PROJECT = "my-project-1"
ARTIFACTS, STAGING = "tpuctl-my-project-1-artifacts", "tpuctl-my-project-1-staging"
OUTPUTS = {
    "project": PROJECT, "region": "us-central1",
    "buckets": {"data": "tpuctl-my-project-1-data", "staging": STAGING, "artifacts": ARTIFACTS},
    "training_service_account": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
}
NAME = "timed-job"


@pytest.fixture(autouse=True)
def _no_curves(monkeypatch):
    monkeypatch.setattr(runs, "scalars", lambda found: {})   # curves need the trainer environment: not read here



def test_runs_show_prints_a_vertex_runs_timings(gcs, fake_vertex, tools, tmp_path, monkeypatch):
    url, storage = gcs
    for bucket in (ARTIFACTS, STAGING):
        storage.create_bucket(bucket)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))

    def on_state(fake, name, state):   # the job's chief, once RUNNING: its first step 2 s later, then its result
        if state == "JOB_STATE_SUCCEEDED":
            start = time.time() - 1.0
            result = trainer_record(f"gs://{ARTIFACTS}/runs/{NAME}", 0.9, timing={
                "first_step_at": start, "process_first_step_at": start, "step_seconds": 0.01,
                "examples_per_second": 6400.0, "steps": 50, "total_steps": 50})
            write_trainer_result(storage.bucket(ARTIFACTS), f"runs/{NAME}", result)

    fake = fake_vertex(states=["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"],
                       on_state=on_state)
    image = "us-docker.pkg.dev/my-project-1/team-images/trainer:7"
    proc = invoke_as_process(["train", "--target", "vertex", "--outputs", str(outputs), "--poll-seconds", "0.5",
                              "--image", image, "--name", NAME],
                             env={"TPUCTL_VERTEX_ENDPOINT": fake.url, "STORAGE_EMULATOR_HOST": url}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "not recorded" not in proc.stderr, proc.stderr
    [job] = fake.jobs
    record = json.loads(storage.bucket(ARTIFACTS).blob(f"runs/{NAME}/tpuctl-run.json").download_as_bytes())
    times = fake.times[job]
    assert record["target"] == "vertex" and record["spot"] is False
    # Vertex AI's own times of the job, as its API answered them
    from google.protobuf.timestamp_pb2 import Timestamp

    def seconds(text: str) -> float:
        stamp = Timestamp()
        stamp.FromJsonString(text)
        return stamp.ToNanoseconds() / 1e9

    assert record["started"] == pytest.approx(seconds(fake.jobs[job]["createTime"]))
    assert record["provisioned"] == pytest.approx(seconds(times["startTime"]))
    assert record["finished"] == pytest.approx(seconds(times["endTime"]))
    assert record["started"] < record["provisioned"] < record["finished"]

    r = invoke(["runs", "show", NAME, "--outputs", str(outputs)])
    assert r.exit_code == 0, r.output
    rows = shown_rows(r.stdout)
    assert rows["target"] == "vertex"
    assert rows["provisioned"].endswith(" after submission") and rows["first step"].endswith(" after submission")
    assert rows["step time"] == "10.0 ms" and rows["examples/s"] == "6400.0"
    wall = record["finished"] - record["started"]
    assert rows["goodput"] == f"{50 * 0.01 / wall:.0%}"
    spent = record.get("spent_usd")
    assert rows["spend"] == ("-" if spent is None else f"${spent:.2f}")


def test_a_run_record_that_cannot_be_written_is_one_note_and_the_run_succeeds(gcs, fake_vertex, tools, tmp_path,
                                                                               monkeypatch):
    from ground.errors import UserError
    from tpuctl.services.runs import records

    url, storage = gcs
    storage.create_bucket(STAGING)
    storage.create_bucket(ARTIFACTS)        # the trainer writes its result; tpuctl's record is refused

    def refused(*_args, **_kwargs):
        raise UserError("writing tpuctl-run.json: permission denied (storage.objects.create)")

    monkeypatch.setattr(records, "write_launch_record", refused)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))
    fake = fake_vertex()
    image = "us-docker.pkg.dev/my-project-1/team-images/trainer:7"
    proc = invoke_as_process(["train", "--target", "vertex", "--outputs", str(outputs), "--poll-seconds", "0.01",
                              "--image", image, "--name", NAME],
                             env={"TPUCTL_VERTEX_ENDPOINT": fake.url, "STORAGE_EMULATOR_HOST": url}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "the run's times were not recorded" in line]
    assert len(notes) == 1 and notes[0].startswith("note: "), proc.stderr
