"""Stack config files (``Pulumi.<stack>.yaml``) read offline, values exactly as written.

The edge where a stack file enters: the bytes are checked (size), the YAML is parsed by
``yamlfile.parse_yaml`` (UTF-8, no aliases, bounded nesting), and the document must be a mapping with a ``config:`` mapping of string keys. Anything else
is a one-line ``DomainError`` naming the file. Validation of the values is the settings model's job.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ground.envs import REPO_ROOT
from ground.errors import ConfigError, DomainError
from ground.files import read_head
from ground.yamlfile import parse_yaml

#: Stack files are a few KB; a file bigger than this is refused before it is parsed.
MAX_STACK_FILE_BYTES = 1024 * 1024


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


def read_stack_config(stack: str | None = None, config_file: Path | None = None,
                      root: Path = REPO_ROOT) -> dict[str, Any]:
    """The ``config:`` section of ``Pulumi.<stack>.yaml`` (or ``config_file``), values as written.

    Secure values cannot be decrypted without the engine; they raise ``ConfigError`` naming the key.
    """
    if config_file is None:
        if not stack:
            raise DomainError("give a stack name or a stack config file")
        config_file = Path(root) / f"Pulumi.{stack}.yaml"
    path = Path(config_file)
    data = read_head(path, "stack config file", MAX_STACK_FILE_BYTES, error=DomainError,
                     folder_hint=f"give a file such as {path}/Pulumi.dev.yaml",
                     missing_hint="create it with `pulumi stack init` or copy Pulumi.example.yaml")
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


def stack_file_keys(stack: str, root: Path = REPO_ROOT) -> tuple[str, ...]:
    """The config keys written in ``Pulumi.<stack>.yaml`` (values not read, so secrets are fine); ``()`` when
    the stack keeps its config elsewhere (no file). The program uses it to name a key it does not know."""
    path = Path(root) / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return ()
    data = read_head(path, "stack config file", MAX_STACK_FILE_BYTES, error=DomainError,
                     folder_hint="Pulumi.<stack>.yaml must be a file", missing_hint="it was just there")
    doc = parse_stack_yaml(data, path)
    config = doc.get("config") if isinstance(doc, dict) else None
    return tuple(str(key) for key in config) if isinstance(config, dict) else ()
