"""Errors a user can fix, with no terminal toolkit attached: the CLI turns them into a line and an exit code.

``DomainError`` is a value that breaks a Google Cloud naming or catalogue rule; ``UserError`` is anything
else the user can fix, with the process exit status it should end with. ``str()`` of either is the one
line shown after ``error:``. Only ``tpuctl.cli`` prints them (``cli.main`` is the one boundary).
"""

from __future__ import annotations

#: Exit code for bad input (names, config, flags): nothing was changed.
EXIT_BAD_INPUT = 2
#: Exit code of a run that was interrupted (Ctrl-C / SIGTERM), as shells report SIGINT.
EXIT_INTERRUPTED = 130


class DomainError(ValueError):
    """A value breaks a Google Cloud naming or catalogue rule. ``str()`` is the user message."""


class ConfigError(DomainError):
    """A stack config value breaks a rule. ``str()`` names the key: ``tpuctl:<key>: <rule>``."""
    def __init__(self, key: str, message: str):
        self.key = key if ":" in key else f"tpuctl:{key}"
        super().__init__(f"{self.key}: {message}")


class UserError(Exception):
    """A problem the user can fix. ``str()`` is the one-line message; ``exit_code`` the process status.

    ``abandoned_threads``: threads of a library are still blocked (in network I/O) and the user chose not to wait
    for them; the interpreter would join them at exit, so the CLI ends the process at once after the line."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT, *, abandoned_threads: bool = False):
        super().__init__(message)
        self.exit_code = exit_code
        self.abandoned_threads = abandoned_threads

