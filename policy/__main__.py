"""Entry point of the policy pack: constructs the PolicyPack, which prints its port and serves the analyzer.

Run by the engine (`pulumi preview --policy-pack policy`, which executes this file) or directly with
`python -m policy`. Everything else lives in importable modules; this file only builds the pack.
"""

import sys
from pathlib import Path

if __package__ in (None, ""):  # executed as a file by the engine: make `policy` importable as a package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack

from policy.pack import PACK_DESCRIPTION, PACK_NAME, policies

PolicyPack(
    name=PACK_NAME,
    description=PACK_DESCRIPTION,
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=policies(),
)
