"""Quota facts: which Cloud Quotas metric or quota id limits a job, and the stack's quota requests.

GPU and Vertex AI TPU quotas are regional and known by their METRIC; the Cloud TPU API's TPU VM quotas are
per-zone and known by their quota ID. The accelerators themselves are catalogued in ``accelerators`` (GPUs) and
``tpu`` (TPU slices).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from ground.domain.accelerators import GPU_TYPES, NEW_GPU_METRICS, Accelerator, GpuType, gpu_type
from ground.domain.names import validate_region
from ground.domain.tpu import TPU_SLICES, TpuSlice
from ground.domain.tpuvm import validate_tpu_vm_zone
from ground.domain.vertexdata import vertex_tables
from ground.errors import DomainError

#: Default cap of the policy pack on one GPU quota preference (stack key maxGpuQuota).
DEFAULT_MAX_GPU_QUOTA = 16

# --------------------------------------------------------------------------------------------
# Accelerator quota: which Cloud Quotas METRIC limits a job. The quota ID (what a QuotaPreference
# names) is never written here: it is resolved from the metric through Cloud Quotas QuotaInfos
# (Pulumi: gcp.cloudquota.get_s_quota_infos; bootstrap/doctor and `tpuctl train`: CloudQuotasClient
# .list_quota_infos), so a renamed or missing quota fails with the metric named. The one exception: the
# Cloud TPU API's per-zone quotas have no known metric, so their ids are catalogued (TPU_VM_QUOTAS below) and
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
#: listed in docs/vertex.md and docs/tpu-vm.md). The quota pre-flight checks never rely on them silently: a metric the project's
#: Cloud Quotas QuotaInfos do not list is a note naming the fact (``unverified_metric_fact``), not a refusal.
UNVERIFIED_QUOTA_FACTS: dict[str, str] = {
    "p100-quota-metric": "Vertex AI's P100 quota metric is custom_model_training_nvidia_p100_gpus (the pattern of "
                         "the other GPUs; Google's sample list has no P100)",
    "spot-quota-metrics": "Vertex AI's Spot quota metrics are custom_model_training_preemptible_<gpu> (seen in "
                          "errors and listings, on no Google page)",
    "tpu-v2-quota-metric": "Vertex AI's TPU v2 quota metric is custom_model_training_tpu_v2 (the pattern of v3/v5e)",
    "tpu-v6e-quota-metric": "Vertex AI's TPU v6e quota metric is custom_model_training_tpu_v6e, counting chips (the "
                            "pattern of v3/v5e; no Google page or public listing read here names it)",
    "new-gpu-quota-metrics": "Vertex AI's quota metrics of H100 Mega, H200, B200 and RTX PRO 6000 are "
                             "custom_model_training_nvidia_<gpu>_gpus (the pattern of the others; h100_mega and h200 "
                             "seen in public repositories, on no Google page read here)",
    "tpu-vm-quota-ids": "the Cloud TPU per-zone quota ids (Google's strings from errors and listings)",
    "v4-quota-unit": "v4 per-zone quota counts TensorCores, like v5p",
}
#: The service whose quota the stack asks for by default (was compute.googleapis.com: the wrong one for Vertex AI).
QUOTA_SERVICE = QUOTA_SERVICES[DEFAULT_QUOTA_SERVICE]
#: Full metric for (quota service, spot) from GpuType.quota_metric (``nvidia_t4_gpus``).
#: vertex on-demand: ``aiplatform.googleapis.com/custom_model_training_<gpu>`` — Google's own sample
#:   github.com/GoogleCloudPlatform/vertex-ai-samples community-content/vertex_model_garden/model_oss/
#:   notebook_util/common_util.py ``get_resource_id`` (T4, L4, V100, A100, A100 80GB, H100; checked 2026-11);
#:   P100 follows the same pattern but is NOT in that list [unverified: p100-quota-metric]. H100 Mega, H200, B200 and
#:   RTX PRO 6000 (added in issue 42) follow it too [unverified: new-gpu-quota-metrics].
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
#: Metrics: v3 and v5e from the vertex-ai-samples list above; v2 follows the pattern [unverified: tpu-v2-quota-metric],
#: and so does v6e (searched for 2026-12-07 in Google's quota pages and public code: not found)
#: [unverified: tpu-v6e-quota-metric].
#: Cores per chip: v2/v3 two TensorCores per chip, v5e one (cloud.google.com/tpu/docs/system-architecture-tpu-vm,
#: checked 2026-11), v6e one ("Each v6e chip contains one TensorCore": docs.cloud.google.com/tpu/docs/v6e.md.txt, read
#: 2026-12-07). Compute Engine has no quota for Vertex TPUs; TPU VMs you create yourself use the Cloud TPU
#: API's per-zone quotas (tpu.googleapis.com: ``TPU_VM_QUOTAS``, stack key tpuVmQuotas).
VERTEX_TPU_QUOTA: dict[str, tuple[str, int]] = {
    "v2": ("aiplatform.googleapis.com/custom_model_training_tpu_v2", 2),
    "v3": ("aiplatform.googleapis.com/custom_model_training_tpu_v3", 2),
    "v5e": ("aiplatform.googleapis.com/custom_model_training_tpu_v5e", 1),
    "v6e": ("aiplatform.googleapis.com/custom_model_training_tpu_v6e", 1),
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


def parse_gpu_quota(spec: str, kind: str = DEFAULT_QUOTA_SERVICE, today: datetime.date | None = None) -> QuotaRequest:
    """``GPU_TYPE:REGION:COUNT[:spot]`` (e.g. ``nvidia-tesla-t4:us-central1:4``) → validated request for the
    quota of ``kind`` (vertex: Vertex AI custom training; compute: Compute Engine VMs/GKE). Refused: a GPU past its
    end of support, and (vertex) a region Google's locations table marks "not available for training"; a region the
    table does not list is Google's to grant or refuse."""
    name, region, count_text, spot = split_quota_spec(spec, "GPU quota", "GPU_TYPE:REGION:COUNT",
                                                      "nvidia-tesla-t4:us-central1:4")
    gpu = gpu_type(name)
    validate_region(region)
    end = gpu.end_of_support
    if end is not None and (today or datetime.date.today()) >= end:
        raise DomainError(f"GPU quota {spec!r}: NVIDIA {gpu.label} reached its end of support on {end.isoformat()}")
    offer = vertex_tables().offer(gpu.label)
    if kind == "vertex" and offer is not None and region in offer.not_for_training:
        raise DomainError(f"GPU {gpu.name} is not available for training in {region} ({vertex_tables().dated}); "
                          f"try one of {', '.join(sorted(offer.training))}")
    count = quota_count(spec, count_text, "GPU quota")
    return QuotaRequest(gpu.short, region, count, gpu_quota_metric(gpu, kind, spot), gpu=gpu, spot=spot)


def parse_tpu_quota(spec: str) -> QuotaRequest:
    """``TPU_VERSION:REGION:CORES`` (e.g. ``v5e:us-central1:8`` or ``tpu-v5e:…``) → Vertex AI TPU quota request; a
    region Google's locations table marks "not available for training" for every slice of the version is refused."""
    parts = [p.strip() for p in str(spec).split(":")]
    if len(parts) != 3:
        raise DomainError(f"TPU quota {spec!r} must be TPU_VERSION:REGION:CORES, e.g. v5e:us-central1:8")
    version, region, count_text = parts
    version = version.lower().removeprefix("tpu-")
    if version not in VERTEX_TPU_QUOTA:
        raise DomainError(f"TPU quota {spec!r}: version {version!r} must be one of {', '.join(VERTEX_TPU_QUOTA)}")
    validate_region(region)
    offers = [vertex_tables().offer(label) for label in
              sorted({s.vertex.label for s in TPU_SLICES.values() if s.vertex and s.generation == version})]
    training = frozenset().union(*(o.training for o in offers if o is not None))
    if region not in training and any(o is not None and region in o.not_for_training for o in offers):
        raise DomainError(f"TPU {version} is not available for training in {region} on Vertex AI "
                          f"({vertex_tables().dated}); try one of {', '.join(sorted(training))}")
    count = quota_count(spec, count_text, "TPU quota")
    return QuotaRequest(f"tpu-{version}", region, count, VERTEX_TPU_QUOTA[version][0], tpu_version=version)


def unverified_metric_fact(metric: str) -> str | None:
    """The UNVERIFIED_QUOTA_FACTS id ``metric`` rests on (a Spot metric, P100's, TPU v2's or v6e's), else None."""
    if metric.startswith(QUOTA_METRIC_FORMATS[("vertex", True)].split("{", 1)[0]):
        return "spot-quota-metrics"
    if metric == gpu_quota_metric(GPU_TYPES["nvidia-tesla-p100"]):
        return "p100-quota-metric"
    if metric == VERTEX_TPU_QUOTA["v2"][0]:
        return "tpu-v2-quota-metric"
    if metric == VERTEX_TPU_QUOTA["v6e"][0]:
        return "tpu-v6e-quota-metric"
    if metric in {gpu_quota_metric(GPU_TYPES[name]) for name in NEW_GPU_METRICS}:
        return "new-gpu-quota-metrics"
    return None


def job_quota_need(accel: Accelerator, replicas: int = 1, kind: str = DEFAULT_QUOTA_SERVICE,
                   spot: bool = False) -> tuple[str, int] | None:
    """(metric, units) a job of ``replicas`` copies of ``accel`` draws on; None for CPU-only jobs."""
    if accel.kind == "gpu" and accel.gpu is not None:
        return gpu_quota_metric(accel.gpu, kind, spot), accel.gpu_count * replicas
    if accel.kind == "tpu" and accel.tpu is not None:
        metric, cores_per_chip = VERTEX_TPU_QUOTA[accel.tpu.generation]
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


def tpu_vm_quota_need(accel: TpuSlice, spot: bool = False) -> tuple[str | None, int, str]:
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
