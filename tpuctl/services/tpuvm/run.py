"""One managed run: create, follow, and with ``--recover`` delete and re-queue a preempted slice (the
run's zone first, then ``--zones``) until the chief's result is there; the queued resource is deleted at
the end (also on Ctrl-C / SIGTERM) unless ``keep``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

from bootstrap import clients
from tpuctl.ground import domain
from tpuctl.ground.durations import format_duration
from tpuctl.ground.errors import EXIT_INTERRUPTED, UserError
from tpuctl.services.supervisor import raise_interrupt, signal_handlers
from tpuctl.services.tpuvm.api import (
    Created,
    Preempted,
    Refused,
    RunResult,
    create_and_wait,
    delete_and_wait,
    delete_resource,
    earlier_outputs,
    follow,
    last_backup,
    record_recoveries,
    tpu_client,
)
from tpuctl.services.tpuvm.plan import (
    DEFAULT_POLL_SECONDS,
    DEFAULT_PROVISION_TIMEOUT,
    DEFAULT_RUN_TIMEOUT,
    Progress,
    TpuVmRun,
)


def _recovering(client, storage, run: TpuVmRun, created: Created, *, progress: Progress, recover: int,
                zones: list[str], poll_seconds: float, provision_timeout: float, run_timeout: float,
                sleep: Callable[[float], None], clock: Callable[[], float], wall: Callable[[], float],
                history: list[dict[str, Any]]) -> dict[str, Any]:
    """Create, follow, and on a preemption delete and re-queue the slice in the first of ``zones`` that
    takes it (the same backup folder: the trainer resumes), at most ``recover`` times. Training (the
    slices' ACTIVE time) is bounded by ``run_timeout`` in total, so the cost estimate still holds."""
    from dataclasses import replace

    training_deadline: float | None = None
    preempted_at: float | None = None
    while True:
        for i, zone in enumerate(zones):
            current = replace(run, zone=zone)
            created.run = current
            earlier = earlier_outputs(storage, current)
            if domain.split_gs_uri(current.result_uri)[1] in earlier and preempted_at is None and i == 0:
                progress(f"{current.result_uri} is an earlier run's; waiting for this run's to replace it")
            try:
                create_and_wait(client, current, progress=progress, created=created, poll_seconds=poll_seconds,
                                timeout=provision_timeout, sleep=sleep, clock=clock)
            except Refused as exc:
                # With --recover a refusal (no capacity, say) moves on to the next zone, on the first launch too
                # (no recovery is counted: nothing was trained); without it the refusal ends the run.
                if not recover or i == len(zones) - 1:
                    raise
                delete_and_wait(client, current, poll_seconds=poll_seconds, timeout=provision_timeout, sleep=sleep,
                                 clock=clock)
                created.maybe = False
                progress(f"{exc}; trying {zones[i + 1]}")
                continue
            break
        if preempted_at is not None:
            down = clock() - preempted_at
            history[-1].update(resumed_zone=zone, seconds_down=round(down, 1))
            record_recoveries(storage, current, history)
            if training_deadline is not None:   # a preempted slice is not billed: the wait does not count
                training_deadline += down
            progress(f"recovered in {zone}: training again {format_duration(down)} after the preemption")
        active = clock()
        if training_deadline is None:
            training_deadline = active + run_timeout
        try:
            return follow(client, storage, current, progress=progress, poll_seconds=poll_seconds,
                          timeout=max(training_deadline - active, 0.0), sleep=sleep, clock=clock, earlier=earlier)
        except Preempted as exc:
            now = clock()
            if len(history) >= recover:
                if recover:
                    raise UserError(f"{exc} (after {len(history)} recoveries, the most --recover allows)", 1) from None
                raise
            backup = last_backup(storage, current)
            trained = now - active
            lost = min(trained, wall() - backup) if backup is not None else trained
            history.append({"zone": zone, "what": exc.what, "seconds_trained": round(trained, 1),
                            "seconds_lost": round(max(lost, 0.0), 1),
                            "since": "last backup" if backup is not None else "slice became ACTIVE"})
            record_recoveries(storage, current, history)
            progress(f"preemption {len(history)}/{recover}: {exc.what} in {zone} after {format_duration(trained)} of "
                     f"training; lost {format_duration(lost)} (since the {history[-1]['since']}); re-queueing in "
                     f"{', '.join(zones)}")
            delete_and_wait(client, current, poll_seconds=poll_seconds, timeout=provision_timeout, sleep=sleep,
                             clock=clock)
            created.maybe = False
            preempted_at = clock()


def run_tpu_vm(run: TpuVmRun, *, keep: bool = False, progress: Progress = print, client=None, storage=None,
               poll_seconds: float = DEFAULT_POLL_SECONDS, provision_timeout: float = DEFAULT_PROVISION_TIMEOUT,
               run_timeout: float = DEFAULT_RUN_TIMEOUT, sleep: Callable[[float], None] = time.sleep,
               recover: int = 0, zones: list[str] | None = None, clock: Callable[[], float] = time.monotonic,
               wall: Callable[[], float] = time.time) -> RunResult:
    """Create the slice, train, and delete what was created on success, failure and Ctrl-C/SIGTERM (``keep``:
    keep it on every path, and say how to delete it). An interrupt ends as ``UserError(..., 130)`` naming what
    was deleted or kept. ``recover``: re-queue a preempted slice at most this many times, in the first of
    ``zones`` (default: the run's zone only; the run's zone first) that takes it."""
    client = client or tpu_client()
    storage = storage or clients.storage_client(run.project)
    created = Created()
    created.run = run
    order = [run.zone, *[z for z in (zones or []) if z != run.zone]]
    history: list[dict[str, Any]] = []
    outcome: BaseException | None = None
    try:
        # SIGTERM raises KeyboardInterrupt while a run is followed (the CLI does the same; a direct caller too).
        with signal_handlers(raise_interrupt, (signal.SIGTERM,)):
            result = _recovering(client, storage, run, created, progress=progress, recover=recover, zones=order,
                                 poll_seconds=poll_seconds, provision_timeout=provision_timeout,
                                 run_timeout=run_timeout, sleep=sleep, clock=clock, wall=wall, history=history)
    except (KeyboardInterrupt, UserError) as exc:
        outcome = exc
    current = created.run
    name = current.queued_resource_name
    if not created.maybe:
        if isinstance(outcome, KeyboardInterrupt):
            raise UserError("interrupted before anything was created" if not history else
                            f"interrupted while recovering; nothing is left in {current.zone}; resume with the same "
                            "command", EXIT_INTERRUPTED) from None
        raise outcome  # type: ignore[misc]
    if keep:
        cleanup = (f"kept queued resource {current.name} (--keep): it is billed until you run "
                   f"`tpuctl tpu delete {current.name} --zone {current.zone}`")
    else:
        progress(f"deleting queued resource {name}")
        failed = delete_resource(client, name)
        cleanup = (f"deleted queued resource {current.name}" if failed is None else
                   f"could NOT delete queued resource {current.name} ({failed}); delete it with "
                   f"`tpuctl tpu delete {current.name} --zone {current.zone}`")
        if failed is not None and outcome is None:
            raise UserError(f"training finished ({run.model_dir}) but {cleanup}", 1)
    if isinstance(outcome, KeyboardInterrupt):
        raise UserError(f"interrupted; {cleanup}", EXIT_INTERRUPTED) from None
    if isinstance(outcome, UserError):
        raise UserError(f"{outcome}; {cleanup}", outcome.exit_code) from None
    progress(cleanup)
    if history:
        lost = sum(h["seconds_lost"] for h in history)
        progress(f"recovered from {len(history)} preemption(s); training lost {format_duration(lost)} in all")
    return RunResult(current.name, run.model_dir, result, kept=keep, recoveries=history)
