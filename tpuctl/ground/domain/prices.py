"""Prices: which Cloud Billing Catalog SKU prices what tpuctl launches, and the dated snapshot shipped for TPU VMs.

Google publishes every list price through the Cloud Billing Catalog API (``services.list``,
``services.skus.list``; google/cloud/billing/v1/cloud_catalog.proto: a ``Sku`` has ``description``,
``category`` {service_display_name, resource_family, resource_group, usage_type}, ``service_regions`` and
``pricing_info[].pricing_expression`` {usage_unit, tiered_rates[] {start_usage_amount, unit_price: Money}}).
tpuctl keeps no hand-typed price: ``tpuctl prices refresh`` caches the SKUs below, and estimates match them with
``match_sku``. The only prices in the repository are the converted subset of a public catalogue generated from the
same API (``SNAPSHOT_FILE``), for TPU VM slices.

Sources (read 2026-11-24 with the search tool):
- Services are looked up by display name (``CATALOG_SERVICES``); the ids in public examples are only named here:
  Compute Engine ``6F81-5844-456A`` and Cloud TPU ``E000-3F24-B8AA`` (skypilot-org/skypilot
  sky/catalog/data_fetchers/fetch_gcp.py, GCE_SERVICE_ID / TPU_SERVICE_ID), Vertex AI ``C7E2-9256-1C43`` (issue 30).
- Usage types ``OnDemand`` / ``Preemptible``; a preemptible Cloud TPU SKU may carry usage type OnDemand with
  "Preemptible" in its description (fetch_gcp.py ``get_tpu_price``), so Spot is also read from the description.
- TPU SKU descriptions: Compute Engine holds v5e/v5p/v6e as ``TpuV5e`` / ``TpuV5p`` / ``TpuV6e`` per chip-hour,
  the Cloud TPU service holds ``Tpu-v2``/``Tpu-v3``/``Tpu-v4`` priced per 8 TensorCores (4 chips), v4 only as
  "Pod" SKUs (fetch_gcp.py ``_get_tpu_description_str``, ``core_per_sku``).
- Vertex AI custom training is billed per component; invoice lines read "Vertex AI Training on N1 Predefined
  Instance CPU", "… N1 Predefined Instance RAM", "… NVIDIA Tesla T4 GPU" (a public repository's README quoting its
  Sep 2026 invoice, found with the search tool). The exact SKU descriptions of Vertex AI's catalogue entries could
  not be read here: matching therefore asks for word groups, not a fixed sentence (``SkuWant``), and a SKU that
  matches twice or not at all is reported, never averaged.
- NOT VERIFIED: how Vertex AI prices its TPU machine types (per chip for v5e, per 8-core device for v2/v3 is
  assumed from the Cloud TPU convention above) and that a TPU machine's host is included in the TPU price (as it is
  for Cloud TPU VMs). Vertex GPU hosts are priced for the N1 family only (``VERTEX_HOST_SHAPES``).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources as _resources

from tpuctl.ground.errors import DomainError

__all__ = [
    "CATALOG_SERVICES", "USAGE_ON_DEMAND", "USAGE_PREEMPTIBLE", "UNIT_HOUR", "UNIT_GIB_HOUR", "REFRESH_COMMAND",
    "SkuRecord", "SkuWant", "match_sku", "sku_words", "vertex_gpu_want", "VERTEX_HOST_SHAPES", "vertex_host_wants",
    "TPU_PHRASES", "tpu_unit_chips", "vertex_tpu_want", "tpu_vm_want", "all_wants", "wanted", "SNAPSHOT_FILE",
    "Snapshot", "load_snapshot",
]
#: Service key -> display name in ``services.list`` (the id is looked up, never copied).
CATALOG_SERVICES: dict[str, str] = {"vertex": "Vertex AI", "compute": "Compute Engine", "tpu": "Cloud TPU"}
USAGE_ON_DEMAND = "OnDemand"
USAGE_PREEMPTIBLE = "Preemptible"
#: Per-hour and per-GiB-hour usage units (pricing_expression.usage_unit, as in the Billing Catalog's SKUs).
UNIT_HOUR = "h"
UNIT_GIB_HOUR = "GiBy.h"
#: The command that fills the cache; every "unknown" price names it.
REFRESH_COMMAND = "tpuctl prices refresh"

#: Words of a description that make a SKU something else than the plain list price of a running resource.
_NOT_LIST_PRICE = ("commitment", "commit", "reserved", "reservation", "custom", "sole", "premium", "extended",
                   "license", "licensing", "dws", "calendar", "flex")
_SPOT_WORDS = ("preemptible", "spot")


def sku_words(description: str) -> tuple[str, ...]:
    """``"TpuV5e running in Americas"`` -> ``("tpu", "v5e", "running", "in", "americas")``: lower case, split at
    anything not a letter or digit and at lower→Upper case changes, so "TpuV5e", "TPU v5e" and "Tpu-v5e" agree."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", description)
    return tuple(w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w)


def _has(seq: tuple[str, ...], phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    return any(seq[i:i + n] == phrase for i in range(len(seq) - n + 1))


@dataclass(frozen=True)
class SkuRecord:
    """What the cache keeps of one catalogue SKU (its first-tier USD unit price)."""

    sku_id: str
    description: str
    service: str                    # key of CATALOG_SERVICES
    resource_family: str
    resource_group: str
    usage_type: str
    regions: tuple[str, ...]
    usd: float
    unit: str                       # pricing_expression.usage_unit

    @functools.cached_property
    def words(self) -> tuple[str, ...]:
        return sku_words(self.description)

    @property
    def spot(self) -> bool:
        return self.usage_type == USAGE_PREEMPTIBLE or any(w in self.words for w in _SPOT_WORDS)


@dataclass(frozen=True)
class SkuWant:
    """One priced component: the SKU whose service, usage and description words say it is this thing."""

    label: str                               # what the estimate line calls it: "N1 vCPU", "NVIDIA_TESLA_T4"
    services: tuple[str, ...]
    groups: tuple[tuple[str, ...], ...]      # every group must match: one of its phrases appears in the words
    exclude: tuple[str, ...] = ()            # none of these words may appear
    unit: str = UNIT_HOUR
    per: str = "hour"                        # what one unit price covers (for the breakdown)
    resource_groups: frozenset[str] = frozenset()   # when known: the SKU's category.resource_group must be one

    def matches(self, sku: SkuRecord, region: str, spot: bool) -> bool:
        if sku.service not in self.services or region not in sku.regions or sku.spot != spot:
            return False
        if sku.usage_type not in (USAGE_ON_DEMAND, USAGE_PREEMPTIBLE):    # commitments and the like
            return False
        if self.resource_groups and sku.resource_group not in self.resource_groups:
            return False
        seq = sku.words
        if any(w in seq for w in (*self.exclude, *_NOT_LIST_PRICE)):
            return False
        return all(any(_has(seq, tuple(phrase.split())) for phrase in group) for group in self.groups)


def match_sku(skus, want: SkuWant, region: str, spot: bool) -> SkuRecord:
    """The one SKU priced for ``want`` in ``region``; DomainError (one line) when none or several match."""
    kind = "Spot" if spot else "on-demand"
    found = [s for s in skus if want.matches(s, region, spot)]
    if not found:
        raise DomainError(f"no {kind} SKU for {want.label} in {region} in the Cloud Billing catalogue")
    if len(found) > 1:
        listed = "; ".join(f"{s.sku_id} {s.description!r} ${s.usd:g}" for s in found[:4])
        raise DomainError(f"{len(found)} {kind} SKUs match {want.label} in {region} (not averaged: {listed}); "
                          "please report it")
    sku = found[0]
    if sku.unit != want.unit:
        raise DomainError(f"SKU {sku.sku_id} {sku.description!r} is priced per {sku.unit!r}, expected {want.unit!r}")
    return sku


# --------------------------------------------------------------------------------------------
# What tpuctl prices
# --------------------------------------------------------------------------------------------

_TRAINING = ("training",)

#: Vertex AI GPUs: aiplatform AcceleratorType -> description phrases (the Compute Engine GPU SKU names that
#: fetch_gcp.py matches: "T4 GPU", "A100 80GB GPU", "H100 80GB GPU"; invoices: "NVIDIA Tesla T4 GPU").
_GPU_PHRASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "NVIDIA_TESLA_T4": (("t4",), ()),
    "NVIDIA_TESLA_V100": (("v100",), ()),
    "NVIDIA_TESLA_P100": (("p100",), ()),
    "NVIDIA_L4": (("l4",), ()),
    "NVIDIA_TESLA_A100": (("a100",), ("80gb", "80")),
    "NVIDIA_A100_80GB": (("a100 80gb", "a100 80"), ()),
    "NVIDIA_H100_80GB": (("h100",), ("mega", "plus")),
}


def vertex_gpu_want(accelerator_type: str) -> SkuWant:
    if accelerator_type not in _GPU_PHRASES:
        raise DomainError(f"tpuctl has no catalogue match rule for the GPU {accelerator_type}")
    names, exclude = _GPU_PHRASES[accelerator_type]
    return SkuWant(accelerator_type, ("vertex",), (_TRAINING, names, ("gpu",)), exclude=("tpu", *exclude),
                   per="GPU-hour")


#: Vertex AI hosts tpuctl can price: machine type prefix -> (family phrase, vCPUs, GiB) per size.
#: n1-standard-N: N vCPUs and 3.75 GiB per vCPU (Compute Engine machineTypes: memoryMb 3840 per vCPU;
#: cloud.google.com/compute/docs/general-purpose-machines#n1_machines, checked 2026-11-24).
VERTEX_HOST_SHAPES: dict[str, tuple[int, float]] = {
    f"n1-standard-{n}": (n, 3.75 * n) for n in (1, 2, 4, 8, 16, 32, 64, 96)
}


def vertex_host_wants(machine_type: str) -> tuple[SkuWant, SkuWant, int, float]:
    """(vCPU want, RAM want, vCPUs, GiB) for a Vertex AI host machine; DomainError for a shape not catalogued."""
    if machine_type not in VERTEX_HOST_SHAPES:
        raise DomainError(f"tpuctl does not know the vCPU/memory shape of {machine_type} (it prices N1 hosts: "
                          f"{', '.join(VERTEX_HOST_SHAPES)})")
    cpus, gib = VERTEX_HOST_SHAPES[machine_type]
    family = machine_type.split("-", 1)[0]
    core = SkuWant(f"{family.upper()} vCPU", ("vertex",), (_TRAINING, (family,), ("cpu", "core", "vcpu")),
                   exclude=("ram", "memory", "gpu", "tpu"), per="vCPU-hour")
    ram = SkuWant(f"{family.upper()} RAM", ("vertex",), (_TRAINING, (family,), ("ram", "memory")),
                  exclude=("cpu", "core", "gpu", "tpu"), unit=UNIT_GIB_HOUR, per="GiB-hour")
    return core, ram, cpus, gib


#: TPU versions: description phrases, and chips one SKU unit price covers (fetch_gcp.py ``core_per_sku``: v5e and
#: v6e per chip, v5p per chip = 2 TensorCores, v2/v3/v4 per 8 TensorCores = 4 chips).
TPU_PHRASES: dict[str, tuple[tuple[str, ...], int]] = {
    "v2": (("v2",), 4),
    "v3": (("v3",), 4),
    "v4": (("v4",), 4),
    "v5e": (("v5e", "v5 lite", "v5lite", "v5litepod", "v5 litepod"), 1),
    "v5p": (("v5p",), 1),
    "v6e": (("v6e",), 1),
}


def tpu_unit_chips(version: str) -> int:
    if version not in TPU_PHRASES:
        raise DomainError(f"tpuctl has no price rule for TPU {version}")
    return TPU_PHRASES[version][1]


def vertex_tpu_want(version: str) -> SkuWant:
    phrases, chips = TPU_PHRASES[version]
    per = "chip-hour" if chips == 1 else f"{chips}-chip device-hour"
    return SkuWant(f"TPU {version}", ("vertex",), (_TRAINING, ("tpu",), phrases), exclude=("pod", "gpu"), per=per)


def tpu_vm_want(version: str) -> SkuWant:
    """A Cloud TPU VM slice (Compute Engine or Cloud TPU service): v4 is sold as "Pod" SKUs only."""
    phrases, chips = TPU_PHRASES[version]
    per = "chip-hour" if chips == 1 else f"{chips}-chip unit-hour"
    groups = (("tpu",), phrases) + ((("pod",),) if version == "v4" else ())
    return SkuWant(f"TPU {version}", ("compute", "tpu"), groups,
                   exclude=("training", "gpu") + (() if version == "v4" else ("pod",)), per=per)


@functools.cache
def all_wants() -> tuple[SkuWant, ...]:
    """Every component tpuctl may price: what ``prices refresh`` keeps of the catalogue."""
    wants = [vertex_gpu_want(name) for name in _GPU_PHRASES]
    wants += [w for m in ("n1-standard-4",) for w in vertex_host_wants(m)[:2]]
    wants += [vertex_tpu_want(v) for v in ("v2", "v3", "v5e")]
    wants += [tpu_vm_want(v) for v in ("v4", "v5e", "v5p", "v6e")]
    return tuple(wants)


def wanted(sku: SkuRecord) -> bool:
    """True when some component of ``all_wants`` could use ``sku`` (a SKU without a region never can)."""
    return bool(sku.regions) and any(w.matches(sku, sku.regions[0], sku.spot) for w in all_wants())


# --------------------------------------------------------------------------------------------
# The shipped snapshot (TPU VM slices only)
# --------------------------------------------------------------------------------------------

#: Converted by scripts/convert_skypilot_prices.py from skypilot-org/skypilot-catalog catalogs/v7/gcp/vms.csv.
SNAPSHOT_FILE = "data/tpu_vm_prices.json"


@dataclass(frozen=True)
class Snapshot:
    source: str          # where it came from (repository, path, commit)
    read_on: str         # YYYY-MM-DD
    note: str
    per_chip: dict = field(default_factory=dict)   # version -> region -> {"on_demand": usd, "spot": usd}

    @property
    def label(self) -> str:
        return f"SkyPilot catalogue snapshot ({self.source}, read {self.read_on})"

    def chip_hour(self, version: str, region: str, spot: bool) -> float:
        kind = "spot" if spot else "on_demand"
        regions = self.per_chip.get(version, {})
        usd = regions.get(region, {}).get(kind)
        if usd is None:
            have = ", ".join(sorted(r for r, p in regions.items() if p.get(kind) is not None)) or "none"
            raise DomainError(f"no {'Spot' if spot else 'on-demand'} TPU {version} price for {region} in the "
                              f"shipped snapshot (regions: {have}); run `{REFRESH_COMMAND}`")
        return float(usd)


def load_snapshot() -> Snapshot:
    raw = json.loads(_resources.files("tpuctl.ground.domain").joinpath(SNAPSHOT_FILE).read_text(encoding="utf-8"))
    source = f"{raw['repository']} {raw['path']} at commit {raw['commit'][:12]}"
    return Snapshot(source, raw["read_on"], raw["note"], raw["per_chip"])
