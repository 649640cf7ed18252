"""TPU VMs tpuctl creates through the Cloud TPU API (queued resources): run names, labels, zones, node states.

The slices themselves (``v5litepod-16`` …, with their aliases and base runtimes) are the TPU catalogue of ``tpu``;
their per-zone quotas are in ``quotas``.
"""

from __future__ import annotations

import re

from ground.domain.names import validate_zone
from ground.errors import DomainError

#: Labels tpuctl puts on every TPU VM it creates (``list``/``delete`` only touch resources that carry the first).
TPU_VM_MANAGED_LABEL = ("managed-by", "tpuctl")
TPU_VM_RUN_LABEL = "tpuctl-run"
#: The label that names a run's provisioning model where the resource read back cannot (flex-start through v2).
PROVISIONING_LABEL = "tpuctl-provisioning"

#: A TPU VM node whose hosts are gone while its queued resource may still say ACTIVE: ``Node.state`` PREEMPTED ("TPU
#: node has been preempted"), TERMINATED ("terminated due to maintenance or has reached the end of its life cycle (for
#: preemptible nodes)"), and ``Node.health`` UNHEALTHY_MAINTENANCE ("under maintenance/priority boost caused
#: rescheduling"). Source: the Cloud TPU v2 API schema, Node.StateValueValuesEnum and Node.HealthValueValuesEnum in the
#: Cloud SDK 528.0.0's googlecloudsdk/generated_clients/apis/tpu/v2/tpu_v2_messages.py, read 2026-11-24.
TPU_VM_NODE_GONE_STATES = frozenset({"PREEMPTED", "TERMINATED"})
TPU_VM_NODE_GONE_HEALTH = frozenset({"UNHEALTHY_MAINTENANCE"})

#: Who may create, follow and delete TPU VM slices: Google's role list for Cloud TPU
#: (https://docs.cloud.google.com/iam/docs/roles-permissions/tpu.md.txt, read 2026-11-27) gives TPU Admin
#: ``roles/tpu.admin`` ``tpu.*`` = acceleratortypes, locations, nodes (create/delete/get/list/…), operations,
#: runtimeversions, tensorflowversions - no ``tpu.queuedResources.*`` permission appears in any predefined role there
#: (nor in the role snapshot ``data/predefined_roles.json``). So 403 hints name the role Google documents, not a
#: permission no role grants (issue 42); creating a slice that runs as the training account also needs
#: ``iam.serviceAccounts.actAs`` on it (``roles/iam.serviceAccountUser`` on that one account).
TPU_VM_ROLE = "roles/tpu.admin"
TPU_VM_ROLE_HINT = (f"{TPU_VM_ROLE} in the project (Google's Cloud TPU roles carry tpu.nodes.*; none lists a "
                    "tpu.queuedResources permission)")
#: Facts of this module that no Google page confirmed (``[unverified: id]`` where used; listed in docs/tpu-vm.md).
UNVERIFIED_TPUVM_FACTS: dict[str, str] = {
    "tpu-vm-preempted-flag": "a TPU VM's metadata server turns instance/preempted TRUE when its slice is preempted",
    "tpu-vm-create-refusals": "which errors queuedResources.create answers for a zone's quota, capacity or accelerator",
}

#: The metadata key that says whether this VM is being preempted, read by each host's startup script: "FALSE", then
#: "TRUE" once a Spot (or preemptible) VM is being preempted; a GET with ``?wait_for_change=true`` hangs until the value
#: changes. Source: Compute Engine, "Create and use Spot VMs", section "Detect preemption"
#: (docs.cloud.google.com/compute/docs/instances/create-use-spot: `curl "http://metadata.google.internal/computeMetadata/
#: v1/instance/preempted?wait_for_change=true" -H "Metadata-Flavor: Google"`, which returns TRUE when the VM is
#: preempted), and "Preemptible VM instances" for the key itself (TRUE/FALSE); read 2026-11-25 through public quotations
#: of those pages (the search tool did not return the section's own text), and ``wait_for_change`` as the metadata
#: server's documented hanging GET. NOT VERIFIED FOR TPU VMs [unverified: tpu-vm-preempted-flag]: that Compute Engine page sends TPU users to Cloud TPU's
#: own Spot page (cloud.google.com/tpu/docs/spot), which, like "Preemptible TPUs" (cloud.google.com/tpu/docs/preemptible:
#: a preempted TPU's state turns PREEMPTED in `gcloud compute tpus tpu-vm list`), names no metadata key. On a TPU VM
#: whose flag never turns TRUE the watcher stays silent, and the queued resource's state and the hosts' exit files
#: still tell the preemption.
TPU_VM_PREEMPTED_METADATA_KEY = "instance/preempted"

#: How the Cloud TPU API refuses the create call itself for a reason of the zone, so that another zone may take the
#: slice. OBSERVED, NOT DOCUMENTED [unverified: tpu-vm-create-refusals]: Google's pages list no error codes for queuedResources.create. Seen in public
#: reports (read 2026-11-25 with the search tool): HTTP 429 RESOURCE_EXHAUSTED "Quota limit
#: 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region us-east5." on a TPU create
#: (github.com/marin-community/marin/pull/1612, 2025-09-19); HTTP 400 INVALID_ARGUMENT "Cloud TPU received a bad
#: request. The requested accelerator configuration for accelerator type, "v5litepod-8", could not be found in the
#: zonal accelerator configurations for "us-central1-b".; the accelerator v5litepod-8 was not found in zone
#: us-central1-b" (gcloud compute tpus tpu-vm create, quoted in a public repository's notes), and the same "the
#: accelerator v4-128 was not found in zone us-central2-b" (github.com/skypilot-org/skypilot/issues/3840); "There is no
#: more capacity in the zone" (github.com/thevasudevgupta/gsoc-wav2vec2/issues/11). So: every 429 (quota or capacity:
#: the zone's, or the region's, which the next zone then refuses too), and a 400 or 404 only when its message says the
#: zone lacks the accelerator or the capacity (any other bad request would be refused in every zone alike).
TPU_VM_ZONE_REFUSAL_STATUS = 429
TPU_VM_ZONE_REFUSAL_MARKERS = ("not found in zone", "zonal accelerator configurations", "no more capacity")


def is_tpu_vm_zone_refusal(status: int | None, message: str) -> bool:
    """Whether an error answered to the create call (HTTP ``status``, its ``message``) refuses the slice for a
    reason of the zone (``TPU_VM_ZONE_REFUSAL_*``), so that the next zone is worth trying."""
    if status == TPU_VM_ZONE_REFUSAL_STATUS:
        return True
    text = message.lower()
    return status in (400, 404) and any(marker in text for marker in TPU_VM_ZONE_REFUSAL_MARKERS)


#: A run name names the queued resource, its node and the ``tpuctl-run`` label value, so it follows the
#: stricter of those rules: label values (names.validate_labels) and the gcloud TPU name form.
_RUN_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


def validate_tpu_vm_name(name: str) -> str:
    if not _RUN_NAME.match(name or ""):
        raise DomainError(f"TPU VM run name {name!r} must be 1-63 lowercase letters, digits or '-', starting with a "
                          "letter and not ending with '-' (it names the queued resource, its node and a label)")
    return name


#: Regions with Cloud TPUs but no Compute Engine VMs (so not in ``names.REGIONS``): us-central2, whose zone
#: us-central2-b is the only one listed for TPU v4 (cloud.google.com/tpu/docs/regions-zones, read 2026-11-22).
TPU_ONLY_REGIONS = frozenset({"us-central2"})


def validate_tpu_vm_zone(zone: str) -> str:
    """A zone name (``us-central1-a``, or one of ``TPU_ONLY_REGIONS``' zones); which zones offer which generation is
    NOT checked here (it changes often: cloud.google.com/tpu/docs/regions-zones), the API's refusal names it."""
    validate_zone(zone, also_regions=TPU_ONLY_REGIONS)
    return zone
