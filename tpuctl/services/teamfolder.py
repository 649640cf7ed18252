"""`tpuctl init [DIR]`: the starting files of a team's own folder, a git repository of its own that holds the team's
stack configs, code and runs (issue 57: stacks had to live in tpuctl's checkout).

Three files: ``Pulumi.<stack>.yaml`` (Pulumi.example.yaml with its comments, under a header saying whose it is), a
``.gitignore`` (runs, caches, Pulumi's leftovers and files that look like credentials: the same patterns
``usercode`` leaves out of every image) and a short README of the next commands. Nothing is overwritten: when one of
the three is there, one line names it and nothing is written.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ground.envs import REPO_ROOT
from ground.errors import UserError
from ground.files import write_atomically
from ground.stackfile import STACK_DIR_VAR, stack_file_name
from tpuctl.services.usercode import SECRET_PATTERNS

EXAMPLE = REPO_ROOT / "Pulumi.example.yaml"
#: What a team folder never commits, besides credentials.
IGNORED = {
    # runs/ at any depth: a run started in a subfolder writes <subfolder>/runs/
    "tpuctl: runs, caches and the stack outputs `pulumi stack output --json --show-secrets` writes": [
        "runs/", ".tpuctl-cache/", "outputs.json"],
    # a local state backend (`pulumi login file://…`); the backups `pulumi config refresh` makes of a stack file
    # (pulumi/pulumi pkg/cmd/pulumi/config/config_refresh.go: `<file>.bak`, then `.bak.bak` …, read 2026-12-07)
    "Pulumi: a local state backend and the backups `pulumi config refresh` makes": [".pulumi/", "Pulumi.*.yaml.bak*"],
    "Python": ["__pycache__/", "*.pyc", ".venv/"],
}


def gitignore() -> str:
    blocks = [f"# {why}\n" + "\n".join(patterns) for why, patterns in IGNORED.items()]
    blocks.append("# files that look like credentials (tpuctl leaves them out of every image it builds from here)\n"
                  + "\n".join(SECRET_PATTERNS))
    return "\n\n".join(blocks) + "\n"


def stack_file(stack: str) -> str:
    """Pulumi.example.yaml's config with its comments, under a header naming the stack and where to read more."""
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    body = lines[next(i for i, line in enumerate(lines) if not line.startswith("#")):]
    header = [f"# Stack {stack}, this team's (written by `tpuctl init` from tpuctl's Pulumi.example.yaml): set your",
              "# project id. Every key and its rule: docs/stack-config.md in tpuctl. Check it offline with",
              f"# `tpuctl plan --stack {stack}` from this folder; `pulumi up` reads it with --config-file (README.md)."]
    return "\n".join([*header, *body]) + "\n"


def readme(folder: Path, stack: str) -> str:
    steps = [
        (f"TPUCTL={shlex.quote(str(REPO_ROOT))}", "where tpuctl is checked out on this machine"),
        (f"tpuctl plan --stack {stack}", "preview the stack offline: resources, access map, policy"),
        ("tpuctl bootstrap --project PROJECT --yes", "once: the Pulumi state bucket, the APIs Pulumi needs"),
        ("pulumi login gs://PROJECT-pulumi-state", ""),
        (f'pulumi stack init {stack} --cwd "$TPUCTL"', "the stack of tpuctl's program, in that state"),
        (f'pulumi up --cwd "$TPUCTL" --stack {stack} --config-file "$PWD/{stack_file_name(stack)}" '
         '--policy-pack "$TPUCTL/policy"', ""),
        (f"tpuctl doctor --stack {stack}", "is the project ready to train?"),
        (f"tpuctl train --target vertex --stack {stack} --dry-run", "yours: --model model.py:NAME"),
    ]
    width = max(len(command) for command, note in steps if note)
    block = "\n".join(f"{command.ljust(width)}   # {note}" if note else command for command, note in steps)
    return f"""# {folder.resolve().name}: a team's tpuctl project

This folder (its own git repository) holds our stack configs (`{stack_file_name(stack)}`), our code and our runs
(`runs/`, not committed). tpuctl finds `Pulumi.<stack>.yaml` in the folder it runs from and its parents up to the
top of the git repository, before its own checkout; `{STACK_DIR_VAR}=DIR` names another folder.

```bash
{block}
```

`pulumi up --cwd` runs tpuctl's own program (its Pulumi.yaml and infra/) against this folder's config file. The
walkthrough: `$TPUCTL/README.md` ("Walkthrough for a real project"), `$TPUCTL/docs/stack-config.md`; your own model
and data: `$TPUCTL/docs/your-code.md`.
"""


def init_folder(folder: Path, stack: str = "dev") -> list[Path]:
    """Write the starting files into ``folder`` (created if missing) and return them; a ``UserError`` naming the
    first that is already there (nothing written), or naming ``folder`` when it is not a folder."""
    folder = Path(folder)
    name = stack_file_name(stack)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} is not a folder; give the team folder to start (or nothing: the current folder)")
    files = {folder / name: stack_file(stack), folder / ".gitignore": gitignore(), folder / "README.md": readme(folder, stack)}
    there = [path for path in files if path.exists() or path.is_symlink()]
    if there:
        raise UserError(f"{there[0]} is already there: tpuctl init writes {', '.join(p.name for p in files)} only "
                        "into a folder that has none of them (nothing written)")
    written: list[Path] = []
    try:
        for path, text in files.items():
            written.append(write_atomically(path, text))
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return written
