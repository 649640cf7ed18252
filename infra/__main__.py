"""Entry point the Pulumi engine runs (`main: infra/`): read config, build, export."""

import sys
from pathlib import Path

# The engine runs this folder as a script; without the editable install the repository root
# (tpuctl/, infra/) would not be importable.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import pulumi  # noqa: E402

from infra.config import ConfigError, from_pulumi_config  # noqa: E402
from infra.program import build  # noqa: E402

try:
    outputs = build(from_pulumi_config())
except ConfigError as exc:
    # RunError: the engine prints the one-line message without a Python traceback.
    raise pulumi.RunError(str(exc)) from None
for key, value in outputs.items():
    pulumi.export(key, value)
