"""Accelerators: GPUs (quota metrics, Vertex enums), TPUs (Vertex machine specs), Vertex prebuilt images.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tpuctl.ground.domain.names import nearest_multi_region, validate_region
from tpuctl.ground.errors import DomainError


@dataclass(frozen=True)
class GpuType:
    name: str                 # Compute Engine accelerator type, e.g. nvidia-tesla-t4
    short: str                # CLI short name: t4
    vertex_accelerator: str   # aiplatform AcceleratorType enum name
    quota_metric: str         # quota metric name without service/prefix: nvidia_t4_gpus (see QUOTA_METRICS)
    machine_types: Mapping[int, str]  # GPU count -> the machine type tpuctl asks Vertex for (see MIN_VCPUS_PER_GPU)
    regions: frozenset[str]


#: GPU count -> the machine type tpuctl asks Vertex AI for, per GPU. Every pair is a row of Google's
#: "GPU compatibility table" for Vertex AI custom training (cloud.google.com/vertex-ai/docs/training/
#: configure-compute#gpu-compatibility-table, as copied 2026-11-22 into the table of
#: tests/ops/test_domain.py, which is this catalogue's source and checks it). It is NOT the smallest row
#: (the table lists n1-standard-4 for 1, 2 or 4 T4/V100/P100 and g2-standard-4 for one L4): tpuctl picks
#: the smallest row with at least MIN_VCPUS_PER_GPU vCPUs per GPU, because the trainer decodes and augments
#: JPEGs on the host's CPUs (a choice, not a measurement of the 4-vCPU rows). A2/A3 types have their GPU count built in (one row
#: per count). T4 comes in 1, 2 or 4 per VM only (8 T4 on n1-standard-64 is rejected); H100 80GB on
#: a3-highgpu-1g/2g/4g/8g.
#: tpuctl's own sizing rule (not a Google fact): at least this many vCPUs per GPU where the table offers a choice.
MIN_VCPUS_PER_GPU = 8
_T4_MACHINES = {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32"}
_V100_MACHINES = {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32", 8: "n1-standard-64"}
_P100_MACHINES = {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32"}
_L4_MACHINES = {1: "g2-standard-8", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"}
_A100_MACHINES = {1: "a2-highgpu-1g", 2: "a2-highgpu-2g", 4: "a2-highgpu-4g", 8: "a2-highgpu-8g"}
_A100_80GB_MACHINES = {1: "a2-ultragpu-1g", 2: "a2-ultragpu-2g", 4: "a2-ultragpu-4g", 8: "a2-ultragpu-8g"}
_H100_MACHINES = {1: "a3-highgpu-1g", 2: "a3-highgpu-2g", 4: "a3-highgpu-4g", 8: "a3-highgpu-8g"}

GPU_TYPES: dict[str, GpuType] = {
    g.name: g
    for g in (
        GpuType("nvidia-tesla-t4", "t4", "NVIDIA_TESLA_T4", "nvidia_t4_gpus", _T4_MACHINES,
                frozenset({"us-central1", "us-east1", "us-east4", "us-west1", "us-west2", "us-west4",
                           "europe-west1", "europe-west2", "europe-west3", "europe-west4",
                           "asia-east1", "asia-northeast1", "asia-northeast3", "asia-south1",
                           "asia-southeast1", "australia-southeast1", "northamerica-northeast1",
                           "southamerica-east1"})),
        GpuType("nvidia-tesla-v100", "v100", "NVIDIA_TESLA_V100", "nvidia_v100_gpus", _V100_MACHINES,
                frozenset({"us-central1", "us-east1", "us-west1", "europe-west4", "asia-east1"})),
        GpuType("nvidia-tesla-p100", "p100", "NVIDIA_TESLA_P100", "nvidia_p100_gpus",
                _P100_MACHINES,
                frozenset({"us-central1", "us-east1", "us-west1", "europe-west1", "europe-west4", "asia-east1"})),
        GpuType("nvidia-l4", "l4", "NVIDIA_L4", "nvidia_l4_gpus",
                _L4_MACHINES,
                frozenset({"us-central1", "us-east1", "us-east4", "us-west1", "us-west4", "europe-west1",
                           "europe-west2", "europe-west3", "europe-west4", "asia-east1", "asia-northeast1",
                           "asia-southeast1"})),
        GpuType("nvidia-tesla-a100", "a100", "NVIDIA_TESLA_A100", "nvidia_a100_gpus",
                _A100_MACHINES,
                frozenset({"us-central1", "us-east1", "us-west1", "us-west3", "us-west4", "europe-west4",
                           "asia-northeast1", "asia-southeast1"})),
        GpuType("nvidia-a100-80gb", "a100-80gb", "NVIDIA_A100_80GB", "nvidia_a100_80gb_gpus",
                _A100_80GB_MACHINES,
                frozenset({"us-central1", "us-east4", "us-east5", "europe-west4", "asia-southeast1"})),
        GpuType("nvidia-h100-80gb", "h100", "NVIDIA_H100_80GB", "nvidia_h100_gpus",
                _H100_MACHINES,
                frozenset({"us-central1", "us-east4", "us-east5", "us-west1", "europe-west4", "asia-southeast1"})),
    )
}
GPU_BY_SHORT: dict[str, GpuType] = {g.short: g for g in GPU_TYPES.values()}
DEFAULT_MAX_GPU_QUOTA = 16


def gpu_type(name: str) -> GpuType:
    """Look up a GPU by Compute Engine name (nvidia-tesla-t4) or short name (t4)."""
    key = name.strip().lower()
    if key in GPU_TYPES:
        return GPU_TYPES[key]
    if key in GPU_BY_SHORT:
        return GPU_BY_SHORT[key]
    raise DomainError(f"unknown GPU type {name!r}; known: {', '.join(sorted(GPU_TYPES))}")


# --------------------------------------------------------------------------------------------
# Accelerator quota: which Cloud Quotas METRIC limits a job. The quota ID (what a QuotaPreference
# names) is never written here: it is resolved from the metric through Cloud Quotas QuotaInfos
# (Pulumi: gcp.cloudquota.get_s_quota_infos; bootstrap/doctor and `tpuctl train`: CloudQuotasClient
# .list_quota_infos), so a renamed or missing quota fails with the metric named. The one exception: the
# Cloud TPU API's per-zone quotas have no known metric, so their ids are catalogued (tpuvm.TPU_VM_QUOTAS) and
# checked against the same QuotaInfos before use (zonal_quota_id).
# --------------------------------------------------------------------------------------------

#: Where the job runs decides which service's quota limits it (shared/REFERENCE.md "GPU quota", 2026-11):
#: Vertex AI custom training draws on Vertex AI's own quotas; VMs/GKE you run yourself on Compute Engine's.
QUOTA_SERVICES: dict[str, str] = {
    "vertex": "aiplatform.googleapis.com",
    "compute": "compute.googleapis.com",
}
DEFAULT_QUOTA_SERVICE = "vertex"
#: Facts of this module that no Google page confirmed (each marked ``[unverified: id]`` where it is used, and
#: listed in docs/vertex.md). The quota pre-flight checks never rely on them silently: a metric the project's
#: Cloud Quotas QuotaInfos do not list is a note naming the fact (``unverified_metric_fact``), not a refusal.
UNVERIFIED_ACCELERATOR_FACTS: dict[str, str] = {
    "p100-quota-metric": "Vertex AI's P100 quota metric is custom_model_training_nvidia_p100_gpus (the pattern of "
                         "the other GPUs; Google's sample list has no P100)",
    "spot-quota-metrics": "Vertex AI's Spot quota metrics are custom_model_training_preemptible_<gpu> (seen in "
                          "errors and listings, on no Google page)",
    "tpu-v2-quota-metric": "Vertex AI's TPU v2 quota metric is custom_model_training_tpu_v2 (the pattern of v3/v5e)",
}
#: The service whose quota the stack asks for by default (was compute.googleapis.com: the wrong one for Vertex AI).
QUOTA_SERVICE = QUOTA_SERVICES[DEFAULT_QUOTA_SERVICE]
#: Full metric for (quota service, spot) from GpuType.quota_metric (``nvidia_t4_gpus``).
#: vertex on-demand: ``aiplatform.googleapis.com/custom_model_training_<gpu>`` — Google's own sample
#:   github.com/GoogleCloudPlatform/vertex-ai-samples community-content/vertex_model_garden/model_oss/
#:   notebook_util/common_util.py ``get_resource_id`` (T4, L4, V100, A100, A100 80GB, H100; checked 2026-11);
#:   P100 follows the same pattern but is NOT in that list [unverified: p100-quota-metric].
#: vertex Spot/preemptible: ``…/custom_model_training_preemptible_<gpu>`` — seen in RESOURCE_EXHAUSTED
#:   errors and quota listings quoted in public repositories (2025-2026); no Google reference page was
#:   reachable from here [unverified: spot-quota-metrics].
#: compute: ``compute.googleapis.com/<gpu>`` and ``…/preemptible_<gpu>`` — Compute Engine GPU quota
#:   metrics (cloud.google.com/compute/resource-usage#gpu_quota, the metrics behind
#:   NVIDIA-T4-GPUS-per-project-region / PREEMPTIBLE-NVIDIA-T4-GPUS-per-project-region; checked 2026-11).
QUOTA_METRIC_FORMATS: dict[tuple[str, bool], str] = {
    ("vertex", False): "aiplatform.googleapis.com/custom_model_training_{metric}",
    ("vertex", True): "aiplatform.googleapis.com/custom_model_training_preemptible_{metric}",
    ("compute", False): "compute.googleapis.com/{metric}",
    ("compute", True): "compute.googleapis.com/preemptible_{metric}",
}
#: Vertex AI custom-training TPU quota per TPU version: (metric, TensorCores per chip). The quota counts
#: cores ("Custom model training TPU V2/V3 cores per region" in the Vertex AI quotas console, checked 2026-11).
#: Metrics: v3 and v5e from the vertex-ai-samples list above; v2 follows the pattern [unverified: tpu-v2-quota-metric].
#: Cores per chip: v2/v3 two TensorCores per chip, v5e one (cloud.google.com/tpu/docs/system-architecture-tpu-vm,
#: checked 2026-11). Compute Engine has no quota for Vertex TPUs; TPU VMs you create yourself use the Cloud TPU
#: API's per-zone quotas (tpu.googleapis.com: ``tpuvm.TPU_VM_QUOTAS``, stack key tpuVmQuotas).
VERTEX_TPU_QUOTA: dict[str, tuple[str, int]] = {
    "v2": ("aiplatform.googleapis.com/custom_model_training_tpu_v2", 2),
    "v3": ("aiplatform.googleapis.com/custom_model_training_tpu_v3", 2),
    "v5e": ("aiplatform.googleapis.com/custom_model_training_tpu_v5e", 1),
}


def quota_service(kind: str) -> str:
    """``vertex`` / ``compute`` -> the API whose quota it is (aiplatform.googleapis.com / compute.googleapis.com)."""
    if kind not in QUOTA_SERVICES:
        raise DomainError(f"quota service {kind!r} must be one of: {', '.join(QUOTA_SERVICES)}")
    return QUOTA_SERVICES[kind]


def gpu_quota_metric(gpu: GpuType, kind: str = DEFAULT_QUOTA_SERVICE, spot: bool = False) -> str:
    quota_service(kind)
    return QUOTA_METRIC_FORMATS[(kind, spot)].format(metric=gpu.quota_metric)


@dataclass(frozen=True)
class QuotaRequest:
    """One regional accelerator quota the stack asks Google for (a Cloud Quotas preference)."""

    accelerator: str             # short label: t4, tpu-v5e (resource names, messages)
    region: str
    count: int                   # GPUs, or TPU cores
    metric: str                  # full quota metric, e.g. aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus
    gpu: GpuType | None = None
    tpu_version: str | None = None
    spot: bool = False
    #: Per-zone quota known by its quota id, not by a metric (Cloud TPU VMs: ``domain.TPU_VM_QUOTAS``). Then
    #: ``metric`` is "", ``region`` is the zone's region, and the preference's dimension is the zone.
    zone: str | None = None
    quota_id: str | None = None

    @property
    def service(self) -> str:
        return self.metric.split("/", 1)[0] if self.metric else TPU_VM_QUOTA_SERVICE

    @property
    def label(self) -> str:
        return f"{self.accelerator}{'-spot' if self.spot else ''}"

    @property
    def location(self) -> str:
        """The value of the preference's one dimension: the zone of a per-zone quota, else the region."""
        return self.zone or self.region

    @property
    def dimensions(self) -> dict[str, str]:
        return {"zone": self.zone} if self.zone else {"region": self.region}

    @property
    def key(self) -> str:
        """What identifies the quota before its id is looked up: the metric, or the known quota id."""
        return self.metric or self.quota_id or ""


#: The old name: every GPU quota request is a QuotaRequest.
GpuQuotaRequest = QuotaRequest


#: Largest count one quota preference may ask for: tpuctl's own bound (Google documents none; preferredValue is
#: an int64), far above any GPU fleet or TPU slice a stack requests. The policy pack caps GPUs lower (maxGpuQuota).
MAX_QUOTA_COUNT = 100_000


def quota_count(spec: str, text: str, what: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise DomainError(f"{what} {spec!r}: count {text!r} is not a whole number") from None
    if not 1 <= count <= MAX_QUOTA_COUNT:
        raise DomainError(f"{what} {spec!r}: count must be 1 to {MAX_QUOTA_COUNT:,}")
    return count


def split_quota_spec(spec: str, what: str, form: str, example: str) -> tuple[str, str, str, bool]:
    """``form`` or ``form:spot`` (three ':'-separated fields) -> (first, location, count text, spot)."""
    parts = [p.strip() for p in str(spec).split(":")]
    spot = len(parts) == 4 and parts[3].lower() == "spot"
    if len(parts) not in (3, 4) or (len(parts) == 4 and not spot):
        raise DomainError(f"{what} {spec!r} must be {form} or {form}:spot, e.g. {example}")
    return parts[0], parts[1], parts[2], spot


def parse_gpu_quota(spec: str, kind: str = DEFAULT_QUOTA_SERVICE) -> QuotaRequest:
    """``GPU_TYPE:REGION:COUNT[:spot]`` (e.g. ``nvidia-tesla-t4:us-central1:4``) → validated request for the
    quota of ``kind`` (vertex: Vertex AI custom training; compute: Compute Engine VMs/GKE)."""
    name, region, count_text, spot = split_quota_spec(spec, "GPU quota", "GPU_TYPE:REGION:COUNT",
                                                      "nvidia-tesla-t4:us-central1:4")
    gpu = gpu_type(name)
    validate_region(region)
    if region not in gpu.regions:
        raise DomainError(f"GPU {gpu.name} is not offered in {region}; try one of {', '.join(sorted(gpu.regions))}")
    count = quota_count(spec, count_text, "GPU quota")
    return QuotaRequest(gpu.short, region, count, gpu_quota_metric(gpu, kind, spot), gpu=gpu, spot=spot)


def parse_tpu_quota(spec: str) -> QuotaRequest:
    """``TPU_VERSION:REGION:CORES`` (e.g. ``v5e:us-central1:8`` or ``tpu-v5e:…``) → Vertex AI TPU quota request."""
    parts = [p.strip() for p in str(spec).split(":")]
    if len(parts) != 3:
        raise DomainError(f"TPU quota {spec!r} must be TPU_VERSION:REGION:CORES, e.g. v5e:us-central1:8")
    version, region, count_text = parts
    version = version.lower().removeprefix("tpu-")
    if version not in VERTEX_TPU_QUOTA:
        raise DomainError(f"TPU quota {spec!r}: version {version!r} must be one of {', '.join(VERTEX_TPU_QUOTA)}")
    validate_region(region)
    regions = frozenset().union(*(t.regions for t in TPU_TYPES.values() if t.version == version))
    if region not in regions:
        raise DomainError(f"TPU {version} is not offered in {region} on Vertex AI according to tpuctl's catalogue; "
                          f"try one of {', '.join(sorted(regions))}")
    count = quota_count(spec, count_text, "TPU quota")
    return QuotaRequest(f"tpu-{version}", region, count, VERTEX_TPU_QUOTA[version][0], tpu_version=version)


def unverified_metric_fact(metric: str) -> str | None:
    """The UNVERIFIED_ACCELERATOR_FACTS id ``metric`` rests on (a Spot metric, P100's, TPU v2's), else None."""
    if metric.startswith(QUOTA_METRIC_FORMATS[("vertex", True)].split("{", 1)[0]):
        return "spot-quota-metrics"
    if metric == gpu_quota_metric(GPU_TYPES["nvidia-tesla-p100"]):
        return "p100-quota-metric"
    if metric == VERTEX_TPU_QUOTA["v2"][0]:
        return "tpu-v2-quota-metric"
    return None


def job_quota_need(accel: Accelerator, replicas: int = 1, kind: str = DEFAULT_QUOTA_SERVICE,
                   spot: bool = False) -> tuple[str, int] | None:
    """(metric, units) a job of ``replicas`` copies of ``accel`` draws on; None for CPU-only jobs."""
    if accel.kind == "gpu" and accel.gpu is not None:
        return gpu_quota_metric(accel.gpu, kind, spot), accel.gpu_count * replicas
    if accel.kind == "tpu" and accel.tpu is not None:
        metric, cores_per_chip = VERTEX_TPU_QUOTA[accel.tpu.version]
        return metric, accel.tpu.chips * cores_per_chip * replicas
    return None


#: The Cloud TPU API: the service whose quotas limit TPU VMs (queued resources, nodes) you create yourself.
TPU_VM_QUOTA_SERVICE = "tpu.googleapis.com"


def zonal_quota_id(quota_id: str, infos) -> str:
    """``quota_id`` when the service's QuotaInfos (``(quota_id, metric, dimension keys)`` triples) hold it as a
    per-zone quota; else a DomainError naming it (Google may have renamed it: its ids are not documented)."""
    found = [tuple(dims) for qid, _m, dims in infos if qid == quota_id]
    if any("zone" in dims for dims in found):
        return quota_id
    if found:
        raise DomainError(f"quota {quota_id} is not a per-zone quota (dimensions: {', '.join(found[0]) or 'none'})")
    known = sorted(qid for qid, _m, dims in infos if "zone" in dims)
    raise DomainError(f"no Cloud Quotas quota of {TPU_VM_QUOTA_SERVICE} has the id {quota_id}: Google may have renamed "
                      "it, or the API is not enabled; per-zone quota ids there: "
                      f"{', '.join(known) or 'none'} (please report it)")


def regional_quota_id(metric: str, infos) -> str:
    """The per-region quota id of ``metric`` among Cloud Quotas QuotaInfos, given as
    ``(quota_id, metric, dimension keys)`` triples. Raises DomainError naming the metric when none matches."""
    matching = [(qid, tuple(dims)) for qid, m, dims in infos if m == metric]
    regional = sorted(qid for qid, dims in matching if "region" in dims)
    if regional:
        return regional[0]
    service = metric.split("/", 1)[0]
    if matching:
        raise DomainError(f"quota metric {metric} has no per-region quota (quota ids: "
                          f"{', '.join(q for q, _ in matching)}); tpuctl requests regional quota only")
    raise DomainError(f"no Cloud Quotas quota of {service} has the metric {metric}: Google may have renamed it, "
                      f"or the API is not enabled; list them with `gcloud beta quotas info list --service={service} "
                      "--project=PROJECT` and report it")


@dataclass(frozen=True)
class TpuType:
    name: str                     # CLI name: tpu-v3-8
    version: str                  # v2, v3, v5e
    chips: int
    vertex_machine_type: str
    vertex_accelerator: str | None   # aiplatform AcceleratorType enum name
    vertex_accelerator_count: int
    topology: str | None
    regions: frozenset[str]


#: TensorFlow on TPU v5e runs through the PJRT runtime, switched on by two environment variables in the container:
#: "TensorFlow training on TPU v5e requires the PJRT runtime. To enable the PJRT runtime, configure the following
#: environment variables" — NEXT_PLUGGABLE_DEVICE_USE_C_API=true, TF_PLUGGABLE_DEVICE_LIBRARY_PATH=/lib/libtpu.so
#: (cloud.google.com/vertex-ai/docs/training/training-with-tpu-vm, custom-container example, read 2026-11-24).
#: TensorFlow 2.20's own code reads the second at import and loads that library as a pluggable device
#: (tensorflow/__init__.py in the tensorflow-tpu 2.20.0 wheel: ``if _os.getenv("TF_PLUGGABLE_DEVICE_LIBRARY_PATH")``).
#: Google names no such variables for v2/v3, which run TensorFlow's own TPU runtime, so the trainer image sets none
#: and tpuctl adds them to the jobs of these TPU versions only.
TF_PJRT_TPU_VERSIONS = frozenset({"v5e"})
TF_PJRT_ENV = {"NEXT_PLUGGABLE_DEVICE_USE_C_API": "true", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/lib/libtpu.so"}


def tpu_runtime_env(tpu_version: str) -> dict[str, str]:
    """Environment a TensorFlow container needs on this TPU version (the PJRT switch on v5e, else nothing)."""
    return dict(TF_PJRT_ENV) if tpu_version in TF_PJRT_TPU_VERSIONS else {}


_V23_REGIONS = frozenset({"us-central1", "europe-west4"})
_V5E_REGIONS = frozenset({"us-central1", "us-east1", "us-east5", "us-south1", "us-west1", "us-west4",
                          "europe-west4", "asia-southeast1"})

TPU_TYPES: dict[str, TpuType] = {
    t.name: t
    for t in (
        TpuType("tpu-v2-8", "v2", 4, "cloud-tpu", "TPU_V2", 8, None, _V23_REGIONS),
        TpuType("tpu-v3-8", "v3", 4, "cloud-tpu", "TPU_V3", 8, None, _V23_REGIONS),
        TpuType("tpu-v5e-1", "v5e", 1, "ct5lp-hightpu-1t", None, 0, "1x1", _V5E_REGIONS),
        TpuType("tpu-v5e-4", "v5e", 4, "ct5lp-hightpu-4t", None, 0, "2x2", _V5E_REGIONS),
        TpuType("tpu-v5e-8", "v5e", 8, "ct5lp-hightpu-8t", None, 0, "2x4", _V5E_REGIONS),
    )
}


@dataclass(frozen=True)
class Accelerator:
    """What ``--accelerator`` names: where the trainer runs and with which strategy."""

    name: str
    kind: str                         # cpu | gpu | tpu
    gpu: GpuType | None = None
    gpu_count: int = 0
    tpu: TpuType | None = None
    cpu_machine_type: str = "n1-standard-4"
    strategy: str = field(default="cpu")   # trainer --distribution_strategy

    @property
    def machine_type(self) -> str:
        if self.kind == "gpu":
            assert self.gpu is not None
            return self.gpu.machine_types[self.gpu_count]
        if self.kind == "tpu":
            assert self.tpu is not None
            return self.tpu.vertex_machine_type
        return self.cpu_machine_type

    @property
    def regions(self) -> frozenset[str] | None:
        if self.gpu is not None:
            return self.gpu.regions
        if self.tpu is not None:
            return self.tpu.regions
        return None


_GPU_ACCEL = re.compile(r"^gpu(?:-(?P<type>[a-z0-9-]+?))?(?:x(?P<count>\d+))?$")

#: Every spelling of one TPU slice users type: Vertex-style ``tpu-v5e-8``, the short ``v5e-8`` of Google's prose
#: and the Cloud TPU API's ``acceleratorType`` ``v5litepod-8`` (v5e's API prefix; cloud.google.com/tpu/docs/v5e).
#: N is the API's number: chips for v5e/v6e, TensorCores for v5p/v4, the TensorCores of a v2/v3 board.
_TPU_SLICE = re.compile(r"^(?:tpu-)?(?P<gen>v\d+[a-z]*|v5litepod)-(?P<n>\d+)$")


def tpu_slice_key(name: str) -> tuple[str, int] | None:
    """``tpu-v5e-8``, ``v5e-8`` and ``v5litepod-8`` -> ``("v5e", 8)``; None for a name that is no TPU slice.

    The one key both catalogues file their TPU records under (``TPU_TYPES`` for Vertex AI, ``TPU_VM_TYPES`` for
    the Cloud TPU API), so every name a user types finds the record of either."""
    m = _TPU_SLICE.match((name or "").strip().lower())
    if not m:
        return None
    gen = "v5e" if m.group("gen") == "v5litepod" else m.group("gen")
    return gen, int(m.group("n"))


def vertex_tpu(name: str) -> TpuType | None:
    """The Vertex AI TPU record for any spelling of a slice (``v5litepod-8`` -> ``tpu-v5e-8``), None when Vertex
    AI offers no such slice in tpuctl's catalogue."""
    key = tpu_slice_key(name)
    return next((t for t in TPU_TYPES.values() if tpu_slice_key(t.name) == key), None) if key else None


def parse_accelerator(name: str) -> Accelerator:
    """``cpu``, ``gpu`` (one T4), ``gpu-t4``, ``gpu-t4x2``, ``gpu-l4x4``, ``tpu-v3-8``, ``tpu-v5e-4``…"""
    key = name.strip().lower()
    if key == "cpu":
        return Accelerator("cpu", "cpu", strategy="cpu")
    tpu = vertex_tpu(key)
    if tpu is not None:
        return Accelerator(tpu.name, "tpu", tpu=tpu, strategy="tpu")
    m = _GPU_ACCEL.match(key)
    if m:
        gpu = gpu_type(m.group("type") or "t4")
        count = int(m.group("count") or 1)
        if count not in gpu.machine_types:
            raise DomainError(
                f"accelerator {name!r}: {gpu.name} comes in counts {', '.join(map(str, sorted(gpu.machine_types)))}"
            )
        return Accelerator(key, "gpu", gpu=gpu, gpu_count=count, strategy="gpu")
    known = ["cpu", "gpu", *(f"gpu-{g.short}[xN]" for g in GPU_TYPES.values()), *TPU_TYPES]
    hint = ""
    if tpu_slice_key(key) is not None:
        hint = " (a TPU slice Vertex AI does not offer in tpuctl's catalogue; TPU VM slices run with --target tpu-vm)"
    raise DomainError(f"unknown accelerator {name!r}{hint}; known: {', '.join(known)}")


def check_accelerator_region(accel: Accelerator, region: str) -> None:
    validate_region(region)
    regions = accel.regions
    if regions is not None and region not in regions:
        raise DomainError(
            f"{accel.name} is not available in {region} according to tpuctl's catalogue; "
            f"use --region with one of {', '.join(sorted(regions))}"
        )



# --------------------------------------------------------------------------------------------
# Vertex AI custom training: prebuilt images, console links
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainingImage:
    """A Vertex AI prebuilt training container (python_package_spec.executor_image_uri)."""

    name: str          # image name under <multi-region>-docker.pkg.dev/vertex-ai/training/
    tensorflow: str    # TensorFlow minor version inside: the trainer package pins tf-keras to it
    #: Vertex AI's published end-of-availability date (jobs using the image are rejected from then on);
    #: None: not known. `train --python-package` refuses a past date and warns 90 days ahead.
    end_of_availability: datetime.date | None = None
    #: TPU versions the image runs on (TPU images only).
    tpu_versions: frozenset[str] = frozenset()

    def uri(self, region: str | None = None) -> str:
        """Same image in the Artifact Registry multi-region nearest to ``region`` (us/europe/asia)."""
        return f"{nearest_multi_region(region)}-docker.pkg.dev/vertex-ai/training/{self.name}:latest"


#: Newest TensorFlow prebuilt training containers in Vertex AI's list
#: (cloud.google.com/vertex-ai/docs/training/pre-built-containers, checked 2026-11): TF 2.17 for
#: CPU/GPU, TF 2.15 for TPU VMs (no newer TF TPU image is published). Only ``:latest`` tags work.
#: ``tpuctl train --image`` overrides the choice.
#: End of availability: Google's "Supported frameworks for custom training" table
#: (https://docs.cloud.google.com/vertex-ai/docs/supported-frameworks-list, now also published as
#: docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/supported-frameworks): TF 2.17
#: cpu/gpu 2026-07-11, TF 2.15 tpu 2025-10-23 - both past on 2026-11-24, so `--python-package` without
#: `--image` is refused. The dates are the audit of issue 26 (2026-11-24, shared/REFERENCE.md); this session's
#: search tool returned the page's heading but not the rows, so they were not re-read here.
#: TPU versions: v2 and v3 only - "Prebuilt containers for TPU v5e are not available"
#: (https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/training-with-tpu-vm,
#: "TensorFlow training > Prebuilt container", read 2026-11-24); v5e runs a custom container (the trainer image).
VERTEX_TRAINING_IMAGES: dict[str, TrainingImage] = {
    "cpu": TrainingImage("tf-cpu.2-17.py310", "2.17", datetime.date(2026, 7, 11)),
    "gpu": TrainingImage("tf-gpu.2-17.py310", "2.17", datetime.date(2026, 7, 11)),
    "tpu": TrainingImage("tf-tpu.2-15.cp310", "2.15", datetime.date(2025, 10, 23), frozenset({"v2", "v3"})),
}


def prebuilt_training_image(accel: Accelerator) -> TrainingImage:
    """The prebuilt image for ``accel``; a DomainError where Google publishes none (TPU v5e)."""
    image = VERTEX_TRAINING_IMAGES[accel.kind]
    if accel.tpu is not None and accel.tpu.version not in image.tpu_versions:
        raise DomainError(f"Vertex AI publishes no prebuilt TensorFlow image for TPU {accel.tpu.version} "
                          f"({accel.name}); drop --python-package to run the trainer's own image "
                          "(`tpuctl image build --variant tpu`)")
    return image


#: Console page of a CustomJob (job_id = last segment of projects/P/locations/R/customJobs/ID), as
#: google-cloud-aiplatform 2.x links it (Vertex AI's console moved under "agent-platform").
VERTEX_CUSTOM_JOB_CONSOLE_URL = (
    "https://console.cloud.google.com/agent-platform/locations/{region}/training/{job_id}?project={project}"
)
#: Regional Vertex AI API host (REST and gRPC).
VERTEX_API_HOST = "{region}-aiplatform.googleapis.com"
