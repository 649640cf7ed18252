"""Every command's `--help` as a user sees it in an 80-column terminal (issue 57: `train --help` was 347 lines with a
17-character description column and 17 cells cut with "…", the `--model`/`--dataset` plug-in syntax among them).

One process shows every help page on one pseudo-terminal of 80 columns (TIOCSWINSZ, as a terminal emulator or tmux
sets it): no line is wider than the terminal, nothing of an option's names, value word, help, default or range is
cut or left out, and no word that fits its column is broken."""

from __future__ import annotations

import json
import re

from typer._click import Context
from typer.core import TyperGroup

from ground.envs import ops_python
from tpuctl.cli import COMMANDS, load_command

from procfixtures import on_terminal

COLUMNS = 80
#: A word up to this long must be shown whole (the help column is 49 wide at 80 columns; a longer word, such as
#: AIP_MODEL_DIR/AIP_CHECKPOINT_DIR/AIP_TENSORBOARD_LOG_DIR, is broken after a "/" and is checked whole below).
WHOLE = 40
MARK = "=== help of "
PROBE = f"""
import json, sys
from tpuctl.cli import run
for path in json.loads(sys.argv[1]):
    print({MARK!r} + " ".join(path), flush=True)
    run([*path, "--help"])
    sys.stdout.flush()
"""


def _paths(command, path):
    yield path, command
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            yield from _paths(sub, (*path, name))


def _records(command) -> list[str]:
    """What the page must show of each entry: its names and help (with default and range), or a command's summary."""
    ctx = Context(command, info_name=command.name)
    shown = [" ".join(record) for param in command.get_params(ctx) if (record := param.get_help_record(ctx))]
    for sub in getattr(command, "commands", {}).values():
        shown.append((sub.short_help or sub.help or "").split("\n\n")[0])
    return shown


def _squash(text: str) -> str:
    return re.sub(r"[\s│╭╮╰╯─]", "", text)


def test_every_help_page_fits_80_columns_with_nothing_cut():
    commands = {(): None}
    for name in COMMANDS:
        commands.update(_paths(load_command(name), (name,)))
    code, lines = on_terminal([str(ops_python()), "-c", PROBE, json.dumps([list(p) for p in commands])], COLUMNS,
                              "every command's help on an 80-column terminal")
    assert code == 0, lines[-20:]
    pages: dict[tuple[str, ...], list[str]] = {}
    for line in lines:
        if line.startswith(MARK):
            page = pages.setdefault(tuple(line[len(MARK):].split()), [])
        else:
            page.append(line)
    assert set(pages) == set(commands)

    for path, page in pages.items():
        wide = [line for line in page if len(line.rstrip()) > COLUMNS]
        assert not wide, (path, wide[:2])
        words = {word.strip("│") for line in page for word in line.split()}
        squashed = _squash("\n".join(page))
        records = _records(commands[path]) if path else [line for _, line in COMMANDS.values()]
        for record in records:
            assert _squash(record) in squashed, (path, record)           # nothing cut, nothing left out
            broken = [w for w in record.split() if len(w) <= WHOLE and w not in words]
            assert not broken, (path, broken, record)                   # no word that fits broken

    # the top-level help says both routes for a user's own code (issue 57: it said "the bundled trainer" only)
    top = " ".join(" ".join(pages[()]).split())
    assert "--model model.py:NAME" in top and '--command "python train.py"' in top

    train = pages[("train",)]
    assert len(train) < 150, len(train)                                  # was 347 lines
    # the plug-in syntax, readable: both spellings whole, in the help of --model and --dataset
    words = {word for line in train for word in line.split()}
    assert {"path/to/file.py:NAME", "package.module:NAME"} <= words
    # a word wider than the help column is broken after a "/", never inside a name
    text = "".join(line.strip("│ ") for line in train)
    assert "AIP_MODEL_DIR/AIP_CHECKPOINT_DIR/AIP_TENSORBOARD_LOG_DIR" in text
