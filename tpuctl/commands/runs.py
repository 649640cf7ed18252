"""``tpuctl runs ls|show|compare`` and ``tpuctl board``: earlier runs, their curves, and TensorBoard on them."""

from __future__ import annotations

import math
import os
import textwrap
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ground.durations import format_duration
from ground.envs import trainer_python
from ground.errors import UserError
from ground.localtree import user_path
from ground.outputs import load_outputs
from ground.polling import poll
from ground.storagepath import is_gs, normalized
from tpuctl.commands.options import natural_width, shown, strict_json
from tpuctl.services.runs import board as board_svc
from tpuctl.services.runs import records as runs

runs_app = typer.Typer(name="runs", no_args_is_help=True,
                       help="Training runs under ./runs (or the stack's artifacts bucket): list, show, compare.")

_DIR = typer.Option("runs", "--dir", help="Folder of runs (local, or gs://bucket/prefix).")
_STACK = typer.Option(None, "--stack", help="The runs in this stack's artifacts bucket (gs://…/runs).")
_OUTPUTS = typer.Option(None, "--outputs", help="The same, from this outputs JSON.")
_BARS = "▁▂▃▄▅▆▇█"


def register(app: typer.Typer) -> None:
    app.add_typer(runs_app, name="runs")
    app.command("board")(board)


def _runs(base: str, stack, outputs):
    if base != _DIR.default and not (stack or outputs) and not is_gs(base) and \
            not os.path.lexists(user_path(base, "run folder")):
        # a --dir the user named that is not there (issue 56, a fresh trial: "no run 'base' (newest: none)")
        raise UserError(f"--dir {shown(base)} does not exist; name a folder of runs (tpuctl train writes runs/)")
    return runs.list_runs(base, outputs=load_outputs(stack, outputs))


def _fmt(value, digits: int = 4, *, markup: bool = False) -> str:
    """A value from a run's records, as terminal text (``shown``: control and escape sequences stripped)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return shown(value, markup=markup)


#: The run's timings (``Run.row``'s keys) as `runs show` and `runs compare` label them.
TIMING_LABELS = {"to_provisioned": "provisioned", "to_first_step": "first step", "step_seconds": "step time",
                 "examples_per_second": "examples/s", "goodput": "goodput", "spent_usd": "spend"}


def timing_cell(key: str, value) -> str:
    """A timing of ``Run.row`` as text: times after submission, the step time, a rate, a share, dollars."""
    if value is None:
        return "-"
    if key in ("to_provisioned", "to_first_step"):
        return f"{format_duration(value)} after submission"
    if key == "step_seconds":
        return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"
    if key == "examples_per_second":
        return f"{value:.1f}"
    if key == "goodput":
        return f"{value:.0%}"
    return f"${value:.2f}"


def _cell(key: str, value, *, markup: bool = False) -> str:
    if key == "seconds":
        return format_duration(value)
    if key in TIMING_LABELS:
        return timing_cell(key, value)
    return _fmt(value, markup=markup)


def _lost(history: list[dict], resumes: list[dict] = ()) -> str:
    """The time preemptions cost: a TPU VM run's recovery history (tpuctl saw each one), else the trainer's own
    record of its resumes from the backup (every target)."""
    if history:
        return f"{format_duration(sum(e['seconds_lost'] for e in history))} in {len(history)} preemption(s)"
    if not resumes:
        return "-"
    known = [e["seconds_lost"] for e in resumes if e.get("seconds_lost") is not None]
    if not known:
        return f"unknown, {len(resumes)} resume(s) from the backup"
    more = f" ({len(resumes) - len(known)} unknown)" if len(known) < len(resumes) else ""
    return f"{format_duration(sum(known))} in {len(resumes)} resume(s) from the backup{more}"


def sparkline(values: list[float], bars: int | None = None) -> str:
    """One bar per value, scaled between the finite ones; a NaN or infinite point (a loss that diverged) is ``×``
    (was: the whole `runs show` ended in a traceback). ``bars``: at most that many, the values sampled evenly (the
    first and the last kept)."""
    if bars is not None and len(values) > bars > 1:
        values = [values[round(i * (len(values) - 1) / (bars - 1))] for i in range(bars)]
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "×" * len(values)
    low, high = min(finite), max(finite)
    span = (high - low) or 1.0
    return "".join(_BARS[min(len(_BARS) - 1, int((v - low) / span * (len(_BARS) - 1)))] if math.isfinite(v) else "×"
                   for v in values)


@runs_app.command("ls")
def ls(base: str = _DIR, stack: Optional[str] = _STACK, outputs: Optional[Path] = _OUTPUTS,
       as_json: bool = typer.Option(False, "--json", help="One JSON list of runs.")) -> None:
    """A table of runs, newest first: date, target, model, accelerator, epochs, val accuracy, time, export."""


    found = _runs(base, stack, outputs)
    good = [r for r in found if r.problem is None]
    bad = [r for r in found if r.problem is not None]
    if as_json:
        typer.echo(strict_json([{**r.row(), "problem": r.problem} for r in found]))
        return
    if not found:

        where = "the stack's artifacts bucket" if (stack or outputs) else (
            base if is_gs(base) else str(user_path(base, "run folder").resolve()))
        typer.echo(f"no runs in {shown(where)}" + ("" if (stack or outputs) or base != "runs" else
                                                    " (tpuctl train writes them here; --dir DIR reads another folder)"))
        return
    heads = ["run", "date", "target", "model", "data", "accelerator", "epochs", "val acc", "time", "export"]
    cells = [[*(_fmt(row[key], markup=True) for key in ("run", "date", "target", "model", "data", "accelerator",
                                                        "epochs")),
              row["state"] if row["state"] != "finished" else _fmt(row["val_accuracy"], markup=True),
              format_duration(row["seconds"]), _fmt(row["export_dir"], markup=True)] for row in (r.row() for r in good)]
    console = Console()
    plain = [[Text.from_markup(c).plain for c in row] for row in cells]
    # Never break a cell (a run name must stay copyable): drop the least needed columns until the table fits.
    keep = list(range(len(heads)))
    for drop in (heads.index(h) for h in ("export", "date", "accelerator", "time", "target", "model", "data")):
        if natural_width([heads[i] for i in keep], [[row[i] for i in keep] for row in plain]) <= console.width:
            break
        keep.remove(drop)
    dropped = [heads[i] for i in range(len(heads)) if i not in keep]
    table = Table(title=f"{len(good)} run(s)")
    for i in keep:
        table.add_column(heads[i], no_wrap=True)
    for row in cells:
        table.add_row(*(row[i] for i in keep))
    console.print(table)
    if dropped:
        console.print(f"(hidden at {console.width} columns: {', '.join(dropped)}; see `tpuctl runs show RUN` or "
                      "--json)", highlight=False, markup=False)
    if bad:
        typer.echo(f"{len(bad)} bad run record(s), not listed above:")
        for r in bad:
            typer.echo(f"  {shown(r.name)}: {shown(r.problem, limit=300)}")


@runs_app.command("show")
def show(run: str = typer.Argument(..., help="Run folder name (or a unique prefix, or its path)."),
         base: str = _DIR, stack: Optional[str] = _STACK, outputs: Optional[Path] = _OUTPUTS) -> None:
    """One run: what was asked, what came out, and a terminal chart of its per-epoch curves."""
    found = _usable(runs.find_run(_runs(base, stack, outputs), run))
    history = runs.recoveries(found)      # a bad history file is one error line, before anything is printed
    width = Console().width

    def say(label: str, value: str) -> None:
        """``label value``, the value wrapped between words under itself to the terminal's width (issue 57: the
        trainer's arguments and a resume's line ran past 80 columns and the terminal folded them mid-word); a word
        wider than the terminal (a path) stays whole on its own line."""
        head = f"  {label:<13} "
        if " " not in value and len(head) + len(value) > width:
            typer.echo(f"{head.rstrip()}\n    {value}")      # a path: whole, under its label
            return
        typer.echo(textwrap.fill(value, width=max(width, 40), initial_indent=head, subsequent_indent=" " * 16,
                                 break_long_words=False, break_on_hyphens=False))

    title = f"run {shown(found.name)}  ({shown(found.path)})"
    typer.echo(title if len(title) <= width else f"run {shown(found.name)}\n  ({shown(found.path)})")
    for key, value in found.row().items():
        if key != "run":
            say(TIMING_LABELS.get(key, key), _cell(key, value))
    if found.launch.get("args"):
        say("trainer args", shown(" ".join(map(str, found.launch["args"]))))
    for i, event in enumerate(history, 1):
        resumed = event.get("resumed_zone")
        down = event.get("seconds_down")
        say(f"recovery {i}", f"{shown(event['what'])} in {shown(event['zone'])} after "
            f"{format_duration(event['seconds_trained'])} of training; lost {format_duration(event['seconds_lost'])}"
            + (f" (since the {shown(event['since'])})" if event.get("since") else "")
            + (f"; resumed in {shown(resumed)} {format_duration(down)} later" if resumed else "; not resumed")
            + (f"; ${event['spent_usd']:.2f} spent by then" if event.get("spent_usd") is not None else ""))
    if not history:      # the trainer's own record (a TPU VM run's history above says more)
        for i, event in enumerate(found.resumes, 1):
            lost = event.get("seconds_lost")
            say(f"resume {i}", f"from the backup of step {event['from_step']}, training again "
                + (f"{format_duration(lost)} after it was written" if lost is not None else
                   "(when the backup was written is not known)"))
    if history or found.resumes:
        say("time lost", _lost(history, found.resumes))
    problem = runs.logs_problem(found)
    if problem:
        say("curves", f"not read: {shown(problem)}")
    for tag, series in sorted(runs.scalars([found]).get(found.path, {}).items()):
        values = [v for _, v in series]
        if len(values) > 1 or "epoch_" in tag:
            ends = f"{values[0]:.4f} -> {values[-1]:.4f}"
            label = f"  {shown(tag):<32} "
            # the chart takes the room the line has left (at least 8 bars): a long run's epochs are sampled evenly
            typer.echo(f"{label}{sparkline(values, max(8, width - len(label) - 2 - len(ends)))}  {ends}")


def _usable(run):
    """A run whose records can be shown; a bad record is one error line saying what is wrong with it."""
    if run.problem is not None:
        raise UserError(f"run {run.name} has a bad record: {run.problem}", 1)
    return run


@runs_app.command("compare")
def compare(a: str = typer.Argument(..., help="First run."), b: str = typer.Argument(..., help="Second run."),
            base: str = _DIR, stack: Optional[str] = _STACK, outputs: Optional[Path] = _OUTPUTS) -> None:
    """Two runs side by side: settings, results and the final value of every curve."""


    known = _runs(base, stack, outputs)
    left, right = _usable(runs.find_run(known, a)), _usable(runs.find_run(known, b))
    curves = runs.scalars([left, right])
    lrow, rrow = left.row(), right.row()
    rows = [(TIMING_LABELS.get(key, key), _cell(key, lrow[key], markup=True), _cell(key, rrow[key], markup=True))
            for key in lrow if key != "run"]
    rows.append(("time lost", _lost(runs.recoveries(left), left.resumes), _lost(runs.recoveries(right), right.resumes)))
    lc, rc = curves.get(left.path, {}), curves.get(right.path, {})
    rows += [(shown(tag, markup=True), _fmt(lc[tag][-1][1]) if tag in lc else "-",
              _fmt(rc[tag][-1][1]) if tag in rc else "-") for tag in sorted(set(lc) | set(rc))]
    console = Console()
    names = (shown(left.name, markup=True), shown(right.name, markup=True))
    # Never a cut name, tag or path (issue 57: at 80 columns the run names, the export paths and the longest curve tags
    # were folded or cut with "…"): the runs' names head the columns when they fit, else A and B do and the names are
    # said above; values too wide for the columns (the export paths) go under the table, whole.
    every = list(rows)

    def fitted(heads: list[str]) -> tuple[list, list]:
        """The rows that fit under these heads, and those whose values go under the table (the widest first)."""
        kept, plain, below = list(every), [[Text.from_markup(c).plain for c in row] for row in every], []
        while natural_width(heads, plain) > console.width and len(plain) > 1:
            widest = max(range(len(plain)), key=lambda i: max(len(plain[i][1]), len(plain[i][2])))
            below.append(kept.pop(widest))
            plain.pop(widest)
        return kept, below

    # the names head the columns unless that sends more values under the table than A and B would
    heads = ["", *names]
    rows, below = fitted(heads)
    short, short_below = fitted(["", "A", "B"])
    if len(short_below) < len(below):
        heads, rows, below = ["", "A", "B"], short, short_below
        console.print(Text.from_markup(f"A: {names[0]}\nB: {names[1]}"))
    table = Table(title=None if heads[1] == "A" else f"{names[0]} vs {names[1]}")
    for head in heads:
        table.add_column(head, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for label, one, two in below:
        for which, value in ((heads[1], one), (heads[2], two)):
            line = Text.from_markup(f"{label} {which}: {value}")
            if line.cell_len > console.width:       # the value (a path) on its own line, whole
                line = Text.from_markup(f"{label} {which}:\n  {value}")
            console.print(line, soft_wrap=True)


def _say_profiles(handle) -> None:
    """One line when the logs hold profiles (``--profile-steps``): where TensorBoard shows them, or that its Profile tab
    needs a package the trainer environment does not have."""
    found = board_svc.profiles(handle.logdir)
    if not found:
        return
    where = ", ".join(shown(f) for f in found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
    if "profile" in handle.plugins():
        typer.echo(f"profiles: {where} (the Profile tab: {handle.url}#profile)")
    else:
        typer.echo(f"note: profiles in {where}; TensorBoard's Profile tab needs {board_svc.PROFILE_PLUGIN} in the "
                   f"trainer environment: {shown(str(trainer_python()))} -m pip install {board_svc.PROFILE_PLUGIN}",
                   err=True)


def board(
    run: Optional[str] = typer.Argument(None, help="A run (folder name, prefix or path); default: all runs in --dir."),
    base: str = _DIR, stack: Optional[str] = _STACK, outputs: Optional[Path] = _OUTPUTS,
    port: Optional[int] = typer.Option(None, "--port", min=1024, max=65535, help="Port on 127.0.0.1 (default: a free one)."),
) -> None:
    """Start TensorBoard (trainer environment) on a run's logs, or on every run, and print its URL."""


    so = load_outputs(stack, outputs)
    if run is not None:
        found = _usable(runs.find_run(runs.list_runs(base, outputs=so), run))
        problem = runs.logs_problem(found)
        if problem:
            raise UserError(problem)
        logdir = f"{found.path}/logs"
    elif so is not None:
        logdir = f"{so.require('buckets.artifacts')}/runs"
    elif is_gs(base):
        # TensorBoard reads gs:// itself (TensorFlow's client); a folder without runs is said so before it starts
        if not runs.list_runs(base):
            raise UserError(f"no runs in {base}; train first (`tpuctl train --model-dir {base}/NAME`) or pass --dir")
        logdir = normalized(base)
    else:
        if not Path(base).is_dir():
            raise UserError(f"no runs folder {base}; train first (`tpuctl train`) or pass --dir")
        logdir = str(Path(base).resolve())
        problem = runs.tree_problem(Path(logdir), Path(logdir), limit=runs.MAX_LOG_ENTRIES * 10)
        if problem:
            raise UserError(f"{problem} (TensorBoard would walk it); name one run: `tpuctl board RUN`")
    handle = board_svc.start(logdir, port=port)
    typer.echo(f"TensorBoard on {shown(logdir)}: {handle.url}  (Ctrl-C stops it)")
    _say_profiles(handle)
    try:
        poll(handle.task.proc.poll, lambda code: code is not None, interval=0.5)   # until it ends, or Ctrl-C
    finally:
        handle.stop()
