"""GpuQuota: one Cloud Quotas preference per requested accelerator quota (GPU or Vertex TPU per region, Cloud TPU
VMs per zone).

Which quota limits a job depends on where it runs (``domain.QUOTA_SERVICES``): Vertex AI custom training
by default, Compute Engine for users who train on their own VMs/GKE (``quotaService: compute``). The
catalogue holds each accelerator's quota METRIC; the quota ID a preference names is looked up from the
metric in the project's Cloud Quotas QuotaInfos (``resolve_quota_ids``), never guessed. TPU VM quotas have no
documented metric: their catalogued quota id is checked against the same QuotaInfos before it is used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from ground import domain
from ground.errors import DomainError
from infra.config import ConfigError


@dataclass(frozen=True)
class GpuQuotaArgs:
    project: str
    requests: Sequence[domain.QuotaRequest]
    quota_ids: Mapping[str, str]                   # QuotaRequest.key -> quota id, from resolve_quota_ids
    contact_email: str
    justification: str | None = None
    depends_on: Sequence[pulumi.Resource] = ()     # e.g. the Cloud Quotas API


def _key_of(req: domain.QuotaRequest) -> str:
    if req.zone:
        return "tpuVmQuotas"
    return "tpuQuotas" if req.tpu_version else "gpuQuotas"


def resolve_quota_ids(project: str, requests: Sequence[domain.QuotaRequest]) -> dict[str, str]:
    """``QuotaRequest.key`` -> quota id for every request, from ``gcp.cloudquota.get_s_quota_infos`` (one call per
    service): the per-region quota of the request's metric, or the request's known per-zone quota id, present.

    Raises ``ConfigError`` (naming the metric or id) when the lookup fails or no quota matches.
    """
    infos: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
    out: dict[str, str] = {}
    for req in requests:
        service = req.service
        if service not in infos:
            try:
                result = gcp.cloudquota.get_s_quota_infos(parent=f"projects/{project}", service=service)
            except Exception as exc:  # noqa: BLE001 - not found, denied, API disabled: the provider's text varies
                raise ConfigError(_key_of(req), f"cannot read the Cloud Quotas quota infos of {service} "
                                                f"(to find the quota of {req.key}): "
                                                f"{str(exc).splitlines()[0]}") from None
            infos[service] = [(i.quota_id, i.metric, tuple(i.dimensions or ())) for i in result.quota_infos or ()]
        try:
            out[req.key] = (domain.zonal_quota_id(req.quota_id, infos[service]) if req.quota_id
                            else domain.regional_quota_id(req.metric, infos[service]))
        except DomainError as exc:
            raise ConfigError(_key_of(req), str(exc)) from None
    return out


def preference_id(req: domain.QuotaRequest, quota_id: str) -> str:
    """Quota preference id in the form the Cloud console uses: ``<service>-<quota id>_<region or zone>``."""
    return f"{req.service.replace('.', '_')}-{quota_id}_{req.location}"


def resource_name(req: domain.QuotaRequest) -> str:
    """``vertex-quota-t4-us-central1``, ``vertex-quota-t4-spot-…``, ``vertex-quota-tpu-v5e-…``,
    ``quota-tpu-vm-v5e-spot-us-west4-a``; Compute Engine quota keeps the name earlier versions gave it
    (``gpu-quota-t4-us-central1``), so those stacks see no change."""
    if req.zone:
        return f"quota-{req.label}-{req.zone}"
    kind = "gpu" if req.service == domain.QUOTA_SERVICES["compute"] else "vertex"
    return f"{kind}-quota-{req.label}-{req.region}"


class GpuQuota(pulumi.ComponentResource):
    preferences: dict[str, gcp.cloudquota.SQuotaPreference]

    def __init__(self, name: str, args: GpuQuotaArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpuctl:infra:GpuQuota", name, None, opts)
        self.preferences = {}
        for req in args.requests:
            quota_id = args.quota_ids[req.key]
            pref = preference_id(req, quota_id)
            # A preference is a request Google reviews; the API cannot delete one, so a removed
            # entry leaves the granted quota in place.
            self.preferences[pref] = gcp.cloudquota.SQuotaPreference(
                resource_name(req),
                gcp.cloudquota.SQuotaPreferenceArgs(
                    parent=f"projects/{args.project}",
                    name=pref,
                    service=req.service,
                    quota_id=quota_id,
                    dimensions=req.dimensions,
                    quota_config=gcp.cloudquota.SQuotaPreferenceQuotaConfigArgs(preferred_value=str(req.count)),
                    contact_email=args.contact_email,
                    justification=args.justification,
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
            )
        self.register_outputs({"preferences": {k: p.name for k, p in self.preferences.items()}})
