"""``tpuctl train``: run the bundled trainer locally (one process or a 127.0.0.1 cluster) or on Vertex AI."""

from __future__ import annotations

import json
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from tpuctl.commands.options import (
    MAX_EPOCHS,
    MAX_WORKERS,
    OUTPUTS,
    STACK,
    Model,
    echo_err,
    finite,
    refuse_other_targets,
)
from tpuctl.ground.errors import UserError


class Target(str, Enum):
    local = "local"
    vertex = "vertex"
    tpu_vm = "tpu-vm"


#: The flags only some targets take, declared once per target (parameter names); given to another target, a flag
#: is refused with one line naming the targets that take it. Flags in no set apply to every target.
TARGET_FLAGS: dict[str, frozenset[str]] = {
    Target.local.value: frozenset({"name", "parameter_servers", "verbose"}),
    Target.vertex.value: frozenset({"region", "job_name", "image", "python_package", "spot", "max_run_time", "budget",
                                    "dry_run", "wait", "poll_seconds", "parameter_servers"}),
    Target.tpu_vm.value: frozenset({"zone", "keep", "recover", "zones", "job_name", "image", "spot", "budget",
                                    "dry_run", "poll_seconds"}),
}
FLAG_NOTES = {"name": "a Vertex job or a TPU VM run is named with --job-name"}

#: Bounds of the other numeric flags (as tpuctl.commands.options.MAX_WORKERS).
MAX_BATCH_SIZE = 1 << 20
MIN_POLL_SECONDS = 0.01
MAX_POLL_SECONDS = 3600.0


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
    target: Target = typer.Option(Target.local, "--target", help="Where to train: this machine (local), a Vertex AI CustomJob (vertex) or a TPU VM slice (tpu-vm)."),
    accelerator: Optional[str] = typer.Option(
        None, "--accelerator", "-a",
        help="cpu, gpu (one T4), gpu-t4, gpu-t4x2, gpu-l4x4, tpu-v3-8, tpu-v5e-4, … Local default: auto-detect; "
             "Vertex default: cpu."),
    workers: int = typer.Option(1, "--workers", "-w", min=1, max=MAX_WORKERS,
                                help=f"Processes/replicas in a MultiWorkerMirrored cluster (chief + N-1 workers); 1..{MAX_WORKERS}."),
    parameter_servers: int = typer.Option(0, "--parameter-servers", min=0, max=16,
                                          help="Parameter-server training: this many ps tasks, --workers workers and a coordinator (0..16)."),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="TFRecord folder (local or gs://). Default: the stack's data bucket, else the demo dataset."),
    model_dir: Optional[str] = typer.Option(None, "--model-dir", help="Checkpoints, logs and export. Default: the stack's artifacts bucket, else ./runs/<timestamp>."),
    name: Optional[str] = typer.Option(None, "--name", help="Local: name the run: its folder is runs/NAME (or <artifacts>/runs/NAME) instead of runs/<timestamp>; letters, digits, . _ -, at most 63."),
    model: Optional[Model] = typer.Option(None, "--model", help="Model to train (trainer default: small_cnn)."),
    hub_handle: Optional[str] = typer.Option(None, "--hub-handle", help="TF-Hub handle of a feature vector (implies --model hub)."),
    hub_cache_dir: Optional[str] = typer.Option(None, "--hub-cache-dir", help="TFHUB_CACHE_DIR for the trainer. Default: the stack's hub cache."),
    epochs: Optional[int] = typer.Option(None, "--epochs", min=1, max=MAX_EPOCHS,
                                         help=f"Training epochs, 1..{MAX_EPOCHS} (trainer default if omitted)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=1, max=MAX_BATCH_SIZE,
                                             help=f"Global training batch size, 1..{MAX_BATCH_SIZE}."),
    stack: Optional[str] = STACK,
    outputs: Optional[Path] = OUTPUTS,
    region: Optional[str] = typer.Option(None, "--region", help="Vertex: region of the job (default: the stack's region)."),
    job_name: Optional[str] = typer.Option(None, "--job-name", help="Vertex: display name, also names the staging/output folders (default tpuctl-train-<timestamp>); TPU VM: the run's and its queued resource's name (default tpuctl-<timestamp>)."),
    image: Optional[str] = typer.Option(None, "--image", help="Vertex/TPU VM: run this image instead of the trainer's own (`tpuctl image build`)."),
    python_package: bool = typer.Option(False, "--python-package", help="Vertex: ship trainer/ as a package onto Google's prebuilt TensorFlow image (refused past its end of availability)."),
    spot: bool = typer.Option(False, "--spot", help="Vertex/TPU VM: Spot capacity; a preempted job restarts and resumes from its gs:// backup."),
    max_run_time: Optional[str] = typer.Option(None, "--max-run-time", help="Vertex: stop the job after this long (10m..7d, e.g. 2h, 1h30m); also bounds the cost estimate."),
    budget: Optional[float] = typer.Option(None, "--budget", min=0.01, callback=finite, help="Vertex/TPU VM: refuse the run when its maximum cost (USD) is above this."),
    zone: Optional[str] = typer.Option(None, "--zone", help="TPU VM: zone of the slice (default: the stack's tpu_zone, else zone)."),
    keep: bool = typer.Option(False, "--keep", help="TPU VM: keep the slice when the run ends (it keeps costing money)."),
    recover: int = typer.Option(0, "--recover", min=0, max=100,
                                help="TPU VM with --spot: re-queue a preempted slice (resuming from its gs:// backup) at "
                                     "most this many times."),
    zones: Optional[str] = typer.Option(None, "--zones", help="TPU VM with --recover: other zones of the region to "
                                                              "re-queue in, in this order after --zone (comma-separated)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Vertex/TPU VM: print the request (CustomJob, or queued resource and startup script) as JSON; create nothing."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Vertex: follow the job until it ends."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Local: show everything the trainer prints (protocol lines, Keras, TensorFlow notices)."),
    poll_seconds: float = typer.Option(30.0, "--poll-seconds", min=MIN_POLL_SECONDS, max=MAX_POLL_SECONDS,
                                       callback=finite, hidden=True,
                                       help=f"Vertex: seconds between job status reads, {MIN_POLL_SECONDS}..{MAX_POLL_SECONDS}."),
) -> None:
    from tpuctl.commands.options import stack_outputs as stack_outputs_for
    from tpuctl.services.training import TrainOptions

    if ctx.args and "--" not in sys.argv:
        raise UserError(f"unexpected argument {ctx.args[0]!r}; trainer flags go after `--`, e.g. "
                        "`tpuctl train -- --learning_rate 0.01`")
    opts = TrainOptions(
        accelerator=accelerator, workers=workers, data_dir=data_dir, model_dir=model_dir,
        model=model.value if model else None, hub_handle=hub_handle, hub_cache_dir=hub_cache_dir,
        epochs=epochs, batch_size=batch_size, extra=list(ctx.args), parameter_servers=parameter_servers, name=name,
    )
    refuse_other_targets(ctx, target.value, TARGET_FLAGS, FLAG_NOTES)
    stack_outputs = stack_outputs_for(stack, outputs, dry_run=dry_run)
    if target is Target.vertex:
        _train_vertex(opts, stack_outputs, region, job_name, image, dry_run, wait, poll_seconds,
                      python_package=python_package, spot=spot, max_run_time=max_run_time, budget=budget)
        return
    if target is Target.tpu_vm:
        from tpuctl.commands import tpu

        tpu.run_options(opts, stack_outputs, zone=zone, spot=spot, keep=keep, name=job_name, image=image,
                        dry_run=dry_run, poll_seconds=poll_seconds, budget=budget, recover=recover, zones=zones)
        return
    _train_local(opts, stack_outputs, verbose=verbose)


def _train_local(opts, stack_outputs, verbose: bool = False) -> None:
    from tpuctl.commands.display import TrainDisplay, summary_lines
    from tpuctl.commands.options import echo_result
    from tpuctl.services.training import plan_local, release_run_dir, run_local, trainer_help

    help_text = trainer_help(opts.extra)
    if help_text is not None:   # `tpuctl train -- --help`: the trainer's flags, no run
        typer.echo(help_text.rstrip("\n"))
        return
    plan = plan_local(opts, stack_outputs, echo=echo_err)
    source = "demo dataset" if plan.demo_data else "data"
    echo_err(f"{source}: {plan.data_dir}")
    echo_err(f"model dir: {plan.model_dir}")

    display = TrainDisplay(terminal=sys.stderr.isatty(), verbose=verbose)

    def _started(task) -> None:
        display.event(f"started {task.label} (pid {task.pid})")

    from tpuctl.services import runs
    from tpuctl.services.supervisor import TaskFailed

    started = time.time()
    try:
        outcome = run_local(plan.args, workers=plan.workers, env=plan.env, on_started=_started,
                            out=display.stdout_sink(), err=display.stderr_sink(), on_message=display.on_message,
                            parameter_servers=plan.parameter_servers)
    except TaskFailed as exc:
        release_run_dir(plan)   # a run that failed before writing anything leaves no empty folder
        if exc.exit_code == 130:
            _record_interrupted(plan, opts, started)
        if said_why(exc):       # the trainer's own `error: …` line is on the screen: not a second one
            raise typer.Exit(exc.exit_code) from None
        raise
    except BaseException as exc:
        release_run_dir(plan)
        if isinstance(exc, KeyboardInterrupt):
            _record_interrupted(plan, opts, started)
        raise
    finally:
        display.close()
    runs.write_launch_record(plan.model_dir, {
        "target": "local", "accelerator": opts.accelerator or "auto", "workers": plan.workers,
        "args": plan.args, "started": started, "finished": time.time(),
    })
    result = outcome.result
    for line in summary_lines(result, display.history, time.time() - started, plan.model_dir,
                              Path(plan.model_dir).name):
        echo_err(line)
    if not result:
        typer.echo(f"training finished; model dir: {plan.model_dir} (the trainer printed no result line)")
        return
    echo_result(result)


def _record_interrupted(plan, opts, started: float) -> None:
    """A stopped run that left work behind (checkpoints, logs) and no result is listed by `runs ls` as
    interrupted: its launch record says so."""
    from tpuctl.services import runs

    folder = Path(plan.model_dir)
    if plan.model_dir.startswith("gs://") or not folder.is_dir() or (folder / runs.RESULT_FILE).exists():
        return
    try:
        runs.write_launch_record(plan.model_dir, {
            "target": "local", "accelerator": opts.accelerator or "auto", "workers": plan.workers,
            "args": plan.args, "started": started, "finished": time.time(), "state": "interrupted"})
    except OSError:
        pass   # the interrupt is what the user sees; the record is a courtesy


def said_why(exc) -> bool:
    """A supervised trainer ended with its own ``error: …`` line, which the screen already shows (the trainer
    knows the cause; "trainer (pid N) exited with code 3; last stderr line: error: …" only repeated it)."""
    task = getattr(exc, "task", None)
    line = task.last_error_line() if task is not None else None
    return bool(line) and exc.exit_code != 130 and line.split("] ", 1)[-1].startswith("error:")


def _train_vertex(opts, stack_outputs, region, job_name, image, dry_run, wait, poll_seconds, *,
                  python_package: bool = False, spot: bool = False, max_run_time: str | None = None,
                  budget: float | None = None) -> None:
    from tpuctl.services import cloudrun, vertex

    job = vertex.plan_job(opts, stack_outputs, region=region, job_name=job_name, image=image,
                          python_package=python_package, echo=echo_err)
    run_time = cloudrun.parse_run_time(max_run_time) if max_run_time else None
    vertex.check_quota(job, echo=echo_err, spot=spot)   # before anything is built; offline: a note
    # Spot / timeout, and the cost estimate (refused over --budget) before anything is uploaded.
    cloud = cloudrun.plan_cloud_run(job, spot=spot, max_run_time=run_time, budget=budget)
    for line in cloud.estimate.lines():
        echo_err(line)
    if dry_run:
        typer.echo(json.dumps(vertex.job_to_dict(cloud.custom_job), indent=2, sort_keys=True))
        return
    submission = vertex.run_job(job, wait=wait, poll_seconds=poll_seconds, echo=typer.echo,
                                custom_job=cloud.custom_job)
    if not wait:
        return
    if submission.state != "JOB_STATE_SUCCEEDED":
        detail = f": {submission.error}" if submission.error else ""
        raise UserError(f"job {submission.name} ended in {submission.state}{detail} ({submission.console_url})", 1)
    typer.echo(f"job succeeded; outputs in {job.base_output_dir}")
