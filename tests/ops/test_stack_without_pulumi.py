"""`--stack NAME` without the Pulumi CLI (issue 28): a dry run uses the outputs `tpuctl plan` computes from
Pulumi.NAME.yaml and says so in one line; a command that needs the deployed stack says what to install."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))

from clifixtures import invoke

NOTE = ("no Pulumi CLI: using the outputs `tpuctl plan --stack example` computes from Pulumi.example.yaml (enough "
        "for a dry run; a real run needs the deployed stack)")


@pytest.fixture
def no_pulumi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))          # no `pulumi` anywhere
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    monkeypatch.setenv("TPUCTL_CACHE_DIR", str(tmp_path / "cache"))


def test_a_vertex_dry_run_uses_the_planned_outputs_and_says_so(no_pulumi):
    r = invoke(["train", "--target", "vertex", "--stack", "example", "--dry-run", "--accelerator", "tpu-v5e-4"])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[0] == NOTE
    job = json.loads(r.stdout)
    # the example stack's artifacts bucket and training service account, as `tpuctl plan --stack example` has them
    assert job["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"].startswith(
        "gs://tpuctl-my-tpu-project-artifacts/runs/")
    assert job["jobSpec"]["serviceAccount"] == "tpuctl-trainer@my-tpu-project.iam.gserviceaccount.com"


def test_a_tune_dry_run_uses_the_planned_outputs_too(no_pulumi):
    r = invoke(["tune", "--target", "vertex", "--stack", "example", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[0] == NOTE


def test_a_command_that_needs_the_deployed_stack_says_what_to_install(no_pulumi):
    r = invoke(["doctor", "--stack", "example"])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1
    assert "install it (`curl -fsSL https://get.pulumi.com | sh`)" in r.stderr
    assert "--outputs outputs.json" in r.stderr
