"""The run flags of ``train`` and ``tune`` as typer options, made from their one declaration
(``tpuctl.services.runs.flags.RunFlags``: name, default, help, bounds). Parsing turns the text into a value of the
flag's type; checking it (bounds, durations, image references) is ``RunFlags.of``'s, one line naming the flag."""

from __future__ import annotations

from enum import Enum
from typing import Any

import typer

from ground.domain.capacity import PROVISIONING
from tpuctl.services.runs.flags import TARGETS, RunFlags, bounds, flag_name

#: ``--target`` as typer reads a choice (an Enum). ``--model`` is a built-in name or the user's function: text.
Target = Enum("Target", {name.replace("-", "_"): name for name in TARGETS}, type=str)  # type: ignore[misc]
#: The targets a search runs on (a search of TPU VM slices is not offered).
TuneTarget = Enum("TuneTarget", {"local": "local", "vertex": "vertex"}, type=str)  # type: ignore[misc]
#: ``--provisioning`` as a choice.
Provisioning = Enum("Provisioning", {name.replace("-", "_"): name for name in PROVISIONING},  # type: ignore[misc]
                    type=str)
_CHOICES = {"target": Target, "provisioning": Provisioning}


def option(name: str, *short: str, default: Any = ..., hidden: bool = False, choices: type[Enum] | None = None,
           help: str | None = None) -> Any:
    """The typer option of the run flag ``name`` (``short``: its one-letter aliases; ``default``: another default
    for this command; ``choices``: the command's own Enum of the flag's values, a subset of the flag's; ``help``:
    what the flag means for this command, when that is narrower than the flag's own text)."""
    field = RunFlags.model_fields[name]
    value = field.default if default is ... else default
    if value == ():
        value = None        # a list flag (--zones a,b) not given
    enum = choices or _CHOICES.get(name)
    if enum is not None and value is not None:
        value = enum(value)
    decls = [flag_name(name), *short]
    if isinstance(value, bool) and value:
        decls = [f"{flag_name(name)}/--no-{name.replace('_', '-')}"]
    text = help or field.description or ""
    span = bounds(name)
    help_text = f"{text} [{span}]" if span else text
    return typer.Option(value, *decls, help=help_text, hidden=hidden, show_default=value is not None)


def run_flags(ctx: typer.Context, **overrides: Any) -> RunFlags:
    """The run flags this command was given (its parameters that are run flags, and the trainer's flags after
    ``--``), checked: one UserError line naming a bad flag."""
    values = {name: (value.value if isinstance(value, Enum) else value) for name, value in ctx.params.items()
              if name in RunFlags.model_fields}
    return RunFlags.of(**{**values, "trainer_args": tuple(ctx.args), **overrides})
