"""Docs checked against the typer app (issue 28): every option of every command is named on the command's doc
page, and every option a page's option table names exists; help pages show metavars that say what to type and
show defaults. Fails when a command gains an option its page does not mention (docs/train.md had lost --spot,
--max-run-time, --budget, --zone, --keep and --python-package)."""

from __future__ import annotations

import re

import pytest
from typer.core import TyperGroup, TyperOption

from ground.envs import REPO_ROOT
from tpuctl.cli import COMMANDS as TABLE
from tpuctl.cli import load_command

#: command (or its group) -> the page that documents its options
PAGES = {"init": "stack-config.md", "train": "train.md", "data": "train.md", "grant-access": "grant-access.md", "bootstrap": "grant-access.md",
         "doctor": "doctor.md", "plan": "plan.md", "tune": "cheaper-runs.md", "runs": "runs.md", "board": "runs.md", "logs": "runs.md",
         "hub-cache": "hub-cache.md", "serve": "serving.md", "predict": "serving.md", "deploy": "serving.md",
         "prices": "prices.md", "image": "image.md", "tpu": "tpu-vm.md",
         "cluster": "capacity.md"}


def _commands(cmd, path=()):
    if isinstance(cmd, TyperGroup):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), cmd


COMMANDS = {path: cmd for name in TABLE for path, cmd in _commands(load_command(name), (name,))}


def _page(path: str) -> tuple[str, str]:
    page = PAGES.get(path) or PAGES.get(path.split(" ")[0])
    assert page, f"`tpuctl {path}` has no doc page in PAGES"
    return page, (REPO_ROOT / "docs" / page).read_text()


def _options(cmd) -> list[TyperOption]:
    return [p for p in cmd.params if isinstance(p, TyperOption) and not p.hidden and p.name != "help"]


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_option_is_on_the_commands_doc_page(path):
    page, text = _page(path)
    missing = []
    for option in _options(COMMANDS[path]):
        names = [n for n in (*option.opts, *option.secondary_opts) if n.startswith("--")]
        if not any(re.search(rf"`[^`]*{re.escape(n)}(?![\w-])[^`]*`", text) for n in names):
            missing.append(names[0])
    assert not missing, f"docs/{page} does not mention `tpuctl {path}` {', '.join(missing)}"


@pytest.mark.parametrize("page", sorted({"train.md", "grant-access.md"}))
def test_every_option_in_a_pages_table_exists(page):
    text = (REPO_ROOT / "docs" / page).read_text()
    known = {n for path, cmd in COMMANDS.items() if PAGES.get(path.split(" ")[0]) == page
             for option in _options(cmd) for n in (*option.opts, *option.secondary_opts)}
    rows = [line for line in text.splitlines() if line.startswith("| `--")]
    named = {n for row in rows for n in re.findall(r"(--[a-z][a-z0-9-]*)", row.split(" | ")[0])}
    assert named and not named - known, f"docs/{page} documents options no command has: {sorted(named - known)}"


def test_train_help_names_every_target():
    target = next(p for p in COMMANDS["train"].params if p.name == "target")
    assert all(word in target.help for word in ("local", "vertex", "tpu-vm", "TPU VM")), target.help


_TYPER_TYPES = re.compile(r"<(str|bool|int|float|path|int range|float range|list\[[^\]]*\])>")


def test_help_pages_say_what_to_type_not_the_python_type(monkeypatch):
    """Options and arguments show a word (RUN, ZONE, SECONDS, N, with its range [1..64]) or their choices, flags
    nothing; defaults shown (issue 40: 13 pages still showed `<str>` beside their arguments)."""
    from clifixtures import invoke

    monkeypatch.setenv("COLUMNS", "200")
    bad = {}
    for path in COMMANDS:
        r = invoke([*path.split(), "--help"])
        assert r.exit_code == 0, r.output
        found = _TYPER_TYPES.findall(r.stdout)
        if found:
            bad[path] = sorted(set(found))
    assert not bad, bad
    r = invoke(["train", "--help"])
    assert re.search(r"-w, --workers N\s.*\[1\.\.64\]", r.stdout) and "[default: 1]" in r.stdout
    assert re.search(r"--zone ZONE\s", r.stdout) and re.search(r"--max-run-time DURATION\s", r.stdout)
    assert re.search(r"--max-wait DURATION\s", r.stdout)
