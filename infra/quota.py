"""GpuQuota: one Cloud Quotas preference per requested GPU type and region."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pulumi
import pulumi_gcp as gcp

from tpuctl.ground import domain


@dataclass(frozen=True)
class GpuQuotaArgs:
    project: str
    requests: Sequence[domain.GpuQuotaRequest]
    contact_email: str
    justification: str | None = None
    depends_on: Sequence[pulumi.Resource] = ()     # e.g. the Cloud Quotas API


def preference_id(req: domain.GpuQuotaRequest) -> str:
    """Quota preference id in the form the Cloud console uses: ``<service>-<quota id>_<region>``."""
    return f"{domain.QUOTA_SERVICE.replace('.', '_')}-{req.quota_id}_{req.region}"


class GpuQuota(pulumi.ComponentResource):
    preferences: dict[str, gcp.cloudquota.SQuotaPreference]

    def __init__(self, name: str, args: GpuQuotaArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpuctl:infra:GpuQuota", name, None, opts)
        self.preferences = {}
        for req in args.requests:
            # A preference is a request Google reviews; the API cannot delete one, so a removed
            # entry leaves the granted quota in place.
            self.preferences[preference_id(req)] = gcp.cloudquota.SQuotaPreference(
                f"gpu-quota-{req.gpu.short}-{req.region}",
                gcp.cloudquota.SQuotaPreferenceArgs(
                    parent=f"projects/{args.project}",
                    name=preference_id(req),
                    service=domain.QUOTA_SERVICE,
                    quota_id=req.quota_id,
                    dimensions={"region": req.region},
                    quota_config=gcp.cloudquota.SQuotaPreferenceQuotaConfigArgs(preferred_value=str(req.count)),
                    contact_email=args.contact_email,
                    justification=args.justification,
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
            )
        self.register_outputs({"preferences": {k: p.name for k, p in self.preferences.items()}})
