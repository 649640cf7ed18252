"""``tpuctl logs RUN``: a cloud run's log lines (Vertex AI replicas, TPU VM hosts) from Cloud Logging, labelled by
host; ``--follow`` until the run ends."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Optional

import typer

from ground.durations import parse_duration
from ground.errors import UserError
from ground.numbers import is_digits
from ground.outputs import load_outputs
from tpuctl.commands.options import OUTPUTS, STACK, shown
from tpuctl.services.runs import logs as logs_svc
from tpuctl.services.runs import targets

#: How far back ``--since`` may reach (Cloud Logging keeps the _Default bucket's entries 30 days).
MAX_SINCE = timedelta(days=30)


def register(app: typer.Typer) -> None:
    app.command("logs", help="A cloud run's log lines (every Vertex AI replica, every TPU VM host), labelled by host; "
                             "--follow until the run ends.")(logs)


def _host(text: str) -> int | None:
    if text == "all":
        return None
    if not is_digits(text) or len(text) > 6 or int(text) > 100_000:
        raise UserError(f"--host {text[:40]!r}: give a host number (0 is the chief) or all")
    return int(text)


def logs(
    run: str = typer.Argument(..., help="The run's name (its folder under runs/)."),
    stack: Optional[str] = STACK,
    outputs: Optional[Path] = OUTPUTS,
    base: Optional[str] = typer.Option(None, "--dir", help="A gs:// folder of runs (default: the stack's "
                                                           "<artifacts>/runs)."),
    host: str = typer.Option("all", "--host", help="One host (0 is the chief; on Vertex AI the replicas in order) "
                                                   "or all."),
    since: Optional[str] = typer.Option(None, "--since", help="Only lines of the last DURATION (e.g. 10m, 2h; at "
                                                              "most 30d)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines until the run ends "
                                                              "(Ctrl-C stops)."),
    interval: float = typer.Option(5.0, "--poll-seconds", min=0.01, max=300, hidden=True),
) -> None:
    which = _host(host)
    start = None
    if since is not None:
        start = time.time() - parse_duration(since, "--since", timedelta(seconds=1), MAX_SINCE,
                                             "Cloud Logging's default retention").total_seconds()
    found = targets.run_logs(run, base=base, outputs=load_outputs(stack, outputs), host=which)
    lines = (logs_svc.follow(found.source, since=start, done=found.ended, interval=interval) if follow else
             logs_svc.entries(found.source, since=start))
    printed = 0
    for line in lines:
        typer.echo(f"[{shown(line.host)}] {shown(line.text)}")
        printed += 1
    if not printed:
        typer.echo(f"no log lines of {shown(run)}" + (f" host {which}" if which is not None else "")
                   + (f" in the last {since}" if since else "") + " (Cloud Logging may take a minute to show them)",
                   err=True)
