"""The run flags of ``train`` and ``tune`` as typer options, made from their one declaration: the fields of the run
request and of each target's options model (``tpuctl.services.runs.request``: name, type, default, help, bounds,
the commands that take it). A command lists none of them by hand: ``with_run_flags(command)`` gives its function
the options its targets take, and ``run_request(ctx, command)`` hands what the user gave to the model, which checks
it (one line naming the flag) and refuses a flag the run's target does not take."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from datetime import timedelta
from enum import Enum
from typing import Any, List, Optional

import typer
from pydantic.fields import FieldInfo

from tpuctl.services.runs import targets
from tpuctl.services.runs.request import RunRequest, bounds, flag_name

#: Flags whose words the model reads itself (``--zones a,b``; durations such as ``2h``): typed as text here.
_TEXT = (timedelta,)


def _enum(name: str, values: list[str]) -> type[Enum]:
    return Enum(name, {value.replace("-", "_"): value for value in values}, type=str)  # type: ignore[return-value]


def _fields(command: str) -> list[tuple[str, FieldInfo, str]]:
    """``(name, field, where)`` of every run flag ``command`` takes, each once, in the order ``--help`` shows them:
    the common ones (``where`` = "common"), then each target's own (``where`` = "options"); ``dry_run`` last."""
    out: list[tuple[str, FieldInfo, str]] = []
    seen: set[str] = set()
    for name, info in RunRequest.model_fields.items():
        if name in RunRequest.NOT_OPTIONS or command not in _extra(info).get("commands", ()):
            continue
        out.append((name, info, "common"))
        seen.add(name)
    for model in targets.options_of(command).values():
        for name, info in model.model_fields.items():
            if name == "target" or name in seen or command not in _extra(info).get("commands", ()):
                continue
            out.append((name, info, "options"))
            seen.add(name)
    out.sort(key=lambda item: item[0] == "dry_run")
    return out


def _extra(info: FieldInfo) -> dict[str, Any]:
    return info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}


def _annotation(name: str, info: FieldInfo, command: str) -> Any:
    """The type typer parses the flag's text into (the model checks it: bounds, durations, references)."""
    if name == "target":
        return _enum("Target", list(targets.targets_of(command)))
    kind = info.annotation
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    base = args[0] if typing.get_origin(kind) in (typing.Union, types.UnionType) and len(args) == 1 else kind
    if typing.get_origin(base) is typing.Literal:
        return Optional[_enum(name.title().replace("_", ""), list(typing.get_args(base)))]
    if typing.get_origin(base) is tuple:
        return Optional[List[str]] if name == "hparam" else Optional[str]
    if base in _TEXT:
        return Optional[str]
    if base in (bool, int, float, str) and info.default is not None:
        return base
    return Optional[base]


def _option(name: str, info: FieldInfo, command: str) -> Any:
    """The typer option of one run flag: its declarations, help (``tune_help`` for tune) with its ``[low..high]``,
    default, hidden or not."""
    extra = _extra(info)
    value = None if info.default == () else info.default
    decls = [flag_name(name), *extra.get("short", ())]
    if isinstance(value, bool) and value:
        decls = [f"{flag_name(name)}/--no-{name.replace('_', '-')}"]
    if name == "target":
        value = _annotation(name, info, command)(value)
    text = (extra.get("tune_help") if command == "tune" else None) or info.description or ""
    span = bounds(info)
    return typer.Option(value, *decls, help=f"{text} [{span}]" if span else text, hidden=extra.get("hidden", False),
                        show_default=value is not None)


def with_run_flags(command: str, *, before: int = 1) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command function (``def train(ctx, stack, outputs, **flags)``) the run flags its targets take, as
    typer options: the common ones after its first ``before`` parameters, the targets' own after the rest of its
    parameters, ``--dry-run`` last. Applied when the command is registered, so the targets are the registry's
    then (``tpuctl.services.runs.targets``); applied again, it starts from the function's own parameters."""
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        written = func.__dict__.setdefault("_written_signature", inspect.signature(func))   # before any run flag
        own = [p for p in written.parameters.values() if p.kind is not p.VAR_KEYWORD]
        fields = _fields(command)
        made = {name: inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=_annotation(name, info, command),
                                        default=_option(name, info, command)) for name, info, _ in fields}
        common = [made[name] for name, _, where in fields if where == "common" and name != "dry_run"]
        options = [made[name] for name, _, where in fields if where == "options"]
        tail = [made["dry_run"]] if "dry_run" in made else []
        params = [*own[:before], *[p.replace(kind=p.KEYWORD_ONLY) for p in common],
                  *[p.replace(kind=p.KEYWORD_ONLY) for p in own[before:]], *options, *tail]
        func.__signature__ = inspect.Signature([params[0], *(p.replace(kind=p.KEYWORD_ONLY) for p in params[1:])])  # type: ignore[attr-defined]
        return func
    return decorate


def run_request(ctx: typer.Context, command: str) -> RunRequest:
    """The run request of the flags the user gave on the command line (a flag left at its default is not given,
    so the model's defaults hold and a flag of another target given with its default value is still refused), and
    the trainer's flags after ``--``: checked, one UserError line naming a bad flag."""
    names = {name for name, _, _ in _fields(command)}
    values: dict[str, Any] = {}
    for name, value in ctx.params.items():
        if name not in names:
            continue
        source = ctx.get_parameter_source(name)   # typer's own click: compared by name
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):
            continue
        values[name] = value.value if isinstance(value, Enum) else (tuple(value) if isinstance(value, list) else value)
    return targets.request(command, {**values, "trainer_args": tuple(ctx.args)})
