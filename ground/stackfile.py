"""Stack config files (``Pulumi.<stack>.yaml``): where a stack's file is, and its values read offline, exactly as
written.

Where (``find_stack_file``, the one rule every ``--stack NAME`` that reads a file goes through; docs/stack-config.md,
"Where tpuctl finds a stack"): the folder ``$TPUCTL_STACK_DIR`` names, and only it, when set; else the current
folder and each parent up to the top of its git repository (a team's own repository holds its stacks); else
tpuctl's own checkout. Not found: one line naming every folder looked in.

The edge where a stack file enters: the bytes are checked (size), the YAML is parsed by
``yamlfile.parse_yaml`` (UTF-8, no aliases, bounded nesting), and the document must be a mapping with a ``config:``
mapping of string keys. Anything else is a one-line ``DomainError`` naming the file. Validation of the values is the
settings model's job.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from ground.envs import REPO_ROOT
from ground.errors import ConfigError, DomainError
from ground.files import read_head
from ground.yamlfile import parse_yaml

#: Stack files are a few KB; a file bigger than this is refused before it is parsed.
MAX_STACK_FILE_BYTES = 1024 * 1024
#: Names the folder holding a team's stack configs; when set, the only folder looked in.
STACK_DIR_VAR = "TPUCTL_STACK_DIR"
#: One part of a Pulumi stack name (``NAME``, ``ORG/NAME`` or ``ORG/PROJECT/NAME``): letters, digits, ``-``, ``_``,
#: ``.``, at most 100 (pulumi/pulumi pkg/backend/httpstate validateStackName, ``^[a-zA-Z0-9-_.]{1,100}$``, read
#: 2026-12-07). Pulumi names the file after the last part: ``Pulumi.<NAME>.yaml``.
_STACK_NAME_PART = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def stack_file_name(stack: str) -> str:
    """``Pulumi.<NAME>.yaml`` of a stack name as ``--stack`` takes it, or one line saying what a name may hold."""
    parts = str(stack).split("/")
    if len(parts) > 3 or not all(_STACK_NAME_PART.fullmatch(part) for part in parts):
        raise DomainError(f"--stack {str(stack)[:120]!r}: a stack name is letters, digits, '-', '_' or '.' (at most "
                          "100), alone or as ORG/NAME or ORG/PROJECT/NAME")
    return f"Pulumi.{parts[-1]}.yaml"


def stack_folders() -> list[Path]:
    """Where ``find_stack_file`` looks, in order: ``[$TPUCTL_STACK_DIR]`` when set; else the current folder and its
    parents up to the first that holds ``.git`` (outside a git repository: the current folder alone), then tpuctl's
    checkout."""
    named = os.environ.get(STACK_DIR_VAR)
    if named:
        return [Path(named)]
    try:
        here = Path.cwd()
    except OSError:            # the current folder was removed: the checkout is all there is
        return [REPO_ROOT]
    chain: list[Path] = []
    for folder in (here, *here.parents):
        chain.append(folder)
        if (folder / ".git").exists():
            break
    else:
        chain = [here]
    return chain if REPO_ROOT in chain else [*chain, REPO_ROOT]


def find_stack_file(stack: str) -> Path:
    """The ``Pulumi.<NAME>.yaml`` of stack ``stack``: the first of ``stack_folders`` that has it. Not found: a
    ``DomainError`` naming every folder looked in and the two ways to fix it."""
    name = stack_file_name(stack)
    folders = stack_folders()
    for folder in folders:
        if (folder / name).exists():      # a folder of that name too: the reader says what it is
            return folder / name
    if os.environ.get(STACK_DIR_VAR):
        raise DomainError(f"no {name} in {folders[0]} (${STACK_DIR_VAR}); write it there (`tpuctl init "
                          f"{folders[0]}` starts one) or unset {STACK_DIR_VAR} to look in the current folder")
    raise DomainError(f"no {name} for stack {stack}: looked in {', '.join(map(str, folders))}; write one (`tpuctl "
                      f"init` starts a team folder) or set {STACK_DIR_VAR} to the folder that holds it")


def parse_stack_yaml(data: bytes, path: Path | str) -> Any:
    """Bytes of a stack config file -> the YAML document, or a one-line DomainError naming ``path``."""
    if len(data) > MAX_STACK_FILE_BYTES:
        raise DomainError(f"stack config file {path} is larger than {MAX_STACK_FILE_BYTES} bytes; "
                          "a stack config file is a few KB")
    return parse_yaml(data, "stack config file", path)


def _check_value(value: Any, key: str, path: Path) -> None:
    """Keys inside values must be strings and numbers finite (YAML allows ``.nan``, ``? [a]: b`` …)."""
    if isinstance(value, dict):
        for inner, item in value.items():
            if not isinstance(inner, str):
                raise ConfigError(key, f"in {path.name} has a non-string key {inner!r} inside its value")
            _check_value(item, key, path)
    elif isinstance(value, list):
        for item in value:
            _check_value(item, key, path)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"in {path.name} is {value!r}, which is not a finite number")


def read_stack_config(stack: str | None = None, config_file: Path | None = None) -> dict[str, Any]:
    """The ``config:`` section of stack ``stack``'s file (``find_stack_file``) or of ``config_file``, values as
    written.

    Secure values cannot be decrypted without the engine; they raise ``ConfigError`` naming the key.
    """
    if config_file is None:
        if not stack:
            raise DomainError("give a stack name or a stack config file")
        config_file = find_stack_file(stack)
    path = Path(config_file)
    data = read_head(path, "stack config file", MAX_STACK_FILE_BYTES, error=DomainError,
                     folder_hint=f"give a file such as {path}/Pulumi.dev.yaml",
                     missing_hint="`tpuctl init` writes a starting one, or copy Pulumi.example.yaml")
    doc = parse_stack_yaml(data, path)
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise DomainError(f"stack config file {path} must be a YAML mapping with a 'config:' section")
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise DomainError(f"stack config file {path}: 'config:' must be a mapping of key: value")
    out: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise DomainError(f"stack config file {path}: config key {key!r} must be a string such as tpuctl:region")
        if isinstance(value, dict) and "secure" in value:
            raise ConfigError(key, f"is a secret in {path.name}; secrets can't be read offline (tpuctl needs no secret config)")
        _check_value(value, key, path)
        out[key] = value
    return out
