"""Commands of this group are registered by their owner issue; see tpuctl/cli.py."""

import typer


def register(app: typer.Typer) -> None:
    return None
