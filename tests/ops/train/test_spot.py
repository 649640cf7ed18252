"""Spot runs: the CustomJob `vertex.plan_job` builds, with Spot scheduling, a bounded run time and the trainer's
backup in the run's gs:// folder; sent through the real JobServiceClient to the local Vertex stand-in and parsed
strictly. The resume it relies on is tested where it happens: a two-worker `tpuctl train -w 2` stopped and continued
(tests/ops/train/test_real_trainer.py), a chief and a worker resumed at the interrupted epoch
(tests/trainer/test_multiworker.py)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from google.cloud import aiplatform_v1

from ground.errors import UserError
from ground.outputs import read_outputs_file
from tpuctl.services.runs import targets, vertex
from tpuctl.services.runs.target import Report
from tpuctl.services.runs.vertex import VertexTarget

from runfixtures import planned
from stackfixtures import write_outputs


@pytest.fixture
def outputs(tmp_path):
    return read_outputs_file(write_outputs(tmp_path / "outputs.json"))


@pytest.fixture
def job(outputs):
    return planned("vertex", outputs, workers=2, epochs=3, name="spot-1")


def test_spot_scheduling_on_the_planned_request_parses_strictly(outputs, job):
    base = vertex.build_custom_job(job)
    spot = vertex.build_custom_job(planned("vertex", outputs, workers=2, epochs=3, name="spot-1", spot=True,
                                           max_run_time="3h"))
    text = aiplatform_v1.CustomJob.to_json(spot)
    parsed = aiplatform_v1.CustomJob.from_json(text, ignore_unknown_fields=False)
    scheduling = parsed.job_spec.scheduling
    assert scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
    assert scheduling.restart_job_on_worker_restart is True
    assert scheduling.timeout == timedelta(hours=3)
    # Everything else is the request an on-demand run sends.
    parsed.job_spec.scheduling = None
    assert parsed == base
    assert base.job_spec.scheduling == aiplatform_v1.Scheduling()
    # On-demand with a time limit only.
    limited = vertex.build_custom_job(job.model_copy(update={"max_run_time": timedelta(minutes=10)})).job_spec.scheduling
    assert limited.strategy == aiplatform_v1.Scheduling.Strategy.STRATEGY_UNSPECIFIED and limited.timeout.seconds == 600
    assert not limited.restart_job_on_worker_restart


def test_the_backup_is_in_the_run_folder_the_job_restarts_in(outputs, job):
    """The trainer backs up in <model_dir>/checkpoints/backup; the job's base output directory is that model folder,
    so a restarted Spot job (AIP_CHECKPOINT_DIR=<base>/checkpoints/) resumes. A trainer --model_dir after `--`
    would move the backup away from it: refused, with the flag to use."""
    assert vertex.build_custom_job(job).job_spec.base_output_directory.output_uri_prefix == job.model_dir
    assert job.trainer.model_dir == job.model_dir == "gs://tpuctl-my-project-1-artifacts/runs/spot-1"
    with pytest.raises(UserError, match=r"--model_dir\b.*`--`.*\buse --model-dir\b"):
        planned("vertex", outputs, spot=True, trainer_args=("--model_dir", "gs://elsewhere/x"))


@pytest.mark.parametrize("text, seconds", [("10m", 600), ("2h", 7200), ("1h30m", 5400), ("7d", 604800),
                                           ("3600", 3600), ("1.5h", 5400)])
def test_max_run_time_parses(text, seconds):
    assert targets.request("train", {"target": "vertex", "max_run_time": text}).options.max_run_time.total_seconds() == seconds


@pytest.mark.parametrize("text", ["9m", "8d", "2 hours", "h", "", "1x", "-1h"])
def test_max_run_time_out_of_range_or_malformed_is_one_line(text):
    with pytest.raises(UserError, match=r"^--max-run-time") as info:
        targets.request("train", {"target": "vertex", "max_run_time": text})
    assert "\n" not in str(info.value)


def test_the_preflight_estimates_and_checks_the_budget(outputs):
    from billingfakes import fake_prices

    # 2 replicas of n1-standard-4 at the stand-in catalogue's Spot prices (4 × $0.012 + 15 × $0.0015), 2 h.
    spot = planned("vertex", outputs, workers=2, name="spot-1", spot=True, max_run_time="2h", budget=5)
    target = VertexTarget(spot, Report(note=lambda _: None), prices=fake_prices())
    target.preflight()
    assert target.estimate.spot and target.estimate.maximum == pytest.approx(2 * 0.0705 * 2)
    with pytest.raises(UserError, match=r"\$0\.28\b.*--budget \$0\.20\b"):
        VertexTarget(spot.model_copy(update={"budget": 0.2}), Report(note=lambda _: None), prices=fake_prices()).preflight()


def test_spot_job_goes_through_the_real_client_to_the_endpoint(outputs, fake_vertex, monkeypatch, gcs):
    fake = fake_vertex()
    monkeypatch.setenv("TPUCTL_VERTEX_ENDPOINT", fake.url)
    spec = planned("vertex", outputs, workers=2, epochs=3, name="spot-1", spot=True, max_run_time="1h")
    target = VertexTarget(spec.model_copy(update={"wait": False}), Report(say=lambda _: None), image_exists=lambda _: True)
    with target.submit() as created:
        outcome = target.follow(created)
    assert outcome.state == "SUBMITTED" and outcome.name.endswith("/customJobs/1000")
    [(_, path, body)] = fake.posts()
    assert path == "/v1/projects/my-project-1/locations/us-central1/customJobs"
    sent = aiplatform_v1.CustomJob.from_json(json.dumps(body), ignore_unknown_fields=False)
    # The REST transport sends enums as numbers: 4 is Scheduling.Strategy.SPOT in the installed proto.
    assert body["jobSpec"]["scheduling"] == {"timeout": "3600s", "restartJobOnWorkerRestart": True,
                                             "strategy": int(aiplatform_v1.Scheduling.Strategy.SPOT)}
    assert sent.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
    assert sent.job_spec.base_output_directory.output_uri_prefix == spec.model_dir
