"""One-line user errors: what to fix, a non-zero exit, no traceback."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, TypeVar

import typer

from tpuctl.domain import DomainError

F = TypeVar("F", bound=Callable[..., Any])

#: Exit code for bad input (names, config, flags): nothing was changed.
EXIT_BAD_INPUT = 2


class UserError(Exception):
    """A problem the user can fix. ``str()`` is the one-line message; ``exit_code`` the process status."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT):
        super().__init__(message)
        self.exit_code = exit_code


def fail(message: str, exit_code: int = EXIT_BAD_INPUT) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(exit_code)


def handle_errors(fn: F) -> F:
    """Turn UserError/DomainError raised by a command into ``error: …`` on stderr and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            raise fail(str(exc), exc.exit_code) from None
        except DomainError as exc:
            raise fail(str(exc)) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def die(message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
    """For scripts outside typer (python -m …): print one line and exit."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(exit_code)
