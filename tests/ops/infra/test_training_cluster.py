"""trainingCluster under mocks: the stack owns one Vertex AI persistent resource (pulumi-gcp's AiPersistentResource)
of the machine `train -a ACCELERATOR` asks for, and `tpuctl plan` prices it per hour."""

from __future__ import annotations

import pytest

from ground import domain
from ground import tokens as T
from infra.config import ConfigError
from infra.mocks import run_program

PROJECT = "my-tpu-project"


def test_the_stack_owns_its_cluster():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:region": "us-central1",
                       "tpuctl:trainingCluster": "team-t4:gpu-t4x2:3"})
    [cluster] = run.of_type(T.VERTEX_PERSISTENT_RESOURCE)
    assert cluster.inputs["name"] == "team-t4" and cluster.inputs["location"] == "us-central1"
    [pool] = cluster.inputs["resourcePools"]
    assert pool["replicaCount"] == "3"
    # the machine `train -a gpu-t4x2` asks for (a job runs on the pool of its own machine)
    assert pool["machineSpec"] == {"machineType": domain.parse_accelerator("gpu-t4x2").machine_type,
                                   "acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": 2}
    assert cluster.inputs["resourceRuntimeSpec"] == {"serviceAccountSpec": {"enableCustomServiceAccount": True}}
    assert cluster.inputs["labels"]["managed-by"] == "tpuctl"


def test_no_cluster_unless_asked():
    assert run_program({"tpuctl:project": PROJECT}).of_type(T.VERTEX_PERSISTENT_RESOURCE) == []


@pytest.mark.parametrize("value, says", [("team", "NAME:ACCELERATOR"), ("Team:gpu-t4", "NAME:ACCELERATOR"),
                                         ("t:gpu-t4:0", "REPLICAS"), ("t:tpu-v5e-4", "tpuctl cluster create"),
                                         ("t:gpu-zz", "zz")])
def test_a_bad_cluster_is_a_config_error_before_anything_registers(registrations, value, says):
    with pytest.raises(ConfigError, match=r"^tpuctl:trainingCluster: ") as info:
        run_program({"tpuctl:project": PROJECT, "tpuctl:trainingCluster": value})
    assert says in str(info.value) and registrations == []
