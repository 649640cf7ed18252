"""`--provisioning spot|on-demand|flex-start`, `--max-wait` and `--reservation` on Vertex AI: each is the field
Google's types define (``Scheduling.strategy`` / ``max_wait_duration``, ``MachineSpec.reservation_affinity``), the
dry run parses strictly as an ``aiplatform_v1.CustomJob``, the real client sends it to the local Vertex stand-in
and the run follows it to the end; what a model rules out is one line before anything is sent."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from google.cloud import aiplatform_v1

from ground.errors import UserError
from ground.outputs import read_outputs_file
from tpuctl.services.runs.target import Report
from tpuctl.services.runs.vertex import VertexTarget, build_custom_job

from clifixtures import error_line, invoke
from runfixtures import planned
from stackfixtures import write_outputs

Strategy = aiplatform_v1.Scheduling.Strategy
Affinity = aiplatform_v1.ReservationAffinity.Type
RESERVATION = "projects/my-project-1/zones/us-central1-a/reservations/team-a100"


@pytest.fixture
def outputs_file(tmp_path):
    return write_outputs(tmp_path / "outputs.json")


def _dry_run(outputs_file, *extra):
    r = invoke(["train", "--target", "vertex", "--outputs", str(outputs_file), "--dry-run", "--name", "cap",
                *extra])
    assert r.exit_code == 0, r.output
    return aiplatform_v1.CustomJob.from_json(r.stdout, ignore_unknown_fields=False)


@pytest.mark.parametrize("extra, strategy, restart", [
    (["--provisioning", "on-demand"], Strategy.STANDARD, False),
    (["--provisioning", "spot"], Strategy.SPOT, True),
    (["--spot"], Strategy.SPOT, True),
    (["--provisioning", "flex-start", "-a", "gpu-a100x8"], Strategy.FLEX_START, False),
])
def test_each_provisioning_model_is_its_scheduling_strategy(outputs_file, extra, strategy, restart):
    job = _dry_run(outputs_file, *extra)
    scheduling = job.job_spec.scheduling
    assert scheduling.strategy == strategy and scheduling.restart_job_on_worker_restart is restart
    assert "max_wait_duration" not in scheduling     # not asked: Vertex AI's own default (24 h)


def test_no_provisioning_asked_sends_no_scheduling(outputs_file):
    assert "scheduling" not in _dry_run(outputs_file).job_spec


def test_flex_start_max_wait_is_the_jobs_max_wait_duration(outputs_file):
    job = _dry_run(outputs_file, "--provisioning", "flex-start", "-a", "gpu-l4x4", "--max-wait", "6h",
                   "--max-run-time", "2d")
    scheduling = job.job_spec.scheduling
    assert scheduling.strategy == Strategy.FLEX_START
    assert scheduling.max_wait_duration == timedelta(hours=6) and scheduling.timeout == timedelta(days=2)


@pytest.mark.parametrize("reservation, kind, values", [
    ("any", Affinity.ANY_RESERVATION, []),
    (RESERVATION, Affinity.SPECIFIC_RESERVATION, [RESERVATION]),
])
def test_a_reservation_is_every_pools_reservation_affinity(outputs_file, reservation, kind, values):
    job = _dry_run(outputs_file, "-a", "gpu-t4", "--workers", "3", "--reservation", reservation)
    pools = job.job_spec.worker_pool_specs
    assert len(pools) == 2
    for pool in pools:
        affinity = pool.machine_spec.reservation_affinity
        assert affinity.reservation_affinity_type == kind and list(affinity.values) == values
        assert affinity.key == ("compute.googleapis.com/reservation-name" if values else "")
    assert "scheduling" not in job.job_spec


@pytest.mark.parametrize("extra, says", [
    (["--provisioning", "flex-start"], "L4, A100, H100, H200 or B200"),                  # cpu
    (["--provisioning", "flex-start", "-a", "gpu-t4"], "not gpu-t4"),
    (["--provisioning", "flex-start", "-a", "tpu-v5e-4"], "--target tpu-vm"),
    (["--max-wait", "1h"], "--provisioning flex-start"),
    (["--spot", "--provisioning", "flex-start"], "give one of --spot and --provisioning"),
    (["--reservation", "any", "--spot"], "--reservation runs on reserved capacity"),
    (["--reservation", "team-a100"], "projects/my-project-1/zones/ZONE/reservations/team-a100"),
    (["--reservation", "projects/p-123456/zones/europe-west4-a/reservations/r"], "--region europe-west4"),
    (["--reservation", "Team A"], "--reservation 'Team A'"),
    (["--provisioning", "standard"], "--provisioning"),
])
def test_what_a_model_rules_out_is_one_line(outputs_file, extra, says):
    r = invoke(["train", "--target", "vertex", "--outputs", str(outputs_file), "--dry-run", *extra])
    line = error_line(r, 2, alone=True)
    assert says in line, line


def test_local_runs_refuse_the_capacity_flags_in_one_line(outputs_file):
    for flag, value in (("--provisioning", "spot"), ("--reservation", "any"), ("--max-wait", "1h")):
        line = error_line(invoke(["train", flag, value]), 2, alone=True)
        assert flag in line and "--target" in line, line


def test_flex_start_and_reservation_jobs_go_through_the_real_client_and_are_followed(outputs_file, fake_vertex,
                                                                                      monkeypatch, gcs):
    fake = fake_vertex()
    monkeypatch.setenv("TPUCTL_VERTEX_ENDPOINT", fake.url)
    outputs = read_outputs_file(outputs_file)
    gcs[1].create_bucket(outputs.require("buckets.artifacts").removeprefix("gs://"))   # the trainer writes its result
    said: list[str] = []
    for i, flags in enumerate(({"provisioning": "flex-start", "accelerator": "gpu-h100x8", "max_wait": "3h"},
                               {"reservation": RESERVATION, "accelerator": "gpu-a100x8"},
                               {"provisioning": "on-demand"})):
        spec = planned("vertex", outputs, name=f"cap-run-{i}", **flags)   # a finished run's folder is not reused
        target = VertexTarget(spec.model_copy(update={"poll_seconds": 0.01}), Report(say=said.append, note=said.append),
                              image_exists=lambda _: True, sleep=lambda _: None)
        with target.submit() as created:
            outcome = target.follow(created)
        assert outcome.state == "SUCCEEDED", outcome
    sent = [aiplatform_v1.CustomJob.from_json(json.dumps(body), ignore_unknown_fields=False)
            for _, _, body in fake.posts()]
    flex, reserved, standard = sent
    assert flex.job_spec.scheduling.strategy == Strategy.FLEX_START
    assert flex.job_spec.scheduling.max_wait_duration == timedelta(hours=3)
    affinity = reserved.job_spec.worker_pool_specs[0].machine_spec.reservation_affinity
    assert affinity.reservation_affinity_type == Affinity.SPECIFIC_RESERVATION and list(affinity.values) == [RESERVATION]
    assert standard.job_spec.scheduling.strategy == Strategy.STANDARD
    assert "state: JOB_STATE_SUCCEEDED" in said


def test_the_request_without_capacity_flags_is_unchanged(outputs_file):
    outputs = read_outputs_file(outputs_file)
    base = build_custom_job(planned("vertex", outputs, name="cap", accelerator="gpu-a100x8"))
    flex = build_custom_job(planned("vertex", outputs, name="cap", accelerator="gpu-a100x8",
                                    provisioning="flex-start"))
    flex.job_spec.scheduling = None
    assert flex.labels.pop("tpuctl-provisioning") == "flex-start"    # the label `tpu list` reads on TPU VMs
    assert flex == base


def test_a_reservation_skips_the_quota_preflight_with_a_note(outputs_file):
    from tpuctl.services.runs.vertex import check_quota

    notes: list[str] = []
    spec = planned("vertex", read_outputs_file(outputs_file), accelerator="gpu-a100x8", reservation="any")
    assert check_quota(spec, client=object(), echo=notes.append) is None
    assert notes and "reserved capacity" in notes[0]


def test_service_callers_get_the_same_refusals():
    with pytest.raises(UserError, match="--reservation"):
        planned("local", None, reservation="any")


def test_a_flex_start_cost_is_unknown_naming_why_and_a_reservation_says_how_it_is_billed(outputs_file):
    from billingfakes import fake_prices

    outputs = read_outputs_file(outputs_file)
    notes: list[str] = []
    flex = planned("vertex", outputs, name="cap", accelerator="gpu-a100x8", provisioning="flex-start")
    target = VertexTarget(flex, Report(note=notes.append), prices=fake_prices())
    target.preflight()
    assert target.estimate.maximum is None and target.estimate.provisioning == "flex-start"
    [total] = [line for line in notes if "total:" in line]
    assert "unknown" in total and "Dynamic Workload Scheduler" in total, total
    with pytest.raises(UserError, match=r"cannot check --budget \$5\.00: flex-start"):
        VertexTarget(flex.model_copy(update={"budget": 5.0}), Report(note=notes.append), prices=fake_prices()).preflight()
    notes.clear()
    reserved = planned("vertex", outputs, name="cap", workers=2, reservation="any")
    target = VertexTarget(reserved, Report(note=notes.append), prices=fake_prices())
    target.preflight()
    assert target.estimate.maximum is not None and any("on a reservation" in line for line in notes), notes


def test_a_tuning_job_carries_the_model_and_the_reservation_on_every_trial(outputs_file):
    r = invoke(["tune", "--target", "vertex", "--outputs", str(outputs_file), "--dry-run", "-a", "gpu-a100x8",
                "--provisioning", "flex-start", "--max-wait", "2h"])
    assert r.exit_code == 0, r.output
    job = aiplatform_v1.HyperparameterTuningJob.from_json(r.stdout, ignore_unknown_fields=False)
    scheduling = job.trial_job_spec.scheduling
    assert scheduling.strategy == Strategy.FLEX_START and scheduling.max_wait_duration == timedelta(hours=2)
    r = invoke(["tune", "--target", "vertex", "--outputs", str(outputs_file), "--dry-run", "-a", "gpu-a100x8",
                "--reservation", RESERVATION])
    assert r.exit_code == 0, r.output
    job = aiplatform_v1.HyperparameterTuningJob.from_json(r.stdout, ignore_unknown_fields=False)
    affinity = job.trial_job_spec.worker_pool_specs[0].machine_spec.reservation_affinity
    assert list(affinity.values) == [RESERVATION]
