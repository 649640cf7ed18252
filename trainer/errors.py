"""Errors the trainer reports as one ``error: …`` line with a documented exit code."""

from __future__ import annotations

import sys
from typing import Callable

#: Exit codes (documented in docs/trainer.md).
EXIT_OK = 0
EXIT_USAGE = 2  # bad flag, path, missing or corrupt data: the user fixes the input
EXIT_HARDWARE = 3  # the requested accelerator / cluster is not available on this machine


class TrainerError(Exception):
    """An error the user can fix; ``str(err)`` says what to fix."""

    exit_code = EXIT_USAGE


class UsageError(TrainerError):
    """Bad flag value or combination."""


class DataError(TrainerError):
    """Missing, malformed or corrupt input data."""


class HardwareError(TrainerError):
    """The requested TPU / GPU / cluster is not available."""

    exit_code = EXIT_HARDWARE


def run_cli(fn: Callable[[], int | None]) -> int:
    """Run ``fn``; a TrainerError becomes one ``error: …`` line on stderr and its exit code."""
    try:
        rc = fn()
    except TrainerError as err:
        sys.stdout.flush()
        message = " ".join(str(err).split())  # exactly one line
        print(f"error: {message}", file=sys.stderr, flush=True)
        return err.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr, flush=True)
        return 130
    return EXIT_OK if rc is None else rc
