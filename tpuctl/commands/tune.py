"""``tpuctl tune``: hyperparameter search (Vertex AI HyperparameterTuningJob, or local trainer runs) and
``tpuctl tune status JOB``: the trials ranked by val_accuracy."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from ground.errors import UserError
from ground.outputs import load_outputs
from tpuctl.commands.display import TrainDisplay
from tpuctl.commands.options import OUTPUTS, STACK, echo_err, say, show_outcome, shown
from tpuctl.commands.options import stack_outputs as stack_outputs_for
from tpuctl.commands.runflags import run_request, with_run_flags
from tpuctl.commands.train import refuse_stray_arguments
from tpuctl.services.runs import targets
from tpuctl.services.runs.target import Report, launch
from tpuctl.services.runs.target import target_flags as flags_of
from tpuctl.services.runs.tuning.spec import MAX_TRIALS, load_spec
from tpuctl.services.runs.tuning.vertex import get_tuning_job, resolve_job_name, vertex_rows
from tpuctl.services.runs.vertex import state_name


def target_flags() -> dict[str, frozenset[str]]:
    """The flags each target of ``tune`` takes besides the common ones (as ``tpuctl train``'s): refused, one line,
    for the other."""
    return flags_of(targets.targets_of("tune").values())


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        name="tune",
        help=("Search hyperparameters (learning rate, batch size, model, epochs) for the bundled trainer: trials on "
              "this machine (local, one after another) or a Vertex AI hyperparameter tuning job. Metric: "
              "val_accuracy."),
        invoke_without_command=True,
        no_args_is_help=False,
        context_settings={"allow_extra_args": True},
    )
    group.callback()(with_run_flags("tune")(tune))   # the options of the targets registered now
    group.command("status", help="Trials of a Vertex AI tuning job, best val_accuracy first, with the best export.")(status)
    app.add_typer(group)


def tune(
    ctx: typer.Context,
    spec: Optional[Path] = typer.Option(None, "--spec", help="Search space (YAML, see docs/cheaper-runs.md). Default: learning rate × batch size."),
    trials: Optional[int] = typer.Option(None, "--trials", min=1, max=MAX_TRIALS, help=f"Number of trials, 1..{MAX_TRIALS} (default: the spec's max_trials; locally at most 3 of them)."),
    stack: Optional[str] = STACK,
    outputs: Optional[Path] = OUTPUTS,
    **_flags: Any,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    refuse_stray_arguments(ctx, "tpuctl tune -- --steps_per_epoch 50")
    request = run_request(ctx, "tune")
    search = load_spec(spec)
    stack_outputs = stack_outputs_for(stack, outputs, dry_run=request.dry_run)
    run = targets.plan("tune", request, stack_outputs, claim=not request.dry_run, echo=echo_err)
    verbose = request.option("verbose", False)

    def display() -> TrainDisplay:   # per trial: a live bar on a terminal, no epoch lines; -v: everything
        return TrainDisplay(terminal=sys.stderr.isatty() and not verbose, verbose=verbose, epoch_lines=False)

    report = Report(note=echo_err, say=say, display=display)
    outcome = launch(targets.target("tune", run, report, search=search, trials=trials), dry_run=request.dry_run)
    if isinstance(outcome, dict) or not outcome.trials:
        show_outcome(outcome)
        return
    _render(outcome.trials, f"local tuning: {outcome.outputs}")
    if outcome.state == "FAILED":
        raise UserError(outcome.error or "every trial failed", 1)


def _render(rows, title: str) -> None:
    """Trials as a table; text from a job or a folder (parameters, ids, names) is terminal-safe (``shown``)."""
    table = Table(title=shown(title, markup=True))
    for col in ("trial", "state", "val_accuracy", "parameters"):
        table.add_column(col)
    for row in rows:
        metric = f"{row.metric:.4f}" if row.metric is not None else "-"
        params = " ".join(f"{k}={v}" for k, v in sorted(row.params.items()))
        table.add_row(shown(row.trial, markup=True), shown(row.state, markup=True), metric, shown(params, markup=True))
    Console(width=200).print(table)
    best = next((r for r in rows if r.metric is not None), None)
    if best is None:
        typer.echo("no trial has reported val_accuracy yet")
    else:
        typer.echo(f"best trial: {shown(best.trial)} val_accuracy {best.metric:.4f}")
        typer.echo(f"best export: {shown(best.export) if best.export else '(not exported)'}")


def status(
    job: str = typer.Argument(..., metavar="JOB", help="projects/P/locations/R/hyperparameterTuningJobs/ID, or the ID with --stack/--outputs."),
    stack: Optional[str] = typer.Option(None, "--stack", help="Project and region from this stack's outputs."),
    outputs: Optional[Path] = typer.Option(None, "--outputs", help="Project and region from a `pulumi stack output --json` file."),
    region: Optional[str] = typer.Option(None, "--region", help="Region of the job (default: the stack's)."),
) -> None:
    stack_outputs = load_outputs(stack=stack, outputs_file=outputs)
    name = resolve_job_name(job, project=stack_outputs.project if stack_outputs else None,
                            region=region or (stack_outputs.region if stack_outputs else None))
    hp_job = get_tuning_job(name)
    rows = vertex_rows(hp_job)
    _render(rows, f"{hp_job.display_name or name}: {state_name(hp_job)}")
