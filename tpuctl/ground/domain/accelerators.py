"""Accelerators: GPUs (quota ids, Vertex enums), TPUs (Vertex machine specs), Vertex prebuilt images.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from tpuctl.ground.domain.names import validate_region
from tpuctl.ground.errors import DomainError


@dataclass(frozen=True)
class GpuType:
    name: str                 # Compute Engine accelerator type, e.g. nvidia-tesla-t4
    short: str                # CLI short name: t4
    vertex_accelerator: str   # aiplatform AcceleratorType enum name
    quota_id: str             # Cloud Quotas per-region quota id (compute.googleapis.com)
    machine_types: Mapping[int, str]  # GPU count -> smallest machine type Vertex accepts with it
    regions: frozenset[str]


_N1 = {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32", 8: "n1-standard-64"}

GPU_TYPES: dict[str, GpuType] = {
    g.name: g
    for g in (
        GpuType("nvidia-tesla-t4", "t4", "NVIDIA_TESLA_T4", "NVIDIA-T4-GPUS-per-project-region", _N1,
                frozenset({"us-central1", "us-east1", "us-east4", "us-west1", "us-west2", "us-west4",
                           "europe-west1", "europe-west2", "europe-west3", "europe-west4",
                           "asia-east1", "asia-northeast1", "asia-northeast3", "asia-south1",
                           "asia-southeast1", "australia-southeast1", "northamerica-northeast1",
                           "southamerica-east1"})),
        GpuType("nvidia-tesla-v100", "v100", "NVIDIA_TESLA_V100", "NVIDIA-V100-GPUS-per-project-region", _N1,
                frozenset({"us-central1", "us-east1", "us-west1", "europe-west4", "asia-east1"})),
        GpuType("nvidia-tesla-p100", "p100", "NVIDIA_TESLA_P100", "NVIDIA-P100-GPUS-per-project-region",
                {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32"},
                frozenset({"us-central1", "us-east1", "us-west1", "europe-west1", "europe-west4", "asia-east1"})),
        GpuType("nvidia-l4", "l4", "NVIDIA_L4", "NVIDIA-L4-GPUS-per-project-region",
                {1: "g2-standard-8", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"},
                frozenset({"us-central1", "us-east1", "us-east4", "us-west1", "us-west4", "europe-west1",
                           "europe-west2", "europe-west3", "europe-west4", "asia-east1", "asia-northeast1",
                           "asia-southeast1"})),
        GpuType("nvidia-tesla-a100", "a100", "NVIDIA_TESLA_A100", "NVIDIA-A100-GPUS-per-project-region",
                {1: "a2-highgpu-1g", 2: "a2-highgpu-2g", 4: "a2-highgpu-4g", 8: "a2-highgpu-8g"},
                frozenset({"us-central1", "us-east1", "us-west1", "us-west3", "us-west4", "europe-west4",
                           "asia-northeast1", "asia-southeast1"})),
        GpuType("nvidia-a100-80gb", "a100-80gb", "NVIDIA_A100_80GB", "NVIDIA-A100-80GB-GPUS-per-project-region",
                {1: "a2-ultragpu-1g", 2: "a2-ultragpu-2g", 4: "a2-ultragpu-4g", 8: "a2-ultragpu-8g"},
                frozenset({"us-central1", "us-east4", "us-east5", "europe-west4", "asia-southeast1"})),
        GpuType("nvidia-h100-80gb", "h100", "NVIDIA_H100_80GB", "NVIDIA-H100-GPUS-per-project-region",
                {8: "a3-highgpu-8g"},
                frozenset({"us-central1", "us-east4", "us-east5", "us-west1", "europe-west4", "asia-southeast1"})),
    )
}
GPU_BY_SHORT: dict[str, GpuType] = {g.short: g for g in GPU_TYPES.values()}
#: Project-wide GPU quota (all regions) that every regional GPU request also needs.
GPUS_ALL_REGIONS_QUOTA_ID = "GPUS-ALL-REGIONS-per-project"
QUOTA_SERVICE = "compute.googleapis.com"
DEFAULT_MAX_GPU_QUOTA = 16


def gpu_type(name: str) -> GpuType:
    """Look up a GPU by Compute Engine name (nvidia-tesla-t4) or short name (t4)."""
    key = name.strip().lower()
    if key in GPU_TYPES:
        return GPU_TYPES[key]
    if key in GPU_BY_SHORT:
        return GPU_BY_SHORT[key]
    raise DomainError(f"unknown GPU type {name!r}; known: {', '.join(sorted(GPU_TYPES))}")


@dataclass(frozen=True)
class GpuQuotaRequest:
    gpu: GpuType
    region: str
    count: int

    @property
    def quota_id(self) -> str:
        return self.gpu.quota_id


def parse_gpu_quota(spec: str) -> GpuQuotaRequest:
    """``GPU_TYPE:REGION:COUNT`` (e.g. ``nvidia-tesla-t4:us-central1:4``) → validated request."""
    parts = [p.strip() for p in str(spec).split(":")]
    if len(parts) != 3:
        raise DomainError(f"GPU quota {spec!r} must be GPU_TYPE:REGION:COUNT, e.g. nvidia-tesla-t4:us-central1:4")
    name, region, count_text = parts
    gpu = gpu_type(name)
    validate_region(region)
    if region not in gpu.regions:
        raise DomainError(f"GPU {gpu.name} is not offered in {region}; try one of {', '.join(sorted(gpu.regions))}")
    try:
        count = int(count_text)
    except ValueError:
        raise DomainError(f"GPU quota {spec!r}: count {count_text!r} is not a whole number") from None
    if count <= 0:
        raise DomainError(f"GPU quota {spec!r}: count must be at least 1")
    return GpuQuotaRequest(gpu, region, count)


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


def parse_accelerator(name: str) -> Accelerator:
    """``cpu``, ``gpu`` (one T4), ``gpu-t4``, ``gpu-t4x2``, ``gpu-l4x4``, ``tpu-v3-8``, ``tpu-v5e-4``…"""
    key = name.strip().lower()
    if key == "cpu":
        return Accelerator("cpu", "cpu", strategy="cpu")
    if key in TPU_TYPES:
        return Accelerator(key, "tpu", tpu=TPU_TYPES[key], strategy="tpu")
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
    raise DomainError(f"unknown accelerator {name!r}; known: {', '.join(known)}")


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

    def uri(self, region: str | None = None) -> str:
        """Same image in the Artifact Registry multi-region nearest to ``region`` (us/europe/asia)."""
        area = "us"
        if region and region.startswith("europe-"):
            area = "europe"
        elif region and region.startswith(("asia-", "australia-", "me-")):
            area = "asia"
        return f"{area}-docker.pkg.dev/vertex-ai/training/{self.name}:latest"


#: Newest TensorFlow prebuilt training containers in Vertex AI's list
#: (cloud.google.com/vertex-ai/docs/training/pre-built-containers, checked 2026-11): TF 2.17 for
#: CPU/GPU, TF 2.15 for TPU VMs (no newer TF TPU image is published). Only ``:latest`` tags work.
#: ``tpuctl train --image`` overrides the choice.
VERTEX_TRAINING_IMAGES: dict[str, TrainingImage] = {
    "cpu": TrainingImage("tf-cpu.2-17.py310", "2.17"),
    "gpu": TrainingImage("tf-gpu.2-17.py310", "2.17"),
    "tpu": TrainingImage("tf-tpu.2-15.cp310", "2.15"),
}

#: Console page of a CustomJob (job_id = last segment of projects/P/locations/R/customJobs/ID), as
#: google-cloud-aiplatform 2.x links it (Vertex AI's console moved under "agent-platform").
VERTEX_CUSTOM_JOB_CONSOLE_URL = (
    "https://console.cloud.google.com/agent-platform/locations/{region}/training/{job_id}?project={project}"
)
#: Regional Vertex AI API host (REST and gRPC).
VERTEX_API_HOST = "{region}-aiplatform.googleapis.com"
