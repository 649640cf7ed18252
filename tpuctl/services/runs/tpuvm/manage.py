"""`tpuctl tpu list|delete`: the queued resources tpuctl created (labelled managed-by=tpuctl).
"""

from __future__ import annotations

from dataclasses import dataclass

from cloud import clients
from cloud.google import tpu_v2
from ground import domain
from ground.errors import UserError
from ground.outputs import StackOutputs
from tpuctl.services.runs.tpuvm.api import delete_resource, is_managed, node_labels, state_name, tpu_client
from tpuctl.services.runs.tpuvm.plan import stack_zone

# --------------------------------------------------------------------------------------------
# list / delete: only what tpuctl created (labelled managed-by=tpuctl)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunSummary:
    name: str
    state: str
    accelerator: str
    spot: bool
    run: str
    create_time: str
    tier: str = "on-demand"     # on-demand, spot or flex-start


def _zone_parent(outputs: StackOutputs | None, project: str | None, zone: str | None) -> str:
    project = project or (outputs.project if outputs else None)
    zone = zone or stack_zone(outputs)
    if not project or not zone:
        raise UserError("TPU VMs need a project and a zone: pass --stack/--outputs (or --project and --zone)")
    domain.validate_project_id(project)
    domain.validate_tpu_vm_zone(zone)
    return tpu_v2.TpuClient.common_location_path(project, zone)


def list_runs(outputs: StackOutputs | None, *, project: str | None = None, zone: str | None = None,
              client=None) -> list[RunSummary]:
    parent = _zone_parent(outputs, project, zone)
    client = client or tpu_client()
    runs = []
    with clients.google_errors(f"listing queued resources in {parent}",
                               forbidden=f"permission denied listing {parent}: you need {domain.TPU_VM_ROLE_HINT}"):
        for resource in client.list_queued_resources(parent=parent):
            if not is_managed(resource):
                continue
            specs = resource.tpu.node_spec
            created = resource.create_time.isoformat() if resource.create_time else ""
            runs.append(RunSummary(resource.name.rsplit("/", 1)[-1], state_name(resource),
                                   specs[0].node.accelerator_type if specs else "?", "spot" in resource,
                                   node_labels(resource).get(domain.TPU_VM_RUN_LABEL, ""), created, _tier(resource)))
    return sorted(runs, key=lambda r: r.name)


def _tier(resource) -> str:
    if node_labels(resource).get(domain.PROVISIONING_LABEL) == "flex-start":
        return "flex-start"
    return "spot" if "spot" in resource else "on-demand"


def delete(name: str, outputs: StackOutputs | None, *, project: str | None = None, zone: str | None = None,
           client=None) -> str:
    """Delete a tpuctl-created queued resource (and its nodes); refuses one tpuctl did not label."""
    domain.validate_tpu_vm_name(name)
    parent = _zone_parent(outputs, project, zone)
    full = f"{parent}/queuedResources/{name}"
    client = client or tpu_client()
    with clients.google_errors(f"reading queued resource {full}",
                               not_found=f"no queued resource {name} in {parent.rsplit('/', 1)[-1]} "
                                         "(`tpuctl tpu list` shows tpuctl's)"):
        resource = client.get_queued_resource(name=full)
    if not is_managed(resource):
        key, value = domain.TPU_VM_MANAGED_LABEL
        raise UserError(f"queued resource {name} was not created by tpuctl (no {key}={value} label); "
                        "tpuctl leaves it alone: delete it with gcloud if you mean to")
    failed = delete_resource(client, full)
    if failed is not None:
        raise UserError(f"could not delete queued resource {name}: {failed}", 1)
    return full
