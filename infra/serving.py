"""ServingEndpoint: the Vertex AI Endpoint a stack owns when ``servingEndpoint`` is set (``tpuctl deploy``
then deploys every export to it instead of finding or creating its own).

Facts (pulumi-gcp 10.2 ``gcp.vertex.AiEndpoint``, read 2026-11-22): ``display_name`` and ``location`` are
required; ``name`` is the Endpoint ID and "must be numeric with no leading zeros and can be at most 10
digits", so the program sets it (``domain.serving_endpoint_id``) rather than leave Pulumi's auto-name;
``traffic_split`` is what ``deployModel`` changes on every deployment, so the program ignores changes to
it (deployments are tpuctl's, the Endpoint is the stack's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi
import pulumi_gcp as gcp

from ground import domain


def serving_endpoint(*, project: str, region: str, display_name: str, labels: Mapping[str, str],
                     depends_on: Sequence[pulumi.Resource] = ()) -> str:
    """Register the Endpoint; returns its resource name (known before it exists: the ID is the stack's)."""
    gcp.vertex.AiEndpoint(
        "serving-endpoint",
        name=domain.serving_endpoint_id(project, display_name),
        display_name=display_name,
        description="tpuctl deploy target (tpuctl:servingEndpoint)",
        project=project,
        location=region,
        region=region,
        labels={**labels, domain.PURPOSE_LABEL: domain.SERVING_ENDPOINT_PURPOSE},
        opts=pulumi.ResourceOptions(depends_on=list(depends_on), ignore_changes=["trafficSplit"]),
    )
    return domain.serving_endpoint_name(project, region, display_name)
