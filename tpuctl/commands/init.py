"""``tpuctl init [DIR]``: start a team's own folder (its stack config, a .gitignore, a README of the next commands)."""

from __future__ import annotations

from pathlib import Path

import typer

from tpuctl.commands.options import say
from tpuctl.services.teamfolder import init_folder


def register(app: typer.Typer) -> None:
    app.command("init")(init_command)


def init_command(
    folder: Path = typer.Argument(Path("."), metavar="DIR", show_default=False,
                                  help="The team's folder (default: the current folder; created if missing)."),
    stack: str = typer.Option("dev", "--stack", "-s", metavar="NAME",
                              help="The stack whose Pulumi.<NAME>.yaml to write."),
) -> None:
    """Start a team's own folder: Pulumi.<NAME>.yaml from tpuctl's example (with its comments), a .gitignore
    (runs/, caches, Pulumi's leftovers, credentials) and a README of the next commands. Writes nothing when one of
    them is there.

    Every `--stack NAME` command run from that folder (or below it, in its git repository) finds the stack there.
    """

    written = init_folder(folder, stack)
    for path in written:
        say(f"wrote {path}")
    say(f"next: set tpuctl:project in {written[0]}, then `tpuctl plan --stack {stack}` from {folder} "
        "(its README.md has the rest)")
