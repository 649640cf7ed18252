"""TPU VMs created through the Cloud TPU API (queued resources): accelerator types, hosts, base runtimes.

These are the TPU VMs tpuctl creates itself (``tpuctl tpu run``), not the Vertex AI TPU machine types of
``accelerators`` (``tpu-v5e-4`` …). A name here is the Cloud TPU API ``acceleratorType`` as Google spells it.

Sources (checked 2026-11-22 with the search tool):
- Base TPU software versions for containerised frameworks: v6e ``v2-alpha-tpuv6e``, v5p ``v2-alpha-tpuv5``,
  v5e ``v2-alpha-tpuv5-lite``, v4 and older ``tpu-ubuntu2204-base``; they include Ubuntu and Docker
  (cloud.google.com/tpu/docs/runtimes).
- v6e (cloud.google.com/tpu/docs/v6e, "Supported configurations"): ``v6e-1/4/8`` one VM; ``v6e-16/32/64/128/256``
  are topologies 4x4/4x8/8x8/8x16/16x16 on 2/4/8/16/32 hosts and 4/8/16/32/64 VMs (4 chips per VM).
- v5e (cloud.google.com/tpu/docs/v5e and /supported-tpu-configurations): ``v5litepod-N`` with N chips; 1, 4 and 8
  fit one host; 16/32/64/128/256 are topologies 4x4…16x16 on 2/4/8/16/32 hosts. "Each TPU VM in a v5e slice
  contains 1, 4 or 8 chips". [unverified: v5e-multihost-vms] The number of TPU VMs of a multi-host v5e slice; ``vms`` below
  assumes 4 chips per VM as v6e's table states for v6e (and GKE's ct5lp-hightpu-4t suggests).
- v5p (cloud.google.com/tpu/docs/supported-tpu-configurations): ``v5p-N`` where N counts TensorCores (2 per chip),
  4 chips per host (one VM per host): v5p-8 is 1 host, v5p-16 2, v5p-32 4 … Only power-of-two sizes up to
  v5p-1024 are listed here; Google accepts other sizes too (not listed) [unverified: other-slice-sizes].
- v4 (cloud.google.com/tpu/docs/v4) [unverified: v4-shapes]: ``v4-N`` where N counts TensorCores (2 per chip),
  4 chips per host; power-of-two sizes up to v4-1024 listed.
- TensorFlow-specific runtimes ``tpu-vm-tf-x.y.z[-pod][-pjrt]`` exist (cloud.google.com/tpu/docs/runtimes);
  tpuctl does not use them: the trainer runs in its own container (tensorflow-tpu + libtpu) on the base runtime.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpuctl.ground.domain.accelerators import QuotaRequest, quota_count, split_quota_spec, tpu_slice_key
from tpuctl.ground.domain.names import validate_zone
from tpuctl.ground.errors import DomainError

__all__ = [
    "TPU_VM_GENERATIONS", "TPU_VM_TYPES", "TpuVmAccelerator", "TpuVmGeneration", "parse_tpu_vm_accelerator",
    "tpu_vm_names", "validate_tpu_vm_name", "validate_tpu_vm_zone", "TPU_VM_RUN_LABEL", "TPU_VM_MANAGED_LABEL",
    "TPU_VM_QUOTAS", "TpuVmQuota", "TPU_ONLY_REGIONS", "tpu_vm_quota_need", "parse_tpu_vm_quota",
    "UNVERIFIED_TPU_VM_FACTS", "TPU_VM_NODE_GONE_STATES", "TPU_VM_NODE_GONE_HEALTH",
]

#: Facts of this module that no Google page confirmed (``[unverified: id]`` where used; listed in
#: docs/tpu-vm.md). Pre-flight quota checks look every quota id up in the project's QuotaInfos before using it.
UNVERIFIED_TPU_VM_FACTS: dict[str, str] = {
    "v5e-multihost-vms": "a multi-host v5e slice has one TPU VM per 4 chips",
    "other-slice-sizes": "v5p/v4 sizes other than powers of two are left out (Google accepts more)",
    "v4-shapes": "v4 accelerator types and hosts were not re-read from Google's v4 page",
    "tpu-vm-quota-ids": "the Cloud TPU per-zone quota ids (Google's strings from errors and listings)",
    "v4-quota-unit": "v4 per-zone quota counts TensorCores, like v5p",
}

#: Labels tpuctl puts on every TPU VM it creates (``list``/``delete`` only touch resources that carry the first).
TPU_VM_MANAGED_LABEL = ("managed-by", "tpuctl")
TPU_VM_RUN_LABEL = "tpuctl-run"

#: A TPU VM node whose hosts are gone while its queued resource may still say ACTIVE: ``Node.state`` PREEMPTED ("TPU
#: node has been preempted"), TERMINATED ("terminated due to maintenance or has reached the end of its life cycle (for
#: preemptible nodes)"), and ``Node.health`` UNHEALTHY_MAINTENANCE ("under maintenance/priority boost caused
#: rescheduling"). Source: the Cloud TPU v2 API schema, Node.StateValueValuesEnum and Node.HealthValueValuesEnum in the
#: Cloud SDK 528.0.0's googlecloudsdk/generated_clients/apis/tpu/v2/tpu_v2_messages.py, read 2026-11-24.
TPU_VM_NODE_GONE_STATES = frozenset({"PREEMPTED", "TERMINATED"})
TPU_VM_NODE_GONE_HEALTH = frozenset({"UNHEALTHY_MAINTENANCE"})


@dataclass(frozen=True)
class TpuVmGeneration:
    version: str              # v6e, v5p, v5e, v4
    prefix: str               # what the accelerator type starts with: v6e-, v5p-, v5litepod-, v4-
    runtime_version: str      # base TPU software version for a containerised framework
    counts: str               # what N in ``<prefix>N`` counts: "chips" or "TensorCores"
    chips_per_host: int
    chips_per_vm: int         # chips of one TPU VM in a multi-host slice


TPU_VM_GENERATIONS: dict[str, TpuVmGeneration] = {
    g.version: g
    for g in (
        TpuVmGeneration("v6e", "v6e-", "v2-alpha-tpuv6e", "chips", 8, 4),
        TpuVmGeneration("v5p", "v5p-", "v2-alpha-tpuv5", "TensorCores", 4, 4),
        TpuVmGeneration("v5e", "v5litepod-", "v2-alpha-tpuv5-lite", "chips", 8, 4),
        TpuVmGeneration("v4", "v4-", "tpu-ubuntu2204-base", "TensorCores", 4, 4),
    )
}


@dataclass(frozen=True)
class TpuVmAccelerator:
    """One Cloud TPU API accelerator type."""

    name: str                 # v5litepod-16
    generation: str           # v5e
    chips: int
    hosts: int                # physical hosts, as Google's tables count them (a sub-host slice counts 1)
    vms: int                  # TPU VMs ("workers"): the startup script runs on each of them
    topology: str | None      # 4x4 (None where not recorded here)

    @property
    def runtime_version(self) -> str:
        return TPU_VM_GENERATIONS[self.generation].runtime_version

    @property
    def multi_host(self) -> bool:
        return self.vms > 1

    @property
    def aliases(self) -> tuple[str, ...]:
        """The other names users type for this slice (``v5litepod-8``: ``v5e-8``, ``tpu-v5e-8``)."""
        number = self.name.rsplit("-", 1)[1]
        return tuple(n for n in (f"{self.generation}-{number}", f"tpu-{self.generation}-{number}") if n != self.name)


def _v6e_v5e(generation: str) -> list[TpuVmAccelerator]:
    prefix = TPU_VM_GENERATIONS[generation].prefix
    shapes = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
    out = []
    for chips, topology in shapes.items():
        hosts = max(1, chips // 8)
        vms = 1 if chips <= 8 else chips // TPU_VM_GENERATIONS[generation].chips_per_vm
        out.append(TpuVmAccelerator(f"{prefix}{chips}", generation, chips, hosts, vms, topology))
    return out


def _cores(generation: str) -> list[TpuVmAccelerator]:
    gen = TPU_VM_GENERATIONS[generation]
    out = []
    cores = 8
    while cores <= 1024:
        chips = cores // 2
        hosts = max(1, chips // gen.chips_per_host)
        out.append(TpuVmAccelerator(f"{gen.prefix}{cores}", generation, chips, hosts, hosts, None))
        cores *= 2
    return out


TPU_VM_TYPES: dict[str, TpuVmAccelerator] = {
    a.name: a for a in (*_v6e_v5e("v6e"), *_cores("v5p"), *_v6e_v5e("v5e"), *_cores("v4"))
}


def tpu_vm_names() -> list[str]:
    """Every accelerator type of the catalogue, by generation then size (the order of the error message)."""
    return list(TPU_VM_TYPES)


def parse_tpu_vm_accelerator(name: str) -> TpuVmAccelerator:
    """``v5litepod-16`` (or an alias: ``v5e-16``, ``tpu-v5e-16``) -> its entry; anything else is a DomainError
    listing the valid names."""
    key = tpu_slice_key(name)
    found = next((a for a in TPU_VM_TYPES.values() if tpu_slice_key(a.name) == key), None) if key else None
    if found is not None:
        return found
    hint = ""
    if key is not None and key[0] in ("v2", "v3"):
        hint = " (v2/v3 run through Vertex AI here: `tpuctl train --target vertex --accelerator tpu-v3-8`)"
    raise DomainError(f"unknown TPU VM accelerator type {name!r}{hint}; valid: {', '.join(tpu_vm_names())}")


#: A run name names the queued resource, its node and the ``tpuctl-run`` label value, so it follows the
#: stricter of those rules: label values (names.validate_labels) and the gcloud TPU name form.
_RUN_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


def validate_tpu_vm_name(name: str) -> str:
    if not _RUN_NAME.match(name or ""):
        raise DomainError(f"TPU VM run name {name!r} must be 1-63 lowercase letters, digits or '-', starting with a "
                          "letter and not ending with '-' (it names the queued resource, its node and a label)")
    return name


#: Regions with Cloud TPUs but no Compute Engine VMs (so not in ``names.REGIONS``): us-central2, whose zone
#: us-central2-b is the only one listed for TPU v4 (cloud.google.com/tpu/docs/regions-zones, read 2026-11-22).
TPU_ONLY_REGIONS = frozenset({"us-central2"})


def validate_tpu_vm_zone(zone: str) -> str:
    """A zone name (``us-central1-a``, or one of ``TPU_ONLY_REGIONS``' zones); which zones offer which generation is
    NOT checked here (it changes often: cloud.google.com/tpu/docs/regions-zones), the API's refusal names it."""
    validate_zone(zone, also_regions=TPU_ONLY_REGIONS)
    return zone


# --------------------------------------------------------------------------------------------
# Quota: the Cloud TPU API's per-zone quotas (Cloud Quotas service tpu.googleapis.com)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TpuVmQuota:
    """The per-zone Cloud Quotas quota ids of one TPU generation, and what one unit of them counts."""

    on_demand: str | None     # None: not known to tpuctl
    spot: str | None
    unit: str                 # "chips" or "TensorCores"
    units_per_chip: int

    def quota_id(self, spot: bool) -> str | None:
        return self.spot if spot else self.on_demand


#: Per-zone quota ids of the Cloud TPU API (each also has a ...PerRegion... twin that Google enforces too).
#: [unverified: tpu-vm-quota-ids] NOT FROM A GOOGLE REFERENCE PAGE: cloud.google.com/tpu/docs/quota
#: (read 2026-11-22) names quota *types* (on-demand, spot/preemptible, reserved; v5e serving quota ``tpu-v5s-litepod-serving``…) but no Cloud
#: Quotas ids. The ids below are Google's own strings as they appear in RESOURCE_EXHAUSTED errors ("Quota
#: 'TPUV5PPerProjectPerZoneForTPUAPI' exhausted. Limit 8 in zone us-central1-a") and in
#: ``gcloud beta quotas info`` listings quoted in several unrelated public repositories (2025-2026, found
#: with the search tool 2026-11-22). v5e, v6e and v5p each seen in 3+ sources; v4 Spot in one; v4
#: on-demand not found (None: tpuctl cannot check or request it). tpuctl checks every id against the
#: project's QuotaInfos before using it, so a renamed id fails with its name instead of asking for nothing.
#: Units: v5e/v6e count chips (one TensorCore per chip; "512 chips per zone" in one listing); v5p counts
#: TensorCores (a v5p-8, 4 chips, exhausted a limit of 8) - cloud.google.com/tpu/docs/quota says v4/v5p quota
#: "can be specified in terms of chips or TensorCores"; v4 TensorCores assumed like v5p [unverified: v4-quota-unit].
TPU_VM_QUOTAS: dict[str, TpuVmQuota] = {
    "v6e": TpuVmQuota("TPUV6EPerProjectPerZoneForTPUAPI", "TPUV6EPreemptiblePerProjectPerZoneForTPUAPI", "chips", 1),
    "v5p": TpuVmQuota("TPUV5PPerProjectPerZoneForTPUAPI", "TPUV5PPreemptiblePerProjectPerZoneForTPUAPI",
                      "TensorCores", 2),
    "v5e": TpuVmQuota("TPUV5sLitepodPerProjectPerZoneForTPUAPI",
                      "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI", "chips", 1),
    "v4": TpuVmQuota(None, "TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI", "TensorCores", 2),
}


def tpu_vm_quota_need(accel: TpuVmAccelerator, spot: bool = False) -> tuple[str | None, int, str]:
    """(quota id or None when unknown, units, unit name) one slice of ``accel`` draws on in its zone."""
    quota = TPU_VM_QUOTAS[accel.generation]
    return quota.quota_id(spot), accel.chips * quota.units_per_chip, quota.unit


def parse_tpu_vm_quota(spec: str) -> QuotaRequest:
    """``GENERATION:ZONE:COUNT[:spot]`` (e.g. ``v5e:us-west4-a:16:spot``) -> a per-zone Cloud TPU quota request;
    COUNT is in the generation's unit (chips for v5e/v6e, TensorCores for v5p/v4)."""
    generation, zone, count_text, spot = split_quota_spec(spec, "TPU VM quota", "GENERATION:ZONE:COUNT",
                                                          "v5e:us-west4-a:16:spot")
    generation = generation.lower().removeprefix("tpu-")
    if generation not in TPU_VM_QUOTAS:
        raise DomainError(f"TPU VM quota {spec!r}: generation {generation!r} must be one of {', '.join(TPU_VM_QUOTAS)}")
    validate_tpu_vm_zone(zone)
    quota = TPU_VM_QUOTAS[generation]
    quota_id = quota.quota_id(spot)
    if quota_id is None:
        raise DomainError(f"TPU VM quota {spec!r}: tpuctl does not know the {'Spot' if spot else 'on-demand'} quota "
                          f"id of {generation} (request it in the console's quota page)")
    count = quota_count(spec, count_text, "TPU VM quota")
    return QuotaRequest(f"tpu-vm-{generation}", zone.rsplit("-", 1)[0], count, "", tpu_version=generation,
                        spot=spot, zone=zone, quota_id=quota_id)
