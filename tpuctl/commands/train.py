"""``tpuctl train``: run the bundled trainer on this machine (one process or a 127.0.0.1 cluster), as a Vertex AI
CustomJob, or on a slice of TPU VMs: one run request, one planner, one driver for every target (the registry,
``tpuctl.services.runs.targets``, says which target a run goes to; this module never asks)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer

from ground.errors import UserError
from tpuctl.commands.display import TrainDisplay, summary_lines
from tpuctl.commands.options import OUTPUTS, STACK, echo_err, say, show_outcome
from tpuctl.commands.options import stack_outputs as stack_outputs_for
from tpuctl.commands.runflags import run_request, with_run_flags
from tpuctl.services.runs import targets
from tpuctl.services.runs.local import trainer_help
from tpuctl.services.runs.target import SUCCEEDED, Report, RunTarget, launch
from tpuctl.services.runs.target import target_flags as flags_of
from tpuctl.services.supervisor import TaskFailed


def target_flags() -> dict[str, frozenset[str]]:
    """The flags each target of ``train`` takes besides the common ones (its options model): given to another
    target, a flag is refused with one line naming the targets that take it."""
    return flags_of(targets.targets_of("train").values())


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
    )(with_run_flags("train")(train))   # the options of the targets registered now


def train(ctx: typer.Context, stack: Optional[str] = STACK, outputs: Optional[Path] = OUTPUTS, **_flags: Any) -> None:
    refuse_stray_arguments(ctx, "tpuctl train -- --learning_rate 0.01")
    request = run_request(ctx, "train")
    if request.trainer_help:     # `tpuctl train -- --help`: the trainer's flags, no run
        typer.echo(trainer_help().rstrip("\n"))
        return
    stack_outputs = stack_outputs_for(stack, outputs, dry_run=request.dry_run)
    spec = targets.plan("train", request, stack_outputs, claim=not request.dry_run, echo=echo_err)
    # your program's output is shown as it prints it (it speaks no progress protocol)
    display = None if request.dry_run else TrainDisplay(terminal=sys.stderr.isatty(),
                                                        verbose=request.option("verbose", False) or bool(spec.command),
                                                        resume_hint=spec.resume_hint)
    run_target(targets.target("train", spec, Report(note=echo_err, say=say, display=display)), display,
               dry_run=request.dry_run)


def run_target(target: RunTarget, display: TrainDisplay | None, *, dry_run: bool = False,
               started: float | None = None) -> None:
    """A run on any target (``train``, ``tpu attach``): launched (its request with ``dry_run``), its progress on
    the display (the trainer's protocol lines, from its processes or read back from Cloud Logging), and a run that
    ended well ends with the run summary (its time counted from ``started``: now, or an attached run's first
    submission); then its outcome. A trainer that said why it failed is not said again."""
    started = time.time() if started is None else started
    try:
        outcome = launch(target, dry_run=dry_run)
    except TaskFailed as exc:
        if said_why(exc):       # the trainer's own `error: …` line is on the screen: not a second one
            raise typer.Exit(exc.exit_code) from None
        raise
    finally:
        if display is not None:
            display.close()
    if display is not None and not isinstance(outcome, dict) and outcome.state == SUCCEEDED:
        now = time.time()
        first = outcome.started if outcome.started is not None and outcome.started < started else None
        for line in summary_lines(outcome.result, display.history, now - started, outcome.outputs, outcome.name,
                                  since_first=None if first is None else now - first):
            echo_err(line)
    show_outcome(outcome)


def refuse_stray_arguments(ctx: typer.Context, example: str) -> None:
    """Extra arguments are the trainer's flags, after ``--``; a word that is no flag is a typo."""
    if ctx.args and not ctx.args[0].startswith("-"):
        raise UserError(f"unexpected argument {ctx.args[0]!r}; trainer flags go after `--`, e.g. `{example}`")


def said_why(exc) -> bool:
    """A supervised trainer ended with its own ``error: …`` line, which the screen already shows (the trainer
    knows the cause; "trainer (pid N) exited with code 3; last stderr line: error: …" only repeated it)."""
    task = getattr(exc, "task", None)
    line = task.last_error_line() if task is not None else None
    # the task's own line, kept before any "[worker-0] " label is put on the screen's copy; the message itself may
    # hold "] " ("[Op:…] name:"), which a label split took for a label's end
    return bool(line) and line.startswith("error:")
