"""``tpuctl train``: run the bundled trainer on this machine (one process or a 127.0.0.1 cluster), as a Vertex AI
CustomJob, or on a slice of TPU VMs: one set of run flags, one planner, one driver for every target."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import List, Optional

import typer

from ground.errors import UserError
from tpuctl.commands.display import TrainDisplay, follow_cloud_run, summary_lines
from tpuctl.commands.options import OUTPUTS, STACK, echo_err, refuse_other_targets, say, show_outcome
from tpuctl.commands.options import stack_outputs as stack_outputs_for
from tpuctl.commands.runflags import Provisioning, Target, option, run_flags
from tpuctl.services.runs import spec as runspec
from tpuctl.services.runs.local import LocalTarget, trainer_help
from tpuctl.services.runs.target import launch
from tpuctl.services.runs.target import target_flags as flags_of
from tpuctl.services.runs.tpuvm.target import TpuVmTarget
from tpuctl.services.runs.vertex import VertexTarget
from tpuctl.services.supervisor import TaskFailed

TARGETS = {"local": LocalTarget, "vertex": VertexTarget, "tpu-vm": TpuVmTarget}


def target_flags() -> dict[str, frozenset[str]]:
    """The flags only some targets take, as each target declares them (``flags`` on its class); given to another
    target, a flag is refused with one line naming the targets that take it. Flags in no set apply to every target."""
    return flags_of(TARGETS.values())


def register(app: typer.Typer) -> None:
    app.command(
        "train",
        context_settings={"allow_extra_args": True},
        help=(
            "Train with the bundled trainer (its models, or your model and dataset functions: --model/--dataset), or "
            "run your own program (--command), locally or in the cloud. With no arguments: the demo dataset, "
            "locally, SavedModel under ./runs/<timestamp>. Flags after `--` are passed to `python -m trainer.task` "
            "unchanged."
        ),
    )(train)


def train(
    ctx: typer.Context,
    target: Target = option("target"),
    accelerator: Optional[str] = option("accelerator", "-a"),
    workers: int = option("workers", "-w"),
    parameter_servers: int = option("parameter_servers"),
    data_dir: Optional[str] = option("data_dir"),
    model_dir: Optional[str] = option("model_dir"),
    name: Optional[str] = option("name"),
    model: Optional[str] = option("model"),
    dataset: Optional[str] = option("dataset"),
    hparam: Optional[List[str]] = option("hparam"),
    code: Optional[str] = option("code"),
    command: Optional[str] = option("command"),
    hub_handle: Optional[str] = option("hub_handle"),
    hub_cache_dir: Optional[str] = option("hub_cache_dir"),
    epochs: Optional[int] = option("epochs"),
    batch_size: Optional[int] = option("batch_size"),
    profile_steps: Optional[str] = option("profile_steps"),
    stack: Optional[str] = STACK,
    outputs: Optional[Path] = OUTPUTS,
    region: Optional[str] = option("region"),
    zone: Optional[str] = option("zone"),
    image: Optional[str] = option("image"),
    python_package: bool = option("python_package"),
    spot: bool = option("spot"),
    provisioning: Optional[Provisioning] = option("provisioning"),
    reservation: Optional[str] = option("reservation"),
    autocheckpoint: bool = option("autocheckpoint"),
    cluster: Optional[str] = option("cluster"),
    recover: int = option("recover"),
    zones: Optional[str] = option("zones"),
    max_run_time: Optional[str] = option("max_run_time"),
    max_wait: Optional[str] = option("max_wait"),
    budget: Optional[float] = option("budget"),
    keep: bool = option("keep"),
    dry_run: bool = option("dry_run"),
    wait: bool = option("wait"),
    verbose: bool = option("verbose", "-v"),
    poll_seconds: float = option("poll_seconds", hidden=True),
) -> None:
    refuse_stray_arguments(ctx, "tpuctl train -- --learning_rate 0.01")
    refuse_other_targets(ctx, target.value, target_flags())
    flags = run_flags(ctx)
    if flags.trainer_help:     # `tpuctl train -- --help`: the trainer's flags, no run
        typer.echo(trainer_help().rstrip("\n"))
        return
    stack_outputs = stack_outputs_for(stack, outputs, dry_run=dry_run)
    spec = runspec.plan(flags, stack_outputs, claim=not flags.dry_run, echo=echo_err)
    if spec.target == "vertex":
        display = None if flags.dry_run or not flags.wait else TrainDisplay(terminal=sys.stderr.isatty(),
                                                                            verbose=flags.verbose)
        planned = VertexTarget(spec, note=echo_err, say=say, wait=flags.wait, poll_seconds=flags.poll_seconds,
                               display=display)
        follow_cloud_run(planned, display, flags.dry_run)
    elif spec.target == "tpu-vm":
        display = None if flags.dry_run else TrainDisplay(terminal=sys.stderr.isatty(), verbose=flags.verbose)
        follow_cloud_run(TpuVmTarget(spec, progress=echo_err, poll_seconds=flags.poll_seconds, display=display),
                         display, flags.dry_run)
    elif flags.dry_run:
        show_outcome(launch(LocalTarget(spec, note=echo_err), dry_run=True))
    else:
        _train_local(spec, verbose=flags.verbose or bool(spec.command))   # your program's output, as it prints it


def refuse_stray_arguments(ctx: typer.Context, example: str) -> None:
    """Extra arguments are the trainer's flags, after ``--``; a word that is no flag is a typo."""
    if ctx.args and not ctx.args[0].startswith("-"):
        raise UserError(f"unexpected argument {ctx.args[0]!r}; trainer flags go after `--`, e.g. `{example}`")


def _train_local(spec: runspec.RunSpec, verbose: bool = False) -> None:
    display = TrainDisplay(terminal=sys.stderr.isatty(), verbose=verbose)
    started = time.time()
    try:
        outcome = launch(LocalTarget(spec, display=display, note=echo_err))
    except TaskFailed as exc:
        if said_why(exc):       # the trainer's own `error: …` line is on the screen: not a second one
            raise typer.Exit(exc.exit_code) from None
        raise
    for line in summary_lines(outcome.result, display.history, time.time() - started, outcome.outputs,
                              outcome.name):
        echo_err(line)
    show_outcome(outcome)


def said_why(exc) -> bool:
    """A supervised trainer ended with its own ``error: …`` line, which the screen already shows (the trainer
    knows the cause; "trainer (pid N) exited with code 3; last stderr line: error: …" only repeated it)."""
    task = getattr(exc, "task", None)
    line = task.last_error_line() if task is not None else None
    return bool(line) and exc.exit_code != 130 and line.split("] ", 1)[-1].startswith("error:")
