"""policy.config: the --policy-pack-config file written from a stack file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from policy.config import pack_config, settings_from_stack_values
from policy.evaluate import ALL_RULES
from policy.settings import settings_from, to_config

REPO = Path(__file__).resolve().parents[3]


def test_stack_values_become_per_policy_config():
    settings = settings_from_stack_values({
        "gcp:project": "ignored-provider-key", "tpuctl:project": "p", "tpuctl:accessMode": "project",
        "tpuctl:existingDataBucket": "legacy-data", "tpuctl:existingDataBucketAccess": "acl", "maxGpuQuota": 4,
    })
    config = pack_config(settings)
    assert set(config) == {spec.name for spec in ALL_RULES if spec.config_keys}
    assert config["gpu-quota-preference"] == {"maxGpuQuota": 4}
    assert config["training-principals-storage-access"] == {"existingDataBucket": "legacy-data",
                                                             "existingDataBucketAccess": "acl"}
    # each policy reads back exactly the stack's settings for the keys it declares
    for values in config.values():
        back = to_config(settings_from(values))
        assert {k: back[k] for k in values} == values


def test_cli_writes_json_for_the_example_stack():
    proc = subprocess.run([sys.executable, "-m", "policy.config", "Pulumi.example.yaml"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["project-roles-need-project-mode"] == {"accessMode": "bucket"}
    bad = subprocess.run([sys.executable, "-m", "policy.config", "missing.yaml"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and len(bad.stderr.strip().splitlines()) == 1


def test_pulumi_policy_yaml_points_the_engine_at_the_ops_env():
    import yaml

    doc = yaml.safe_load((REPO / "policy" / "PulumiPolicy.yaml").read_text())
    assert doc["runtime"]["name"] == "python"
    venv = (REPO / "policy" / doc["runtime"]["options"]["virtualenv"]).resolve()
    assert venv == (REPO / ".venv").resolve()  # the analyzer script resolves it from the pack folder
    assert (venv / "bin" / "python").exists()
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import pulumi_policy, pulumi.policy"],
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
