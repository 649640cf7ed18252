"""Cloud Quotas: read what a project may use, and say how to ask for more.

A Vertex AI job needs its accelerator's per-region quota (GPUs, or TPU cores, over all replicas); a TPU VM slice
needs the Cloud TPU API's per-zone quota of its generation (on-demand or Spot). Both are read with the real
``google-cloud-quotas`` client (``CloudQuotasClient.list_quota_infos``). Each run target's pre-flight asks through
these functions (``tpuctl.services.runs.vertex.check_quota``, ``tpuctl.services.runs.tpuvm.target.check_quota``): a
quota that cannot be read (no credentials, an unlisted id) is one ``note:`` line and the run goes on, Google enforces
the quota itself; one that is read and too small is a ``UserError`` with the stack key and the exact gcloud command
that asks for more (``vertex_quota_fix``, ``tpu_vm_quota_fix``). ``tpuctl doctor`` shows the same quotas as checks
(bootstrap/doctor.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cloud import clients
from cloud.google import cloudquotas_v1
from ground import domain
from ground.errors import DomainError, UserError

Echo = Callable[[str], None]



def quotas_client():
    return clients.gapic(cloudquotas_v1.CloudQuotasClient, "cloudquotas")


def quota_api_unreachable() -> str | None:
    """None when the Cloud Quotas API can be asked (a redirect, or Application Default Credentials); else why
    not, for the note that a pre-flight quota check was skipped."""
    return clients.missing_credentials("cloudquotas")


def global_location(project: str) -> str:
    """``projects/P/locations/global``: where Cloud Quotas keeps a project's quota preferences."""
    return cloudquotas_v1.CloudQuotasClient.common_location_path(project, "global")


def _service_parent(project: str, service: str) -> str:
    """The parent of a service's QuotaInfos (the client has no helper for it: ``quota_info_path`` names one info)."""
    return f"{global_location(project)}/services/{service}"


def quota_infos(project: str, service: str, client=None) -> list:
    """Every Cloud Quotas QuotaInfo of ``service`` in ``project`` (``CloudQuotasClient.list_quota_infos``)."""
    client = client or quotas_client()
    with clients.google_errors(f"listing the {service} quotas of {project}",
                               forbidden=f"permission denied listing the {service} quotas of {project}: you need "
                                         "cloudquotas.quotas.get (e.g. roles/cloudquotas.viewer)", exit_code=1):
        return list(client.list_quota_infos(parent=_service_parent(project, service)))


def quota_info_for_metric(project: str, metric: str, client=None):
    """The per-region QuotaInfo of ``metric`` among its service's QuotaInfos.

    Raises ``DomainError`` naming the metric when no per-region quota of the service has it."""
    infos = quota_infos(project, metric.split("/", 1)[0], client)
    quota_id = domain.regional_quota_id(metric, [(i.quota_id, i.metric, tuple(i.dimensions)) for i in infos])
    return next(i for i in infos if i.quota_id == quota_id)


def limit_in(info, location: str, dimension: str = "region") -> int | None:
    """The value in force in ``location`` (a region, or a zone with ``dimension="zone"``): the most specific
    dimensions info that applies; -1 is unlimited; None when unknown."""
    general = None
    for dim in info.dimensions_infos:
        dims = dict(dim.dimensions)
        if dims.get(dimension) == location or location in dim.applicable_locations and not dims:
            return int(dim.details.value)
        if not dims:
            general = int(dim.details.value)
    return general


def preflight_limit(lookup, location: str, *, dimension: str = "region", client=None,
                    echo: Echo) -> tuple[Any, int] | None:
    """What a pre-flight quota check reads: ``(QuotaInfo, limit in location)``, or None after one ``note:`` line
    saying why it cannot (no credentials, the quotas cannot be listed, ``lookup(client)`` returned a reason
    string instead of a QuotaInfo, no value for ``location``) -- the job then goes on and Google enforces it."""
    def skipped(why) -> None:
        echo(f"note: quota check skipped: {why}")

    if client is None and (why := quota_api_unreachable()):
        return skipped(why)
    try:
        info = lookup(client)
    except DomainError:         # the catalogue names a metric the service lacks: the caller decides
        raise
    except UserError as exc:
        return skipped(exc)
    if isinstance(info, str):
        return skipped(info)
    limit = limit_in(info, location, dimension)
    if limit is None:
        return skipped(f"{info.quota_id} has no value for {location}")
    return info, limit


def tpu_vm_quota_fix(project: str, zone: str, quota_id: str, generation: str, count: int, spot: bool) -> str:
    """How to get ``count`` units of a Cloud TPU per-zone quota: the stack key, or the exact gcloud command."""
    entry = f"{generation}:{zone}:{count}{':spot' if spot else ''}"
    return (f"add the tpuctl:tpuVmQuotas entry {entry} and run `pulumi up`, or run `gcloud beta quotas preferences "
            f"create --service={domain.TPU_VM_QUOTA_SERVICE} --quota-id={quota_id} --preferred-value={count} "
            f"--dimensions=zone={zone} --project={project} --email=YOUR_EMAIL`; Google reviews the request")




def vertex_quota_fix(project: str, region: str, accel: domain.Accelerator, metric: str, quota_id: str,
                     need: int) -> str:
    """How to get ``need`` units of a Vertex AI quota: the stack key (declarative) or the exact gcloud command."""
    if accel.kind == "gpu" and accel.gpu is not None:
        entry = f"tpuctl:gpuQuotas entry {accel.gpu.name}:{region}:{need} (quotaService: vertex)"
    else:
        assert accel.tpu is not None
        entry = f"tpuctl:tpuQuotas entry {accel.tpu.generation}:{region}:{need}"
    service = metric.split("/", 1)[0]
    return (f"add the {entry} and run `pulumi up`, or run `gcloud beta quotas preferences create "
            f"--service={service} --quota-id={quota_id} --preferred-value={need} --dimensions=region={region} "
            f"--project={project} --email=YOUR_EMAIL`; Google reviews the request")
