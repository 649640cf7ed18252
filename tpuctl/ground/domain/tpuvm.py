"""TPU VMs tpuctl creates through the Cloud TPU API (queued resources): run names, labels, zones, node states.

The slices themselves (``v5litepod-16`` …, with their aliases and base runtimes) are the TPU catalogue of ``tpu``;
their per-zone quotas are in ``quotas``.
"""

from __future__ import annotations

import re

from tpuctl.ground.domain.names import validate_zone
from tpuctl.ground.errors import DomainError

#: Labels tpuctl puts on every TPU VM it creates (``list``/``delete`` only touch resources that carry the first).
TPU_VM_MANAGED_LABEL = ("managed-by", "tpuctl")
TPU_VM_RUN_LABEL = "tpuctl-run"

#: A TPU VM node whose hosts are gone while its queued resource may still say ACTIVE: ``Node.state`` PREEMPTED ("TPU
#: node has been preempted"), TERMINATED ("terminated due to maintenance or has reached the end of its life cycle (for
#: preemptible nodes)"), and ``Node.health`` UNHEALTHY_MAINTENANCE ("under maintenance/priority boost caused
#: rescheduling"). Source: the Cloud TPU v2 API schema, Node.StateValueValuesEnum and Node.HealthValueValuesEnum in the
#: Cloud SDK 528.0.0's googlecloudsdk/generated_clients/apis/tpu/v2/tpu_v2_messages.py, read 2026-11-24.
TPU_VM_NODE_GONE_STATES = frozenset({"PREEMPTED", "TERMINATED"})
TPU_VM_NODE_GONE_HEALTH = frozenset({"UNHEALTHY_MAINTENANCE"})


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
