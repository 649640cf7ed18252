"""The training cluster a stack owns when ``trainingCluster`` is set: a Vertex AI persistent resource
(``tpuctl train --target vertex --cluster NAME`` runs on it; ``tpuctl cluster`` makes one without Pulumi).

Facts (pulumi-gcp 10.2 ``gcp.vertex.AiPersistentResource``, read 2026-11-27): ``name`` is the resource id,
``location`` its region, ``resource_pools`` each a ``machine_spec`` (machine type, accelerator type and count; no TPU
topology) and a ``replica_count`` (a string, as the API's int64), ``resource_runtime_spec.service_account_spec.
enable_custom_service_account`` lets each job run as its own service account (the stack's training account), as
``tpuctl cluster create`` asks (tpuctl/services/runs/cluster.py). It is billed while it exists, jobs or not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi
import pulumi_gcp as gcp

from ground import domain


def training_cluster(*, project: str, region: str, spec: str, labels: Mapping[str, str],
                     depends_on: Sequence[pulumi.Resource] = ()) -> str:
    """Register the persistent resource of ``spec`` (``NAME:ACCELERATOR[:REPLICAS]``); returns its name."""
    name, accelerator, replicas = domain.parse_training_cluster(spec)
    accel = domain.vertex_accelerator(accelerator)
    machine: dict[str, object] = {"machine_type": accel.machine_type}
    if accel.kind == "gpu" and accel.gpu is not None:
        machine.update(accelerator_type=accel.gpu.vertex_accelerator, accelerator_count=accel.gpu_count)
    gcp.vertex.AiPersistentResource(
        "training-cluster",
        name=name,
        display_name=name,
        project=project,
        location=region,
        labels={**labels, "accelerator": accel.name},
        resource_pools=[{"machine_spec": machine, "replica_count": str(replicas)}],
        resource_runtime_spec={"service_account_spec": {"enable_custom_service_account": True}},
        opts=pulumi.ResourceOptions(depends_on=list(depends_on)),
    )
    return name
