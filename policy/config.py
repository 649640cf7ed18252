"""Write the policy config file that matches a stack, for `pulumi preview --policy-pack-config`.

    .venv/bin/python -m policy.config Pulumi.dev.yaml > policy-config.json
    pulumi preview --stack dev --policy-pack policy --policy-pack-config policy-config.json

Pulumi gives each policy its own config object, so the stack's accessMode, existingDataBucket,
existingDataBucketAccess, maxGpuQuota and hubCachePrefix are repeated under every policy that reads
them. Keys the stack does not set take the pack's defaults (the same defaults Pulumi.yaml declares).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ground.errors import DomainError
from ground.settings import NAMESPACE, StackSettings
from ground.stackfile import read_stack_config
from policy.evaluate import ALL_RULES
from policy.settings import SCHEMA, SettingsError, settings_from, to_config


def settings_from_stack_values(values: Mapping[str, Any]) -> StackSettings:
    """Policy settings from a stack's ``config:`` values (``tpuctl:key`` or bare keys; others ignored)."""
    picked = {}
    for key, value in values.items():
        ns, _, bare = key.rpartition(":")
        if ns in ("", NAMESPACE) and bare in SCHEMA and value is not None:
            picked[bare] = value
    return settings_from(picked, strict=False)


def pack_config(settings: StackSettings) -> dict[str, dict[str, Any]]:
    """``{policy name: {setting: value}}`` for every policy that declares settings."""
    config = to_config(settings)
    return {spec.name: {key: config[key] for key in spec.config_keys} for spec in ALL_RULES if spec.config_keys}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m policy.config Pulumi.<stack>.yaml > policy-config.json", file=sys.stderr)
        return 2

    try:
        settings = settings_from_stack_values(read_stack_config(config_file=Path(args[0])))
    except (DomainError, SettingsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(pack_config(settings), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
