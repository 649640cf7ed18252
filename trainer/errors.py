"""Errors the trainer reports as one ``error: …`` line with a documented exit code."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from collections.abc import Callable, Mapping
from typing import NoReturn
from urllib.parse import urlsplit

from trainer.protocol import CONTINUE_HINT, PREEMPTED

#: Exit codes (documented in docs/trainer.md).
EXIT_OK = 0
EXIT_USAGE = 2  # bad flag, path, missing or corrupt data: the user fixes the input
EXIT_HARDWARE = 3  # the requested accelerator / cluster is not available on this machine
EXIT_DIVERGED = 4  # training diverged: a loss, a metric or the weights became NaN or infinite; nothing exported
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C), or SIGTERM for the data tools (run_cli(..., handle_signals=True))
#: The process reading the trainer's standard output went away (a broken pipe): 128 + SIGPIPE, the status a process
#: SIGPIPE ends has (Python ignores the signal and gets the error instead; the trainer ends with this status).
EXIT_OUTPUT_LOST = 141
#: SIGTERM during training: the step was backed up first (trainer.callbacks), the status a process killed by SIGTERM
#: has (128 + 15), which a TPU VM host reports and `--recover` takes for a preemption.
EXIT_PREEMPTED = 143


class Preempted(Exception):
    """Training stopped on SIGTERM after its step was backed up (``epoch``, ``step``: 1-based, the last step the
    backup holds); a run started again in the same --model_dir continues after it."""

    def __init__(self, epoch: int, step: int, steps_per_epoch: int):
        super().__init__(f"stopped by SIGTERM; the backup holds epoch {epoch} step {step}/{steps_per_epoch}: "
                         f"{CONTINUE_HINT}")


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


class Diverged(TrainerError):
    """Training produced a NaN or infinite loss, metric or weight: the run stops there, nothing is exported, and the
    preemption backup keeps the steps before it."""

    exit_code = EXIT_DIVERGED

    def __init__(self, where: str, what: str):
        super().__init__(f"training diverged {where}: {what}; nothing was exported (lower --learning_rate, or look for "
                         f"NaN or infinite values in the data); the preemption backup holds the training before it: "
                         f"{CONTINUE_HINT}")


#: TensorFlow's Cloud Storage endpoint (built into its GCS file system, which ignores STORAGE_EMULATOR_HOST).
GCS_ENDPOINT = "https://www.googleapis.com"
#: What TensorFlow's GCS client says when no answer came at all (name lookup, connection, proxy, TLS): its libcurl
#: failed before any HTTP status. Up to the line's end: the rest of the message says which call it was.
_NO_ANSWER = re.compile(r"Error executing an HTTP request: (libcurl code \d+.*)")


def unreachable_storage(message: str | None, what: str, environ: Mapping[str, str] | None = None) -> DataError | None:
    """The one line for a TensorFlow error ``message`` that says Cloud Storage could not be reached (None for any
    other error): the endpoint, the proxy libcurl went through (``https_proxy``, without credentials) and what
    libcurl said. ``what``: what was being done, e.g. ``read --data_dir gs://b/data``.

    Needed because ``tf.io.gfile.isdir`` and friends turn every error into False: without it an unreachable
    bucket read as a folder that does not exist."""
    found = _NO_ANSWER.search(message or "")
    if found is None:
        return None
    environ = os.environ if environ is None else environ
    proxy = environ.get("https_proxy") or environ.get("HTTPS_PROXY")
    via = ""
    if proxy:
        parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        via = f", through the proxy {parts.scheme}://{parts.netloc.rpartition('@')[2]} (https_proxy)"
    return DataError(f"cannot reach Cloud Storage ({GCS_ENDPOINT}{via}) to {what}: {found.group(1).strip()}")


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are a UsageError (one ``error: …`` line, exit 2) instead of usage + exit."""

    def error(self, message: str):
        raise UsageError(message)


def _flush_stdout() -> None:
    """What was printed goes out before the error line; standard output that cannot be written (closed, a reader
    gone) holds nothing that could (trainer.stdio)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def _print_error(message: str) -> None:
    _flush_stdout()
    text = " ".join(str(message).split())  # exactly one line
    print(f"error: {text}", file=sys.stderr, flush=True)


def abort(err: TrainerError) -> NoReturn:
    """End the process now with ``err``'s one line and exit code, from any thread: for a main thread blocked where
    Python cannot interrupt it (a step waiting inside TensorFlow or JAX; trainer.stall)."""
    _print_error(str(err))
    os._exit(err.exit_code)


def _interrupted(signum, frame):
    # The first signal starts the clean-up; further ones must not interrupt it half-way.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def run_cli(fn: Callable[[], int | None], *, handle_signals: bool = False) -> int:
    """Run ``fn``; a TrainerError becomes one ``error: …`` line on stderr and its exit code.

    Ctrl-C is ``error: interrupted``, exit 130. ``handle_signals`` (the data tools): SIGTERM is treated
    like Ctrl-C, so ``fn``'s clean-up (``except BaseException`` / ``finally``) runs, and a second
    signal during that clean-up is ignored.
    """
    previous = {}
    if handle_signals:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, _interrupted)
    try:
        rc = fn()
    except TrainerError as err:
        _print_error(str(err))
        return err.exit_code
    except KeyboardInterrupt:
        _print_error("interrupted")
        return EXIT_INTERRUPTED
    except Preempted as stop:
        _flush_stdout()
        print(f"{PREEMPTED}{stop}", file=sys.stderr, flush=True)
        return EXIT_PREEMPTED
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return EXIT_OK if rc is None else rc
