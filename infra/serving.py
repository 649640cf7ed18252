"""ServingEndpoint: the Vertex AI Endpoint a stack owns when ``servingEndpoint`` is set (``tpuctl deploy``
then deploys every export to it instead of finding or creating its own).

Facts (pulumi-gcp 10.2 ``gcp.vertex.AiEndpoint``, read 2026-11-22): ``display_name`` and ``location`` are
required; ``name`` is the Endpoint ID and "must be numeric with no leading zeros and can be at most 10
digits", so the program sets it (``domain.serving_endpoint_id``) rather than leave Pulumi's auto-name;
``traffic_split`` is what ``deployModel`` changes on every deployment, so the program ignores changes to
it (deployments are tpuctl's, the Endpoint is the stack's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pulumi
import pulumi_gcp as gcp

from tpuctl.ground import domain


@dataclass(frozen=True)
class ServingEndpointArgs:
    project: str
    region: str
    display_name: str
    labels: Mapping[str, str]
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)


def serving_endpoint(args: ServingEndpointArgs, parent: pulumi.Resource | None = None) -> str:
    """Register the Endpoint; returns its resource name (known before it exists: the ID is the stack's)."""
    endpoint_id = domain.serving_endpoint_id(args.project, args.display_name)
    gcp.vertex.AiEndpoint(
        "serving-endpoint",
        name=endpoint_id,
        display_name=args.display_name,
        description="tpuctl deploy target (tpuctl:servingEndpoint)",
        project=args.project,
        location=args.region,
        region=args.region,
        labels={**args.labels, domain.PURPOSE_LABEL: domain.SERVING_ENDPOINT_PURPOSE},
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(args.depends_on),
                                    ignore_changes=["trafficSplit"]),
    )
    return domain.serving_endpoint_name(args.project, args.region, args.display_name)
