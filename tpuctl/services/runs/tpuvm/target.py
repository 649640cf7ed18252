"""The TPU VM target: one managed run on a slice of TPU VMs (Cloud TPU queued resources).

``submit`` creates nothing by itself: the slice is queued by ``follow`` (which also re-queues a preempted slice with
``--recover``: the run's zone first, then ``--zones``, until the chief's result is there); leaving ``submit``'s
context deletes the queued resource that was created, on success, failure, Ctrl-C and SIGTERM, unless ``keep``.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bootstrap import quotas
from cloud import clients
from cloud.google import api_exceptions
from ground import domain
from ground.durations import format_duration
from ground.errors import EXIT_INTERRUPTED, UserError
from ground.outputs import StackOutputs, require_outputs
from ground.storagepath import GsPath
from tpuctl.services.runs import cost, logs, records
from tpuctl.services.runs.spec import refuse_finished
from tpuctl.services.runs.target import SUCCEEDED, Outcome, Report
from tpuctl.services.runs.tpuvm.api import (
    GONE_STATES,
    Created,
    Preempted,
    Progress,
    Refused,
    create_and_wait,
    delete_and_wait,
    delete_resource,
    earlier_outputs,
    follow,
    last_backup,
    queued_resource_name,
    record_recoveries,
    result_uri,
    state_name,
    tpu_client,
    wait_active,
)
from tpuctl.services.runs.tpuvm.plan import TpuVmPlanning, TpuVmRun
from tpuctl.services.runs.tpuvm.record import read_plan, read_recoveries, write_plan
from tpuctl.services.runs.tpuvm.script import request_document
from tpuctl.services.runs.tpuvm.spend import Spend
from tpuctl.services.supervisor import raise_interrupt, signal_handlers


@dataclass
class Held:
    """A run inside ``submit``: what was created (deleted on the way out) and the recoveries so far."""
    client: Any
    storage: Any
    created: Created
    spend: Spend
    history: list[dict[str, Any]] = field(default_factory=list)
    #: when (epoch seconds) the run's first slice was queued and first became ACTIVE (the run record's times)
    submitted: float | None = None
    provisioned: float | None = None


def _silent(_line: str) -> None:
    """A note nobody asked to see (a pre-flight called without a report)."""


def check_quota(run: TpuVmRun, *, client=None, echo: Progress = _silent) -> int | None:
    """The slice's quota pre-flight (before anything is created): raise ``UserError`` when the zone's Cloud TPU quota
    (on-demand, or Spot: flex-start draws on it too, "ensure you have sufficient preemptible quota to use Flex-start",
    cloud.google.com/tpu/docs/request-using-flex-start, read 2026-11-27) is below what one slice needs. Returns the
    limit, or None when it could not be read (a note says why and the run goes on: the Cloud TPU API enforces the
    quota itself). A slice in a reservation is not checked."""
    if run.reservation is not None:
        echo("note: quota check skipped: a slice in a reservation uses reserved capacity (tpuctl does not read "
             "reservations; the Cloud TPU API checks it)")
        return None
    spot = run.preemptible_quota
    quota_id, units, unit = domain.tpu_vm_quota_need(run.slice, spot)
    kind = "Spot" if spot else "on-demand"
    generation = run.slice.generation
    if quota_id is None:
        echo(f"note: quota check skipped: tpuctl does not know the {kind} quota id of TPU {generation}")
        return None

    def lookup(c):
        infos = quotas.quota_infos(run.project, domain.TPU_VM_QUOTA_SERVICE, c)
        return next((i for i in infos if i.quota_id == quota_id),
                    f"the Cloud TPU API lists no quota {quota_id} (renamed? please report it)")

    got = quotas.preflight_limit(lookup, run.zone, dimension="zone", client=client, echo=echo)
    if got is None:
        return None
    limit = got[1]
    if 0 <= limit < units:   # -1: unlimited
        raise UserError(
            f"Cloud TPU {kind} quota {quota_id} in {run.zone} is {limit} {unit}, a {run.slice.name} slice needs "
            f"{units}; " + quotas.tpu_vm_quota_fix(run.project, run.zone, quota_id, generation, units, spot), 1)
    return limit


def recovery_zones(run: TpuVmRun, *, client=None, echo: Progress = _silent) -> list[str]:
    """The zones a preempted slice may be re-queued in: the run's zone, then each of its ``zones`` whose quota
    pre-flight shows room for the slice (an unreadable quota is a note and the zone stays: the API enforces it)."""
    order = [run.zone]
    for zone in run.zones:
        try:
            check_quota(run.model_copy(update={"zone": zone}), client=client,
                        echo=lambda line, zone=zone: echo(f"{line} ({zone})"))
        except UserError as exc:
            echo(f"note: {zone} left out of the recovery zones: {str(exc).split(';')[0]}")
            continue
        order.append(zone)
    return order


@dataclass
class TpuVmTarget(TpuVmPlanning):
    """``spec``: the planned slice (``targets.plan``, --target tpu-vm), its bounds included (--recover, --keep, --budget,
    --max-run-time, --max-wait). ``zones``: the zones a preempted slice may be re-queued in, the run's zone first
    (default: what ``preflight`` finds of the run's ``zones``). The spend is stopped at the run's budget
    (``tpuvm.spend``). The report's ``note`` takes the run's progress, its ``display`` host 0's protocol lines read
    back from Cloud Logging. ``client``, ``storage``, ``prices`` (of the estimate), ``sleep``, ``clock`` and ``wall``
    are there for tests."""

    spec: TpuVmRun
    report: Report = field(default_factory=Report)
    #: seconds between status reads (None: the run's --poll-seconds)
    poll_seconds: float | None = None
    #: the zones a preempted slice may be re-queued in, the run's zone first (None: ``preflight`` finds them)
    zone_order: list[str] | None = None
    client: Any = None
    storage: Any = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    #: follow a run another tpuctl process started (``tpuctl tpu attach``): its slice is found, not created
    attach: bool = False
    #: with ``attach``: what the folder held before the current slice was queued (from the run's plan record)
    earlier: dict[str, int] | None = None
    #: USD per hour of the slice, the spend is counted with: the estimate's (``preflight``), or the run's plan's
    hourly: float | None = None
    #: with ``attach``: when (epoch seconds) the current slice became ACTIVE, from the run's plan (None: not known)
    active_since: float | None = None
    #: with ``attach``: when the run's first slice was queued and first became ACTIVE, from the run's plan
    submitted: float | None = None
    provisioned: float | None = None
    prices: Any = None
    #: the run's record could not be written once (said in one note): not tried again
    unrecorded: bool = False
    display: Any = None

    def __post_init__(self) -> None:
        if self.poll_seconds is None:
            self.poll_seconds = self.spec.poll_seconds
        if self.display is None:
            self.display = self.report.new_display()

    @property
    def progress(self) -> Progress:
        return self.report.note

    @property
    def keep(self) -> bool:
        return self.spec.keep

    @property
    def recover(self) -> int:
        return self.spec.recover

    @property
    def budget(self) -> float | None:
        return self.spec.budget

    @property
    def run_timeout(self) -> float:
        """The slices' training time in all (--max-run-time, default 24h)."""
        return self.spec.run_time.total_seconds()

    @property
    def provision_timeout(self) -> float:
        return self.spec.wait_limit.total_seconds()

    def preflight(self) -> None:
        """The cost for at most the run time and the slice's price the spend is counted with (--budget without a
        price is refused; a maximum above it is said: the spend stops the run), the quota, the recovery zones (all
        said when the run was launched: nothing for ``attach``)."""
        if self.attach:
            return
        assert self.spec.zone is not None
        estimate = cost.estimate_tpu_vm(self.spec.slice, self.spec.zone, spot=self.spec.spot,
                                        run_timeout=self.run_timeout, prices=self.prices,
                                        run_time_flag="--max-run-time")
        if self.spec.flex_start:
            estimate = cost.flex_start_estimate(estimate)
        elif self.spec.reservation is not None:
            estimate = cost.with_reservation_note(estimate)
        for line in estimate.lines():
            self.progress(line)
        self.hourly = estimate.hourly
        if self.hourly is None:
            cost.check_budget(estimate, self.budget)     # --budget: one line, there is no price to count with
            self.progress("note: the run's spend cannot be tracked: no price for the slice (see the estimate)")
        elif self.budget is not None and (estimate.maximum or 0.0) > self.budget:
            self.progress(f"note: the run is stopped when its spend reaches --budget ${self.budget:.2f} (after "
                          f"{format_duration(self.budget / self.hourly * 3600)} of slice time at ${self.hourly:.4f}/h)")
        check_quota(self.spec, echo=self.progress)   # before anything is created; offline: a note
        if self.recover and self.zone_order is None:
            self.zone_order = recovery_zones(self.spec, echo=self.progress)

    def describe(self) -> dict[str, Any]:
        return request_document(self.spec)

    @contextmanager
    def submit(self) -> Iterator[Held]:
        """Delete what was created when the run ends, fails or is interrupted (``keep``: keep it, and say how to
        delete it). An interrupt ends as ``UserError(..., 130)`` naming what was deleted or kept."""
        self.progress(f"{'attaching to run ' + self.spec.name + '; ' if self.attach else ''}model dir: "
                      f"{self.spec.model_dir}")
        order = self.order()
        if self.recover:
            self.progress(f"recovery: up to {self.recover} preemption(s), re-queued in {', '.join(order)}")
        held = Held(self.client or tpu_client(), self.storage or clients.storage_client(self.spec.project), Created(),
                    Spend(self.hourly, self.budget))
        held.created.run = self.spec
        if not self.attach:
            refuse_finished(self.spec.model_dir, held.storage)
        if self.attach:
            held.submitted, held.provisioned = self.submitted, self.provisioned
            held.history = read_recoveries(held.storage, self.spec)
            held.spend.seconds = sum(h["seconds_trained"] for h in held.history)
        outcome: BaseException | None = None
        try:
            # SIGTERM raises KeyboardInterrupt while a run is followed (the CLI does the same; a direct caller too).
            with signal_handlers(raise_interrupt, (signal.SIGTERM,)):
                yield held
        except (KeyboardInterrupt, UserError) as exc:
            outcome = exc
        self._clean_up(held, outcome)

    def _clean_up(self, held: Held, outcome: BaseException | None) -> None:
        current = held.created.run or self.spec
        if not held.created.maybe:
            if isinstance(outcome, KeyboardInterrupt):
                raise UserError("interrupted before anything was created" if not held.history else
                                f"interrupted while recovering; nothing is left in {current.zone}; resume with the "
                                "same command", EXIT_INTERRUPTED) from None
            if outcome is not None:
                raise outcome
            return
        if self.keep:
            cleanup = (f"kept queued resource {current.name} (--keep): it is billed until you run "
                       f"`tpuctl tpu delete {current.name} --zone {current.zone}`")
        else:
            self.progress(f"deleting queued resource {queued_resource_name(current)}")
            failed = delete_resource(held.client, queued_resource_name(current))
            cleanup = (f"deleted queued resource {current.name}" if failed is None else
                       f"could NOT delete queued resource {current.name} ({failed}); delete it with "
                       f"`tpuctl tpu delete {current.name} --zone {current.zone}`")
            if failed is not None and outcome is None:
                raise UserError(f"training finished ({self.spec.model_dir}) but {cleanup}", 1)
        if isinstance(outcome, KeyboardInterrupt):
            raise UserError(f"interrupted; {cleanup}", EXIT_INTERRUPTED) from None
        if isinstance(outcome, UserError):
            raise UserError(f"{outcome}; {cleanup}", outcome.exit_code, details=outcome.details) from None
        self.progress(cleanup)
        if held.history:
            lost = sum(h["seconds_lost"] for h in held.history)
            self.progress(f"recovered from {len(held.history)} preemption(s); training lost {format_duration(lost)} "
                          "in all")
        spent = held.spend.summary()
        if spent is not None:
            self.progress(spent)

    def _queue(self, held: Held, zones: list[str], waits: dict[str, Any], *, first: bool) -> tuple[TpuVmRun, dict]:
        """Queue the slice in the first of ``zones`` that takes it and wait until it is ACTIVE (the run's plan is
        written first, for ``attach``): the run there, and what its folder held before."""
        client, storage, created, progress = held.client, held.storage, held.created, self.progress
        for i, zone in enumerate(zones):
            current = self.spec.model_copy(update={'zone': zone})
            created.run = current
            earlier = earlier_outputs(storage, current)
            if held.submitted is None:
                held.submitted = self.wall()
                self._write_record(held, self.spec.launch_record(started=held.submitted, spot=self.spec.spot,
                                                                project=self.spec.project))
            self._write_plan(held, current, zones, earlier)
            if GsPath.parse(result_uri(current)).path in earlier and first and i == 0:
                progress(f"{result_uri(current)} is an earlier run's; waiting for this run's to replace it")
            try:
                create_and_wait(client, current, progress=progress, created=created, **waits)
            except Refused as exc:
                # With --recover a refusal (no capacity or quota, no such accelerator: by the create call itself or
                # FAILED before ACTIVE; or still queued after --max-wait) moves on to the next zone, on the first
                # launch too (no recovery is counted: nothing was trained); without it, or in the last zone, the
                # refusal ends the run.
                if not self.recover or i == len(zones) - 1:
                    if first:
                        raise
                    raise UserError(f"{exc}; checkpoints are kept in {current.model_dir}; to resume, "
                                    f"{current.resume_hint}", 1) from None
                if created.maybe:   # a queued resource that FAILED exists until it is deleted
                    delete_and_wait(client, current, **waits)
                created.maybe = False
                progress(f"{exc}; trying {zones[i + 1]}")
                continue
            return current, earlier
        raise AssertionError("the last zone's refusal is raised above")

    def _write_plan(self, held: Held, current: TpuVmRun, zones: list[str], earlier: dict[str, int],
                    active_since: float | None = None) -> None:
        write_plan(held.storage, current, zones=zones, earlier=earlier, hourly_usd=self.hourly,
                   active_since=active_since, submitted=held.submitted, provisioned=held.provisioned)

    def _record(self, held: Held) -> None:
        """The run record ``runs show`` reads (``<model_dir>/tpuctl-run.json``): submitted (the first slice queued),
        provisioned (first ACTIVE), ended (the result seen), the spend; a record that cannot be written is a note."""
        record = self.spec.launch_record(started=held.submitted, provisioned=held.provisioned, finished=self.wall(),
                                        spot=self.spec.spot, spent_usd=held.spend.usd(), project=self.spec.project)
        self._write_record(held, record)

    def _write_record(self, held: Held, record) -> None:
        if self.unrecorded:
            return
        try:
            records.write_launch_record(self.spec.model_dir, record, storage_client=held.storage)
        except UserError as exc:
            self.unrecorded = True
            self.progress(f"note: the run's times were not recorded: {exc}")

    def _attached(self, held: Held, zones: list[str]) -> tuple[TpuVmRun, str]:
        """The run's queued resource, looked for in the run's zones: the run as it is there, and its state."""
        for zone in zones:
            current = self.spec.model_copy(update={'zone': zone})
            state = self._state(held, current)
            if state is None:
                continue
            held.created.run, held.created.maybe = current, True
            self.progress(f"found queued resource {current.name} in {zone}: {state}")
            return current, state
        raise UserError(f"run {self.spec.name} has no queued resource in {', '.join(zones)}: it ended (its outputs "
                        f"are in {self.spec.model_dir}) or was deleted; to resume it, {self.spec.resume_hint}", 1)

    @staticmethod
    def _state(held: Held, run: TpuVmRun) -> str | None:
        """The queued resource's state; None when there is none."""
        with clients.google_errors(f"reading queued resource {queued_resource_name(run)}"):
            try:
                return state_name(held.client.get_queued_resource(name=queued_resource_name(run)))
            except api_exceptions.NotFound:
                return None

    def order(self) -> list[str]:
        return [self.spec.zone or "", *[z for z in (self.zone_order or []) if z != self.spec.zone]]

    def follow(self, held: Held) -> Outcome:
        """Create, follow, and on a preemption delete and re-queue the slice in the first of the zones that takes
        it (the same backup folder: the trainer resumes), at most ``recover`` times. Training (the slices' ACTIVE
        time) is bounded by ``run_timeout`` in total, so the cost estimate still holds, and its spend by ``budget``."""
        feed = contextlib.nullcontext()
        if self.display is not None and self.spec.project:
            feed = logs.LogFeed(logs.tpu_vm_source(self.spec.project, self.spec.name, 0), logs.feed_display(self.display),
                                self.progress, interval=min(self.poll_seconds, 5.0),
                                since=(held.submitted or self.wall()) - 60)
        with feed:
            result = self._recovering(held, self.order())
        self._record(held)
        current = held.created.run or self.spec
        return Outcome(self.name, current.name, SUCCEEDED, self.spec.model_dir, result=result,
                       recoveries=held.history)

    def _recovering(self, held: Held, zones: list[str]) -> dict[str, Any]:
        client, storage, created, history, spend = held.client, held.storage, held.created, held.history, held.spend
        progress, clock = self.progress, self.clock
        waits = dict(poll_seconds=self.poll_seconds, timeout=self.provision_timeout, sleep=self.sleep, clock=clock)
        preempted_at: float | None = None
        found = self._attached(held, zones) if self.attach else None
        while True:
            before = 0.0   # ACTIVE seconds the slice had before this process saw it (attached to an ACTIVE one)
            if found is not None:   # attached: the slice another process queued, as it is now
                (current, state), earlier = found, self.earlier or {}
                found = None
                # still queued or provisioning: wait for it; ACTIVE, FAILED or gone: following says which
                if state not in {"ACTIVE", "FAILED", *GONE_STATES}:
                    wait_active(client, current, progress=progress, **waits)
                elif state == "ACTIVE" and self.active_since is not None:
                    before = max(self.wall() - self.active_since, 0.0)
            else:
                current, earlier = self._queue(held, zones, waits, first=preempted_at is None)
            zone = current.zone
            if held.provisioned is None:
                held.provisioned = self.wall() - before
            self._write_plan(held, current, zones, earlier, active_since=self.wall() - before)
            if preempted_at is not None:
                down = clock() - preempted_at
                history[-1].update(resumed_zone=zone, seconds_down=round(down, 1))
                record_recoveries(storage, current, history)
                progress(f"recovered in {zone}: training again {format_duration(down)} after the preemption")
            active = clock() - before
            backup = f"{current.model_dir}/checkpoints/backup"

            def within_budget(run: TpuVmRun = current, active: float = active, backup: str = backup) -> None:
                spend.check(clock() - active, backup=backup, resume_hint=run.resume_hint)

            try:
                # --run-timeout bounds the slices' ACTIVE time in all (a preempted slice's wait is not billed)
                result = follow(client, storage, current, progress=progress, poll_seconds=self.poll_seconds,
                                timeout=max(self.run_timeout - spend.seconds - before, 0.0), sleep=self.sleep,
                                clock=clock, earlier=earlier, check=within_budget)
                spend.seconds += clock() - active
                return result
            except Preempted as exc:
                now = clock()
                if len(history) >= self.recover:
                    if self.recover:
                        raise UserError(f"{exc} (after {len(history)} recoveries, the most --recover allows)",
                                        1) from None
                    raise
                newest = last_backup(storage, current)
                trained = now - active
                spend.seconds += trained
                lost = min(trained, self.wall() - newest) if newest is not None else trained
                history.append({"zone": zone, "what": exc.what, "seconds_trained": round(trained, 1),
                                "seconds_lost": round(max(lost, 0.0), 1),
                                "since": "last backup" if newest is not None else "slice became ACTIVE"})
                spent = spend.usd()
                if spent is not None:
                    history[-1]["spent_usd"] = round(spent, 2)
                record_recoveries(storage, current, history)
                progress(f"preemption {len(history)}/{self.recover}: {exc.what} in {zone} after "
                         f"{format_duration(trained)} of training; lost {format_duration(lost)} (since the "
                         f"{history[-1]['since']}); {spend.so_far() + '; ' if spent is not None else ''}"
                         f"re-queueing in {', '.join(zones)}")
                delete_and_wait(client, current, **waits)
                created.maybe = False
                preempted_at = clock()


def attach_tpu_vm(name: str, outputs: StackOutputs | None, *, model_dir: str | None = None, keep: bool | None = None,
                  storage=None, **settings: Any) -> TpuVmTarget:
    """``tpuctl tpu attach NAME``: the managed run NAME as its tpuctl process planned it (read from its model folder,
    default ``<artifacts>/runs/NAME``), to follow, recover and clean up from here. ``keep``: None keeps the
    run's own choice."""
    name = domain.validate_tpu_vm_name(name)
    outputs = require_outputs(outputs, "tpu attach")
    if model_dir is None:
        model_dir = f"{outputs.require('buckets.artifacts', 'pass --model-dir gs://BUCKET/PATH')}/runs/{name}"
    else:
        model_dir = TpuVmPlanning.gs_folder(model_dir, "--model-dir", "write to")
    storage = storage or clients.storage_client(outputs.require("project"))
    record = read_plan(storage, model_dir, name)
    run = record.spec if keep is None else record.spec.model_copy(update={"keep": keep})
    return TpuVmTarget(run, zone_order=record.zones, attach=True, earlier=record.earlier, storage=storage,
                       hourly=record.hourly_usd, active_since=record.active_since, submitted=record.submitted,
                       provisioned=record.provisioned, **settings)
