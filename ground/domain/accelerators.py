"""Accelerators: the GPU catalogue, what ``--accelerator`` names, Vertex AI prebuilt training images.

TPU slices are catalogued in ``tpu`` (one record per slice, every name users type); quota facts in ``quotas``.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ground.domain.names import nearest_multi_region, validate_region
from ground.domain.tpu import TpuSlice, tpu_slice_key, vertex_tpu, vertex_tpu_names
from ground.errors import DomainError


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


def gpu_type(name: str) -> GpuType:
    """Look up a GPU by Compute Engine name (nvidia-tesla-t4) or short name (t4)."""
    key = name.strip().lower()
    if key in GPU_TYPES:
        return GPU_TYPES[key]
    if key in GPU_BY_SHORT:
        return GPU_BY_SHORT[key]
    raise DomainError(f"unknown GPU type {name!r}; known: {', '.join(sorted(GPU_TYPES))}")


@dataclass(frozen=True)
class Accelerator:
    """What ``--accelerator`` names: where the trainer runs and with which strategy."""
    name: str
    kind: str                         # cpu | gpu | tpu
    gpu: GpuType | None = None
    gpu_count: int = 0
    tpu: TpuSlice | None = None       # a slice Vertex AI offers (its ``vertex`` is set)
    cpu_machine_type: str = "n1-standard-4"
    strategy: str = field(default="cpu")   # trainer --distribution_strategy

    @property
    def machine_type(self) -> str:
        if self.kind == "gpu":
            assert self.gpu is not None
            return self.gpu.machine_types[self.gpu_count]
        if self.kind == "tpu":
            assert self.tpu is not None and self.tpu.vertex is not None
            return self.tpu.vertex.machine_type
        return self.cpu_machine_type

    @property
    def regions(self) -> frozenset[str] | None:
        if self.gpu is not None:
            return self.gpu.regions
        if self.tpu is not None and self.tpu.vertex is not None:
            return self.tpu.vertex.regions
        return None


_GPU_ACCEL = re.compile(r"^gpu(?:-(?P<type>[a-z0-9-]+?))?(?:x(?P<count>\d+))?$")

def parse_accelerator(name: str) -> Accelerator:
    """``cpu``, ``gpu`` (one T4), ``gpu-t4``, ``gpu-t4x2``, ``gpu-l4x4``, ``tpu-v3-8``, ``tpu-v5e-4``…"""
    key = name.strip().lower()
    if key == "cpu":
        return Accelerator("cpu", "cpu", strategy="cpu")
    tpu = vertex_tpu(key)
    if tpu is not None:
        return Accelerator(tpu.vertex_name, "tpu", tpu=tpu, strategy="tpu")
    m = _GPU_ACCEL.match(key)
    if m:
        gpu = gpu_type(m.group("type") or "t4")
        count = int(m.group("count") or 1)
        if count not in gpu.machine_types:
            raise DomainError(
                f"accelerator {name!r}: {gpu.name} comes in counts {', '.join(map(str, sorted(gpu.machine_types)))}"
            )
        return Accelerator(key, "gpu", gpu=gpu, gpu_count=count, strategy="gpu")
    known = ["cpu", "gpu", *(f"gpu-{g.short}[xN]" for g in GPU_TYPES.values()), *vertex_tpu_names()]
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
    if accel.tpu is not None and accel.tpu.generation not in image.tpu_versions:
        raise DomainError(f"Vertex AI publishes no prebuilt TensorFlow image for TPU {accel.tpu.generation} "
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
