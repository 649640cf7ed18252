"""``tpuctl tune``: hyperparameter search (Vertex AI HyperparameterTuningJob, or local trainer runs) and
``tpuctl tune status JOB``: the trials ranked by val_accuracy."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from tpuctl.commands.options import (
    MAX_EPOCHS,
    MAX_WORKERS,
    OUTPUTS,
    STACK,
    echo_err,
    finite,
    image_ref,
    refuse_other_targets,
    show_outcome,
)
from tpuctl.ground.errors import UserError


class Target(str, Enum):
    local = "local"
    vertex = "vertex"


MAX_TRIALS = 100


def target_flags() -> dict[str, frozenset[str]]:
    """The flags only one target takes, as each target declares them (as ``tpuctl train``'s): refused, one line,
    for the other."""
    from tpuctl.services.targets import target_flags as flags_of
    from tpuctl.services.targets.local import LocalTuningTarget
    from tpuctl.services.targets.vertex import VertexTuningTarget

    return flags_of([LocalTuningTarget, VertexTuningTarget])


FLAG_NOTES = {"seed": "Vertex AI picks the trials", "verbose": "a Vertex AI job's logs are in the console"}


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        name="tune",
        help=("Search hyperparameters (learning rate, batch size, model, epochs) for the bundled trainer: a Vertex AI "
              "hyperparameter tuning job, or --target local trials run one after another. Metric: val_accuracy."),
        invoke_without_command=True,
        no_args_is_help=False,
    )
    group.callback()(tune)
    group.command("status", help="Trials of a Vertex AI tuning job, best val_accuracy first, with the best export.")(status)
    app.add_typer(group)


def tune(
    ctx: typer.Context,
    target: Target = typer.Option(Target.vertex, "--target", help="vertex: a HyperparameterTuningJob; local: trials on this machine."),
    spec: Optional[Path] = typer.Option(None, "--spec", help="Search space (YAML, see docs/cheaper-runs.md). Default: learning rate × batch size."),
    trials: Optional[int] = typer.Option(None, "--trials", min=1, max=MAX_TRIALS, help=f"Number of trials, 1..{MAX_TRIALS} (default: the spec's max_trials)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Local: seed of the random search."),
    accelerator: Optional[str] = typer.Option(None, "--accelerator", "-a", help="As for `tpuctl train`."),
    workers: int = typer.Option(1, "--workers", "-w", min=1, max=MAX_WORKERS, help="Vertex: replicas per trial."),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="TFRecord folder. Default: the stack's data bucket, locally the demo dataset."),
    model_dir: Optional[str] = typer.Option(None, "--model-dir", help="Tuning folder; each trial writes below it."),
    epochs: Optional[int] = typer.Option(None, "--epochs", min=1, max=MAX_EPOCHS, help="Epochs of every trial unless the spec tunes them."),
    stack: Optional[str] = STACK,
    outputs: Optional[Path] = OUTPUTS,
    region: Optional[str] = typer.Option(None, "--region", help="Vertex: region (default: the stack's)."),
    job_name: Optional[str] = typer.Option(None, "--job-name", help="Vertex: display name. Default: tpuctl-tune-<timestamp>."),
    image: Optional[str] = typer.Option(None, "--image", callback=image_ref, help="Vertex: run this image instead of the trainer's own (`tpuctl image build`)."),
    python_package: bool = typer.Option(False, "--python-package", help="Vertex: the trainer as a package on Google's prebuilt TensorFlow image."),
    spot: bool = typer.Option(False, "--spot", help="Vertex: run the trials on Spot capacity (resume from the backup on restart)."),
    max_run_time: Optional[str] = typer.Option(None, "--max-run-time", help="Vertex: timeout of each trial, 10m..7d (e.g. 2h)."),
    budget: Optional[float] = typer.Option(None, "--budget", min=0.01, callback=finite,
                                           help="Vertex: refuse the job if its maximum cost (USD) is above this."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Vertex: print the request and the cost estimate; send nothing."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Local: show everything the trainer prints."),
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    from tpuctl.commands.options import stack_outputs as stack_outputs_for
    from tpuctl.services import cloudrun, tuning, vertex
    from tpuctl.services.targets import launch
    from tpuctl.services.training import TrainOptions, timestamp

    search = tuning.load_spec(spec)
    opts = TrainOptions(accelerator=accelerator, workers=workers, data_dir=data_dir, model_dir=model_dir,
                        epochs=epochs)
    refuse_other_targets(ctx, target.value, target_flags(), FLAG_NOTES)
    stack_outputs = stack_outputs_for(stack, outputs, dry_run=dry_run and target is Target.vertex)
    if target is Target.local:
        from tpuctl.commands.display import TrainDisplay
        from tpuctl.services.targets.local import LocalTuningTarget

        def display() -> TrainDisplay:   # per trial: a live bar on a terminal, no epoch lines; -v: everything
            return TrainDisplay(terminal=sys.stderr.isatty() and not verbose, verbose=verbose, epoch_lines=False)

        outcome = launch(LocalTuningTarget(opts, search, trials or min(search.max_trials, 3), seed=seed,
                                           display=display, note=echo_err))
        _render(outcome.trials, f"local tuning: {outcome.outputs}")
        if outcome.state == "FAILED":
            raise UserError(outcome.error, 1)
        return
    from tpuctl.services.targets.vertex import VertexTuningTarget

    run_time = cloudrun.parse_run_time(max_run_time) if max_run_time is not None else None
    job = vertex.plan_job(opts, stack_outputs, region=region, job_name=job_name or f"tpuctl-tune-{timestamp()}",
                          image=image, python_package=python_package, echo=echo_err)
    planned = VertexTuningTarget(job, search, trials=trials, spot=spot, max_run_time=run_time, budget=budget,
                                 note=echo_err, say=typer.echo)
    show_outcome(launch(planned, dry_run=dry_run))


def _render(rows, title: str) -> None:
    """Trials as a table; text from a job or a folder (parameters, ids, names) is terminal-safe (``shown``)."""
    from rich.console import Console
    from rich.table import Table

    from tpuctl.commands.options import shown

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
    job: str = typer.Argument(..., help="projects/P/locations/R/hyperparameterTuningJobs/ID, or the ID with --stack/--outputs."),
    stack: Optional[str] = typer.Option(None, "--stack", help="Project and region from this stack's outputs."),
    outputs: Optional[Path] = typer.Option(None, "--outputs", help="Project and region from a `pulumi stack output --json` file."),
    region: Optional[str] = typer.Option(None, "--region", help="Region of the job (default: the stack's)."),
) -> None:
    from tpuctl.ground.outputs import load_outputs
    from tpuctl.services import tuning, vertex

    stack_outputs = load_outputs(stack=stack, outputs_file=outputs)
    name = tuning.resolve_job_name(job, project=stack_outputs.project if stack_outputs else None,
                                   region=region or (stack_outputs.region if stack_outputs else None))
    hp_job = tuning.get_tuning_job(name)
    rows = tuning.vertex_rows(hp_job)
    _render(rows, f"{hp_job.display_name or name}: {vertex.state_name(hp_job)}")
