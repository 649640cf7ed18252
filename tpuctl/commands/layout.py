"""Text laid out for the terminal it is shown on: every command's ``--help``, and the word wrapping the help and
`tpuctl plan`'s narrow layout share.

Issue 57: `train --help` at 80 columns was 347 lines with a 17-character description column and 17 cells cut with
"…", the `--model`/`--dataset` syntax a plug-in user needs among them. Here one layout serves any list of options or
commands at any width: each entry's names (``-a, --accelerator ACCELERATOR``) on the left, its help wrapped beside
them; the names column is as wide as its widest entry up to a third of the panel, so the help keeps two thirds; an
entry whose names are wider than that takes a line of its own and its help starts on the next line, in the help
column (argparse's layout, and man pages'). Nothing is cut: text wraps between words (``wrap_words``), and a word
wider than its column (a long path, ``A/B/C``, a member ``serviceAccount:…@…``) is broken after a ``/``, ``,``,
``:``, ``=``, ``@`` or ``|`` where it has one. What is shown comes from click's public help API (``get_usage``,
``get_help_record``: names, value word, help, default, range); ``tpuctl.cli`` installs ``show_help`` on every
command.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer._click import Command, Context

#: Columns between the names and the help.
GAP = 2
#: The names column takes at most this share of a panel's width (the help keeps the rest) ...
NAMES_SHARE = 3
#: ... and is never narrower than this, however narrow the terminal.
NAMES_MIN = 12
#: A panel's border and padding, both sides.
PANEL_EDGES = 4
#: Where a word wider than its line may be broken: after one of these, the first that occurs, in this order.
BREAK_AFTER = "/:,|=@"
_OPTION = r"(?<![\w-])--?[A-Za-z0-9][\w-]*"


def wrap_words(text: str, width: int) -> list[str]:
    """``text``'s words in lines of at most ``width`` characters, broken between words. A word wider than a line
    starts a line of its own and is broken after a ``BREAK_AFTER`` character: the last ``/`` that fits, else the
    last ``:``, then ``,``, ``|``, ``=``, ``@`` (a path between folders, ``serviceAccount:`` before its e-mail); at
    the width when it has none."""
    width = max(width, 1)
    lines: list[str] = []
    line = ""
    for word in text.split():
        if len(line) + (1 if line else 0) + len(word) <= width:
            line = f"{line} {word}" if line else word
            continue
        if line:
            lines.append(line)
        while len(word) > width:
            cut = _cut(word, width) or width
            lines.append(word[:cut])
            word = word[cut:]
        line = word
    if line:
        lines.append(line)
    return lines


def _cut(word: str, room: int) -> int:
    """Length of the head of ``word`` that fits ``room`` and ends after the best ``BREAK_AFTER`` character (by its
    rank in that string, then the last); 0: none."""
    head = word[:room]
    for mark in BREAK_AFTER:
        index = head.rfind(mark)
        if index > 0:
            return index + 1
    return 0


def show_help(command: Command, ctx: Context) -> None:
    """Print ``command``'s help on stdout, laid out for the terminal's width (or ``COLUMNS``; 80 when not a
    terminal)."""
    console = Console(highlight=False)
    console.print()
    console.print(Padding(Text(command.get_usage(ctx).strip(), style="bold"), (0, 1)))
    console.print()
    if command.help:
        console.print(Padding(_description(command.help), (0, 1, 1, 1)))
    inner = max(console.width - PANEL_EDGES, NAMES_MIN + GAP + 1)
    for title, rows in _panels(command, ctx):
        console.print(Panel(_entries(rows, inner), title=title, title_align="left", border_style="dim"))
    if command.epilog:
        console.print(Padding(_description(command.epilog), 1))


def _paragraphs(text: str) -> list[str]:
    """Click's docstring conventions: paragraphs split by a blank line, one starting with ``\\b`` keeps its line
    breaks, the rest is joined; nothing after a ``\\f`` line."""
    body = inspect.cleandoc(text).partition("\f")[0]
    return [part.removeprefix("\b").strip("\n") if part.startswith("\b") else " ".join(part.split())
            for part in body.split("\n\n") if part.strip()]


def _description(text: str) -> Text:
    first, *rest = _paragraphs(text) or [""]
    shown = Text(first)
    for paragraph in rest:
        shown.append("\n\n" + paragraph, style="dim")
    return shown


def _panels(command: Command, ctx: Context) -> Iterable[tuple[str, list[tuple[str, str, str]]]]:
    """(title, rows of (names, help, style of the names)) of the Arguments, Options and Commands panels, each entry
    in the panel typer's ``rich_help_panel`` names, if any."""
    panels: dict[str, list[tuple[str, str, str]]] = {"Arguments": [], "Options": []}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:          # hidden
            continue
        default = "Arguments" if param.param_type_name == "argument" else "Options"
        panels.setdefault(getattr(param, "rich_help_panel", None) or default, []).append((*record, ""))
    for name in getattr(command, "list_commands", lambda _ctx: [])(ctx):
        sub = command.get_command(ctx, name)        # type: ignore[attr-defined]
        if sub is None or sub.hidden:
            continue
        summary = (_paragraphs(sub.short_help or sub.help or "") or [""])[0]
        panels.setdefault(getattr(sub, "rich_help_panel", None) or "Commands", []).append((name, summary, "bold cyan"))
    return [(title, rows) for title, rows in panels.items() if rows]


def _entries(rows: list[tuple[str, str, str]], inner: int) -> RenderableType:
    """The rows in two columns within ``inner`` columns: names, then help wrapped between words."""
    names_width = min(max(len(names) for names, _, _ in rows), max(NAMES_MIN, inner // NAMES_SHARE))
    help_width = inner - names_width - GAP
    parts: list[RenderableType] = []
    grid = None
    for names, help_text, style in rows:
        shown_names = Text(names, style=style, overflow="fold")
        shown_names.highlight_regex(_OPTION, "bold cyan")
        shown_help = Text("\n".join(wrap_words(help_text, help_width)), overflow="fold")
        shown_help.highlight_regex(r"\[(default|env var|required)[^\]]*\]", "dim")
        if len(names) <= names_width:
            if grid is None:
                grid = Table.grid(padding=(0, GAP, 0, 0))
                grid.add_column(width=names_width, no_wrap=True)
                grid.add_column(width=help_width, overflow="fold")
                parts.append(grid)
            grid.add_row(shown_names, shown_help)
        else:                       # wider than the column: a line of its own, its help below in the help column
            grid = None
            parts.append(shown_names)
            if help_text:
                parts.append(Padding(shown_help, (0, 0, 0, names_width + GAP)))
    return Group(*parts)
