"""``tpuctl tpu attach|list|delete``: the TPU VM runs `tpuctl train --target tpu-vm` starts (Cloud TPU queued
resources, single- or multi-host, Spot)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from ground.outputs import load_outputs
from tpuctl.commands.display import TrainDisplay
from tpuctl.commands.options import echo_err, say, shown
from tpuctl.commands.train import run_target
from tpuctl.services.runs.target import Report
from tpuctl.services.runs.tpuvm.manage import delete as delete_run
from tpuctl.services.runs.tpuvm.manage import list_runs
from tpuctl.services.runs.tpuvm.target import attach_tpu_vm

tpu_app = typer.Typer(
    name="tpu", no_args_is_help=True,
    help="TPU VM runs (`tpuctl train --target tpu-vm` starts one): attach to a run from another shell, list and "
         "delete tpuctl's slices.",
)


_STACK = typer.Option(None, "--stack", help="Project, zone, buckets and service account from this stack's outputs.")
_OUTPUTS = typer.Option(None, "--outputs", help="The same, from this outputs JSON (`pulumi stack output --json`).")
_ZONE = typer.Option(None, "--zone", help="Zone of the slice (default: the stack's tpu_zone, else zone), e.g. us-central1-a.")
_PROJECT = typer.Option(None, "--project", help="Override the stack's project.")


def register(app: typer.Typer) -> None:
    app.add_typer(tpu_app, name="tpu")


@tpu_app.command("attach")
def attach(
    name: str = typer.Argument(..., metavar="NAME", help="Run name (`tpuctl tpu list`), as given to `train --target tpu-vm --name`."),
    stack: Optional[str] = _STACK,
    outputs: Optional[Path] = _OUTPUTS,
    model_dir: Optional[str] = typer.Option(None, "--model-dir", help="The run's gs:// folder, when it was not "
                                                                      "<artifacts bucket>/runs/NAME."),
    keep: Optional[bool] = typer.Option(None, "--keep/--delete", help="Keep or delete the slice when the run ends "
                                                                      "(default: what the run was started with)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every log line of the chief as it was logged "
                                                                  "(the live display shows the progress lines)."),
    poll_seconds: float = typer.Option(30.0, "--poll-seconds", min=0.01, max=3600, hidden=True,
                                       help="Seconds between status reads."),
) -> None:
    """Follow a run that `train --target tpu-vm` started from another shell or machine (a laptop that slept, a closed terminal):
    the live display from its logs (the epochs already done first), its result, its recoveries from preemption (as it
    was started: --recover, --zones) and the slice's deletion."""

    # the chief's lines from the run's first submission (the plan's): the epochs already done are epoch lines
    display = TrainDisplay(terminal=sys.stderr.isatty(), verbose=verbose)
    planned = attach_tpu_vm(name, load_outputs(stack=stack, outputs_file=outputs), model_dir=model_dir, keep=keep,
                            report=Report(note=echo_err, say=say, display=display), poll_seconds=poll_seconds)
    run_target(planned, display, started=planned.submitted)


@tpu_app.command("list")
def list_(
    stack: Optional[str] = _STACK,
    outputs: Optional[Path] = _OUTPUTS,
    zone: Optional[str] = _ZONE,
    project: Optional[str] = _PROJECT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """The queued resources tpuctl created (label managed-by=tpuctl) in the zone."""


    runs = list_runs(load_outputs(stack, outputs), project=project, zone=zone)
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in runs], indent=2))
        return
    if not runs:
        typer.echo("no tpuctl TPU VMs in this zone")
        return

    table = Table("name", "state", "accelerator", "tier", "created")
    for r in runs:
        table.add_row(*(shown(v, markup=True) for v in (r.name, r.state, r.accelerator)),   # the API's text
                      r.tier, shown(r.create_time, markup=True))
    Console().print(table)


@tpu_app.command("delete")
def delete(
    name: str = typer.Argument(..., help="Run name (the queued resource id), as `tpuctl tpu list` shows it."),
    stack: Optional[str] = _STACK,
    outputs: Optional[Path] = _OUTPUTS,
    zone: Optional[str] = _ZONE,
    project: Optional[str] = _PROJECT,
) -> None:
    """Delete a tpuctl queued resource and its TPU VMs (force)."""
    full = delete_run(name, load_outputs(stack, outputs), project=project, zone=zone)
    typer.echo(f"deleting {full}")
