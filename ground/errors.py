"""Errors a user can fix, with no terminal toolkit attached: the CLI turns them into a line and an exit code.

One base: ``UserError`` is anything the user can fix, with the process exit status it should end with.
``DomainError`` is one of them: a value that breaks a Google Cloud naming or catalogue rule (exit 2; also a
``ValueError``, so a pydantic validator may raise it and pydantic names the field), ``ConfigError`` a stack key's.
``str()`` is the one line shown after ``error:``. Only ``tpuctl.cli`` prints them (``cli.run`` is the one
boundary); Google's client exceptions become one through ``cloud.errors`` (``google_errors``, ``as_user_error``).
"""

from __future__ import annotations

#: Exit code for bad input (names, config, flags): nothing was changed.
EXIT_BAD_INPUT = 2
#: Exit code of a run that was interrupted (Ctrl-C / SIGTERM), as shells report SIGINT.
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """A problem the user can fix. ``str()`` is the one-line message; ``exit_code`` the process status.

    ``abandoned_threads``: threads of a library are still blocked (in network I/O) and the user chose not to wait
    for them; the interpreter would join them at exit, so the CLI ends the process at once after the line.
    ``details``: lines the CLI prints after the error line, indented (a failed host's last log lines)."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT, *, abandoned_threads: bool = False,
                 details: tuple[str, ...] = ()):
        super().__init__(message)
        self.exit_code = exit_code
        self.abandoned_threads = abandoned_threads
        self.details = tuple(details)


class DomainError(UserError, ValueError):
    """A value breaks a Google Cloud naming or catalogue rule (bad input: exit 2). ``str()`` is the user message."""

    def __init__(self, message: str):
        super().__init__(message, EXIT_BAD_INPUT)


class ConfigError(DomainError):
    """A stack config value breaks a rule. ``str()`` names the key: ``tpuctl:<key>: <rule>``."""

    def __init__(self, key: str, message: str):
        self.key = key if ":" in key else f"tpuctl:{key}"
        super().__init__(f"{self.key}: {message}")


def validation_problem(exc: Exception, top: str = "(top level)") -> str:
    """The first problem a pydantic ``ValidationError`` names, as ``field.path: message`` (``top`` for the document
    itself): the one-line detail of a file or an answer read back by its shape."""
    errors = exc.errors() if hasattr(exc, "errors") else [{}]
    err = errors[0] if errors else {}
    where = ".".join(str(p) for p in err.get("loc", ())) or top
    return f"{where}: {str(err.get('msg', 'invalid')).removeprefix('Value error, ')}"
