"""``tpuctl prices refresh|show``: Google's list prices from the Cloud Billing Catalog, and what tpuctl estimates with."""

from __future__ import annotations

from enum import Enum
from typing import Optional

import typer

from ground import domain
from ground.domain.names import validate_region
from ground.errors import UserError
from tpuctl.commands.options import echo_err, say
from tpuctl.services import prices
from tpuctl.services.runs.vertex import machine_spec

prices_app = typer.Typer(
    name="prices", no_args_is_help=True,
    help="List prices from Google's Cloud Billing Catalog: cache them (refresh) and show what an accelerator costs "
         "per hour (show).",
)


class PriceTarget(str, Enum):
    vertex = "vertex"
    tpu_vm = "tpu-vm"


def register(app: typer.Typer) -> None:
    app.add_typer(prices_app, name="prices")


@prices_app.command("refresh")
def refresh() -> None:
    """Read the SKUs of Vertex AI, Compute Engine and Cloud TPU and write the dated cache estimates use."""
    catalogue, path = prices.refresh()
    say(f"cached {len(catalogue.skus)} SKUs from {catalogue.label} in {path}")


@prices_app.command("show")
def show(
    accelerator: str = typer.Option(..., "--accelerator", "-a",
                                    help="Vertex AI: cpu, gpu-t4, gpu-t4x2, tpu-v5e-4 …; TPU VM: v5litepod-8, v6e-8 …"),
    region: str = typer.Option(domain.DEFAULT_REGION, "--region", help="Region the price is for."),
    spot: bool = typer.Option(False, "--spot", help="The Spot price instead of on-demand."),
    replicas: Optional[int] = typer.Option(None, "--replicas", min=1, max=64,
                                           help="Vertex AI: also the price of a cluster of this many replicas "
                                                "(`tpuctl cluster create --replicas N`), billed while it exists."),
    target: Optional[PriceTarget] = typer.Option(
        None, "--target", help="vertex (a Vertex AI training replica) or tpu-vm (a Cloud TPU VM slice). Default: "
                               "tpu-vm for a Cloud TPU accelerator type, else vertex."),
) -> None:
    """Print the hourly price of one replica (Vertex AI) or one slice (TPU VM), part by part, with its source."""
    if target is None:   # a Cloud TPU API name (or a slice only TPU VMs offer, such as v5e-16) prices a TPU VM
        typed = accelerator.strip().lower()
        found = domain.find_tpu_slice(typed)
        tpu_vm_only = domain.tpu_slice_key(typed) is not None and (found is None or found.vertex is None)
        api_name = found is not None and found.tpu_vm and typed == found.name
        target = PriceTarget.tpu_vm if api_name or tpu_vm_only else PriceTarget.vertex
    if region not in domain.TPU_ONLY_REGIONS:
        validate_region(region)
    if target is PriceTarget.tpu_vm and replicas is not None:
        raise UserError("--replicas prices a Vertex AI cluster (`tpuctl cluster create`); a TPU VM slice is one "
                        "price: drop --replicas")
    if target is PriceTarget.tpu_vm:
        slice_ = domain.parse_tpu_vm_accelerator(accelerator)
        title = f"{slice_.name} (TPU VM slice)"
    else:

        spec = machine_spec(domain.vertex_accelerator(accelerator))
        title = f"{accelerator.strip().lower()} on {spec['machine_type']} (one Vertex AI training replica)"
    book = prices.load_prices()          # after the input is checked: a typo never waits for a refresh
    for note in book.notes:
        echo_err(f"note: {note}")
    if target is PriceTarget.tpu_vm:
        hourly = prices.tpu_vm_hourly(book, slice_, region, spot)
    else:
        hourly = prices.vertex_replica_hourly(book, spec["machine_type"], spec.get("accelerator_type"),
                                              int(spec.get("accelerator_count") or 0), region, spot,
                                              spec.get("tpu_topology"))
    kind = "Spot" if spot else "on-demand"
    say(f"{title}, {region}, {kind}:")
    for c in hourly.components:
        say(f"  {c.label}: {c.quantity:g} × ${c.unit_usd:.6g}/{c.per} = ${c.usd:.4f}/h   [{c.sku}]")
    say(f"  total: ${hourly.usd:.4f}/h")
    if replicas is not None and target is PriceTarget.vertex:
        say(f"  a cluster of {replicas}: ${hourly.usd * replicas:.4f}/h while it exists, jobs or not "
            f"(`tpuctl cluster create NAME -a {accelerator.strip().lower()} --replicas {replicas}`)")
    if hourly.note:
        say(f"  note: {hourly.note}")
    say(f"source: {hourly.source}")
