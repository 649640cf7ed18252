"""`--budget` on a TPU VM run counted from what is spent (tpuvm.spend): the ACTIVE time of every slice (across
recoveries and `tpu attach`) × the slice's hourly price from the estimate's catalogue. The stand-in catalogue
(billingfakes.fake_prices: invented prices) makes a Spot v5litepod-16 $4.80/h = $0.80 per 10 minutes; each poll of
the injected clock is 10 minutes of training. Against the fake Cloud TPU API and the storage emulator."""

from __future__ import annotations

import json
import time

import pytest

from ground.errors import UserError
from ground.outputs import read_outputs_file
from tpuctl.services.runs.target import launch
from tpuctl.services.runs.tpuvm.target import TpuVmTarget

from billingfakes import fake_prices
from runfixtures import tpu_vm_target

PROJECT, ZONE = "my-tpu-project", "us-central1-a"
ARTIFACTS = "tpuctl-my-tpu-project-artifacts"
NAME = "tpuctl-budget-run"
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


def test_the_spend_reaching_the_budget_stops_the_run_and_deletes_the_slice(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(states=["ACTIVE"])
    lines: list[str] = []
    with pytest.raises(UserError) as err:
        launch(_target(outputs_file, gcs, lines, Clock(), budget=3))
    # The maximum for --max-run-time (1 day, $115.20) is above the budget: said, not refused.
    assert "note: the run is stopped when its spend reaches --budget $3.00 (after 37m30s of slice time at " \
           "$4.8000/h)" in lines
    # Polls at 0, 10, 20, 30 minutes ($2.40 by then), the next at 40 ($3.20) stops the run.
    assert err.value.exit_code == 1
    assert str(err.value) == (f"spend $3.20 reached --budget $3.00 (40m00s of slice time at $4.8000/h): the run was "
                              f"stopped; its backup is in {MODEL}/checkpoints/backup; to resume, run the same command "
                              f"again with --name {NAME}; deleted queued resource {NAME}")
    assert [name for name, _ in fake.deleted] == [QR] and fake.resources == {}
    assert _json(gcs, "tpuctl/tpu-vm-run.json")["spec"]["budget"] == 3.0


def test_the_spend_counts_every_slice_across_recoveries(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[["ACTIVE", "ACTIVE", "ACTIVE", SUSPENDED], ["ACTIVE"]])
    lines: list[str] = []
    with pytest.raises(UserError) as err:
        launch(_target(outputs_file, gcs, lines, Clock(), budget=5, recover=2))
    [preemption] = [line for line in lines if line.startswith("preemption ")]
    # The first slice trained 20 minutes ($1.60); the second is stopped at 50 minutes of its own ($5.60 in all).
    assert "after 20m00s of training;" in preemption and "; $1.60 spent so far of --budget $5.00; re-queueing" in \
        preemption
    assert str(err.value).startswith("spend $5.60 reached --budget $5.00 (1h10m of slice time at $4.8000/h)")
    assert fake.zones_created == [ZONE, ZONE] and fake.resources == {}
    [recovery] = _json(gcs, "tpuctl/recoveries.json")["recoveries"]
    assert recovery["spent_usd"] == 1.6 and recovery["seconds_trained"] == 1200
    plan = _json(gcs, "tpuctl/tpu-vm-run.json")
    assert plan["hourly_usd"] == 4.8 and plan["spec"]["budget"] == 5.0 and plan["active_since"] is not None


def test_a_run_within_its_budget_finishes_and_says_what_it_spent(outputs_file, tpu_cloud, gcs):
    def on_get(fake, state, n):
        if state == "ACTIVE" and n == 3:
            gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/result.json").upload_from_string('{"val_accuracy": 0.5}')

    tpu_cloud(states=["ACTIVE"], on_get=on_get)
    lines: list[str] = []
    outcome = launch(_target(outputs_file, gcs, lines, Clock(), budget=3))
    assert outcome.result == {"val_accuracy": 0.5}
    assert lines[-1] == "spent $2.40 (--budget $3.00): 30m00s of slice time at $4.8000/h (list price, compute only)"


def test_without_a_price_the_spend_is_not_tracked_and_that_is_said_once(outputs_file, tpu_cloud, gcs):
    from ground import domain
    from tpuctl.services.prices import Prices

    def on_get(fake, state, n):
        if state == "SUSPENDED":
            gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/tpuctl/hosts/worker-1.exit").upload_from_string("143\n")
        if state == "ACTIVE" and len(fake.zones_created) == 2:
            gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/result.json").upload_from_string('{"val_accuracy": 0.5}')

    tpu_cloud(plans=[["ACTIVE", "ACTIVE", SUSPENDED], ["ACTIVE"]], on_get=on_get)
    unpriced = Prices(None, domain.Snapshot("nothing", "2026-11-25", "", {}))
    lines: list[str] = []
    clock = Clock()
    run = tpu_vm_target(read_outputs_file(outputs_file), accelerator="v5litepod-16", spot=True,
                      name=NAME, image="img:1", recover=1, progress=lines.append, storage=gcs, poll_seconds=0,
                      prices=unpriced, sleep=clock.sleep, clock=clock)
    assert launch(run).result == {"val_accuracy": 0.5}
    assert [line for line in lines if "spend" in line] == [
        "note: the run's spend cannot be tracked: no price for the slice (see the estimate)"]
    [preemption] = [line for line in lines if line.startswith("preemption ")]
    assert "spent" not in preemption and not any(line.startswith("spent $") for line in lines)
    assert "spent_usd" not in _json(gcs, "tpuctl/recoveries.json")["recoveries"][0]
    with pytest.raises(UserError, match=r"^cannot check --budget \$5\.00: no Spot TPU v5e price"):
        TpuVmTarget(run.run.model_copy(update={"budget": 5.0}), prices=unpriced, progress=lines.append).preflight()


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
    target = attach_tpu_vm(NAME, read_outputs_file(outputs_file), storage=gcs, progress=lines.append, poll_seconds=0,
                           sleep=clock.sleep, clock=clock, wall=lambda: time.time() + 1500)
    assert target.budget == 3.0 and target.hourly == 4.8
    with pytest.raises(UserError) as err:
        launch(target)
    assert str(err.value).startswith("spend $3.60 reached --budget $3.00 (45m00s of slice time at $4.8000/h)")
    assert clock.now == 1200 and [name for name, _ in fake.deleted] == [QR] and fake.resources == {}
