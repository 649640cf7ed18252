"""`--stack NAME` without the Pulumi CLI (issue 28): a dry run uses the outputs `tpuctl plan` computes from
Pulumi.NAME.yaml and says so in one line; a command that needs the deployed stack says what to install."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))

from clifixtures import error_line, invoke

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
    assert "`curl -fsSL https://get.pulumi.com | sh`" in r.stderr
    assert "--outputs outputs.json" in r.stderr


def test_every_dry_run_works_offline_from_the_planned_outputs(no_pulumi, tmp_path):
    """issue 40: which dry runs worked offline differed by command; now each one with --stack and no Pulumi CLI
    uses the planned outputs and shows its request, with no credentials either."""
    export = tmp_path / "digits" / "1"
    export.mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"\n")
    for args, shows in [
        (["image", "build", "--stack", "example", "--dry-run"], "image"),
        (["deploy", str(export), "--stack", "example", "--dry-run"], "uploadModel"),
        (["train", "--target", "tpu-vm", "--stack", "example", "--accelerator", "v5litepod-8", "--dry-run"],
         "queuedResource"),
        (["tune", "--stack", "example", "--dry-run"], None),
    ]:
        r = invoke(args)
        assert r.exit_code == 0, (args, r.output)
        assert r.stderr.splitlines()[0] == NOTE, args
        if shows:
            assert shows in json.loads(r.stdout), (args, r.stdout[:300])


def test_bootstrap_and_grant_access_dry_runs_show_what_they_would_do_without_credentials(no_pulumi):
    r = invoke(["bootstrap", "--project", "my-tpu-project", "--agents", "--dry-run"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert "not read: no Google credentials" in lines[0]
    assert "  ? enable tpu.googleapis.com" in lines and lines[-1] == "dry run: nothing changed"
    assert any(line.startswith("  ? tpu-vm-agent: create") for line in lines)

    r = invoke(["grant-access", "--stack", "example", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[0] == NOTE
    lines = r.stdout.splitlines()
    assert "policies not read" in lines[0] and "no Google credentials" in lines[0], lines[0]
    assert "gs://tpuctl-my-tpu-project-data" in lines
    assert "  + serviceAccount:tpuctl-trainer@my-tpu-project.iam.gserviceaccount.com roles/storage.objectViewer" in lines
    assert lines[-1].startswith("dry run: ") and lines[-1].endswith("change(s) shown, nothing written")

    # an agent's e-mail needs the project number, which only Google (or the stack) knows: one line
    r = invoke(["grant-access", "--project", "my-tpu-project", "--read-bucket", "some-data", "--principal",
                "tpu-agent", "--dry-run"])
    line = error_line(r, 2)
    assert "service agent" in line and "project number" in line, line
    # without --dry-run nothing is planned blind: the missing credentials are the error
    r = invoke(["bootstrap", "--project", "my-tpu-project", "--yes"])
    assert r.exit_code == 2 and r.stderr.startswith("error: no Google credentials")
