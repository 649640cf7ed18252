"""What `tpuctl train` and `tpuctl tune` share: flag bounds and checks, the stack options, the stderr echo."""

from __future__ import annotations

import math

import typer

from tpuctl.ground.errors import UserError

#: Bounds of the numeric flags (docs/train.md, docs/troubleshooting.md): checked by the parser, before any
#: process starts or any job is built. 64 processes is far more than one machine runs usefully; a Vertex job
#: of more replicas is a worker pool spec of its own, not a flag.
MAX_WORKERS = 64
MAX_EPOCHS = 100_000

STACK = typer.Option(None, "--stack", help="Read defaults from this Pulumi stack's outputs.")
OUTPUTS = typer.Option(None, "--outputs", help="Read defaults from a `pulumi stack output --json` file.")


def finite(ctx: typer.Context, param: typer.CallbackParam, value):
    """Click's FloatRange lets NaN through (every comparison with NaN is false): refuse it here."""
    if isinstance(value, float) and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number", ctx=ctx, param=param)
    return value


def echo_err(message: str) -> None:
    typer.echo(message, err=True)


def refuse_given(flags, message: str) -> None:
    """UserError ``message`` naming (``{flag}``) the first of the ``(flag, value)`` pairs whose value is set."""
    for flag, value in flags:
        if value:
            raise UserError(message.format(flag=flag))
