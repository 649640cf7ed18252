"""The TPU VM catalogue: accelerator types, chips, hosts, runtimes; unknown names rejected with the list."""

from __future__ import annotations

import pytest

from ground import domain


@pytest.mark.parametrize("name, generation, chips, hosts, vms, runtime", [
    ("v5litepod-1", "v5e", 1, 1, 1, "v2-alpha-tpuv5-lite"),
    ("v5litepod-8", "v5e", 8, 1, 1, "v2-alpha-tpuv5-lite"),
    ("v5litepod-16", "v5e", 16, 2, 4, "v2-alpha-tpuv5-lite"),
    ("v5litepod-256", "v5e", 256, 32, 64, "v2-alpha-tpuv5-lite"),
    ("v6e-8", "v6e", 8, 1, 1, "v2-alpha-tpuv6e"),
    ("v6e-16", "v6e", 16, 2, 4, "v2-alpha-tpuv6e"),
    ("v5p-8", "v5p", 4, 1, 1, "v2-alpha-tpuv5"),
    ("v5p-16", "v5p", 8, 2, 2, "v2-alpha-tpuv5"),
    ("v5p-32", "v5p", 16, 4, 4, "v2-alpha-tpuv5"),
    ("v4-8", "v4", 4, 1, 1, "tpu-ubuntu2204-base"),
    ("v4-32", "v4", 16, 4, 4, "tpu-ubuntu2204-base"),
])
def test_known_types(name, generation, chips, hosts, vms, runtime):
    accel = domain.parse_tpu_vm_accelerator(name.upper())
    assert (accel.name, accel.generation, accel.chips, accel.hosts, accel.vms, accel.runtime_version) == \
        (name, generation, chips, hosts, vms, runtime)
    assert accel.multi_host == (vms > 1)


def test_v5e_topologies_follow_googles_table():
    shapes = {a.name: a.topology for a in domain.TPU_SLICES.values() if a.generation == "v5e"}
    assert shapes == {"v5litepod-1": "1x1", "v5litepod-4": "2x2", "v5litepod-8": "2x4", "v5litepod-16": "4x4",
                      "v5litepod-32": "4x8", "v5litepod-64": "8x8", "v5litepod-128": "8x16",
                      "v5litepod-256": "16x16"}


@pytest.mark.parametrize("typed, machine_type, topology, vms", [
    ("tpu-v6e-1", "ct6e-standard-1t", "1x1", 1), ("tpu-v6e-4", "ct6e-standard-4t", "2x2", 1),
    ("v6e-8", "ct6e-standard-8t", "2x4", 1), ("tpu-v6e-16", "ct6e-standard-4t", "4x4", 4),
    ("tpu-v6e-32", "ct6e-standard-4t", "4x8", 8), ("tpu-v6e-256", "ct6e-standard-4t", "16x16", 64),
])
def test_tpu_v6e_is_a_vertex_ai_slice_by_its_machine_spec(typed, machine_type, topology, vms):
    # Vertex AI's TPU page offers TPU v6e (JAX 0.4.37+); the machine spec is the Cloud TPU v6e page's GKE machine type
    # and topology [unverified: vertex-v6e-machine-specs], one replica of `vms` TPU VMs, as the TPU VM route counts them
    from tpuctl.services.runs.vertex import machine_spec

    accel = domain.vertex_accelerator(typed)
    assert "vertex" in accel.targets and accel.name in domain.vertex_tpu_names()
    assert machine_spec(accel) == {"machine_type": machine_type, "tpu_topology": topology}
    assert accel.tpu.vertex.vms == accel.tpu.vms == vms and accel.tpu.vertex.multi_host == (vms > 1)
    assert accel.label == "TPU v6e" and accel.regions == domain.vertex_tables().offer("TPU v6e").training


@pytest.mark.parametrize("name, hint", [
    ("v5litepod-12", ""), ("tpu-v3-8", "run through Vertex AI"), ("v7-8", ""), ("", ""),
])
def test_unknown_type_is_rejected_with_the_valid_names(name, hint):
    with pytest.raises(domain.DomainError) as err:
        domain.parse_tpu_vm_accelerator(name)
    message = str(err.value)
    assert "valid: v6e-1, v6e-4" in message and "v5litepod-16" in message and "v4-8" in message
    assert hint in message and "\n" not in message


@pytest.mark.parametrize("typed, api_name", [
    ("v5litepod-16", "v5litepod-16"), ("v5e-16", "v5litepod-16"), ("tpu-v5e-16", "v5litepod-16"),
    ("TPU-V5E-8", "v5litepod-8"), ("v6e-8", "v6e-8"), ("tpu-v6e-8", "v6e-8"), ("tpu-v5p-8", "v5p-8"),
])
def test_every_name_users_type_finds_the_one_record(typed, api_name):
    accel = domain.parse_tpu_vm_accelerator(typed)
    assert accel is domain.TPU_SLICES[api_name]
    assert typed.lower() in (accel.name, *accel.aliases)


def test_one_record_per_slice_serves_both_targets_under_every_name():
    # Vertex AI (--accelerator tpu-v5e-8) and the Cloud TPU API (v5litepod-8) read the same record.
    for typed in ("tpu-v5e-8", "v5e-8", "v5litepod-8"):
        accel = domain.parse_accelerator(typed)
        assert accel.name == "tpu-v5e-8" and accel.tpu is domain.TPU_SLICES["v5litepod-8"]
        assert domain.parse_tpu_vm_accelerator(typed) is accel.tpu
    # no two records share a name, whichever spelling
    names = [n for s in domain.TPU_SLICES.values() for n in (s.name, *s.aliases)]
    assert len(names) == len(set(names))
    assert all(domain.find_tpu_slice(n) is s for s in domain.TPU_SLICES.values() for n in (s.name, *s.aliases))
    # v2/v3 boards and Pods run on Vertex AI only; v5e and v6e slices of several VMs on both (Vertex AI's TPU page
    # offers v6e, for JAX); v5p on TPU VMs only
    assert domain.TPU_SLICES["v3-8"].vertex is not None and not domain.TPU_SLICES["v3-8"].tpu_vm
    assert domain.TPU_SLICES["v3-32"].vertex is not None and not domain.TPU_SLICES["v3-32"].tpu_vm
    assert domain.parse_accelerator("v5litepod-16").tpu is domain.TPU_SLICES["v5litepod-16"]
    assert domain.parse_accelerator("v6e-16").targets == {"local", "tpu-vm", "vertex"}    # one record, parsed once
    assert domain.parse_accelerator("v5p-16").targets == {"local", "tpu-vm"}
    with pytest.raises(domain.DomainError, match=r"--target tpu-vm"):
        domain.vertex_accelerator("v5p-16")
    with pytest.raises(domain.DomainError, match=r"run through Vertex AI"):
        domain.parse_tpu_vm_accelerator("tpu-v3-8")


def test_names_and_zones():
    assert domain.validate_tpu_vm_name("tpuctl-20261122-101010") == "tpuctl-20261122-101010"
    for bad in ("Upper", "-x", "x-", "a" * 64, "under_score", ""):
        with pytest.raises(domain.DomainError):
            domain.validate_tpu_vm_name(bad)
    assert domain.validate_tpu_vm_zone("us-central1-a") == "us-central1-a"
    for bad in ("us-central1", "us-centra1-a", "moon-base1-a"):
        with pytest.raises(domain.DomainError):
            domain.validate_tpu_vm_zone(bad)


def test_tpu_only_region_zones_are_accepted_where_tpu_vms_go():
    from ground.errors import DomainError
    from ground.settings import StackSettings

    # us-central2-b: the TPU v4 zone, in a region without Compute Engine VMs (not in names.REGIONS)
    assert domain.validate_tpu_vm_zone("us-central2-b") == "us-central2-b"
    assert domain.parse_tpu_vm_quota("v4:us-central2-b:32:spot").dimensions == {"zone": "us-central2-b"}
    assert StackSettings.model_validate({"project": "my-tpu-project", "tpuZone": "us-central2-b"}).tpu_zone \
        == "us-central2-b"
    with pytest.raises(DomainError, match="not a Google Cloud region"):
        domain.validate_zone("us-central2-b")           # everything else keeps the Compute Engine list
    with pytest.raises(DomainError, match="not a Google Cloud region"):
        domain.validate_tpu_vm_zone("us-central9-a")


@pytest.mark.parametrize("status, message, refused", [
    (429, "Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region us-east5.",
     True),
    (429, "anything at all", True),
    (400, "Cloud TPU received a bad request. the accelerator v4-128 was not found in zone us-central2-b", True),
    (400, "Cloud TPU received a bad request. ... could not be found in the zonal accelerator configurations for x",
     True),
    (404, "There is no more capacity in the zone \"europe-west4-a\"; you can try in another zone", True),
    (400, "Invalid value at 'queued_resource.tpu.node_spec[0].node.labels'", False),
    (403, "Permission 'tpu.queuedResources.create' denied", False),
    (409, "the accelerator v4-8 was not found in zone us-central2-b", False),
    (None, "no more capacity", False),
])
def test_a_create_refusal_for_the_zone_is_told_from_one_every_zone_would_give(status, message, refused):
    assert domain.is_tpu_vm_zone_refusal(status, message) is refused
