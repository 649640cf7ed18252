"""The host shapes behind Vertex AI GPU estimates: every machine type tpuctl asks Vertex for has a sourced vCPU/GiB
shape, and a host SKU of another machine series of the same family is never taken for it."""

from __future__ import annotations

import pytest

from ground import domain


def _sku(description: str, region: str = "us-central1", usage: str = "OnDemand", unit: str = "h"):
    return domain.SkuRecord("X", description, "vertex", "Compute", "", usage, (region,), 1.0, unit)


#: Hosts of the GPUs added in issue 42: no shape was read for them (the SkyPilot rows above predate them), so their
#: estimates are "unknown" naming the shape, never guessed.
UNPRICED_HOSTS = {"a2-megagpu-16g", "a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g", "g4-standard-48",
                  "g4-standard-96", "g4-standard-192", "g4-standard-384"}


def test_every_gpu_machine_type_tpuctl_requests_has_a_shape():
    wanted = {m for gpu in domain.GPU_TYPES.values() for m in gpu.machine_types.values()}
    assert wanted - set(domain.VERTEX_HOST_SHAPES) == UNPRICED_HOSTS
    with pytest.raises(domain.DomainError, match="does not know the vCPU/memory shape of a3-ultragpu-8g"):
        domain.vertex_host_wants("a3-ultragpu-8g")


@pytest.mark.parametrize("machine, cpus, gib", [
    # Rows of skypilot-catalog catalogs/v7/gcp/vms.csv at 6f65ab58724c (vCPUs, MemoryGiB).
    ("g2-standard-8", 8, 32.0), ("g2-standard-96", 96, 384.0), ("a2-highgpu-1g", 12, 85.0),
    ("a2-ultragpu-8g", 96, 1360.0), ("a3-highgpu-8g", 208, 1872.0), ("n1-standard-8", 8, 30.0),
])
def test_shapes_are_the_catalogued_rows(machine, cpus, gib):
    assert domain.vertex_host_wants(machine)[2:] == (cpus, gib)
    assert "6f65ab58724c" in domain.ACCELERATOR_HOST_SHAPES_SOURCE


@pytest.mark.parametrize("machine, taken, refused", [
    ("g2-standard-8", "Vertex AI Training on G2 Instance Core running in Americas",
     "Vertex AI Training on A2 Instance Core running in Americas"),
    ("a2-highgpu-1g", "Vertex AI Training on A2 Instance Core running in Americas",
     "Vertex AI Training on A2 Ultra Instance Core running in Americas"),
    ("a2-ultragpu-1g", "Vertex AI Training on A2 Ultra Instance Core running in Americas",
     "Vertex AI Training on A2 Instance Core running in Americas"),
    ("a3-highgpu-1g", "Vertex AI Training on A3 Instance Core running in Americas",
     "Vertex AI Training on A3 Mega Instance Core running in Americas"),
])
def test_a_host_sku_of_another_series_is_never_taken(machine, taken, refused):
    core = domain.vertex_host_wants(machine)[0]
    assert core.matches(_sku(taken), "us-central1", False)
    assert not core.matches(_sku(refused), "us-central1", False)
    assert not core.matches(_sku(taken.replace("Core", "Ram"), unit="GiBy.h"), "us-central1", False)
