"""A managed run's plan, kept in its model folder (``<model_dir>/tpuctl/tpu-vm-run.json``) so that ``tpuctl tpu
attach NAME`` can follow, recover and clean up a run that another tpuctl process started (a laptop that slept, a
closed terminal). Written before each slice is queued; the recovery history is ``recoveries.json`` beside it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from bootstrap import clients
from tpuctl.ground import domain
from tpuctl.ground.errors import UserError
from tpuctl.services import runs
from tpuctl.services.tpuvm.plan import TpuVmRun

RUN_PLAN_FILE = "tpuctl/tpu-vm-run.json"
#: A plan is a few kilobytes (the trainer's arguments); anything bigger is not tpuctl's.
MAX_PLAN_BYTES = 1 << 20


class RunPlanRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    project: str
    zone: str
    name: str
    accelerator: str
    spot: bool
    image_uri: str
    service_account: str | None
    trainer_args: list[str]
    env: dict[str, str]
    model_dir: str
    data_dir: str
    labels: dict[str, str]
    resume_hint: str
    #: the managed run's settings: at most this many recoveries, in these zones (the run's first), keep the slice
    recover: int
    zones: list[str]
    keep: bool
    run_timeout: float
    #: the result and host reports that were in the model folder before the current slice was queued
    earlier: dict[str, int]
    #: --budget (USD), the slice's hourly price the spend is counted with (None: not known), and when (epoch
    #: seconds) the current slice became ACTIVE (None while it is queued): a run attached to goes on counting
    budget: float | None = None
    hourly_usd: float | None = None
    active_since: float | None = None


def write_plan(storage, run: TpuVmRun, *, recover: int, zones: list[str], keep: bool, run_timeout: float,
               earlier: dict[str, int], budget: float | None = None, hourly_usd: float | None = None,
               active_since: float | None = None) -> None:
    # Every field of the run, by name: a field the record does not declare is refused here (extra="forbid"), so
    # the two shapes cannot drift apart without every `tpu run` test failing.
    fields = {f.name: getattr(run, f.name) for f in dataclasses.fields(run)}
    record = RunPlanRecord(**{**fields, "accelerator": run.accelerator.name, "recover": recover, "zones": zones,
                              "keep": keep, "run_timeout": float(run_timeout), "earlier": earlier,
                              "budget": budget, "hourly_usd": hourly_usd, "active_since": active_since})
    where = f"{run.model_dir}/{RUN_PLAN_FILE}"
    bucket, path = domain.split_gs_uri(where)
    with clients.google_errors(f"writing {where}"):
        storage.bucket(bucket).blob(path).upload_from_string(record.model_dump_json(indent=2) + "\n",
                                                             content_type="application/json")


def read_plan(storage, model_dir: str, name: str) -> tuple[TpuVmRun, RunPlanRecord]:
    """The run named ``name`` whose model folder is ``model_dir``, as its tpuctl process planned it; one line when
    there is none or it is not tpuctl's."""
    where = f"{model_dir}/{RUN_PLAN_FILE}"
    bucket, path = domain.split_gs_uri(where)
    with clients.google_errors(f"reading {where}",
                               forbidden=f"permission denied reading {where}: you need storage.objects.get"):
        blob = storage.bucket(bucket).get_blob(path)
        if blob is None:
            raise UserError(f"no managed TPU VM run {name} in {model_dir} (no {RUN_PLAN_FILE}): it was started "
                            "by a tpuctl without `tpu attach`, or pass its --model-dir")
        data = clients.download_bounded(blob, MAX_PLAN_BYTES, where, "not tpuctl's run plan")
    try:
        record = RunPlanRecord.model_validate(json.loads(data))
    except (ValueError, RecursionError, ValidationError) as exc:
        first = exc.errors()[0] if isinstance(exc, ValidationError) else None
        why = f"{'.'.join(map(str, first['loc']))}: {first['msg']}" if first else "not valid JSON"
        raise UserError(f"{where} is not tpuctl's run plan ({why})") from None
    if record.name != name or record.model_dir != model_dir:
        raise UserError(f"{where} is the plan of run {record.name} ({record.model_dir}), not of {name}")
    for zone in record.zones:
        domain.validate_tpu_vm_zone(zone)
    values: dict[str, Any] = record.model_dump(exclude={"recover", "zones", "keep", "run_timeout", "earlier", "budget",
                                                        "hourly_usd", "active_since"})
    run = TpuVmRun(**{**values, "accelerator": domain.parse_tpu_vm_accelerator(record.accelerator),
                      "name": domain.validate_tpu_vm_name(record.name)})
    return run, record


def read_recoveries(storage, run: TpuVmRun) -> list[dict[str, Any]]:
    """The run's recovery history so far (``recoveries.json``), validated; [] when it has none."""
    return runs.recoveries(runs.Run(run.name, run.model_dir, {}), storage_client=storage)
