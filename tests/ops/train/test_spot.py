"""Spot runs: the CustomJob `vertex.plan_job` builds, with Spot scheduling, a bounded run time and the trainer's
backup in the run's gs:// folder; sent through the real JobServiceClient to the local Vertex stand-in and parsed
strictly. And the resume it relies on: a 2-process local run stopped after an epoch's backup and started again
with the same model folder continues at the interrupted epoch."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from google.cloud import aiplatform_v1

from tpuctl.ground.errors import UserError
from tpuctl.ground.outputs import read_outputs_file
from tpuctl.services import cloudrun, vertex
from tpuctl.services.targets.vertex import VertexTarget
from tpuctl.services.training import TrainOptions

from stackfixtures import write_outputs


@pytest.fixture
def job(tmp_path):
    path = write_outputs(tmp_path / "outputs.json")
    return vertex.plan_job(TrainOptions(workers=2, epochs=3), read_outputs_file(path), job_name="spot-1")


def test_spot_scheduling_on_the_planned_request_parses_strictly(job):
    base = vertex.build_custom_job(job)
    spot = cloudrun.with_scheduling(base, spot=True, max_run_time=timedelta(hours=3))
    text = aiplatform_v1.CustomJob.to_json(spot)
    parsed = aiplatform_v1.CustomJob.from_json(text, ignore_unknown_fields=False)
    scheduling = parsed.job_spec.scheduling
    assert scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
    assert scheduling.restart_job_on_worker_restart is True
    assert scheduling.timeout == timedelta(hours=3)
    # Everything else is the request `tpuctl train` sends.
    parsed.job_spec.scheduling = None
    assert parsed == base
    assert vertex.build_custom_job(job).job_spec.scheduling == aiplatform_v1.Scheduling()   # input untouched
    # On-demand with a time limit only.
    limited = cloudrun.with_scheduling(base, max_run_time=timedelta(minutes=10)).job_spec.scheduling
    assert limited.strategy == aiplatform_v1.Scheduling.Strategy.STRATEGY_UNSPECIFIED and limited.timeout.seconds == 600
    assert not limited.restart_job_on_worker_restart
    assert cloudrun.with_scheduling(base) == base


def test_backup_folder_is_in_the_run_folder(job):
    assert cloudrun.backup_dir(job) == "gs://tpuctl-my-project-1-artifacts/runs/spot-1/checkpoints/backup"
    args = list(job.trainer_args)
    args[args.index("--model_dir") + 1] = "gs://elsewhere/x"
    moved = type(job)(**{**job.__dict__, "trainer_args": args})
    with pytest.raises(UserError, match="both must be the same folder"):
        cloudrun.backup_dir(moved)


@pytest.mark.parametrize("text, seconds", [("10m", 600), ("2h", 7200), ("1h30m", 5400), ("7d", 604800),
                                           ("3600", 3600), ("1.5h", 5400)])
def test_max_run_time_parses(text, seconds):
    assert cloudrun.parse_run_time(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["9m", "8d", "2 hours", "h", "", "1x", "-1h"])
def test_max_run_time_out_of_range_or_malformed_is_one_line(text):
    with pytest.raises(UserError, match=r"^--max-run-time") as info:
        cloudrun.parse_run_time(text)
    assert "\n" not in str(info.value)


def test_plan_cloud_run_estimates_and_checks_the_budget(job):
    from billingfakes import fake_prices

    # 2 replicas of n1-standard-4 at the stand-in catalogue's Spot prices (4 × $0.012 + 15 × $0.0015), 2 h.
    plan = cloudrun.plan_cloud_run(job, spot=True, max_run_time=timedelta(hours=2), budget=5, prices=fake_prices())
    assert plan.backup_dir.endswith("/runs/spot-1/checkpoints/backup")
    assert plan.estimate.spot and plan.estimate.maximum == pytest.approx(2 * 0.0705 * 2)
    with pytest.raises(UserError, match=r"may cost up to \$0\.28 .*above --budget \$0\.20"):
        cloudrun.plan_cloud_run(job, spot=True, max_run_time=timedelta(hours=2), budget=0.2, prices=fake_prices())


def test_spot_job_goes_through_the_real_client_to_the_endpoint(job, fake_vertex, monkeypatch):
    fake = fake_vertex()
    monkeypatch.setenv("TPUCTL_VERTEX_ENDPOINT", fake.url)
    plan = cloudrun.plan_cloud_run(job, spot=True, max_run_time=timedelta(hours=1))
    target = VertexTarget(job, wait=False, custom_job=plan.custom_job, say=lambda _: None,
                          image_exists=lambda _: True)
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
    assert sent.job_spec.base_output_directory.output_uri_prefix + "/checkpoints/backup" == plan.backup_dir


def _epoch_starts(text: str, label: str = "chief") -> list[str]:
    return [ln.split("] ", 1)[1] for ln in text.splitlines()
            if ln.startswith(f"[{label}] ") and ln.split("] ", 1)[1].startswith("epoch-start:")]


@pytest.mark.slow
def test_two_process_run_stopped_after_an_epoch_resumes_at_the_interrupted_epoch(tmp_path, tools, monkeypatch):
    from tpuctl.services.supervisor import TaskFailed
    from tpuctl.services.training import plan_local, run_local

    if not tools.trainer_python.exists():
        pytest.skip("trainer environment .venv-trainer is missing (scripts/setup.sh)")
    monkeypatch.setenv("TPUCTL_CACHE_DIR", str(tmp_path / "cache"))
    model_dir = tmp_path / "run"
    # The flags `tpuctl train --workers 2 --epochs 3 --model-dir RUN -- --steps_per_epoch 5 --seed 1` resolve to.
    plan = plan_local(TrainOptions(workers=2, epochs=3, model_dir=str(model_dir),
                                   extra=["--steps_per_epoch", "5", "--seed", "1"]))
    first = io.StringIO()
    with pytest.raises(TaskFailed):   # the test hook hard-exits every process right after epoch 2's backup
        run_local(plan.args, workers=2, env={**plan.env, "TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH": "2"},
                  out=first, err=io.StringIO())
    assert _epoch_starts(first.getvalue()) == ["epoch-start: 1/3", "epoch-start: 2/3"], first.getvalue()[-3000:]
    assert (model_dir / "checkpoints" / "backup" / "chief").is_dir()
    assert not (model_dir / "result.json").exists()

    second = io.StringIO()
    outcome = run_local(plan.args, workers=2, env=plan.env, out=second, err=io.StringIO())
    assert outcome.returncode == 0
    assert _epoch_starts(second.getvalue()) == ["epoch-start: 3/3"], second.getvalue()[-3000:]
    assert _epoch_starts(second.getvalue(), "worker 0") == ["epoch-start: 3/3"]
    result = json.loads((model_dir / "result.json").read_text())
    assert result["epochs"] == 3 and result["num_workers"] == 2
