"""What a cloud run may cost, before it is launched, and the --budget it must fit.

- ``estimate_pools`` / ``estimate_custom_job``: USD per hour of every worker pool of a Vertex AI job (machine +
  accelerators × replicas) from the Cloud Billing catalogue (``tpuctl.services.prices``), and the maximum for the
  run time (the job's timeout, else Vertex AI's default of 7 days); ``estimate_tpu_vm``: the same for a TPU VM
  slice (chips × per-chip price, catalogue or shipped snapshot).
- ``check_budget(estimate, budget)``: refuse a run whose maximum exceeds ``--budget``.

Nothing is sent; google-cloud-aiplatform is reached through the adapter (``cloud.google``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from cloud.google import aiplatform_v1, json_format
from ground.durations import format_exact
from ground.errors import DomainError, UserError
from tpuctl.services.prices import load_prices, tpu_vm_hourly, vertex_replica_hourly
from tpuctl.services.runs.request import MAX_RUN_TIME

#: What Vertex AI applies when no timeout is set: the bound a cost maximum is computed for.
DEFAULT_RUN_TIME = MAX_RUN_TIME


@dataclass(frozen=True)
class PoolCost:
    index: int
    machine_type: str
    accelerator_type: str | None
    accelerator_count: int
    replicas: int
    hourly: float | None          # USD per hour for all replicas of the pool; None when a price is missing
    note: str = ""                # which price is a bound or missing
    breakdown: str = ""           # "8 vCPU $0.0X + 30 GiB RAM $0.0Y + …" per replica

    def describe(self) -> str:
        if self.index < 0:        # a TPU VM slice
            return f"slice {self.machine_type}"
        accel = f" + {self.accelerator_count} × {self.accelerator_type}" if self.accelerator_type else ""
        return f"pool {self.index}: {self.replicas} × {self.machine_type}{accel}"


#: Why a flex-start run has no estimate: Google bills flex-start (Dynamic Workload Scheduler) by SKUs of its own
#: ("Flex-start VMs ... at a discounted price", cloud.google.com/compute/docs/instances/about-flex-start-vms; for
#: TPUs cloud.google.com/tpu/pricing), and the Billing Catalog matcher (ground/domain/prices.py) leaves out every
#: SKU named DWS or flex: no list price it reads is a flex-start price.
FLEX_START_UNKNOWN = ("flex-start is billed by its own Dynamic Workload Scheduler SKUs, which tpuctl does not read "
                      "from the Billing Catalog (it prices on-demand and Spot SKUs only)")
#: What a run on a reservation is billed: "reserved resources are charged at the same on-demand rates as running
#: VMs, including any applicable discounts" until the reservation is deleted, and "While a VM is consuming a
#: reservation, it does not incur separate charges" (Compute Engine's page; Vertex AI and Cloud TPU reservations are
#: reserved Compute Engine capacity: cloud.google.com/compute/docs/instances/reservations-overview, read 2026-11-27).
RESERVATION_NOTE = ("on a reservation: the reservation is billed at on-demand rates (with its discounts) until it is "
                    "deleted, used or not, and the run adds no separate charge for what it consumes; the list price "
                    "below is that on-demand rate")

VERTEX_HINT = "lower --max-run-time, --workers or the trial count, or raise --budget"
TPU_VM_HINT = "use a smaller slice, --spot or a shorter run time, or raise --budget"


@dataclass(frozen=True)
class CostEstimate:
    region: str
    spot: bool
    run_time: timedelta           # the bound the maximum is for (--max-run-time, else Vertex AI's 7 days)
    trials: int                   # 1 for a CustomJob; max trials for a tuning job
    pools: list[PoolCost]
    missing: list[str] = field(default_factory=list)
    bound_only: bool = False      # True when a Spot price was missing and on-demand was used as its upper bound
    source: str = ""              # where every price of this estimate came from, with its date
    notes: list[str] = field(default_factory=list)   # how the source was chosen (refresh failed, stale cache)
    target: str = "Vertex AI"
    hint: str = VERTEX_HINT       # what to change when --budget refuses
    run_time_name: str = ""       # "--run-timeout 24h" when the bound is not Vertex AI's timeout
    provisioning: str = ""        # "flex-start" (no price: FLEX_START_UNKNOWN); "" for Spot or on-demand

    @property
    def hourly(self) -> float | None:
        """USD per hour of one job (one trial): every pool, every replica."""
        if self.missing:
            return None
        return sum(p.hourly or 0.0 for p in self.pools)

    @property
    def maximum(self) -> float | None:
        """USD for every trial running the whole run time: what the job can cost at most (compute only)."""
        hourly = self.hourly
        if hourly is None:
            return None
        return hourly * self.run_time.total_seconds() / 3600 * self.trials

    def lines(self) -> list[str]:
        """Human-readable lines (what `--dry-run` and the pre-submit note print)."""
        kind = self.provisioning or ("Spot" if self.spot else "on-demand")
        source = self.source or "no price source"
        out = [f"cost estimate ({self.target}, {kind}, {self.region}; {source}; list prices, compute only, "
               "no storage or network):"]
        out += [f"  note: {n}" for n in self.notes]
        for p in self.pools:
            price = f"${p.hourly:.4f}/h" if p.hourly is not None else "unknown"
            detail = f" = {p.breakdown}" if p.breakdown and p.hourly is not None else ""
            note = f" ({p.note})" if p.note else ""
            out.append(f"  {p.describe()}: {price}{detail}{note}")
        if self.missing:
            out.append("  total: unknown: " + "; ".join(self.missing))
            return out
        bound = " at most" if self.bound_only else ""
        per = f" per trial × {self.trials} trials" if self.trials > 1 else ""
        span = self.run_time_name or format_exact(self.run_time)
        out.append(f"  total:{bound} ${self.hourly:.4f}/h{per}; maximum for {span}: ${self.maximum:.2f}")
        return out


def _field(spec: Mapping[str, Any], *names: str, default=None):
    for name in names:
        if name in spec and spec[name] not in (None, ""):
            return spec[name]
    return default


def _pool_dicts(pools: Iterable[Any]) -> list[dict]:
    """Worker pool specs as plain dicts (proto-plus messages, or dicts in proto or REST spelling)."""
    out = []
    for pool in pools:
        if not isinstance(pool, Mapping):
            pool = json_format.MessageToDict(type(pool).pb(pool), preserving_proto_field_name=True)
        machine = _field(pool, "machine_spec", "machineSpec", default={}) or {}
        out.append({
            "machine_type": _field(machine, "machine_type", "machineType", default=""),
            "accelerator_type": _field(machine, "accelerator_type", "acceleratorType"),
            "accelerator_count": int(_field(machine, "accelerator_count", "acceleratorCount", default=0) or 0),
            "tpu_topology": _field(machine, "tpu_topology", "tpuTopology") or None,
            "replicas": int(_field(pool, "replica_count", "replicaCount", default=1) or 0),
        })
    return out


def _breakdown(hourly) -> str:
    return " + ".join(f"{c.label} ${c.usd:.4f}" for c in hourly.components)


def _replica(prices, region: str, machine: str, accel: str | None, count: int, spot: bool,
             topology: str | None = None):
    """(Hourly, note) of one replica. Spot with no Spot SKU: the on-demand price as an upper bound (Spot capacity
    is sold below on-demand), said in the note; raises DomainError when neither is found."""
    if not spot:
        return vertex_replica_hourly(prices, machine, accel, count, region, False, topology), ""
    try:
        return vertex_replica_hourly(prices, machine, accel, count, region, True, topology), ""
    except DomainError as spot_missing:
        try:
            upper = vertex_replica_hourly(prices, machine, accel, count, region, False, topology)
        except DomainError:
            raise spot_missing from None
        return upper, f"{spot_missing}: on-demand used as the upper bound"


def estimate_pools(pools: Iterable[Any], region: str, *, spot: bool = False,
                   max_run_time: timedelta | None = None, trials: int = 1, prices=None) -> CostEstimate:
    """Price every worker pool (machine + accelerators, × replicas) from the Cloud Billing catalogue; never
    guesses. ``prices``: a ``tpuctl.services.prices.Prices`` (default: ``load_prices()``)."""
    run_time = max_run_time if max_run_time is not None else DEFAULT_RUN_TIME
    if trials < 1:
        raise UserError(f"trials must be at least 1 (got {trials})")
    prices = prices if prices is not None else load_prices()
    costs: list[PoolCost] = []
    missing: list[str] = []
    bound_only = False
    for index, pool in enumerate(_pool_dicts(pools)):
        if pool["replicas"] < 1:
            continue
        accel = pool["accelerator_type"]
        if accel == "ACCELERATOR_TYPE_UNSPECIFIED":
            accel = None
        count = pool["accelerator_count"] if accel else 0
        try:
            hourly, note = _replica(prices, region, pool["machine_type"], accel, count, spot, pool["tpu_topology"])
        except DomainError as exc:
            if str(exc) not in missing:
                missing.append(str(exc))
            costs.append(PoolCost(index, pool["machine_type"], accel, count, pool["replicas"], None))
            continue
        bound_only = bound_only or bool(note)
        costs.append(PoolCost(index, pool["machine_type"], accel, count, pool["replicas"],
                              hourly.usd * pool["replicas"], note, _breakdown(hourly) + " per replica"))
    source = prices.catalogue.label if prices.catalogue is not None else ""
    return CostEstimate(region, spot, run_time, trials, costs, missing, bound_only, source, list(prices.notes))


def flex_start_estimate(estimate: CostEstimate) -> CostEstimate:
    """``estimate`` of the same pools as a flex-start run: every price unknown, naming why (FLEX_START_UNKNOWN)."""
    pools = [PoolCost(p.index, p.machine_type, p.accelerator_type, p.accelerator_count, p.replicas, None)
             for p in estimate.pools]
    return CostEstimate(estimate.region, False, estimate.run_time, estimate.trials, pools, [FLEX_START_UNKNOWN],
                        source=estimate.source, notes=estimate.notes, target=estimate.target, hint=estimate.hint,
                        run_time_name=estimate.run_time_name, provisioning="flex-start")


def with_reservation_note(estimate: CostEstimate) -> CostEstimate:
    return with_note(estimate, RESERVATION_NOTE)


def with_note(estimate: CostEstimate, note: str) -> CostEstimate:
    return CostEstimate(**{**estimate.__dict__, "notes": [*estimate.notes, note]})


#: What a job on a persistent resource is billed: nothing of its own. "You are billed for the entire duration that a
#: persistent resource is in a running state, regardless of whether there is a job running on the persistent
#: resource ... All jobs running on a persistent resource are not separately charged."
#: (cloud.google.com/vertex-ai/docs/training/persistent-resource-overview, "Billing details", read 2026-11-27).
CLUSTER_NOTE = ("on cluster {name}: the job is not charged separately; the cluster is billed while it runs, jobs "
                "or not (`tpuctl cluster delete {name}` stops it); the price below is what these machines cost")


def estimate_custom_job(custom_job, region: str, *, trials: int = 1, prices=None) -> CostEstimate:
    """Estimate from the request itself: its pools, Spot or not, and its timeout (else Vertex AI's 7 days); a
    flex-start job's is unknown (FLEX_START_UNKNOWN), a reserved one's says how a reservation is billed."""
    spec = custom_job.job_spec if hasattr(custom_job, "job_spec") else custom_job
    scheduling = spec.scheduling
    spot = scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
    timeout = scheduling.timeout
    run_time = timeout if isinstance(timeout, timedelta) and timeout.total_seconds() > 0 else None
    estimate = estimate_pools(spec.worker_pool_specs, region, spot=spot, max_run_time=run_time, trials=trials,
                              prices=prices)
    if scheduling.strategy == aiplatform_v1.Scheduling.Strategy.FLEX_START:
        return flex_start_estimate(estimate)
    if spec.persistent_resource_id:
        return with_note(estimate, CLUSTER_NOTE.format(name=spec.persistent_resource_id))
    if any("reservation_affinity" in pool.machine_spec for pool in spec.worker_pool_specs):
        return with_reservation_note(estimate)
    return estimate


def estimate_tpu_vm(accelerator, zone: str, *, spot: bool, run_timeout: float, prices=None,
                    run_time_flag: str = "--run-timeout") -> CostEstimate:
    """A TPU VM slice: chips × per-chip price in the zone's region, for at most ``run_timeout`` seconds (the
    slice is deleted when the run ends or times out, unless --keep); ``run_time_flag`` names the flag that set it."""
    region = zone.rsplit("-", 1)[0]
    prices = prices if prices is not None else load_prices()
    run_time = timedelta(seconds=run_timeout)
    span = f"{run_time_flag} {format_exact(run_time)}"
    try:
        hourly = tpu_vm_hourly(prices, accelerator, region, spot)
    except DomainError as exc:
        pool = PoolCost(-1, accelerator.name, None, 0, 1, None)
        return CostEstimate(region, spot, run_time, 1, [pool], [str(exc)], notes=list(prices.notes),
                            target="TPU VM", hint=TPU_VM_HINT, run_time_name=span)
    comp = hourly.components[0]
    pool = PoolCost(-1, accelerator.name, None, 0, 1, hourly.usd, hourly.note,
                    f"{comp.quantity:g} × ${comp.unit_usd:.6g}/{comp.per}")
    return CostEstimate(region, spot, run_time, 1, [pool], source=hourly.source, notes=list(prices.notes),
                        target="TPU VM", hint=TPU_VM_HINT, run_time_name=span)


def check_budget(estimate: CostEstimate, budget: float | None) -> None:
    """Raise UserError (one line) when ``--budget`` is below the job's maximum, or the maximum is unknown."""
    if budget is None:
        return
    maximum = estimate.maximum
    if maximum is None:
        raise UserError(f"cannot check --budget ${budget:.2f}: " + "; ".join(estimate.missing))
    if not maximum > 0:     # a spend that never grows never reaches a budget (a SKU priced $0, issue 43)
        raise UserError(f"cannot check --budget ${budget:.2f}: the prices say this run costs ${maximum:.2f} "
                        f"({estimate.source or 'no price source'}); run `tpuctl prices refresh`, or leave --budget out")
    if maximum > budget:
        per = f" × {estimate.trials} trials" if estimate.trials > 1 else ""
        span = estimate.run_time_name or format_exact(estimate.run_time)
        raise UserError(
            f"the job may cost up to ${maximum:.2f} (${estimate.hourly:.4f}/h{per} for {span}), above --budget "
            f"${budget:.2f}; {estimate.hint}")
