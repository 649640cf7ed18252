"""``tpuctl data``: make TFRecord shards from image folders, or write the demo dataset (local or gs://)."""

from __future__ import annotations

import json
import math
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tpuctl.commands.options import echo_err, finite, shown
from tpuctl.services import data as datatools
from trainer.flags import MAKE_TFRECORDS_BOUNDS

#: Bounds of the numeric flags (docs/troubleshooting.md), checked by the parser before the tool starts.
MIN_SHARD_MB = 0.001
MAX_SHARD_MB = 4096.0
#: --validation-fraction is an open interval: 0 < fraction < 1 (checked in the callback).
#: --max-side: the trainer tool's own bound.
MAX_SIDE = MAKE_TFRECORDS_BOUNDS["max_side"]

data_app = typer.Typer(
    name="data", no_args_is_help=True,
    help="Prepare training data with the trainer's tools (TFRecord shards + manifest), locally or in gs://.",
)


def _open_fraction(ctx: typer.Context, param: typer.CallbackParam, value):
    if isinstance(value, float) and not (math.isfinite(value) and 0 < value < 1):
        raise typer.BadParameter(f"{value} is not strictly between 0 and 1", ctx=ctx, param=param)
    return value


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")


def _run_with_progress(label: str, fn):
    """Call ``fn(on_progress)``; a rich progress bar (stderr) appears with the tool's first progress line,
    so input errors found before any work print just their one line."""

    state: dict = {}

    def on_progress(done: int, total: int) -> None:
        if "progress" not in state:
            progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True))
            progress.start()
            state["progress"] = progress
            state["task"] = progress.add_task(label, total=total)
        state["progress"].update(state["task"], completed=done, total=total)

    try:
        return fn(on_progress)
    finally:
        if "progress" in state:
            state["progress"].stop()


def _render(summary: dict, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(summary, indent=2, sort_keys=True))
        return

    table = Table(title="TFRecord shards", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    classes = summary.get("classes")
    rows = [
        ("train examples", summary.get("train")),
        ("validation examples", summary.get("validation")),
        ("classes", f"{len(classes)}: {', '.join(map(str, classes))}" if isinstance(classes, list) else classes),
        ("skipped files", summary.get("skipped", 0)),
        ("resized images", f"{summary.get('resized')} (--max-side {summary['max_side']})" if summary.get("max_side")
         else None),
        ("shards", summary.get("shards")),
        ("bytes", summary.get("bytes")),
    ]
    if "uploaded" in summary:
        rows.append(("objects uploaded", summary["uploaded"]))
    for key, value in rows:
        if value is not None:
            table.add_row(key, shown(value, markup=True))       # class names are folder names: never markup
    console = Console()
    console.print(f"written to: {shown(summary.get('destination'), markup=True)}", soft_wrap=True)
    console.print(table)
    reasons = {r.get("file"): r.get("reason") for r in summary.get("skipped_reasons") or [] if isinstance(r, dict)}
    for path in summary.get("skipped_files") or []:
        reason = reasons.get(path) or "no reason given"
        console.print(f"skipped: {shown(path, markup=True)}: {shown(reason, markup=True)}", soft_wrap=True)


@data_app.command("make-tfrecords")
def make_tfrecords(
    src: str = typer.Argument(..., help="Local folder with one sub-folder of images per class (symbolic links "
                                        "out of it are refused)."),
    dest: str = typer.Argument(..., help="Output folder, local (an earlier output there is replaced only when the "
                                         "new one is complete) or gs://BUCKET/PATH (holding no objects yet)."),
    shard_mb: float = typer.Option(100, "--shard-mb", min=MIN_SHARD_MB, max=MAX_SHARD_MB, callback=finite,
                                   help=f"Approximate size of each shard in MB, {MIN_SHARD_MB}..{MAX_SHARD_MB:g}."),
    validation_fraction: float = typer.Option(0.1, "--validation-fraction", callback=_open_fraction,
                                              help="Share of each class held out for validation, strictly between 0 and 1."),
    full_decode: bool = typer.Option(False, "--full-decode",
                                     help="Also decode every JPEG kept as it is, after the check of its stream "
                                          "and tables (about twice as slow)."),
    max_side: Optional[int] = typer.Option(None, "--max-side", metavar="PIXELS", min=int(MAX_SIDE.low),
                                           max=int(MAX_SIDE.high),
                                           help="Downsize images whose longer side is over PIXELS to PIXELS (aspect "
                                                "ratio kept, re-encoded as JPEG); smaller images are stored as "
                                                "without it. Default: every image keeps its size."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Convert images (class sub-folders) to TFRecord shards the trainer reads; corrupt images are skipped and counted."""
    summary = _run_with_progress(
        "converting images",
        lambda cb: datatools.make_tfrecords(src, dest, shard_mb=shard_mb,
                                            validation_fraction=validation_fraction, full_decode=full_decode,
                                            max_side=max_side, on_progress=cb, on_notice=echo_err),
    )
    _render(summary, as_json)


@data_app.command("sample")
def sample(
    dest: str = typer.Argument(..., help="Output folder, local (an earlier output there is replaced only when the "
                                         "new one is complete) or gs://BUCKET/PATH (holding no objects yet)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Write the embedded demo dataset (scikit-learn digits, no download) as TFRecord shards + manifest."""
    summary = _run_with_progress("writing demo dataset",
                                 lambda cb: datatools.sample(dest, on_progress=cb, on_notice=echo_err))
    _render(summary, as_json)
