"""What a TPU VM run has spent so far, and ``--budget`` as a bound on it: the ACTIVE time of each of its slices (across
recoveries) × the slice's hourly list price, the price of the run's cost estimate (``runs.cost.estimate_tpu_vm``: the
Cloud Billing catalogue, else the shipped snapshot; compute only).

A slice counts from the poll at which tpuctl sees it ACTIVE until its result, preemption or failure is seen; the
queued and provisioning waits and the deletion of a preempted slice do not count, and the budget is checked at every
poll (so a run stops at most one poll interval after its spend reached the budget). NOT verified: that Google bills a
slice for exactly that time (billing may start when the TPU VMs are created, before ACTIVE, and run until they are
deleted): the spend is the estimate's measure, not an invoice.
"""

from __future__ import annotations

from dataclasses import dataclass

from ground.durations import format_duration
from ground.errors import UserError


class BudgetSpent(UserError):
    """The run's spend reached ``--budget``: the run is stopped (its slice deleted by ``submit``'s cleanup)."""


@dataclass
class Spend:
    """``hourly``: USD per hour of the slice (None: no price known, the spend is not tracked). ``seconds``: the ACTIVE
    seconds of the run's slices that ended (a preempted one), so far."""

    hourly: float | None
    budget: float | None = None
    seconds: float = 0.0

    def usd(self, current: float = 0.0) -> float | None:
        """USD spent, with ``current`` ACTIVE seconds of the slice that is training now; None without a price."""
        if self.hourly is None:
            return None
        return self.hourly * (self.seconds + max(current, 0.0)) / 3600

    def so_far(self, current: float = 0.0) -> str:
        """``$3.20 spent so far`` (``of --budget $10.00``), for a progress line; "" when it is not tracked."""
        usd = self.usd(current)
        if usd is None:
            return ""
        return f"${usd:.2f} spent so far" + (f" of --budget ${self.budget:.2f}" if self.budget is not None else "")

    def check(self, current: float, *, backup: str, resume_hint: str) -> None:
        """Raise ``BudgetSpent`` (one line: spend, budget, where the backup is, how to resume) once the spend with
        ``current`` ACTIVE seconds of the slice training now has reached the budget."""
        usd = self.usd(current)
        if self.budget is None or usd is None or usd < self.budget:
            return
        total = self.seconds + max(current, 0.0)
        raise BudgetSpent(f"spend ${usd:.2f} reached --budget ${self.budget:.2f} ({format_duration(total)} of slice "
                          f"time at ${self.hourly:.4f}/h): the run was stopped; its backup is in {backup}; to resume, "
                          f"{resume_hint}", 1)

    def summary(self) -> str | None:
        """The line said when the run ends: slice time and spend; None when it is not tracked."""
        usd = self.usd()
        if usd is None:
            return None
        budget = f" (--budget ${self.budget:.2f})" if self.budget is not None else ""
        return (f"spent ${usd:.2f}{budget}: {format_duration(self.seconds)} of slice time at ${self.hourly:.4f}/h "
                "(list price, compute only)")
