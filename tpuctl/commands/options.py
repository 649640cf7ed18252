"""What `tpuctl train`, `tpuctl tune` and the other commands share: flag bounds and checks, the stack options,
the model choice, the stderr echo and progress bar, and the result lines."""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

import typer
from rich import progress as rp
from rich.console import Console
from rich.markup import escape

from ground.domain.names import validate_image_ref
from ground.errors import DomainError, UserError
from ground.files import printable
from ground.outputs import load_outputs, parse_outputs, pulumi_cli
from tpuctl.services.plan import plan
from tpuctl.services.runs.target import Outcome

STACK = typer.Option(None, "--stack", help="Read defaults from this Pulumi stack's outputs.")
OUTPUTS = typer.Option(None, "--outputs", help="Read defaults from a `pulumi stack output --json` file.")


def finite(ctx: typer.Context, param: typer.CallbackParam, value):
    """Click's FloatRange lets NaN through (every comparison with NaN is false): refuse it here."""
    if isinstance(value, float) and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number", ctx=ctx, param=param)
    return value


def shown(value, *, markup: bool = False, limit: int | None = None) -> str:
    """The one way text from a file or a server (run records, trainer results, prediction replies) reaches the
    terminal: control characters and escape sequences stripped (``ground.files.printable``); ``markup``: for a
    rich renderer, its markup escaped too (``[bold]`` stays text)."""

    text = printable(value, limit)
    if markup:

        text = escape(text)
    return text


def strict_json(doc) -> str:
    """JSON that every parser accepts: a NaN or infinite number (which ``json.dumps`` writes as the invalid
    ``NaN``/``Infinity``) becomes null; the dump itself refuses any that slipped through (``allow_nan=False``)."""

    def finite(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {key: finite(v) for key, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        return value

    return json.dumps(finite(doc), indent=2, allow_nan=False)


def image_ref(ctx: typer.Context, param: typer.CallbackParam, value):
    """``--image`` of a command that is no run (``serve``): a container image reference, the same rule as a run's
    (``ground.domain.names.validate_image_ref``), refused at the edge in one line otherwise."""
    if value is not None:
        try:
            validate_image_ref(value, "--image")
        except DomainError as exc:
            raise typer.BadParameter(str(exc), ctx=ctx, param=param) from None
    return value


def stack_outputs(stack, outputs, *, dry_run: bool = False):
    """``--stack``/``--outputs`` as ``load_outputs`` reads them; a dry run with ``--stack NAME`` and no Pulumi
    CLI uses the outputs ``tpuctl plan --stack NAME`` computes offline from Pulumi.NAME.yaml (what the stack
    would export: a dry run sends nothing, so it needs no deployed stack), saying so in one line."""

    if not (dry_run and stack and outputs is None and pulumi_cli() is None):
        return load_outputs(stack=stack, outputs_file=outputs)

    planned = plan(stack, check_policy=False)
    echo_err(f"no Pulumi CLI: using the outputs `tpuctl plan --stack {stack}` computes from Pulumi.{stack}.yaml "
             "(enough for a dry run; a real run needs the deployed stack)")
    return parse_outputs(planned.outputs, f"the outputs planned for stack {stack}")


def program(name: str, folder) -> str:
    """How to type ``name`` (a program in the venv ``folder``) in a hint: the bare name when PATH finds that very
    program (setup's ~/.local/bin link), else its path - relative below the current folder - shell-quoted."""

    installed = Path(folder) / name
    found = shutil.which(name)
    try:
        if found and Path(found).resolve() == installed.resolve():
            return name
    except OSError:
        pass
    try:
        shown_path = os.path.relpath(installed) if installed.resolve().is_relative_to(Path.cwd()) else str(installed)
    except (OSError, ValueError):
        shown_path = str(installed)
    return shlex.quote(shown_path if "/" in shown_path else f"./{shown_path}")


def tpuctl_program() -> str:
    """``tpuctl`` if PATH finds this environment's, else e.g. ``.venv/bin/tpuctl``."""
    return program("tpuctl", Path(sys.executable).parent)


def natural_width(headers: list[str], rows: list[list[str]]) -> int:
    """Columns a rich table (default box, padding 1) needs to show every cell on one line."""
    widths = [max([len(h), *(len(str(row[i])) for row in rows)]) for i, h in enumerate(headers)]
    return sum(widths) + 3 * len(widths) + 1


def say(message: str, *, err: bool = False) -> None:
    """The one way a line of text reaches the terminal when it holds text from a file, a folder, the user or a
    server (a class folder's name, a SKU's description, a hub manifest's handle): each line through ``shown``, so an
    escape sequence (``ESC ] 0 ; title BEL``, ``ESC [ 2 J``) is neutralised and the lines stay the lines."""
    typer.echo("\n".join(shown(line) for line in str(message).split("\n")), err=err)


def echo_err(message: str) -> None:
    say(message, err=True)


def echo_result(result: dict) -> None:
    """The trainer's result on stdout: where the SavedModel is and its validation accuracy."""
    typer.echo(f"SavedModel: {shown(result.get('export_dir'))}")
    accuracy = result.get("val_accuracy")
    known = isinstance(accuracy, (int, float)) and not isinstance(accuracy, bool) and math.isfinite(accuracy)
    typer.echo(f"validation accuracy: {accuracy:.4f}" if known else "validation accuracy: unknown")


def show_outcome(outcome) -> None:
    """How a run ended (``targets.launch``), the same for every target: with ``--dry-run`` the request as JSON;
    a failed run is the error; a finished one its result (or where its outputs are); a submitted one nothing more
    (the target said where to follow it)."""


    if not isinstance(outcome, Outcome):
        typer.echo(json.dumps(outcome, indent=2, sort_keys=True))
        return
    if outcome.state == "FAILED":
        raise UserError(outcome.error or f"{outcome.target} run {outcome.name} failed", 1)
    if outcome.state != "SUCCEEDED":
        return
    if outcome.result:
        echo_result(outcome.result)
    else:
        typer.echo(f"training finished; outputs in {shown(outcome.outputs)}")


@contextmanager
def stderr_bar(label: str, *, data: bool):
    """A progress bar on stderr and only on a terminal: stdout stays the results (and the lines scripts read),
    and an error stays one line in CI logs. Yields ``(advance(n), set_total(total))``; ``data``: it counts
    bytes (size and speed), else items (done/total)."""

    console = Console(stderr=True)
    counts = (rp.DownloadColumn(), rp.TransferSpeedColumn()) if data else (rp.MofNCompleteColumn(),)
    with rp.Progress(rp.TextColumn(label), rp.BarColumn(), *counts, rp.TimeRemainingColumn(), console=console,
                     disable=not console.is_terminal) as progress:
        task = progress.add_task(label, total=None)
        yield (lambda n: progress.advance(task, n)), (lambda total: progress.update(task, total=total))
