"""checkov on exported plans: a deliberately weakened stack fails it, even with the exceptions baseline.

The clean verdict on the example stack in both access modes is scripts/test.sh's checkov step
(checkov_gate.py); these tests prove the gate can fail. They need .venv-scanners.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkov_gate

from ground import tokens as T
from policy.evaluate import evaluate
from tpuctl.services.plan import checkov_baseline, plan, to_tfplan

pytestmark = pytest.mark.skipif(not checkov_gate.CHECKOV.exists(),
                                reason=".venv-scanners is missing: run scripts/setup.sh --with-scanners")


def weakened(result):
    """The example plan with public access prevention off on the data bucket and allUsers reading it."""
    registered = []
    for res in result.registered:
        props = dict(res.props)
        if res.type == T.BUCKET and res.name == "data":
            props["publicAccessPrevention"] = "inherited"
        if res.type == T.BUCKET_IAM_MEMBER and res.name.startswith("data-") and props["role"].endswith("objectViewer"):
            props["member"] = "allUsers"
        registered.append(dataclasses.replace(res, props=props))
    return dataclasses.replace(result, registered=registered)


def test_weakened_stack_fails_checkov_and_the_policy_pack(tmp_path):
    stack = checkov_gate.stack_copy(checkov_gate.REPO / "Pulumi.example.yaml", tmp_path)
    result = weakened(plan(config_file=stack, check_policy=False))
    plan_path, baseline_path = tmp_path / "plan.json", tmp_path / "baseline.json"
    plan_path.write_text(json.dumps(to_tfplan(result), default=str))
    baseline_path.write_text(json.dumps(checkov_baseline(result, str(plan_path))))

    # checkov's own baseline mechanism: the accepted findings drop out, the weakening does not
    code, report = checkov_gate.run_checkov(plan_path, "--baseline", str(baseline_path))
    failed = {(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]}
    assert code != 0
    assert ("CKV_GCP_114", "google_storage_bucket.data") in failed
    assert any(check == "CKV_GCP_28" for check, _ in failed)
    assert not [f for f in failed if f[0] in ("CKV_GCP_62", "CKV_GCP_49")]      # accepted ones stay accepted

    verdict = checkov_gate.judge("weakened", plan_path, baseline_path)
    assert not verdict.ok and {check for check, _ in verdict.failed} == {"CKV_GCP_114", "CKV_GCP_28"}

    # the policy pack agrees
    rules = {v.rule for v in evaluate(result.registered, result.settings) if v.mandatory}
    assert {"bucket-public-access-prevention", "no-public-members"} <= rules
