"""How Google hands out accelerators: provisioning models (on-demand, Spot, flex-start), reservations, and the
request fields each one is, per route (Vertex AI CustomJob, Cloud TPU queued resource).

Sources (read 2026-11-27):
- Vertex AI ``Scheduling`` (google/cloud/aiplatform/v1/custom_job.proto, as installed in google-cloud-aiplatform
  2.7): ``Strategy`` STANDARD ("uses regular on-demand resources"; ON_DEMAND and LOW_COST are "Deprecated"), SPOT,
  FLEX_START ("uses DWS to queue for resources"); ``max_wait_duration`` "the maximum duration that a job will wait for
  the requested resources to be provisioned if the scheduling strategy is set to [Strategy.DWS_FLEX_START]. If set
  to 0, the job will wait indefinitely. The default is 24 hours."
- Vertex AI ``ReservationAffinity`` (google/cloud/aiplatform/v1/reservation_affinity.proto, same client):
  ANY_RESERVATION "Consume any reservation available, falling back to on-demand"; SPECIFIC_RESERVATION with key
  ``compute.googleapis.com/reservation-name`` and values "the full resource name of the reservation".
- Vertex AI, "Schedule training jobs based on resource availability"
  (https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws): FLEX_START needs L4, A100, H100, H200 or B200
  GPUs, a timeout of at most 7 days and the same machine configuration in every worker pool; CustomJob and
  HyperparameterTuningJob are both supported.
- Cloud TPU queued resources, v2 API (google/cloud/tpu/v2/cloud_tpu.proto, google-cloud-tpu 1.27): tiers ``spot``
  and ``guaranteed``; ``reservation_name`` "projects/{project}/locations/{zone}/reservations/{reservation}". The
  Cloud SDK 528 (command_lib/compute/tpus/queued_resources/util.py, ``CreateReservationName``) sends ``--reserved``
  (any reservation of the project) as ``projects/P/locations/ZONE/reservations/-``.
- Cloud TPU flex-start, "Request Cloud TPUs using Flex-start" (https://cloud.google.com/tpu/docs/request-using-flex-start,
  Preview): queued resources only, up to 7 days, TPU v6e and v5e in a few zones, and "ensure you have sufficient
  preemptible quota to use Flex-start". The request field is only in the v2alpha1 REST API: ``QueuedResource.
  provisioningModel`` (STANDARD, SPOT, RESERVATION_BOUND, FLEX_START) and ``runDuration.maxRunDuration`` (the Cloud
  SDK 528's generated tpu v2alpha1 messages, and its ``--provisioning-model`` / ``--max-run-duration`` flags); the
  google-cloud-tpu 1.27 client's v2alpha1 types do not have them yet.
"""

from __future__ import annotations

import re
from typing import Literal

from ground.numbers import is_digits

#: Facts no Google page (or request from here) confirmed, each documented in docs/capacity.md.
UNVERIFIED_CAPACITY_FACTS = {
    "tpu-v2alpha1-create": "a flex-start queued resource made through v2alpha1 is read and deleted through v2, and "
                          "Google fails it after its queueingPolicy.validUntilDuration",
    "vertex-flex-start-quota": "a Vertex AI flex-start training job draws on the preemptible quota (Google says so "
                               "for flex-start inference only)",
    "flex-start-skus": "which Billing Catalog SKUs price flex-start (tpuctl prices none of them)",
}
#: A Vertex AI flex-start training job's quota: the preemptible one, read as a note [unverified: vertex-flex-start-quota]
#: (bootstrap/quotas.py); its price is unknown [unverified: flex-start-skus] (tpuctl/services/runs/cost.py).
VERTEX_FLEX_QUOTA = "preemptible"

#: ``--provisioning``: what tpuctl offers, in the user's words.
PROVISIONING = ("on-demand", "spot", "flex-start")
Provisioning = Literal["on-demand", "spot", "flex-start"]

#: Vertex AI ``Scheduling.Strategy`` name per provisioning model (STANDARD, not the deprecated ON_DEMAND).
VERTEX_STRATEGY = {"on-demand": "STANDARD", "spot": "SPOT", "flex-start": "FLEX_START"}
#: Vertex AI's own default wait of a FLEX_START job (custom_job.proto, Scheduling.max_wait_duration).
VERTEX_FLEX_DEFAULT_WAIT_HOURS = 24
#: The GPUs Vertex AI's Dynamic Workload Scheduler takes (schedule-jobs-dws page), by tpuctl's GPU names.
VERTEX_FLEX_GPUS = frozenset({"l4", "a100", "a100-80gb", "h100", "h100-mega", "h200", "b200"})
#: The longest a flex-start run may last: 7 days (both pages above).
FLEX_MAX_RUN_DAYS = 7

#: ``ReservationAffinity.key`` for a specific reservation (reservation_affinity.proto).
VERTEX_RESERVATION_KEY = "compute.googleapis.com/reservation-name"
#: ``--reservation any``: any reservation of the project (Vertex ANY_RESERVATION; TPU ``reservations/-``).
ANY_RESERVATION = "any"
#: The v2alpha1 value of ``QueuedResource.provisioningModel`` for flex-start (Cloud SDK 528 tpu v2alpha1 messages).
#: That a queued resource created so is read and deleted through v2, and failed after its validUntilDuration, is
#: [unverified: tpu-v2alpha1-create] (no flex-start slice was created from here).
TPU_FLEX_PROVISIONING_MODEL = "FLEX_START"
#: The zones Google lists for TPU flex-start training (request-using-flex-start, read 2026-11-27; v5e is also
#: listed in us-central1-a, for serving only): a note elsewhere, not a refusal (the list changes; the API refuses
#: what it does not offer).
TPU_FLEX_ZONES = {"v6e": ("asia-northeast1-b", "us-east5-a"), "v5e": ("us-west4-a",)}

#: The TPU generations Autocheckpoint works on: "Only TPUs (v2-v4, and v5e) created through the Cloud TPU API can use
#: this feature for now" (Preview; https://cloud.google.com/tpu/docs/autocheckpoint, read 2026-11-27). On a
#: maintenance event Cloud TPU sends SIGTERM to "the process using the TPU device" and waits until it exits or 5
#: minutes pass. The request field is ``Node.autocheckpoint_enabled``, only in the v2alpha1 API (google-cloud-tpu
#: 1.27 ``tpu_v2alpha1.Node``; the Cloud SDK 528 sets it only for api_version v2alpha1,
#: command_lib/compute/tpus/queued_resources/util.py).
AUTOCHECKPOINT_GENERATIONS = frozenset({"v2", "v3", "v4", "v5e"})

_SHORT = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_VERTEX_FULL = re.compile(r"projects/([a-z][-a-z0-9]{4,28}[a-z0-9]|\d+)/zones/([a-z]+-[a-z]+\d+-[a-z0-9]+)/"
                          r"reservations/([a-z]([-a-z0-9]{0,61}[a-z0-9])?)")


#: Most machines tpuctl puts in a cluster's one pool (`tpuctl cluster create --replicas`, tpuctl:trainingCluster).
MAX_CLUSTER_REPLICAS = 64
#: A persistent resource's id: CreatePersistentResourceRequest.persistent_resource_id (google-cloud-aiplatform 2.7).
CLUSTER_ID = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")


def parse_training_cluster(text: str, key: str = "trainingCluster") -> tuple[str, str, int]:
    """``NAME:ACCELERATOR[:REPLICAS]`` (tpuctl:trainingCluster) -> (name, accelerator as `train -a` names it,
    replicas). A GPU or CPU machine only: pulumi-gcp 10.2's ``AiPersistentResourceResourcePoolMachineSpec`` has
    machine type, accelerator type and count but no TPU topology."""
    from ground.domain.accelerators import vertex_accelerator
    from ground.errors import DomainError

    parts = text.split(":")
    if len(parts) not in (2, 3) or not CLUSTER_ID.fullmatch(parts[0]):
        raise DomainError(f"{key} {text[:80]!r}: give NAME:ACCELERATOR[:REPLICAS], e.g. team-t4:gpu-t4x2:2 (NAME 1-63 "
                          "lowercase letters, digits and '-', starting with a letter)")
    accel = vertex_accelerator(parts[1])
    if accel.kind == "tpu":
        raise DomainError(f"{key} {text[:80]!r}: a TPU cluster cannot be declared (pulumi-gcp's persistent resource "
                          "has no TPU topology); make it with `tpuctl cluster create NAME -a "
                          f"{accel.name}`")
    replicas = parts[2] if len(parts) == 3 else "1"
    if not is_digits(replicas) or len(replicas) > 6 or not 1 <= int(replicas) <= MAX_CLUSTER_REPLICAS:
        raise DomainError(f"{key} {text[:80]!r}: REPLICAS is 1..{MAX_CLUSTER_REPLICAS}")
    return parts[0], accel.name, int(replicas)


class Reservation:
    """``--reservation``: ``any``, a reservation's name, or its full name ``projects/P/zones/ZONE/reservations/N``."""

    def __init__(self, text: str):
        self.text = text
        self.any = text == ANY_RESERVATION
        full = _VERTEX_FULL.fullmatch(text)
        self.project, self.zone, self.name = (full.group(1), full.group(2), full.group(3)) if full else (
            None, None, None if self.any else text)
        if not (self.any or full or _SHORT.fullmatch(text)):
            raise ValueError(f"--reservation {text[:80]!r}: give `any`, a reservation's name (lowercase letters, "
                             "digits and '-') or its full name projects/PROJECT/zones/ZONE/reservations/NAME")

    def vertex_value(self) -> str | None:
        """The full name Vertex AI's SPECIFIC_RESERVATION takes (None: a short name, whose zone Vertex AI cannot
        know from a region)."""
        return None if self.zone is None else f"projects/{self.project}/zones/{self.zone}/reservations/{self.name}"

    def tpu_name(self, project: str, zone: str) -> str:
        """``QueuedResource.reservation_name`` in ``zone``: the named reservation, or any (``reservations/-``)."""
        return f"projects/{self.project or project}/locations/{zone}/reservations/{'-' if self.any else self.name}"


def check_reservation(text: str) -> str:
    Reservation(text)
    return text
