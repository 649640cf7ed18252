"""Vertex AI persistent resources: a cluster kept for repeated jobs (`tpuctl cluster create|ls|delete`), so a retry
or a tuning trial starts on machines that are already there instead of minutes of provisioning; `train/tune
--target vertex --cluster NAME` runs on one (``CustomJobSpec.persistent_resource_id``, set by ``runs.vertex``).

The requests are google-cloud-aiplatform's own types (``aiplatform_v1.PersistentResource``, parsed back strictly),
sent through its ``PersistentResourceServiceClient`` (google/cloud/aiplatform/v1/persistent_resource.proto and
persistent_resource_service.proto, google-cloud-aiplatform 2.7, read 2026-11-27). A cluster runs its jobs as the
job's own service account: ``resource_runtime_spec.service_account_spec.enable_custom_service_account`` ("If true,
custom user-managed service account is enforced to run any workloads ... Otherwise, uses the Vertex AI Custom Code
Service Agent"); its ``service_account`` stays empty ("Do not set this field if you want to submit jobs using custom
service account to this PersistentResource after creation, but only specify the service_account inside the job").
A persistent resource is billed while it exists, jobs or not; its hourly price is its pools' (``cost``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cloud import clients
from cloud.google import aiplatform_v1, api_exceptions
from ground import domain
from ground.errors import UserError
from ground.outputs import StackOutputs, require_outputs
from tpuctl.services.runs import cost
from tpuctl.services.runs.vertex import check_cluster_name, get_cluster, job_to_dict, machine_spec, strict
from tpuctl.services.runs.vertex import cluster_client as client
from tpuctl.services.runs.vertex import cluster_name as resource_name

#: --replicas of a cluster's one pool: tpuctl's bound (more is a pool spec of its own, not a flag).
MAX_REPLICAS = 64

Echo = Callable[[str], None]


@dataclass(frozen=True)
class ClusterPlan:
    """A cluster to create: where, and the request (``aiplatform_v1.PersistentResource``)."""
    project: str
    region: str
    name: str
    accelerator: str
    replicas: int
    resource: Any

    @property
    def parent(self) -> str:
        return aiplatform_v1.PersistentResourceServiceClient.common_location_path(self.project, self.region)

    def describe(self) -> dict[str, Any]:
        """What ``--dry-run`` prints: the request as the REST API spells it."""
        return {"parent": self.parent, "persistentResourceId": self.name,
                "persistentResource": job_to_dict(self.resource)}


def plan_cluster(name: str, outputs: StackOutputs | None, *, accelerator: str, replicas: int = 1,
                 region: str | None = None, echo: Echo | None = None) -> ClusterPlan:
    """The cluster ``name``: one resource pool of ``replicas`` machines of ``accelerator`` (the machine a job of
    the same ``--accelerator`` asks for: a job runs on a pool whose machine spec matches its own), labelled as
    tpuctl's, every input checked before anything is sent."""
    check_cluster_name(name)
    if not 1 <= replicas <= MAX_REPLICAS:
        raise UserError(f"invalid value for --replicas: {replicas} (out of range: 1..{MAX_REPLICAS})")
    outputs = require_outputs(outputs, "cluster create")
    project = outputs.require("project")
    region = region or outputs.require("region", "pass --region")
    accel = domain.vertex_accelerator(accelerator)
    warning = domain.check_accelerator_region(accel, region)      # a region not for training: DomainError
    if warning and echo is not None:
        echo(warning)
    labels = {**outputs.labels, domain.TPU_VM_MANAGED_LABEL[0]: domain.TPU_VM_MANAGED_LABEL[1],
              "accelerator": re.sub(r"[^a-z0-9_-]", "-", accel.name.lower())[:63]}
    domain.validate_labels(labels)
    resource = aiplatform_v1.PersistentResource(
        display_name=name, labels=labels,
        resource_pools=[aiplatform_v1.ResourcePool(machine_spec=machine_spec(accel), replica_count=replicas)],
        resource_runtime_spec=aiplatform_v1.ResourceRuntimeSpec(
            service_account_spec=aiplatform_v1.ServiceAccountSpec(enable_custom_service_account=True)))
    return ClusterPlan(project, region, name, accel.name, replicas, strict(resource))


def estimate(resource, region: str, prices=None) -> cost.CostEstimate:
    """USD per hour of the cluster's pools, billed while it exists (list prices, as every estimate)."""
    return cost.estimate_pools(resource.resource_pools, region, prices=prices)


def hourly_lines(resource, region: str, prices=None) -> list[str]:
    """The estimate's lines, said as a cluster's: per hour while it exists (no run time bounds it)."""
    lines = estimate(resource, region, prices).lines()
    return [line.split("; maximum for")[0] + " while the cluster exists" if "total:" in line else line
            for line in lines]


def create_cluster(plan: ClusterPlan, *, api=None) -> str:
    """Send the create; returns the cluster's resource name. Provisioning goes on at Google: ``cluster ls`` shows
    PROVISIONING, then RUNNING."""
    api = api or client(plan.region)
    with clients.google_errors(f"creating cluster {plan.name} in {plan.region}",
                               forbidden=f"permission denied creating cluster {plan.name}: you need "
                                         "aiplatform.persistentResources.create (roles/aiplatform.user)", exit_code=1):
        try:
            api.create_persistent_resource(parent=plan.parent, persistent_resource=plan.resource,
                                           persistent_resource_id=plan.name)
        except api_exceptions.AlreadyExists:
            raise UserError(f"a cluster {plan.name} already exists in {plan.region}; pick another name or delete it "
                            f"with `tpuctl cluster delete {plan.name} --region {plan.region}`", 1) from None
    return resource_name(plan.project, plan.region, plan.name)


@dataclass(frozen=True)
class ClusterRow:
    name: str
    state: str
    machines: str
    managed: bool
    created: str


def list_clusters(project: str, region: str, *, api=None) -> list[ClusterRow]:
    """Every persistent resource of the region (tpuctl's and others), by name."""
    api = api or client(region)
    parent = aiplatform_v1.PersistentResourceServiceClient.common_location_path(project, region)
    key, value = domain.TPU_VM_MANAGED_LABEL
    rows = []
    with clients.google_errors(f"listing the clusters of {project} in {region}", exit_code=1):
        for item in api.list_persistent_resources(parent=parent):
            pools = ", ".join(f"{p.replica_count} × {p.machine_spec.machine_type}"
                              + (f" + {p.machine_spec.accelerator_count} × "
                                 f"{aiplatform_v1.AcceleratorType(p.machine_spec.accelerator_type).name}"
                                 if p.machine_spec.accelerator_count else "")
                              for p in item.resource_pools)
            rows.append(ClusterRow(item.name.rsplit("/", 1)[-1], aiplatform_v1.PersistentResource.State(item.state).name,
                                   pools, item.labels.get(key) == value,
                                   item.create_time.isoformat() if item.create_time else "-"))
    return sorted(rows, key=lambda row: row.name)


def delete_cluster(project: str, region: str, name: str, *, api=None) -> str:
    """Delete a cluster tpuctl created (its label says so; another one is refused in one line)."""
    api = api or client(region)
    found = get_cluster(project, region, name, api=api)
    key, value = domain.TPU_VM_MANAGED_LABEL
    if found.labels.get(key) != value:
        raise UserError(f"cluster {name} was not created by tpuctl (no {key}={value} label); delete it in the "
                        "console or with gcloud", 2)
    with clients.google_errors(f"deleting cluster {name}", exit_code=1):
        api.delete_persistent_resource(name=found.name)
    return found.name


def declared_cluster_lines(settings, *, prices=None) -> list[str]:
    """What ``tpuctl plan`` says of the stack's ``trainingCluster``: its machines and its cost per hour while it
    exists (list prices, as every estimate; unknown naming why), and the notes of the price source."""
    if settings is None or not settings.training_cluster:
        return []
    name, accelerator, replicas = domain.parse_training_cluster(settings.training_cluster)
    pools = [{"machine_spec": machine_spec(domain.vertex_accelerator(accelerator)), "replica_count": replicas}]
    found = cost.estimate_pools(pools, settings.region, prices=prices)
    price = (f"${found.hourly:.4f}/h while it exists (${found.hourly * 24:.2f} a day), jobs or not"
             if found.hourly is not None else "unknown: " + "; ".join(found.missing))
    return [f"Training cluster {name} ({replicas} × {accelerator}, {settings.region}): {price}; "
            f"{found.source or 'no price source'}", *(f"  note: {n}" for n in found.notes)]

