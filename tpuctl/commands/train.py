"""``tpuctl train``: run the bundled trainer locally (one process or a 127.0.0.1 cluster) or on Vertex AI."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from tpuctl.ground.errors import UserError


class Target(str, Enum):
    local = "local"
    vertex = "vertex"


class Model(str, Enum):
    small_cnn = "small_cnn"
    resnet50 = "resnet50"
    hub = "hub"


def register(app: typer.Typer) -> None:
    app.command(
        "train",
        context_settings={"allow_extra_args": True},
        help=(
            "Train with the bundled trainer. With no arguments: the demo dataset, locally, SavedModel under "
            "./runs/<timestamp>. Flags after `--` are passed to `python -m trainer.task` unchanged."
        ),
    )(train)


def train(
    ctx: typer.Context,
    target: Target = typer.Option(Target.local, "--target", help="Where to train: this machine or a Vertex AI CustomJob."),
    accelerator: Optional[str] = typer.Option(
        None, "--accelerator", "-a",
        help="cpu, gpu (one T4), gpu-t4, gpu-t4x2, gpu-l4x4, tpu-v3-8, tpu-v5e-4, … Local default: auto-detect; "
             "Vertex default: cpu."),
    workers: int = typer.Option(1, "--workers", "-w", help="Processes/replicas in a MultiWorkerMirrored cluster (chief + N-1 workers)."),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="TFRecord folder (local or gs://). Default: the stack's data bucket, else the demo dataset."),
    model_dir: Optional[str] = typer.Option(None, "--model-dir", help="Checkpoints, logs and export. Default: the stack's artifacts bucket, else ./runs/<timestamp>."),
    model: Optional[Model] = typer.Option(None, "--model", help="Model to train (trainer default: small_cnn)."),
    hub_handle: Optional[str] = typer.Option(None, "--hub-handle", help="TF-Hub handle of a feature vector (implies --model hub)."),
    hub_cache_dir: Optional[str] = typer.Option(None, "--hub-cache-dir", help="TFHUB_CACHE_DIR for the trainer. Default: the stack's hub cache."),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="Training epochs (trainer default if omitted)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Global training batch size."),
    stack: Optional[str] = typer.Option(None, "--stack", help="Read defaults from this Pulumi stack's outputs."),
    outputs: Optional[Path] = typer.Option(None, "--outputs", help="Read defaults from a `pulumi stack output --json` file."),
    region: Optional[str] = typer.Option(None, "--region", help="Vertex: region of the job (default: the stack's region)."),
    job_name: Optional[str] = typer.Option(None, "--job-name", help="Vertex: display name, also names the staging/output folders. Default: tpuctl-train-<timestamp>."),
    image: Optional[str] = typer.Option(None, "--image", help="Vertex: executor image instead of the prebuilt TensorFlow image for the accelerator."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Vertex: print the CustomJob request as JSON; build, upload and submit nothing."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Vertex: follow the job until it ends."),
    poll_seconds: float = typer.Option(30.0, "--poll-seconds", hidden=True),
) -> None:
    from tpuctl.ground.outputs import load_outputs
    from tpuctl.services.training import TrainOptions

    if ctx.args and "--" not in sys.argv:
        raise UserError(f"unexpected argument {ctx.args[0]!r}; trainer flags go after `--`, e.g. "
                        "`tpuctl train -- --learning_rate 0.01`")
    opts = TrainOptions(
        accelerator=accelerator, workers=workers, data_dir=data_dir, model_dir=model_dir,
        model=model.value if model else None, hub_handle=hub_handle, hub_cache_dir=hub_cache_dir,
        epochs=epochs, batch_size=batch_size, extra=list(ctx.args),
    )
    stack_outputs = load_outputs(stack=stack, outputs_file=outputs)
    if target is Target.vertex:
        _train_vertex(opts, stack_outputs, region, job_name, image, dry_run, wait, poll_seconds)
        return
    for name, value in (("--region", region), ("--job-name", job_name), ("--image", image)):
        if value:
            raise UserError(f"{name} only applies to --target vertex")
    if dry_run:
        raise UserError("--dry-run only applies to --target vertex")
    _train_local(opts, stack_outputs)


def _echo_err(message: str) -> None:
    typer.echo(message, err=True)


def _train_local(opts, stack_outputs) -> None:
    from tpuctl.services.training import plan_local, run_local

    plan = plan_local(opts, stack_outputs, echo=_echo_err)
    source = "demo dataset" if plan.demo_data else "data"
    _echo_err(f"{source}: {plan.data_dir}")
    _echo_err(f"model dir: {plan.model_dir}")

    def _started(task) -> None:
        _echo_err(f"started {task.label} (pid {task.pid})")

    outcome = run_local(plan.args, workers=plan.workers, env=plan.env, on_started=_started)
    result = outcome.result
    if not result:
        typer.echo(f"training finished; model dir: {plan.model_dir} (the trainer printed no result line)")
        return
    typer.echo(f"SavedModel: {result.get('export_dir')}")
    accuracy = result.get("val_accuracy")
    if isinstance(accuracy, (int, float)):
        typer.echo(f"validation accuracy: {accuracy:.4f}")
    else:
        typer.echo(f"validation accuracy: {accuracy}")


def _train_vertex(opts, stack_outputs, region, job_name, image, dry_run, wait, poll_seconds) -> None:
    from tpuctl.services import vertex

    job = vertex.plan_job(opts, stack_outputs, region=region, job_name=job_name, image=image)
    if dry_run:
        typer.echo(json.dumps(vertex.job_to_dict(vertex.build_custom_job(job)), indent=2, sort_keys=True))
        return
    submission = vertex.run_job(job, wait=wait, poll_seconds=poll_seconds, echo=typer.echo)
    if not wait:
        return
    if submission.state != "JOB_STATE_SUCCEEDED":
        detail = f": {submission.error}" if submission.error else ""
        raise UserError(f"job {submission.name} ended in {submission.state}{detail} ({submission.console_url})", 1)
    typer.echo(f"job succeeded; outputs in {job.base_output_dir}")
