"""`--budget` on a TPU VM run counted from what is spent (tpuvm.spend): the ACTIVE time of every slice (across
recoveries and `tpu attach`) × the slice's hourly price from the estimate's catalogue. The stand-in catalogue
(billingfakes.fake_prices: invented prices) makes a Spot v5litepod-16 $4.80/h = $0.80 per 10 minutes; each poll of
the injected clock is 10 minutes of training. Against the fake Cloud TPU API and the storage emulator."""

from __future__ import annotations

import json
import time

import pytest
from resultfixtures import trainer_record, write_trainer_result

from ground.errors import UserError
from ground.outputs import read_outputs_file
from tpuctl.services.runs.target import Report, launch
from tpuctl.services.runs.tpuvm.target import TpuVmTarget

from billingfakes import fake_prices
from runfixtures import tpu_vm_target

PROJECT, ZONE = "my-tpu-project", "us-central1-a"
ARTIFACTS = "tpuctl-my-tpu-project-artifacts"
NAME = "tpuctl-budget-run"
#: the chief's completion record when the run finishes
HALF = trainer_record(f"gs://{ARTIFACTS}/runs/{NAME}", 0.5)
MODEL = f"gs://{ARTIFACTS}/runs/{NAME}"
SUSPENDED = {"state": "SUSPENDED", "stateInitiator": "SERVICE"}
QR = f"projects/{PROJECT}/locations/{ZONE}/queuedResources/{NAME}"


class Clock:
    """Monotonic time that moves only when the run sleeps: 10 minutes a poll."""

    def __init__(self):
        self.now = 0.0

    def sleep(self, _seconds):
        self.now += 600.0

    def __call__(self):
        return self.now


def _target(outputs_file, gcs, lines, clock, *, budget, recover=0, progress=None):
    return tpu_vm_target(read_outputs_file(outputs_file), accelerator="v5litepod-16", spot=True,
                       name=NAME, image="us-central1-docker.pkg.dev/p/r/trainer-tpu:1", budget=budget,
                       recover=recover, progress=progress or lines.append, storage=gcs, poll_seconds=0,
                       prices=fake_prices(), sleep=clock.sleep, clock=clock)


def _json(gcs, path):
    return json.loads(gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/{path}").download_as_bytes())


def _stopped(err, spent: str, budget: str, slice_time: str) -> str:
    """The budget stop: an error (exit 1) of one line naming the spend, the --budget it reached, the slice time and
    the hourly price it was counted at."""
    msg = str(err.value)
    assert err.value.exit_code == 1 and "\n" not in msg, msg
    assert spent in msg and f"--budget {budget}" in msg and slice_time in msg and "$4.8000/h" in msg, msg
    return msg


def test_the_spend_reaching_the_budget_stops_the_run_and_deletes_the_slice(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(states=["ACTIVE"])
    lines: list[str] = []
    with pytest.raises(UserError) as err:
        launch(_target(outputs_file, gcs, lines, Clock(), budget=3))
    # The maximum for --max-run-time (1 day, $115.20) is above the budget: said, not refused.
    [note] = [line for line in lines if line.startswith("note: ") and "--budget $3.00" in line]
    assert "37m30s" in note and "$4.8000/h" in note, note
    # Polls at 0, 10, 20, 30 minutes ($2.40 by then), the next at 40 ($3.20) stops the run.
    msg = _stopped(err, "$3.20", "$3.00", "40m00s")
    # where the backup is, how to resume (the run's --name), and that the slice is gone
    assert f"{MODEL}/checkpoints/backup" in msg and f"--name {NAME}" in msg, msg
    assert msg.endswith(f"deleted queued resource {NAME}"), msg
    assert [name for name, _ in fake.deleted] == [QR] and fake.resources == {}
    assert _json(gcs, "tpuctl/tpu-vm-run.json")["spec"]["budget"] == 3.0


def test_the_spend_counts_every_slice_across_recoveries(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[["ACTIVE", "ACTIVE", "ACTIVE", SUSPENDED], ["ACTIVE"]])
    lines: list[str] = []
    with pytest.raises(UserError) as err:
        launch(_target(outputs_file, gcs, lines, Clock(), budget=5, recover=2))
    [preemption] = [line for line in lines if line.startswith("preemption ")]
    # The first slice trained 20 minutes ($1.60); the second is stopped at 50 minutes of its own ($5.60 in all).
    assert "20m00s" in preemption and "$1.60" in preemption and "--budget $5.00" in preemption, preemption
    _stopped(err, "$5.60", "$5.00", "1h10m")
    assert fake.zones_created == [ZONE, ZONE] and fake.resources == {}
    [recovery] = _json(gcs, "tpuctl/recoveries.json")["recoveries"]
    assert recovery["spent_usd"] == 1.6 and recovery["seconds_trained"] == 1200
    plan = _json(gcs, "tpuctl/tpu-vm-run.json")
    assert plan["hourly_usd"] == 4.8 and plan["spec"]["budget"] == 5.0 and plan["active_since"] is not None


def test_a_run_within_its_budget_finishes_and_says_what_it_spent(outputs_file, tpu_cloud, gcs):
    def on_get(fake, state, n):
        if state == "ACTIVE" and n == 3:
            write_trainer_result(gcs.bucket(ARTIFACTS), f"runs/{NAME}", HALF)

    tpu_cloud(states=["ACTIVE"], on_get=on_get)
    lines: list[str] = []
    outcome = launch(_target(outputs_file, gcs, lines, Clock(), budget=3))
    assert outcome.result == HALF
    last = lines[-1]
    assert last.startswith("spent $2.40") and "--budget $3.00" in last and "30m00s" in last, last
    assert "$4.8000/h" in last and "list price" in last, last


def test_without_a_price_the_spend_is_not_tracked_and_that_is_said_once(outputs_file, tpu_cloud, gcs):
    from ground import domain
    from tpuctl.services.prices import Prices

    def on_get(fake, state, n):
        if state == "SUSPENDED":
            gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/tpuctl/hosts/worker-1.exit").upload_from_string("143\n")
        if state == "ACTIVE" and len(fake.zones_created) == 2:
            write_trainer_result(gcs.bucket(ARTIFACTS), f"runs/{NAME}", HALF)

    tpu_cloud(plans=[["ACTIVE", "ACTIVE", SUSPENDED], ["ACTIVE"]], on_get=on_get)
    unpriced = Prices(None, domain.Snapshot("nothing", "2026-11-25", "", {}))
    lines: list[str] = []
    clock = Clock()
    run = tpu_vm_target(read_outputs_file(outputs_file), accelerator="v5litepod-16", spot=True,
                      name=NAME, image="img:1", recover=1, progress=lines.append, storage=gcs, poll_seconds=0,
                      prices=unpriced, sleep=clock.sleep, clock=clock)
    assert launch(run).result == HALF
    [note] = [line for line in lines if "spend" in line]
    assert note.startswith("note: ") and "no price" in note, note
    [preemption] = [line for line in lines if line.startswith("preemption ")]
    assert "spent" not in preemption and not any(line.startswith("spent $") for line in lines)
    assert "spent_usd" not in _json(gcs, "tpuctl/recoveries.json")["recoveries"][0]
    with pytest.raises(UserError, match=r"--budget \$5\.00\b.*\bSpot TPU v5e price"):
        TpuVmTarget(run.spec.model_copy(update={"budget": 5.0}), Report(note=lines.append), prices=unpriced).preflight()


def test_attach_goes_on_counting_what_the_slice_spent_before(outputs_file, tpu_cloud, gcs):
    """The launching process leaves once training starts; `tpu attach` comes back 25 minutes (wall clock) later:
    the slice has spent $2.00 by then, and the poll 20 minutes on ($3.60) is the first past the $3 budget."""
    from tpuctl.services.runs.tpuvm.target import attach_tpu_vm

    class Detached(BaseException):
        pass

    def leave(line):
        if line.startswith("training on"):
            raise Detached

    fake = tpu_cloud(states=["ACTIVE"])
    with pytest.raises(Detached):
        launch(_target(outputs_file, gcs, [], Clock(), budget=3, progress=leave))
    assert list(fake.resources) == [QR]
    lines: list[str] = []
    clock = Clock()
    target = attach_tpu_vm(NAME, read_outputs_file(outputs_file), storage=gcs, report=Report(note=lines.append), poll_seconds=0,
                           sleep=clock.sleep, clock=clock, wall=lambda: time.time() + 1500)
    assert target.budget == 3.0 and target.hourly == 4.8
    with pytest.raises(UserError) as err:
        launch(target)
    _stopped(err, "$3.60", "$3.00", "45m00s")
    assert clock.now == 1200 and [name for name, _ in fake.deleted] == [QR] and fake.resources == {}
