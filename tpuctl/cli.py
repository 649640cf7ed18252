"""The ``tpuctl`` command line. Commands parse, call a plain function, render."""

from __future__ import annotations

import typer

from tpuctl import __version__
from tpuctl.commands import access, data, hubcache, plan, train

app = typer.Typer(
    name="tpuctl",
    help="Set up Google Cloud for TensorFlow training on TPUs and GPUs, and run the bundled trainer.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tpuctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """tpuctl: Pulumi program, policy pack, setup commands and trainer for Cloud TPU/GPU training."""


for _group in (plan, access, hubcache, train, data):
    _group.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
