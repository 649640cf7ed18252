"""A TPU VM run's timings in its run record and in `runs show` / `runs compare`: submitted (the first slice queued) →
provisioned (first ACTIVE) → the trainer's first step → end, the steady step time and examples/s, the time lost to
each preemption and the spend, and the goodput. Against the fake Cloud TPU API and the storage emulator, with the
hosts' backup and result.json (its ``timing``, as trainer/timing.py writes it) written there; the clocks injected."""

from __future__ import annotations

import json
import time

import pytest
from resultfixtures import trainer_record, write_trainer_result

from ground.outputs import read_outputs_file
from tpuctl.services.runs import records as runs
from tpuctl.services.runs.target import Report, launch
from tpuctl.services.runs.tpuvm.target import TpuVmTarget

from clifixtures import invoke, shown_rows
from runfixtures import planned

ZONE, ZONE_B = "us-central1-a", "us-central1-b"
ARTIFACTS = "tpuctl-my-tpu-project-artifacts"
NAME = "tpuctl-timed-run"
SUSPENDED = {"state": "SUSPENDED", "stateInitiator": "SERVICE"}
#: 2000 steps of 0.6 s: 20 minutes of productive training
TIMING = {"step_seconds": 0.6, "examples_per_second": 213.3, "steps": 1200, "total_steps": 2000}


@pytest.fixture(autouse=True)
def _no_curves(monkeypatch):
    monkeypatch.setattr(runs, "scalars", lambda found: {})   # curves need the trainer environment: not read here



def _preempted_once(tpu_cloud, gcs, outputs_file, base: float):
    """A Spot run preempted once in zone a and finished in zone b: each poll is 10 minutes on the injected clocks
    (monotonic and wall alike, from ``base``); the first step ends 5 minutes after the first slice was queued."""
    now = [0.0]
    bucket = gcs.bucket(ARTIFACTS)

    def on_get(fake, state, n):
        if state == "SUSPENDED":
            bucket.blob(f"runs/{NAME}/tpuctl/hosts/worker-1.exit").upload_from_string("143\n")
        if state != "ACTIVE":
            return
        if n == 1:
            bucket.blob(f"runs/{NAME}/checkpoints/backup/chief/checkpoint").upload_from_string("backup")
        if len(fake.zones_created) == 2 and n == 2:
            for worker in range(4):
                bucket.blob(f"runs/{NAME}/tpuctl/hosts/worker-{worker}.exit").upload_from_string("0\n")
            result = trainer_record(f"gs://{ARTIFACTS}/runs/{NAME}", 0.9, epochs=3, timing={
                **TIMING, "first_step_at": base + 300.0, "process_first_step_at": base + now[0]})
            write_trainer_result(bucket, f"runs/{NAME}", result)

    tpu_cloud(plans=[["ACTIVE", "ACTIVE", "ACTIVE", SUSPENDED], ["PROVISIONING", "ACTIVE", "ACTIVE", "ACTIVE"]],
              on_get=on_get)
    run = planned("tpu-vm", read_outputs_file(outputs_file), accelerator="v5litepod-16", spot=True, recover=1,
                  name=NAME, image="us-central1-docker.pkg.dev/p/r/trainer-tpu:1")
    lines: list[str] = []
    outcome = launch(TpuVmTarget(run, Report(note=lines.append), storage=gcs, poll_seconds=0, zone_order=[ZONE, ZONE_B],
                                 sleep=lambda s: now.__setitem__(0, now[0] + 600.0), clock=lambda: now[0],
                                 wall=lambda: base + now[0]))
    return outcome, lines


def test_runs_show_prints_a_preempted_tpu_vm_runs_timings_time_lost_and_spend(outputs_file, tpu_cloud, gcs):
    # the hosts' backup is written now (real time), 10 minutes into the run on the injected clocks: the preemption
    # seen 20 minutes in loses the 10 minutes since
    base = time.time() - 600
    outcome, lines = _preempted_once(tpu_cloud, gcs, outputs_file, base)
    [recovery] = outcome.recoveries
    record = json.loads(gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/tpuctl-run.json").download_as_bytes())
    # Submitted when the first slice was queued; ACTIVE at once; the end is the poll the result was seen at.
    assert record["target"] == "tpu-vm" and record["spot"] is True
    assert record["started"] == pytest.approx(base) and record["provisioned"] == pytest.approx(base)
    wall = record["finished"] - record["started"]
    assert wall >= 1800         # the second slice's hosts ended in its second ACTIVE poll (30 min in): seen then
    # The spend is the slices' ACTIVE time at the estimate's price: the same figure the run's last line says.
    spent = record["spent_usd"]
    assert spent > 0 and lines[-1].startswith(f"spent ${spent:.2f}"), lines[-1]

    r = invoke(["runs", "show", NAME, "--outputs", str(outputs_file)])
    assert r.exit_code == 0, r.output
    rows = shown_rows(r.stdout)
    assert rows["target"] == "tpu-vm"
    assert rows["provisioned"] == "0s after submission"
    assert rows["first step"] == "5m00s after submission"
    assert rows["step time"] == "600.0 ms" and rows["examples/s"] == "213.3"
    assert rows["goodput"] == f"{2000 * 0.6 / wall:.0%}"
    assert rows["spend"] == f"${spent:.2f}"
    lost = recovery["seconds_lost"]
    assert 590 < lost <= 600 and rows["time lost"].startswith(f"{runs_duration(lost)} in 1 preemption(s)"), rows["time lost"]
    assert rows["recovery 1"].startswith("preempted (Spot), SUSPENDED in us-central1-a")


def runs_duration(seconds: float) -> str:
    from ground.durations import format_duration

    return format_duration(seconds)


def test_runs_compare_puts_a_tpu_vm_run_and_a_local_one_in_one_table(outputs_file, tpu_cloud, gcs, tmp_path):
    base = time.time() - 600
    _preempted_once(tpu_cloud, gcs, outputs_file, base)
    # the same run's folder copied next to a local run, so both are in one --dir
    local = tmp_path / "runs"
    for name, files in ((NAME, None), ("local-run", {
            "result.json": {"val_accuracy": 0.95, "epochs": 3, "timing": {
                "first_step_at": 1000.0 + 12, "step_seconds": 0.05, "examples_per_second": 2560.0,
                "steps": 600, "total_steps": 600}},
            "tpuctl-run.json": {"target": "local", "started": 1000.0, "provisioned": 1001.5, "finished": 1060.0}})):
        folder = local / name
        (folder / "tpuctl").mkdir(parents=True)
        if files is None:
            for blob in gcs.list_blobs(ARTIFACTS, prefix=f"runs/{NAME}/"):
                relative = blob.name[len(f"runs/{NAME}/"):]
                if relative in ("result.json", "tpuctl-run.json", "tpuctl/recoveries.json"):
                    (folder / relative).write_bytes(blob.download_as_bytes())
        else:
            for file, doc in files.items():
                (folder / file).write_text(json.dumps(doc))
    r = invoke(["runs", "compare", NAME, "local-run", "--dir", str(local)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    table = {cells[0]: cells[1:] for cells in (
        [c.strip() for c in line.strip("│┃ ").split("│")] for line in r.stdout.splitlines() if "│" in line)}
    assert table["first step"] == ["5m00s after submission", "12s after submission"]
    assert table["provisioned"][1] == "2s after submission"
    assert table["step time"] == ["600.0 ms", "50.0 ms"]
    assert table["goodput"][1] == "50%"                  # 600 x 0.05 s of 60 s
    assert table["time lost"][0].endswith("in 1 preemption(s)") and table["time lost"][1] == "-"
    assert table["spend"][0].startswith("$") and table["spend"][1] == "-"
