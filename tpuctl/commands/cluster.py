"""``tpuctl cluster create|ls|delete``: Vertex AI persistent resources, machines kept between jobs
(`train/tune --target vertex --cluster NAME` runs on one)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from ground.outputs import load_outputs, require_outputs
from tpuctl.commands.options import echo_err, say, shown, stack_outputs
from tpuctl.services.runs import cluster as clusters

cluster_app = typer.Typer(
    name="cluster", no_args_is_help=True,
    help="Vertex AI persistent resources: machines kept between jobs, so a retry or a tuning trial starts without "
         "provisioning (`train --target vertex --cluster NAME`). Billed while they exist.",
)

_STACK = typer.Option(None, "--stack", help="Project, region and labels from this stack's outputs.")
_OUTPUTS = typer.Option(None, "--outputs", help="The same, from this outputs JSON (`pulumi stack output --json`).")
_REGION = typer.Option(None, "--region", help="Region of the cluster (default: the stack's region).")


def register(app: typer.Typer) -> None:
    app.add_typer(cluster_app, name="cluster")


def _where(stack: Optional[str], outputs: Optional[Path], region: Optional[str]) -> tuple[str, str]:
    loaded = require_outputs(load_outputs(stack, outputs), "tpuctl cluster")
    return loaded.require("project"), region or loaded.require("region", "pass --region")


@cluster_app.command("create")
def create(
    name: str = typer.Argument(..., metavar="NAME", help="The cluster's name (its persistent resource id)."),
    accelerator: str = typer.Option("cpu", "--accelerator", "-a", help="The machines of its one pool, as "
                                    "`train --accelerator` names them (a job runs on the pool of its own machine)."),
    replicas: int = typer.Option(1, "--replicas", help=f"Machines in the pool [1..{clusters.MAX_REPLICAS}]."),
    stack: Optional[str] = _STACK,
    outputs: Optional[Path] = _OUTPUTS,
    region: Optional[str] = _REGION,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the request and its cost per hour; create nothing."),
) -> None:
    """Create a cluster: one pool of REPLICAS machines of ACCELERATOR, billed per hour until `cluster delete`."""
    plan = clusters.plan_cluster(name, stack_outputs(stack, outputs, dry_run=dry_run), accelerator=accelerator,
                                 replicas=replicas, region=region, echo=echo_err)
    for line in clusters.hourly_lines(plan.resource, plan.region):
        echo_err(line)
    if dry_run:
        typer.echo(json.dumps(plan.describe(), indent=2))
        return
    full = clusters.create_cluster(plan)
    say(f"creating {full}: `tpuctl cluster ls` shows it RUNNING (provisioning takes minutes); it is billed "
        f"until `tpuctl cluster delete {name}`")


@cluster_app.command("ls")
def ls(
    stack: Optional[str] = _STACK,
    outputs: Optional[Path] = _OUTPUTS,
    region: Optional[str] = _REGION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """The region's clusters (tpuctl's and others'), their state and machines."""
    project, where = _where(stack, outputs, region)
    rows = clusters.list_clusters(project, where)
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in rows], indent=2))
        return
    if not rows:
        say(f"no clusters in {where}")
        return
    table = Table("name", "state", "machines", "tpuctl's", "created")
    for r in rows:
        table.add_row(*(shown(v, markup=True) for v in (r.name, r.state, r.machines)), "yes" if r.managed else "no",
                      shown(r.created, markup=True))
    Console().print(table)


@cluster_app.command("delete")
def delete(
    name: str = typer.Argument(..., metavar="NAME", help="The cluster's name, as `tpuctl cluster ls` shows it."),
    stack: Optional[str] = _STACK,
    outputs: Optional[Path] = _OUTPUTS,
    region: Optional[str] = _REGION,
) -> None:
    """Delete a cluster tpuctl created (its billing stops when it is gone)."""
    project, where = _where(stack, outputs, region)
    full = clusters.delete_cluster(project, where, name)
    say(f"deleting {full}")
