"""A TPU VM run, planned: its options (``--target tpu-vm``'s own flags), its spec (``TpuVmRun``: the slice, its zone
and the zones a preempted slice may be re-queued in, Autocheckpoint, recovery, keep) and its planning hooks."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from cloud.google import tpu_v2
from ground import domain
from ground.errors import UserError
from ground.outputs import StackOutputs
from tpuctl.services.runs import logs
from tpuctl.services.runs.cloud import CloudRun, CloudTarget
from tpuctl.services.runs.request import (
    CloudOptions,
    PollOptions,
    Recoveries,
    VerboseOptions,
    flag,
)
from tpuctl.services.runs.spec import Planning, aip_folders

#: How long the slices may train in all when --max-run-time does not say (and the cost bound).
DEFAULT_TPU_VM_RUN_TIME = timedelta(hours=24)


def _zones(value: Any) -> Any:
    """``--zones a,b``: a comma-separated list (an empty entry is refused: a typo like ``a,,b``)."""
    if value is None or isinstance(value, (list, tuple)):
        return tuple(value or ())
    zones = [z.strip() for z in str(value).split(",")]
    if "" in zones:
        raise ValueError("has an empty entry; give zones like us-central1-b,us-central1-f")
    return tuple(zones)


class TpuVmOptions(CloudOptions, PollOptions, VerboseOptions):
    """``--target tpu-vm``: a slice of TPU VMs (a Cloud TPU queued resource)."""
    target: Literal["tpu-vm"] = "tpu-vm"
    zone: str | None = flag(None, "TPU VM: zone of the slice (default: the stack's tpu_zone, else zone).",
                            commands=("train",))
    zones: Annotated[tuple[str, ...], BeforeValidator(_zones)] = flag(
        (), "TPU VM with --recover: other zones of the region to re-queue in, in this order after --zone "
            "(comma-separated); a zone whose quota pre-flight shows no room is skipped.", commands=("train",))
    autocheckpoint: bool = flag(
        True, "TPU VM: ask Cloud TPU for Autocheckpoint where it offers it (v2-v4, v5e): before maintenance the "
              "trainer gets SIGTERM and up to 5 minutes to back up its step (docs/capacity.md).", commands=("train",))
    recover: Recoveries = flag(0, "TPU VM with --spot or flex-start: re-queue a preempted slice, or one still "
                                  "waiting after --max-wait, (resuming from its backup) at most this many times.",
                               commands=("train",))
    keep: bool = flag(False, "TPU VM: keep the slice when the run ends (it keeps costing money).", commands=("train",))


class TpuVmRun(CloudRun):
    """A slice of TPU VMs, planned (written into the run's plan record, read back by ``tpuctl tpu attach``)."""
    target: Literal["tpu-vm"] = "tpu-vm"
    zone: str
    #: the zones a preempted slice may be re-queued in after ``zone`` (quota pre-flight still to come)
    zones: tuple[str, ...] = Field((), max_length=100)
    #: Autocheckpoint requested (--autocheckpoint, on a generation that offers it: v2alpha1's node field)
    autocheckpoint: bool = False
    recover: Recoveries = 0
    keep: bool = False

    DEFAULT_RUN_TIME: ClassVar[timedelta] = DEFAULT_TPU_VM_RUN_TIME

    @property
    def slice(self) -> domain.TpuSlice:
        assert self.accelerator is not None and self.accelerator.tpu is not None
        return self.accelerator.tpu

    @property
    def location(self) -> str:
        return self.zone

    @property
    def parent(self) -> str:
        return tpu_v2.TpuClient.common_location_path(self.project, self.zone)


def stack_zone(outputs: StackOutputs | None) -> str | None:
    """The zone TPU VM slices default to: the stack's ``tpu_zone`` output, else its ``zone``."""
    return (outputs.tpu_zone or outputs.zone) if outputs else None


class TpuVmPlanning(CloudTarget):
    """The planning hooks of a TPU VM run (``target.RunTarget``; the cloud ones from ``cloud.CloudTarget``): a slice
    tpuctl creates as TPU VMs (required), its zone, recovery and capacity rules, the trainer's tpu image."""
    name: ClassVar[str] = "tpu-vm"
    options: ClassVar[type] = TpuVmOptions
    Spec: ClassVar[type[CloudRun]] = TpuVmRun
    TPU_WORKERS: ClassVar[str] = "the slice's hosts are the workers: pick a larger slice, e.g. tpu-v5e-16"
    SUPPORT: ClassVar[str] = "tpu-vm"

    @classmethod
    def does(cls, verb: str) -> str:
        return f"TPU VMs {verb}"

    @classmethod
    def accelerator(cls, p: Planning) -> domain.Accelerator:
        typed = p.request.accelerator
        if not typed:
            raise UserError("--target tpu-vm needs --accelerator, e.g. tpu-v5e-8 (one host) or tpu-v5e-16 (a "
                            "multi-host slice)")
        return domain.tpu_vm_accelerator(domain.parse_accelerator(typed), typed)

    @classmethod
    def site(cls, p: Planning, accel: domain.Accelerator | None, name: str, provisioning: str) -> dict[str, Any]:
        """Recovery's and --keep's rules, the slice's zone (flex-start where Google offers it), the reservation's
        zone and the recovery zones."""
        assert accel is not None and accel.tpu is not None
        options = p.options
        if options.recover and provisioning not in ("spot", "flex-start"):
            raise UserError("--recover needs --spot or --provisioning flex-start (it re-queues a preempted Spot "
                            "slice, or a flex-start slice still waiting after --max-wait)")
        if options.zones and not options.recover:
            raise UserError("--zones needs --recover N (the zones a preempted slice may be re-queued in)")
        if options.budget is not None and options.keep:
            raise UserError("--budget cannot bound a slice kept with --keep (it is billed until `tpuctl tpu delete`)")
        outputs = cls.outputs(p)
        zone = options.zone or stack_zone(outputs) or outputs.require("tpu_zone", "pass --zone (e.g. us-central1-a)")
        domain.validate_tpu_vm_zone(zone)
        offered = domain.TPU_FLEX_ZONES.get(accel.tpu.generation, ())
        if provisioning == "flex-start" and zone not in offered:
            p.say(f"note: Google lists TPU flex-start for {accel.tpu.generation} only in "
                  f"{', '.join(offered) or 'no zone'} (cloud.google.com/tpu/docs/request-using-flex-start, read "
                  f"2026-11-27); the Cloud TPU API refuses it where it is not offered")
        if options.reservation is not None:
            reservation = domain.Reservation(options.reservation)
            if reservation.zone is not None and reservation.zone != zone:
                raise UserError(f"--reservation {options.reservation} is in {reservation.zone}, not in the slice's "
                                f"zone {zone}: pass --zone {reservation.zone}")
            if not reservation.any and options.zones:
                raise UserError(f"--reservation {options.reservation} is in one zone; --zones would re-queue the "
                                "slice elsewhere: drop --zones (or use --reservation any)")
        return {"zone": zone, "zones": _recovery_zones(options.zones, zone), "recover": options.recover,
                "keep": options.keep,
                "autocheckpoint": options.autocheckpoint and accel.tpu.generation in domain.AUTOCHECKPOINT_GENERATIONS}

    @classmethod
    def log_source(cls, record: dict[str, Any], name: str, project: str | None, host: int | None) -> logs.Source:
        """Where a slice's lines are (Cloud Logging, its hosts' containers; ``host``: one VM's)."""
        if not project:
            raise logs.no_source(record, name, "project")
        return logs.tpu_vm_source(project, record.get("name") or name, host)

    @classmethod
    def environment(cls, p: Planning, accel: domain.Accelerator | None, name: str, program: tuple[str, ...],
                    model_dir: str) -> dict[str, str]:
        """The TPU runtime's variables (one host: the TPU is attached to this VM; several: the slice's node name),
        and Vertex AI's output folders for the user's program, as a Vertex AI job gets them."""
        assert accel is not None and accel.tpu is not None
        env = aip_folders(model_dir) if program else {}
        env["TPU_NAME"] = name if accel.tpu.multi_host else "local"
        env.update(domain.tpu_runtime_env(accel.tpu.generation, p.backend))
        return env


def _recovery_zones(zones: tuple[str, ...], zone: str) -> tuple[str, ...]:
    """--zones as given, checked as names of zones in ``zone``'s region (its quota is checked at pre-flight)."""
    region = zone.rsplit("-", 1)[0]
    out: list[str] = []
    for other in zones:
        if other == zone or other in out:
            continue
        domain.validate_tpu_vm_zone(other)
        if other.rsplit("-", 1)[0] != region:
            raise UserError(f"--zones {other} is not in {region} (the region of --zone {zone}); a slice's data and "
                            "backup stay in one region")
        out.append(other)
    return tuple(out)
