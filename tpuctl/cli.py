"""The ``tpuctl`` command line. Commands parse, call a plain function, render.

This module is the one place an error becomes an exit code: ``run`` catches what the commands raise
(``UserError``, ``DomainError``, Google client failures, usage errors, Ctrl-C) and prints exactly one
``error: …`` line on stderr. ``--help`` stays rich. A ``UserError`` with ``abandoned_threads`` ends the process
right after its line (``os._exit``): threads blocked in the network would otherwise be joined at exit.
"""

from __future__ import annotations

import errno
import importlib
import os
import signal
import sys
import warnings
from typing import NoReturn, Sequence

import typer
from typer._click import Command, Context
from typer._click import exceptions as click_exc
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from cloud.errors import as_user_error
from ground import interrupts
from ground.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, UserError
from ground.files import printable
from tpuctl import __version__
from tpuctl.commands.layout import show_help
from tpuctl.services.supervisor import STOP_SIGNALS, raise_interrupt, signal_handlers

# google-api-core warns about the interpreter's end of life on every import; the CLI's stderr is for the
# user's errors. Set once here, before any command imports a Google client.
warnings.filterwarnings("ignore", message=r"You are using a Python version .* which Google will stop supporting",
                        category=FutureWarning)

#: Every command, in the order `tpuctl --help` lists them: the module that defines it (``register(app)`` adds it),
#: imported only when the command runs or shows its own help, and its line in `tpuctl --help`. This table is the one
#: place the CLI loads lazily, so `tpuctl --help` imports no command, service or client
#: (tests/ops/test_cli_imports.py; benchmarks/startup.py); every other import is at the top of its module.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("tpuctl.commands.init", "Start a team's own folder (its git repository): its stack config "
                                     "Pulumi.dev.yaml, a .gitignore and a README of the next commands."),
    "plan": ("tpuctl.commands.plan", "Preview a stack offline: the resources it would create, who can read/write which "
                                     "bucket, policy verdicts."),
    "grant-access": ("tpuctl.commands.access", "Grant (or revoke) training principals access to buckets, additively "
                                               "and safely."),
    "doctor": ("tpuctl.commands.access", "Check credentials, APIs, agents, bucket permissions, hub cache and quota "
                                         "preferences."),
    "bootstrap": ("tpuctl.commands.access", "Create the Pulumi state bucket and enable the APIs Pulumi needs before "
                                            "the first `pulumi up`."),
    "train": ("tpuctl.commands.train", "Train locally, as a cluster, on Vertex AI or on TPU VMs: a bundled model, your "
                                       "model and dataset functions in the bundled trainer (--model model.py:NAME, "
                                       "--dataset data.py:NAME), or your own program (--command \"python train.py\")."),
    "tune": ("tpuctl.commands.tune", "Search hyperparameters (learning rate, batch size, model, epochs) for the "
                                     "bundled trainer: trials on this machine (local, one after another) or a Vertex "
                                     "AI hyperparameter tuning job."),
    "tpu": ("tpuctl.commands.tpu", "TPU VM runs (`tpuctl train --target tpu-vm` starts one): attach to a run from "
                                   "another shell, list and delete tpuctl's slices."),
    "cluster": ("tpuctl.commands.cluster", "Vertex AI persistent resources: machines kept between jobs, so a retry "
                                           "or a tuning trial starts without provisioning."),
    "runs": ("tpuctl.commands.runs", "Training runs under ./runs (or the stack's artifacts bucket): list, show, "
                                     "compare."),
    "logs": ("tpuctl.commands.logs", "A cloud run's log lines (every Vertex AI replica, every TPU VM host), labelled "
                                     "by host; --follow until the run ends."),
    "board": ("tpuctl.commands.runs", "Start TensorBoard (trainer environment) on a run's logs, or on every run, and "
                                      "print its URL."),
    "serve": ("tpuctl.commands.serve", "Serve an export with TF Serving in docker (or podman), in the foreground; "
                                       "Ctrl-C stops it."),
    "predict": ("tpuctl.commands.serve", "Top classes of images from a TF Serving URL or a Vertex AI Endpoint (or, "
                                         "with --batch, a batch job)."),
    "deploy": ("tpuctl.commands.serve", "Upload an export as a Vertex AI Model and deploy it to an Endpoint (100% of "
                                        "its traffic)."),
    "hub-cache": ("tpuctl.commands.hubcache", "TF-Hub models in tensorflow_hub's cache layout "
                                              "(<TFHUB_CACHE_DIR>/<sha1(handle)>/)."),
    "data": ("tpuctl.commands.data", "Prepare training data with the trainer's tools (TFRecord shards + manifest), "
                                     "locally or in gs://."),
    "image": ("tpuctl.commands.image", "The trainer's container image: one Dockerfile, variants cpu/gpu/tpu and "
                                       "jax-cpu/jax-gpu/jax-tpu, tagged by a hash of its sources."),
    "prices": ("tpuctl.commands.prices", "List prices from Google's Cloud Billing Catalog: cache them (refresh) and "
                                         "show what an accelerator costs per hour (show)."),
}


def load_command(name: str) -> Command:
    """The command ``name`` as its module defines it (imported now), with the help's value words and layout set."""
    module = importlib.import_module(COMMANDS[name][0])
    holder = typer.Typer()
    module.register(holder)
    command = typer.main.get_group(holder).commands[name]
    _metavars(command)
    _own_help(command)
    return command


def _own_help(command) -> None:
    """Every command and subcommand shows its help through ``layout.show_help`` (laid out for the terminal's
    width, no cell cut) instead of typer's table."""
    for sub in getattr(command, "commands", {}).values() if isinstance(command, TyperGroup) else ():
        _own_help(sub)
    command.format_help = lambda ctx, formatter: show_help(command, ctx)


class _Commands(TyperGroup):
    """tpuctl's commands from ``COMMANDS``: `tpuctl --help` lists them from the table; running one (or asking for its
    help) imports its module."""

    listing = False

    def list_commands(self, ctx: Context) -> list[str]:
        return [*COMMANDS, *(name for name in super().list_commands(ctx) if name not in COMMANDS)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in COMMANDS:     # one registered on the app itself (a test's, say)
            return super().get_command(ctx, cmd_name)
        if self.listing:        # `tpuctl --help`: the table's line, no import
            return TyperCommand(cmd_name, short_help=COMMANDS[cmd_name][1], help=COMMANDS[cmd_name][1])
        return load_command(cmd_name)

    def format_help(self, ctx: Context, formatter) -> None:
        self.listing = True
        try:
            show_help(self, ctx)
        finally:
            self.listing = False


app = typer.Typer(
    name="tpuctl",
    cls=_Commands,
    help="Set up Google Cloud for TensorFlow training on TPUs and GPUs, and train there: the bundled models, your own "
         "model and dataset functions plugged into the bundled trainer (`tpuctl train --model model.py:NAME`), or "
         "your own program on every worker (`tpuctl train --command \"python train.py\"`).",
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


#: What to type for a value, by parameter name, where its upper-cased name does not say it (RUN, ZONE, REGION and
#: PROJECT do); typer would show `<str>`, `<int range>`, `<list[str]>`.
_METAVARS = {
    "a": "RUN", "b": "RUN", "base": "DIR", "baseline": "FILE", "batch": "GS_FOLDER", "batch_size": "N",
    "budget": "USD", "config": "FILE", "data_dir": "DIR", "fmt": "FORMAT", "grpc_port": "PORT", "handles": "HANDLE",
    "hub_cache_dir": "DIR", "hub_handle": "HANDLE", "images": "IMAGE", "machine_type": "TYPE", "manifest": "FILE",
    "max_bytes": "BYTES", "max_replicas": "N", "min_replicas": "N", "max_run_time": "DURATION", "model_dir": "DIR",
    "model_name": "NAME", "outputs": "FILE", "stack": "NAME", "epochs": "N", "workers": "N",
    "parameter_servers": "N", "poll_seconds": "SECONDS", "max_wait": "DURATION",
    "read_bucket": "BUCKET", "write_bucket": "BUCKET", "shard_mb": "MB", "timeout": "SECONDS", "top": "N",
    "recover": "N", "zones": "ZONE,…", "validation_fraction": "FRACTION", "location": "LOCATION",
}


def _no_type(ctx) -> None:
    return None


def _metavars(command) -> None:
    """Help that says what to type: flags show no type, choices their values, every other value a word
    (RUN, ZONE, HOURS…) instead of typer's `<str>`; ranges and defaults are shown by typer after it."""
    for sub in getattr(command, "commands", {}).values() if isinstance(command, TyperGroup) else ():
        _metavars(sub)
    help_option = command.get_help_option(Context(command))    # created once, cached by the command
    for param in [*getattr(command, "params", ()), *([help_option] if help_option is not None else [])]:
        if isinstance(param, TyperArgument):     # its name column is the word already: no `<str>` beside it
            param.display_type_rich = _no_type
        if param.metavar is not None or not isinstance(param, (TyperOption, TyperArgument)):
            continue
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif param.type_descriptor.is_choice:
            param.metavar = param.display_type(None).strip("<>")
        else:
            param.metavar = _METAVARS.get(param.name or "", (param.name or "value").upper())


#: The error line stays readable whatever a hostile input put into it: a word longer than this is shortened
#: (a 5,000-digit number, a path of 4,000 characters), and the whole line ends at ``_LINE_LIMIT``.
_WORD_LIMIT, _LINE_LIMIT = 200, 2000


def _readable(word: str) -> str:
    return word if len(word) <= _WORD_LIMIT else f"{word[:120]}…{word[-40:]} ({len(word)} characters)"


def _error(message: str, code: int) -> int:
    # an error line often quotes a file name or a file's or server's text: escape sequences never reach the terminal
    text = " ".join(_readable(w) for w in printable(message).split()) or "unknown error"
    if len(text) > _LINE_LIMIT:
        text = text[:_LINE_LIMIT - 1] + "…"
    typer.echo(f"error: {text}", err=True)
    return code


#: What the OS says about a path the user gave (too long, a file where a folder should be, no permission,
#: disk full): one line naming the path, whichever layer touched it first.
_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.ELOOP,
                          errno.EROFS, errno.ENOSPC, errno.EEXIST, errno.ENOENT})


def _path_error(exc: OSError) -> str:
    name = str(exc.filename)
    if len(name) > 120:
        name = f"{name[:60]}…{name[-40:]} ({len(name)} characters)"
    reason = "the path is longer than the OS allows" if exc.errno == errno.ENAMETOOLONG else exc.strerror
    return f"{name}: {reason}"


def _end_now(code: int) -> NoReturn:
    """End the process with ``code`` without joining the threads a library left blocked in network I/O (non-daemon
    workers of a thread pool: a normal exit would wait for them, for as long as the network hangs)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default: sys.argv[1:]) and return the exit status; never raises. An error that
    abandoned threads (``UserError.abandoned_threads``) ends the process instead, after its line."""
    args = list(sys.argv[1:] if argv is None else argv)
    # SIGTERM, SIGHUP (a closed terminal) and SIGQUIT (Ctrl-\) behave like Ctrl-C (cleanup in ``finally`` blocks,
    # "interrupted", exit 130) instead of killing the process mid-write (STOP_SIGNALS). Commands that supervise work
    # install their own handlers on top. An interrupt Python swallowed (raised inside a weakref callback) is raised
    # again by the wait loop (ground.interrupts).
    with signal_handlers(raise_interrupt, tuple(s for s in STOP_SIGNALS if s != signal.SIGINT)), interrupts.kept():
        for arg in args:
            # a terminal's bytes that are not UTF-8 reach Python as surrogates, which no path, request or label of
            # tpuctl's can carry (issue 56, a fresh trial: `logs 'x\xff'` and `runs ls --dir gs://b/'x\xff'` were
            # UnicodeEncodeError tracebacks)
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                shown = arg[:80].encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                return _error(f"the argument '{shown}' holds bytes that are not UTF-8 text; type it in UTF-8 (paths, "
                              "names and values travel to the trainer and the cloud as text)", EXIT_BAD_INPUT)
        try:
            command = typer.main.get_command(app)
            _metavars(command)      # the root's own options (each command's are set when it is loaded)
            rv = command(args=args, prog_name="tpuctl", standalone_mode=False)
        except UserError as exc:
            code = _error(str(exc), exc.exit_code)
            for line in getattr(exc, "details", ()):     # after the one error line (a failed host's last lines)
                typer.echo("  " + printable(line, 1000), err=True)
            if exc.abandoned_threads:
                _end_now(code)
            return code
        except click_exc.NoArgsIsHelpError as exc:  # `tpuctl` or `tpuctl data` alone: the (rich) help
            typer.echo(exc.format_message())
            return exc.exit_code
        except click_exc.UsageError as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            return _error(exc.format_message() + hint, exc.exit_code)
        except click_exc.ClickException as exc:
            return _error(exc.format_message(), exc.exit_code)
        except (KeyboardInterrupt, typer.Abort):
            typer.echo("interrupted", err=True)
            return EXIT_INTERRUPTED
        except typer.Exit as exc:
            return exc.exit_code
        except OSError as exc:
            if exc.errno not in _PATH_ERRNOS or exc.filename is None:
                raise
            return _error(_path_error(exc), EXIT_BAD_INPUT)
        except Exception as exc:
            translated = as_user_error(exc)
            if translated is None:
                raise
            return _error(str(translated), getattr(translated, "exit_code", 1))
    code = rv if isinstance(rv, int) else 0
    if code == EXIT_INTERRUPTED:  # typer turns Ctrl-C into a bare Exit(130); say what happened
        typer.echo("interrupted", err=True)
    return code


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
