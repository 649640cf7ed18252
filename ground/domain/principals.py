"""Who gets access: service agents, the training service account, IAM member strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ground.domain.names import DEFAULT_ZONE, validate_account_id
from ground.domain.storage_iam import PUBLIC_MEMBERS
from ground.errors import DomainError
from ground.numbers import is_digits

#: How a service agent comes to exist (shared/REFERENCE.md "Google Cloud facts", verified 2026-11):
#: serviceusage: Service Usage ``generateServiceIdentity`` creates the service's PRIMARY agent (Pulumi
#:   ``gcp.projects.ServiceIdentity``); tpu-v2: Cloud TPU v2 API ``projects.locations.generateServiceIdentity``
#:   (google-cloud-tpu ``TpuClient.generate_service_identity``; gcloud ``compute tpus tpu-vm service-identity
#:   create``) creates the TPU VM agent gcp-sa-tpu, which Service Usage never returns; first-use: Google creates
#:   it when the API is first used (the Vertex AI custom code agent appears with the first custom job).
#: An agent may have both: Google also creates the TPU VM agent with the project's first TPU VM ("The Cloud TPU
#: VM creates a service identity ... when the first Cloud TPU VM is created in a project after TPU service
#: activation" - `gcloud compute tpus tpu-vm service-identity create --help`, Cloud SDK 528, read 2026-11-24;
#: cloud.google.com/sdk/gcloud/reference/compute/tpus/tpu-vm/service-identity/create), see AgentKind.first_use.
AGENT_CREATORS: tuple[str, ...] = ("serviceusage", "tpu-v2", "first-use")


@dataclass(frozen=True)
class AgentKind:
    keyword: str
    description: str
    service: str          # API the agent belongs to
    email_format: str     # str.format with project_number
    creator: str = "serviceusage"    # one of AGENT_CREATORS
    #: The agent's own service-agent role. An agent created ON REQUEST (serviceusage / tpu-v2) is not
    #: granted it automatically, so tpuctl grants it (additively) after creating the agent.
    project_role: str | None = None
    #: What else makes Google create the agent (the first use), where known; "" when only ``creator`` does.
    first_use: str = ""

    @property
    def created_on_request(self) -> bool:
        return self.creator in ("serviceusage", "tpu-v2")

    def create_command(self, project: str, zone: str = DEFAULT_ZONE) -> str:
        """The gcloud command that creates this agent (doctor's fix line)."""
        if self.creator == "tpu-v2":
            return f"gcloud compute tpus tpu-vm service-identity create --zone={zone} --project={project}"
        if self.creator == "serviceusage":
            return f"gcloud beta services identity create --service={self.service} --project={project}"
        return f"run one job on {self.service} (Google creates this agent with {self.first_use or 'the first use'})"


SERVICE_AGENTS: dict[str, AgentKind] = {
    "tpu-agent": AgentKind(
        "tpu-agent", "Cloud TPU service agent (primary)", "tpu.googleapis.com",
        "service-{project_number}@cloud-tpu.iam.gserviceaccount.com",
        creator="serviceusage", project_role="roles/tpu.serviceAgent",
    ),
    "tpu-vm-agent": AgentKind(
        "tpu-vm-agent", "Cloud TPU VM service agent (TPU v2 API)", "tpu.googleapis.com",
        "service-{project_number}@gcp-sa-tpu.iam.gserviceaccount.com",
        creator="tpu-v2", project_role="roles/cloudtpu.serviceAgent",
        first_use="the project's first TPU VM",
    ),
    "vertex-agent": AgentKind(
        "vertex-agent", "Vertex AI custom code service agent", "aiplatform.googleapis.com",
        "service-{project_number}@gcp-sa-aiplatform-cc.iam.gserviceaccount.com",
        creator="first-use", first_use="the project's first Vertex AI custom job",
    ),
}
TRAINING_SA_KEYWORD = "training-sa"
PRINCIPAL_KEYWORDS: tuple[str, ...] = (*SERVICE_AGENTS, TRAINING_SA_KEYWORD)
DEFAULT_TRAINING_SA_ID = "tpuctl-trainer"

_EMAIL = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$")
#: IAM member kinds whose identifier is an e-mail address
#: (cloud.google.com/iam/docs/principal-identifiers, checked 2026-11-22).
_EMAIL_MEMBER_KINDS = ("user", "serviceAccount", "group")
_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$", re.IGNORECASE)
#: A Kubernetes service account (GKE Workload Identity): serviceAccount:PROJECT_ID.svc.id.goog[NAMESPACE/KSA]
#: (same page, "Kubernetes service account"); PROJECT_ID may carry a domain prefix (example.com:project).
_KSA = re.compile(r"^[a-z0-9.:-]+\.svc\.id\.goog\[[a-z0-9-]{1,63}/[a-z0-9.-]{1,253}\]$")
_MEMBER_KINDS = ("user", "serviceAccount", "group", "domain", "principal", "principalSet")


def agent_email(keyword: str, project_number: str | int) -> str:
    if keyword not in SERVICE_AGENTS:
        raise DomainError(f"unknown service agent {keyword!r}; expected one of {', '.join(SERVICE_AGENTS)}")
    number = str(project_number)
    if not is_digits(number):
        raise DomainError(f"project number {project_number!r} must be digits")
    return SERVICE_AGENTS[keyword].email_format.format(project_number=number)


def training_sa_email(project: str, account_id: str = DEFAULT_TRAINING_SA_ID) -> str:
    return service_account_email(project, account_id)


def service_account_email(project: str, account_id: str) -> str:
    """The e-mail of a user-managed service account ``account_id`` of ``project``."""
    validate_account_id(account_id)
    return f"{account_id}@{project}.iam.gserviceaccount.com"


def member_for_email(email: str) -> str:
    """IAM member string for an e-mail: service accounts get ``serviceAccount:``, others ``user:``."""
    if not _EMAIL.match(email):
        raise DomainError(f"{email!r} is not an e-mail address")
    kind = "serviceAccount" if email.endswith(".gserviceaccount.com") else "user"
    return f"{kind}:{email}"


def classify_principal(value: str) -> tuple[str, str]:
    """Sort a ``--principal`` value into ``("keyword", k)``, ``("member", m)``.

    Keywords need the project (number) to resolve; e-mails and member strings are used as given.
    """
    value = value.strip()
    if value in PRINCIPAL_KEYWORDS:
        return "keyword", value
    if ":" in value:
        kind, _, rest = value.partition(":")
        if kind not in _MEMBER_KINDS or not rest:
            raise DomainError(
                f"principal {value!r}: member strings look like serviceAccount:EMAIL, user:EMAIL, "
                "group:EMAIL or domain:NAME"
            )
        if kind in PUBLIC_MEMBERS:
            raise DomainError(f"principal {value!r} would make data public")
        if kind == "serviceAccount" and _KSA.match(rest):
            return "member", value
        if kind in _EMAIL_MEMBER_KINDS and not _EMAIL.match(rest):
            raise DomainError(f"principal {value!r}: {rest!r} is not an e-mail address ({kind}:EMAIL)")
        if kind == "serviceAccount" and not rest.endswith(".gserviceaccount.com"):
            raise DomainError(f"principal {value!r}: service account e-mails end in .gserviceaccount.com")
        if kind == "domain" and not _DOMAIN.match(rest):
            raise DomainError(f"principal {value!r}: {rest!r} is not a domain name (domain:example.com)")
        return "member", value
    if value in PUBLIC_MEMBERS:
        raise DomainError(f"principal {value!r} would make the bucket public; tpuctl never grants it")
    if "@" in value:
        return "member", member_for_email(value)
    raise DomainError(
        f"unknown principal {value!r}; use one of {', '.join(PRINCIPAL_KEYWORDS)}, an e-mail or a member string"
    )
