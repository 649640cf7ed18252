"""What `tpuctl train`, `tpuctl tpu run` and `tpuctl tune` share: flag bounds and checks, the stack options,
the model choice, the stderr echo and progress bar, and the result lines."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from contextlib import contextmanager
from enum import Enum

import typer

from tpuctl.ground.errors import UserError

#: Bounds of the numeric flags (docs/train.md, docs/troubleshooting.md): checked by the parser, before any
#: process starts or any job is built. 64 processes is far more than one machine runs usefully; a Vertex job
#: of more replicas is a worker pool spec of its own, not a flag.
MAX_WORKERS = 64
MAX_EPOCHS = 100_000

STACK = typer.Option(None, "--stack", help="Read defaults from this Pulumi stack's outputs.")
OUTPUTS = typer.Option(None, "--outputs", help="Read defaults from a `pulumi stack output --json` file.")


class Model(str, Enum):
    small_cnn = "small_cnn"
    resnet50 = "resnet50"
    hub = "hub"


def finite(ctx: typer.Context, param: typer.CallbackParam, value):
    """Click's FloatRange lets NaN through (every comparison with NaN is false): refuse it here."""
    if isinstance(value, float) and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number", ctx=ctx, param=param)
    return value


def shown(value, *, markup: bool = False, limit: int | None = None) -> str:
    """The one way text from a file or a server (run records, trainer results, prediction replies) reaches the
    terminal: control characters and escape sequences stripped (``ground.files.printable``); ``markup``: for a
    rich renderer, its markup escaped too (``[bold]`` stays text)."""
    from tpuctl.ground.files import printable

    text = printable(value, limit)
    if markup:
        from rich.markup import escape

        text = escape(text)
    return text


def strict_json(doc) -> str:
    """JSON that every parser accepts: a NaN or infinite number (which ``json.dumps`` writes as the invalid
    ``NaN``/``Infinity``) becomes null; the dump itself refuses any that slipped through (``allow_nan=False``)."""
    import json

    def finite(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {key: finite(v) for key, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        return value

    return json.dumps(finite(doc), indent=2, allow_nan=False)


#: A container image reference, as Docker's own grammar has it (github.com/distribution/reference, regexp.go:
#: ``[host[:port]/]component(/component)*[:tag][@algorithm:hex]``, lowercase path components, a tag of at most
#: 128 word characters, dots and dashes). Anything else would reach a request or a command line as typed.
_IMAGE_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?/)"
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REF = re.compile(rf"{_IMAGE_HOST}?{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                        r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")


def image_ref(ctx: typer.Context, param: typer.CallbackParam, value):
    """``--image``: a container image reference (``_IMAGE_REF``), refused at the edge in one line otherwise."""
    if value is not None and (len(value) > 512 or not _IMAGE_REF.fullmatch(value)):
        raise typer.BadParameter(f"{shown(value, limit=80)!r} is not a container image reference "
                                 "(REGISTRY/PATH/IMAGE:TAG or …@sha256:DIGEST, lowercase path)", ctx=ctx, param=param)
    return value


def stack_outputs(stack, outputs, *, dry_run: bool = False):
    """``--stack``/``--outputs`` as ``load_outputs`` reads them; a dry run with ``--stack NAME`` and no Pulumi
    CLI uses the outputs ``tpuctl plan --stack NAME`` computes offline from Pulumi.NAME.yaml (what the stack
    would export: a dry run sends nothing, so it needs no deployed stack), saying so in one line."""
    from tpuctl.ground.outputs import load_outputs, parse_outputs, pulumi_cli

    if not (dry_run and stack and outputs is None and pulumi_cli() is None):
        return load_outputs(stack=stack, outputs_file=outputs)
    from tpuctl.services.plan import plan

    planned = plan(stack, check_policy=False)
    echo_err(f"no Pulumi CLI: using the outputs `tpuctl plan --stack {stack}` computes from Pulumi.{stack}.yaml "
             "(enough for a dry run; a real run needs the deployed stack)")
    return parse_outputs(planned.outputs, f"the outputs planned for stack {stack}")


def program(name: str, folder) -> str:
    """How to type ``name`` (a program in the venv ``folder``) in a hint: the bare name when PATH finds that very
    program (setup's ~/.local/bin link), else its path - relative below the current folder - shell-quoted."""
    import os
    import shlex
    import shutil
    from pathlib import Path

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
    import sys
    from pathlib import Path

    return program("tpuctl", Path(sys.executable).parent)


def natural_width(headers: list[str], rows: list[list[str]]) -> int:
    """Columns a rich table (default box, padding 1) needs to show every cell on one line."""
    widths = [max([len(h), *(len(str(row[i])) for row in rows)]) for i, h in enumerate(headers)]
    return sum(widths) + 3 * len(widths) + 1


def echo_err(message: str) -> None:
    typer.echo(message, err=True)


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
    import json

    from tpuctl.services.targets import Outcome

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


def refuse_other_targets(ctx: typer.Context, target: str, takes: Mapping[str, Collection[str]],
                         notes: Mapping[str, str] | None = None) -> None:
    """Refuse a flag given on the command line (click's parameter source, not its value) that ``target`` does not
    take. ``takes``: each target's own flags (parameter names), declared once per command; a parameter no target
    lists is common to all. One line: ``--zone only applies to --target tpu-vm`` (+ ``notes[name]``)."""
    owners: dict[str, list[str]] = {}
    for name, params in takes.items():
        for param in params:
            owners.setdefault(param, []).append(name)
    for param in ctx.command.params:
        name = param.name or ""
        wanted = owners.get(name)
        if wanted is None or target in wanted:
            continue
        source = ctx.get_parameter_source(name)   # typer's own click: compared by name
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):
            continue
        long = [o for o in param.opts if o.startswith("--")] or param.opts
        negative = ctx.params.get(name) is False and getattr(param, "secondary_opts", None)
        flag = param.secondary_opts[0] if negative else long[0]
        note = (notes or {}).get(name)
        raise UserError(f"{flag} only applies to --target {' or '.join(wanted)}" + (f" ({note})" if note else ""))


@contextmanager
def stderr_bar(label: str, *, data: bool):
    """A progress bar on stderr and only on a terminal: stdout stays the results (and the lines scripts read),
    and an error stays one line in CI logs. Yields ``(advance(n), set_total(total))``; ``data``: it counts
    bytes (size and speed), else items (done/total)."""
    from rich import progress as rp
    from rich.console import Console

    console = Console(stderr=True)
    counts = (rp.DownloadColumn(), rp.TransferSpeedColumn()) if data else (rp.MofNCompleteColumn(),)
    with rp.Progress(rp.TextColumn(label), rp.BarColumn(), *counts, rp.TimeRemainingColumn(), console=console,
                     disable=not console.is_terminal) as progress:
        task = progress.add_task(label, total=None)
        yield (lambda n: progress.advance(task, n)), (lambda total: progress.update(task, total=total))
