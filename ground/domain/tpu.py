"""The TPU catalogue: one record per TPU slice, with every name users type for it and how each target asks for it.

A slice is filed under its Cloud TPU API ``acceleratorType`` (``v5litepod-8``, ``v3-8``) and found by any of its
names: the short ``v5e-8`` of Google's prose and the Vertex-style ``tpu-v5e-8`` (``tpu_slice_key``). ``vertex`` says
how Vertex AI custom training asks for it (None: Vertex AI does not offer it in tpuctl's catalogue); ``tpu_vm`` says
whether tpuctl creates it itself through the Cloud TPU API (``tpuctl train --target tpu-vm``).

Sources (checked 2026-11-22 with the search tool):
- Base TPU software versions for containerised frameworks: v6e ``v2-alpha-tpuv6e``, v5p ``v2-alpha-tpuv5``,
  v5e ``v2-alpha-tpuv5-lite``, v4 and older ``tpu-ubuntu2204-base``; they include Ubuntu and Docker
  (cloud.google.com/tpu/docs/runtimes).
- v6e (cloud.google.com/tpu/docs/v6e, "Supported configurations"): ``v6e-1/4/8`` one VM; ``v6e-16/32/64/128/256``
  are topologies 4x4/4x8/8x8/8x16/16x16 on 2/4/8/16/32 hosts and 4/8/16/32/64 VMs (4 chips per VM).
- v5e (cloud.google.com/tpu/docs/v5e and /supported-tpu-configurations): ``v5litepod-N`` with N chips; 1, 4 and 8
  fit one host; 16/32/64/128/256 are topologies 4x4…16x16 on 2/4/8/16/32 hosts. "Each TPU VM in a v5e slice
  contains 1, 4 or 8 chips"; a multi-host v5e slice has one VM per 4 chips: Vertex AI's TPU v5e table
  (``vertexdata.v5e_topologies``: ct5lp-hightpu-4t 4x4 = 16 chips on 4 VMs … 16x16 = 256 chips on 64 VMs, generated
  from the custom-training compute page, read 2026-11-26), as GKE's node pools of ct5lp-hightpu-4t (16x16: 64 nodes).
- v5p (cloud.google.com/tpu/docs/supported-tpu-configurations): ``v5p-N`` where N counts TensorCores (2 per chip),
  4 chips per host (one VM per host): v5p-8 is 1 host, v5p-16 2, v5p-32 4 … Only power-of-two sizes up to
  v5p-1024 are listed here; Google accepts other sizes too (not listed) [unverified: other-slice-sizes].
- v4 (cloud.google.com/tpu/docs/v4) [unverified: v4-shapes]: ``v4-N`` where N counts TensorCores (2 per chip),
  4 chips per host; power-of-two sizes up to v4-1024 listed.
- v2 and v3 run through Vertex AI only here: one board (v2-8, v3-8: 4 chips, 8 TensorCores, one host) or a Pod slice
  of 32 × n TensorCores (``vertexdata.tpu_pod_counts``: "8 for single TPU or 32 or multiple of 32 for TPU Pods").
  The Pod sizes are Cloud TPU's accelerator types (cloud.google.com/tpu/docs/regions-zones, read 2026-11-26 with the
  search tool: v2-32/128/256/512, v3-32/64/128/256/512/1024/2048), 4 chips per host.
- TensorFlow-specific runtimes ``tpu-vm-tf-x.y.z[-pod][-pjrt]`` exist (cloud.google.com/tpu/docs/runtimes);
  tpuctl does not use them: the trainer runs in its own container (tensorflow-tpu + libtpu) on the base runtime.
- Vertex AI machine specs (one worker pool, one replica, which may span several TPU VMs): ``cloud-tpu`` with
  ``TPU_V2``/``TPU_V3`` × 8 (a board) or × 32n (a Pod), and for v5e the machine type and ``tpuTopology`` of each row
  of Google's TPU v5e table (``vertexdata.v5e_topologies``: ct5lp-hightpu-1t 1x1, -4t 2x2, -8t 2x4 on one VM;
  ct5lp-hightpu-4t 4x4 … 16x16 on 4 … 64 VMs). Regions: Google's locations table by ``VertexTpu.label``
  (``TPU v2``, ``TPU v2 Pod``, ``TPU v3``, ``TPU v3 Pod``, ``TPU v5e``, ``TPU v6e``). The AcceleratorType names are
  checked against the aiplatform protos (tests/ops/train/test_vertex_contract.py). On a replica of several VMs the
  trainer resolves the slice from Vertex AI's ``TPU_CONFIG`` on each of them [unverified: vertex-multihost-tensorflow]:
  Google documents TensorFlow on a Vertex AI TPU Pod only with its ``tf-tpu-pod-base`` image.
- TPU v6e on Vertex AI (read 2026-12-07 with the search tool): Vertex AI's TPU page says "TPU v6e supports Python
  3.10+, JAX 0.4.37+, and PyTorch 2.1+ using PJRT as the default runtime" and "Starting with TPU v6e, TensorFlow
  isn't supported for training on Agent Platform" (docs.cloud.google.com/gemini-enterprise-agent-platform/
  machine-learning/training/training-with-tpu-vm.md.txt; which framework runs where is ``frameworks``), and its
  locations table lists "TPU v6e" regions for training (``vertexdata``). Its machine specs are Vertex AI's own v6e
  rows when a refresh of the configure-compute page found them (``vertexdata.v6e_topologies``), else
  ``V6E_VERTEX_DERIVED``: the rows of the Cloud TPU v6e page's "Supported configurations" table (topology, chips,
  VMs and "Machine type (GKE API)": ct6e-standard-1t 1x1, -4t 2x2, -8t 2x4 on one VM; ct6e-standard-4t 4x4 … 16x16
  on 4 … 64 VMs; docs.cloud.google.com/tpu/docs/v6e.md.txt, read 2026-12-07), since ``MachineSpec.tpuTopology``
  "corresponds to the TPU topologies available from GKE" (Vertex AI's MachineSpec reference) and Google's Vertex AI
  TPU v5e table has that very shape (ct5lp-hightpu-1t/4t/8t for 1x1/2x2/2x4 on one VM, -4t on 4 chips per VM past
  one host) [unverified: vertex-v6e-machine-specs]. Left out: the
  2x4 slice on two VMs ("only supported when using the GKE API"). TPU7x is offered on no target (``TPU7X_REFUSAL``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ground.domain.vertexdata import TpuTopology, VertexTables, vertex_tables
from ground.errors import DomainError

#: Facts of this module that no Google page confirmed (``[unverified: id]`` where used; listed in docs/tpu-vm.md).
UNVERIFIED_TPU_FACTS: dict[str, str] = {
    "vertex-multihost-tensorflow": "TensorFlow's TPUStrategy spans the VMs of a multi-VM Vertex AI TPU replica when "
                                   "each runs the trainer image and resolves the slice from TPU_CONFIG",
    "other-slice-sizes": "v5p/v4 sizes other than powers of two are left out (Google accepts more)",
    "v4-shapes": "v4 accelerator types and hosts were not re-read from Google's v4 page",
    "vertex-v6e-machine-specs": "Vertex AI asks for a TPU v6e replica by the GKE machine type and topology of the "
                                "Cloud TPU v6e page (ct6e-standard-1t/4t/8t), the shape of its own TPU v5e table "
                                "(ct5lp-hightpu-1t/4t/8t): Vertex AI's own v6e table could not be read here",
}


@dataclass(frozen=True)
class TpuVmGeneration:
    """A TPU generation tpuctl creates as TPU VMs through the Cloud TPU API."""
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
class VertexTpu:
    """How Vertex AI custom training asks for a slice (its MachineSpec: one replica), and where it offers it."""
    machine_type: str
    accelerator_type: str | None      # aiplatform AcceleratorType enum name; None: the machine type implies it
    accelerator_count: int
    label: str                        # its name in Google's locations table: TPU v5e, TPU v2 Pod
    topology: str | None = None       # machineSpec.tpuTopology (v5e)
    vms: int = 1                      # TPU VMs of the one replica (Google's table)

    @property
    def regions(self) -> frozenset[str]:
        """Where Vertex AI trains on it (``vertexdata``); empty when Google's table lists none."""
        offer = vertex_tables().offer(self.label)
        return offer.training if offer is not None else frozenset()

    @property
    def multi_host(self) -> bool:
        return self.vms > 1


@dataclass(frozen=True)
class TpuSlice:
    """One TPU slice: its Cloud TPU API name, its shape, and how Vertex AI asks for it."""
    name: str                 # Cloud TPU API acceleratorType: v5litepod-16, v3-8
    generation: str           # v5e, v3
    chips: int
    hosts: int                # physical hosts, as Google's tables count them (a sub-host slice counts 1)
    vms: int                  # TPU VMs ("workers"): the startup script runs on each of them
    topology: str | None      # 4x4 (None where not recorded here)
    vertex: VertexTpu | None = None

    @property
    def vertex_name(self) -> str:
        """The name tpuctl's ``--accelerator`` prints for a Vertex AI slice: ``tpu-v5e-8``."""
        return f"tpu-{self.generation}-{self.name.rsplit('-', 1)[1]}"

    @property
    def aliases(self) -> tuple[str, ...]:
        """The other names users type for this slice (``v5litepod-8``: ``v5e-8``, ``tpu-v5e-8``)."""
        number = self.name.rsplit("-", 1)[1]
        return tuple(n for n in (f"{self.generation}-{number}", self.vertex_name) if n != self.name)

    @property
    def tpu_vm(self) -> bool:
        """Whether tpuctl creates this slice itself through the Cloud TPU API."""
        return self.generation in TPU_VM_GENERATIONS

    @property
    def runtime_version(self) -> str:
        return TPU_VM_GENERATIONS[self.generation].runtime_version

    @property
    def multi_host(self) -> bool:
        return self.vms > 1


def _v6e_v5e(generation: str) -> list[TpuSlice]:
    prefix = TPU_VM_GENERATIONS[generation].prefix
    shapes = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
    out = []
    for chips, topology in shapes.items():
        hosts = max(1, chips // 8)
        vms = 1 if chips <= 8 else chips // TPU_VM_GENERATIONS[generation].chips_per_vm
        out.append(TpuSlice(f"{prefix}{chips}", generation, chips, hosts, vms, topology))
    return out


def _cores(generation: str) -> list[TpuSlice]:
    gen = TPU_VM_GENERATIONS[generation]
    out = []
    cores = 8
    while cores <= 1024:
        chips = cores // 2
        hosts = max(1, chips // gen.chips_per_host)
        out.append(TpuSlice(f"{gen.prefix}{cores}", generation, chips, hosts, hosts, None))
        cores *= 2
    return out


#: Cloud TPU's v2/v3 Pod sizes (TensorCores), each a multiple of Vertex AI's Pod count (checked in ``vertex_offer``).
_POD_CORES = {"v2": (32, 128, 256, 512), "v3": (32, 64, 128, 256, 512, 1024, 2048)}


def _pods(generation: str) -> list[TpuSlice]:
    """v2/v3: one board (8 TensorCores, 4 chips, one host) and the Pod slices, 4 chips per host."""
    out = [TpuSlice(f"{generation}-8", generation, 4, 1, 1, None)]
    for cores in _POD_CORES[generation]:
        chips = cores // 2
        out.append(TpuSlice(f"{generation}-{cores}", generation, chips, chips // 4, chips // 4, None))
    return out


#: TPU v6e on Vertex AI until a refresh reads Google's own rows [unverified: vertex-v6e-machine-specs]: the rows of the
#: Cloud TPU v6e page's "Supported configurations" table (docs.cloud.google.com/tpu/docs/v6e.md.txt, read 2026-12-07),
#: machine type as its "Machine type (GKE API)" column, VMs as its "VMs" column (see the module docstring).
V6E_VERTEX_DERIVED: tuple[TpuTopology, ...] = (
    TpuTopology("ct6e-standard-1t", "1x1", 1, 1),
    TpuTopology("ct6e-standard-4t", "2x2", 4, 1),
    TpuTopology("ct6e-standard-8t", "2x4", 8, 1),
    TpuTopology("ct6e-standard-4t", "4x4", 16, 4),
    TpuTopology("ct6e-standard-4t", "4x8", 32, 8),
    TpuTopology("ct6e-standard-4t", "8x8", 64, 16),
    TpuTopology("ct6e-standard-4t", "8x16", 128, 32),
    TpuTopology("ct6e-standard-4t", "16x16", 256, 64),
)


def vertex_offer(tables: VertexTables) -> dict[str, VertexTpu]:
    """The slices Vertex AI custom training offers in tpuctl's catalogue, by Cloud TPU API name, from Google's
    tables (``vertexdata``): v2/v3 boards and Pods on ``cloud-tpu``, every v5e row and every v6e row (Google's when
    read, else ``V6E_VERTEX_DERIVED``), one VM before several where a topology has both, as ct5lp-hightpu-8t and -4t
    do for 2x4."""
    out: dict[str, VertexTpu] = {}
    for generation in ("v2", "v3"):
        enum = f"TPU_{generation.upper()}"
        single, multiple = tables.tpu_pod_counts[enum]
        label = f"TPU {generation}"
        out[f"{generation}-{single}"] = VertexTpu("cloud-tpu", enum, single, label)
        for cores in _POD_CORES[generation]:
            if cores % multiple == 0:
                out[f"{generation}-{cores}"] = VertexTpu("cloud-tpu", enum, cores, f"{label} Pod", vms=cores // 8)
    for generation, rows in (("v5e", tables.v5e_topologies), ("v6e", tables.v6e_topologies or V6E_VERTEX_DERIVED)):
        prefix = TPU_VM_GENERATIONS[generation].prefix
        for row in sorted(rows, key=lambda r: (r.chips, r.vms)):
            out.setdefault(f"{prefix}{row.chips}",
                           VertexTpu(row.machine_type, None, 0, f"TPU {generation}", row.topology, row.vms))
    return out


#: Every slice of the catalogue by Cloud TPU API name: Vertex-only boards first, then the TPU VM generations by
#: generation and size (the order of the error messages).
_VERTEX = vertex_offer(vertex_tables())
TPU_SLICES: dict[str, TpuSlice] = {
    s.name: dataclasses.replace(s, vertex=_VERTEX.get(s.name))
    for s in (*_pods("v2"), *_pods("v3"), *_v6e_v5e("v6e"), *_cores("v5p"), *_v6e_v5e("v5e"), *_cores("v4"))
}

#: Every spelling of one TPU slice users type: Vertex-style ``tpu-v5e-8``, the short ``v5e-8`` of Google's prose
#: and the Cloud TPU API's ``acceleratorType`` ``v5litepod-8`` (v5e's API prefix; cloud.google.com/tpu/docs/v5e).
#: N is the API's number: chips for v5e/v6e, TensorCores for v5p/v4, the TensorCores of a v2/v3 board.
_TPU_SLICE = re.compile(r"^(?:tpu-)?(?P<gen>v\d+[a-z]*|v5litepod)-(?P<n>\d+)$")


def tpu_slice_key(name: str) -> tuple[str, int] | None:
    """``tpu-v5e-8``, ``v5e-8`` and ``v5litepod-8`` -> ``("v5e", 8)``; None for a name that is no TPU slice."""
    m = _TPU_SLICE.match((name or "").strip().lower())
    if not m:
        return None
    gen = "v5e" if m.group("gen") == "v5litepod" else m.group("gen")
    return gen, int(m.group("n"))


_BY_KEY: dict[tuple[str, int], TpuSlice] = {tpu_slice_key(s.name): s for s in TPU_SLICES.values()}  # type: ignore[misc]


def find_tpu_slice(name: str) -> TpuSlice | None:
    """The slice any of its names denotes (``v5litepod-8``, ``v5e-8``, ``tpu-v5e-8``); None when none does."""
    key = tpu_slice_key(name)
    return _BY_KEY.get(key) if key else None


def vertex_tpu(name: str) -> TpuSlice | None:
    """The slice ``name`` denotes when Vertex AI offers it in tpuctl's catalogue, else None."""
    found = find_tpu_slice(name)
    return found if found is not None and found.vertex is not None else None


def vertex_tpu_names() -> list[str]:
    """The Vertex-style names of every slice Vertex AI offers (``tpu-v2-8`` … ``tpu-v5e-8``)."""
    return [s.vertex_name for s in TPU_SLICES.values() if s.vertex is not None]


def tpu_vm_names() -> list[str]:
    """The Cloud TPU API names of every slice tpuctl creates as TPU VMs, by generation then size."""
    return [s.name for s in TPU_SLICES.values() if s.tpu_vm]


#: TPU7x (Ironwood) is not offered, on any target, for the reason Google states: "The Cloud TPU API is not supported
#: on TPU7x and later TPU versions": the API every TPU VM run uses (queued resources) "is no longer under active
#: development ... will receive bug fixes and security updates only"; Google points new generations to Compute Engine
#: or GKE (banner of https://docs.cloud.google.com/tpu/docs/runtimes.md.txt, read 2026-11-27), and tpuctl has no
#: Compute Engine or GKE target yet. Vertex AI's TPU page names no TPU7x (it offers v2, v3, v5e and v6e).
TPU7X_REFUSAL = ("TPU7x (Ironwood) is not offered: the Cloud TPU API tpuctl's TPU VM runs use is not supported on "
                 "TPU7x and later (it gets bug and security fixes only; Google runs TPU7x through Compute Engine or "
                 "GKE), and tpuctl has no Compute Engine or GKE target yet; use v6e, v5p or v5e (--target tpu-vm) or "
                 "tpu-v6e, tpu-v5e (--target vertex)")
_TPU7X = re.compile(r"^(?:tpu-?)?v?7x(?:-\d+)?$|^ironwood(?:-\d+)?$")


def refused_tpu(name: str) -> str | None:
    """The one-line reason tpuctl refuses a TPU name on every target (TPU7x), or None."""
    return TPU7X_REFUSAL if _TPU7X.match(name.strip().lower()) else None


def parse_tpu_vm_accelerator(name: str) -> TpuSlice:
    """``v5litepod-16`` (or an alias: ``v5e-16``, ``tpu-v5e-16``) -> its slice when tpuctl creates it as TPU VMs;
    anything else is a DomainError listing the valid names."""
    found = find_tpu_slice(name)
    if found is not None and found.tpu_vm:
        return found
    raise DomainError(tpu_vm_refusal(name))


def tpu_vm_refusal(name: str) -> str:
    """Why ``name`` is no slice tpuctl creates as TPU VMs, in one line that lists the valid names."""
    refused = refused_tpu(name)
    if refused:
        return f"accelerator {name!r}: {refused}"
    key = tpu_slice_key(name)
    hint = ""
    if key is not None and key[0] in ("v2", "v3"):
        hint = " (v2/v3 run through Vertex AI here: `tpuctl train --target vertex --accelerator tpu-v3-8`)"
    return f"unknown TPU VM accelerator type {name!r}{hint}; valid: {', '.join(tpu_vm_names())}"


#: TensorFlow on TPU v5e runs through the PJRT runtime, switched on by two environment variables in the container:
#: "TensorFlow training on TPU v5e requires the PJRT runtime. To enable the PJRT runtime, configure the following
#: environment variables" — NEXT_PLUGGABLE_DEVICE_USE_C_API=true, TF_PLUGGABLE_DEVICE_LIBRARY_PATH=/lib/libtpu.so
#: (cloud.google.com/vertex-ai/docs/training/training-with-tpu-vm, custom-container example, read 2026-11-24).
#: TensorFlow 2.20's own code reads the second at import and loads that library as a pluggable device
#: (tensorflow/__init__.py in the tensorflow-tpu 2.20.0 wheel: ``if _os.getenv("TF_PLUGGABLE_DEVICE_LIBRARY_PATH")``).
#: Google names no such variables for v2/v3, which run TensorFlow's own TPU runtime, so the trainer image sets none
#: and tpuctl adds them to the jobs of these TPU versions only.
#: v5p and v6e too: Google documents TensorFlow on v6e, v5e and v5p only through PJRT - its TensorFlow TPU software
#: versions for them are the ``-pjrt`` ones (``tpu-vm-tf-2.18.0[-pod]-pjrt``; cloud.google.com/tpu/docs/runtimes,
#: "TensorFlow", and /tpu/docs/supported-tpu-configurations, read 2026-11-24; shared/REFERENCE.md "Google Cloud facts
#: verified 2026-11"). v4 and older keep the stream executor (``-se``) runtime TensorFlow picks by default.
TF_PJRT_TPU_VERSIONS = frozenset({"v5e", "v5p", "v6e"})
TF_PJRT_ENV = {"NEXT_PLUGGABLE_DEVICE_USE_C_API": "true", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/lib/libtpu.so"}


def tpu_runtime_env(generation: str, backend: str = "tensorflow") -> dict[str, str]:
    """Environment a container needs on this TPU generation: TensorFlow's PJRT switch on v5e, v5p and v6e, else
    nothing; JAX none (PJRT is how JAX talks to every TPU)."""
    return dict(TF_PJRT_ENV) if backend == "tensorflow" and generation in TF_PJRT_TPU_VERSIONS else {}
