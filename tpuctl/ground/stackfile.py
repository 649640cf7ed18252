"""Stack config files (``Pulumi.<stack>.yaml``) read offline, values exactly as written.

The edge where a stack file enters: anything that is not a YAML mapping with a ``config:`` mapping is
a one-line ``DomainError`` naming the file. Validation of the values is the settings model's job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpuctl.ground.envs import REPO_ROOT
from tpuctl.ground.errors import ConfigError, DomainError


def read_stack_config(stack: str | None = None, config_file: Path | None = None,
                      root: Path = REPO_ROOT) -> dict[str, Any]:
    """The ``config:`` section of ``Pulumi.<stack>.yaml`` (or ``config_file``), values as written.

    Secure values cannot be decrypted without the engine; they raise ``ConfigError`` naming the key.
    """
    import yaml

    if config_file is None:
        if not stack:
            raise DomainError("give a stack name or a stack config file")
        config_file = Path(root) / f"Pulumi.{stack}.yaml"
    path = Path(config_file)
    try:
        text = path.read_text(encoding="utf8")
    except FileNotFoundError:
        raise DomainError(
            f"stack config file {path} does not exist (create it with `pulumi stack init` or copy Pulumi.example.yaml)"
        ) from None
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise DomainError(f"stack config file {path} is not valid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(doc, dict):
        raise DomainError(f"stack config file {path} must be a YAML mapping with a 'config:' section")
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise DomainError(f"stack config file {path}: 'config:' must be a mapping of key: value")
    out: dict[str, Any] = {}
    for key, value in config.items():
        key = str(key)
        if isinstance(value, dict) and "secure" in value:
            raise ConfigError(key, f"is a secret in {path.name}; secrets can't be read offline (tpuctl needs no secret config)")
        out[key] = value
    return out
