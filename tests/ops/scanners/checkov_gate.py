"""Judge the example stack's exported plans with checkov, accepting only policy/exceptions.yaml.

    .venv/bin/python tests/ops/scanners/checkov_gate.py [STACK_FILE]      (scripts/test.sh runs it)

For each access mode (the stack file as written, and a copy with ``tpuctl:accessMode: project``; both with a
``tpuctl:servingEndpoint``, added when the file has none) it writes
``tpuctl plan --format tfplan`` and the matching ``--checkov-baseline``, runs checkov from ``.venv-scanners``
(``-f plan.json --framework terraform_plan``, no network) and fails on any finding the baseline does not
accept. It also fails when checkov judged nothing (a plan it did not recognise must not pass as clean).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
CHECKOV = REPO / ".venv-scanners" / "bin" / "checkov"
MODES = ("bucket", "project")
#: The servingEndpoint display name the gate adds when the stack file has none.
SCAN_ENDPOINT = "tpuctl-checkov-endpoint"


@dataclass
class Verdict:
    label: str
    passed: int
    failed: list[tuple[str, str]]          # (check id, resource) outside the exceptions
    accepted: list[tuple[str, str]]        # failed by checkov, accepted by policy/exceptions.yaml
    resources: int

    @property
    def ok(self) -> bool:
        return not self.failed and self.resources > 0 and self.passed > 0

    def line(self) -> str:
        text = (f"checkov {self.label}: {self.passed} passed, {len(self.failed)} failed, {len(self.accepted)} "
                f"accepted by policy/exceptions.yaml ({self.resources} resources)")
        return text + "".join(f"\n  FAILED {check} {resource}" for check, resource in self.failed)


def stack_copy(stack_file: Path, folder: Path, **overrides: Any) -> Path:
    """``stack_file`` with ``tpuctl:<key>`` overrides, written into ``folder`` (same file name)."""
    doc = yaml.safe_load(stack_file.read_text())
    for key, value in overrides.items():
        if value is None:
            doc["config"].pop(f"tpuctl:{key}", None)
        else:
            doc["config"][f"tpuctl:{key}"] = value
    path = folder / stack_file.name
    path.write_text(yaml.safe_dump(doc))
    return path


def export(stack_file: Path, folder: Path) -> tuple[Path, Path]:
    """plan.json and baseline.json of a stack file, through the service functions ``tpuctl plan`` uses."""
    from tpuctl.services.plan import checkov_baseline, plan, to_tfplan

    result = plan(config_file=stack_file, check_policy=False)
    plan_path, baseline_path = folder / "plan.json", folder / "baseline.json"
    plan_path.write_text(json.dumps(to_tfplan(result), indent=1, default=str))
    baseline_path.write_text(json.dumps(checkov_baseline(result, str(plan_path)), indent=1))
    return plan_path, baseline_path


def run_checkov(plan_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    """checkov's exit code and JSON report of one plan file (offline: no Prisma Cloud download)."""
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"}
    proc = subprocess.run([str(CHECKOV), "-f", str(plan_path), "--framework", "terraform_plan", "--skip-download",
                           "-o", "json", *extra], capture_output=True, text=True, env=env, timeout=600)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"checkov printed no JSON (exit {proc.returncode}): {proc.stderr[-2000:]}") from None
    if isinstance(report, list):
        report = next((r for r in report if r.get("check_type") == "terraform_plan"), report[0] if report else {})
    return proc.returncode, report


def judge(label: str, plan_path: Path, baseline_path: Path) -> Verdict:
    _, report = run_checkov(plan_path)
    results = report.get("results") or {}
    accepted = {(c, f["resource"]) for entry in json.loads(baseline_path.read_text())["failed_checks"]
                for f in entry["findings"] for c in f["check_ids"]}
    failed = sorted((c["check_id"], c["resource"]) for c in results.get("failed_checks", []))
    summary = report.get("summary") or {}
    return Verdict(label, len(results.get("passed_checks", [])), [f for f in failed if f not in accepted],
                   [f for f in failed if f in accepted], int(summary.get("resource_count", 0)))


def gate(stack_file: Path) -> list[Verdict]:
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="tpuctl-checkov-") as tmp:
        for mode in MODES:
            folder = Path(tmp) / mode
            folder.mkdir()
            # a serving Endpoint too, so that its resource is judged whether or not the stack file names one
            endpoint = yaml.safe_load(stack_file.read_text())["config"].get("tpuctl:servingEndpoint") or SCAN_ENDPOINT
            copy = stack_copy(stack_file, folder, accessMode=mode, servingEndpoint=endpoint)
            plan_path, baseline_path = export(copy, folder)
            verdicts.append(judge(f"{stack_file.name} accessMode={mode}", plan_path, baseline_path))
    return verdicts


def main(argv: list[str]) -> int:
    if not CHECKOV.exists():
        print(f"checkov: {CHECKOV.parent.parent.name} is missing (scripts/setup.sh --with-scanners): skipped")
        return 0
    stack_file = Path(argv[0]) if argv else REPO / "Pulumi.example.yaml"
    verdicts = gate(stack_file)
    for verdict in verdicts:
        print(verdict.line())
    return 0 if all(v.ok for v in verdicts) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main(sys.argv[1:]))
