"""A managed run's plan, kept in its model folder (``<model_dir>/tpuctl/tpu-vm-run.json``) so that ``tpuctl tpu
attach NAME`` can follow, recover and clean up a run that another tpuctl process started (a laptop that slept, a
closed terminal). Written before each slice is queued; the recovery history is ``recoveries.json`` beside it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cloud import clients
from ground import domain
from ground.errors import UserError
from ground.storagepath import GsPath
from tpuctl.services.runs import records
from tpuctl.services.runs.tpuvm.plan import TpuVmRun

RUN_PLAN_FILE = "tpuctl/tpu-vm-run.json"
#: A plan is a few kilobytes (the trainer's arguments); anything bigger is not tpuctl's.
MAX_PLAN_BYTES = 1 << 20


class RunPlanRecord(BaseModel):
    """The run as planned (its ``TpuVmRun``, written and read through the same model) and where its following is."""
    model_config = ConfigDict(extra="forbid")

    spec: TpuVmRun
    #: the zones a preemption may re-queue the slice in (the run's first), after the quota pre-flight
    zones: list[str] = Field(max_length=100)
    #: the result and host reports that were in the model folder before the current slice was queued
    earlier: dict[str, int]
    #: the slice's hourly price the spend is counted with (None: not known), and when (epoch seconds) the current
    #: slice became ACTIVE (None while it is queued): a run attached to goes on counting
    hourly_usd: float | None = Field(None, ge=0, allow_inf_nan=False)
    active_since: float | None = Field(None, ge=0, allow_inf_nan=False)
    #: when (epoch seconds) the run's first slice was queued and first became ACTIVE: the run record's times, kept
    #: for a run attached to
    submitted: float | None = Field(None, ge=0, allow_inf_nan=False)
    provisioned: float | None = Field(None, ge=0, allow_inf_nan=False)


def write_plan(storage, run: TpuVmRun, *, zones: list[str], earlier: dict[str, int], hourly_usd: float | None = None,
               active_since: float | None = None, submitted: float | None = None,
               provisioned: float | None = None) -> None:
    record = RunPlanRecord(spec=run, zones=zones, earlier=earlier, hourly_usd=hourly_usd, active_since=active_since,
                           submitted=submitted, provisioned=provisioned)
    where = GsPath.parse(run.model_dir).join(RUN_PLAN_FILE)
    with clients.google_errors(f"writing {where}"):
        storage.bucket(where.bucket).blob(where.path).upload_from_string(record.model_dump_json(indent=2) + "\n",
                                                             content_type="application/json")


def read_plan(storage, model_dir: str, name: str) -> RunPlanRecord:
    """The run named ``name`` whose model folder is ``model_dir``, as its tpuctl process planned it; one line when
    there is none or it is not tpuctl's."""
    where = GsPath.parse(model_dir).join(RUN_PLAN_FILE)
    with clients.google_errors(f"reading {where}",
                               forbidden=f"permission denied reading {where}: you need storage.objects.get"):
        blob = storage.bucket(where.bucket).get_blob(where.path)
        if blob is None:
            raise UserError(f"no managed TPU VM run {name} in {model_dir} (no {RUN_PLAN_FILE}): it was started "
                            "by a tpuctl without `tpu attach`, or pass its --model-dir")
        data = clients.download_bounded(blob, MAX_PLAN_BYTES, where, "not tpuctl's run plan")
    try:
        record = RunPlanRecord.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        why = f"{'.'.join(map(str, first['loc'])) or 'JSON'}: {first['msg']}"
        raise UserError(f"{where} is not tpuctl's run plan ({why})") from None
    spec = record.spec
    if spec.name != name or spec.model_dir != model_dir:
        raise UserError(f"{where} is the plan of run {spec.name} ({spec.model_dir}), not of {name}")
    domain.validate_tpu_vm_name(spec.name)
    if spec.accelerator is None:
        raise UserError(f"{where} is not tpuctl's run plan (spec.accelerator: no slice)")
    domain.tpu_vm_accelerator(spec.accelerator)     # a slice tpuctl creates, or one line
    for zone in record.zones:
        domain.validate_tpu_vm_zone(zone)
    return record


def read_recoveries(storage, run: TpuVmRun) -> list[dict[str, Any]]:
    """The run's recovery history so far (``recoveries.json``), validated; [] when it has none."""
    return records.recoveries(records.Run(run.name, run.model_dir, {}), storage_client=storage)
