"""A team's own repository (issue 57): a project folder outside tpuctl's checkout, its own git repository, holds its
stack config; every `--stack NAME` command run from it (or below it) finds the stack there. `tpuctl init` writes the
folder's starting files and never overwrites one."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from ground.envs import REPO_ROOT
from ground.stackfile import STACK_DIR_VAR

from clifixtures import error_line, invoke

GIT = shutil.which("git") or "git"      # found before the tests take git's folder off PATH

PROJECT = "vision-team-42"


@pytest.fixture
def team(tmp_path, monkeypatch):
    """A team folder as a new user makes one: a git repository, `tpuctl init`, its project id set; no Pulumi CLI."""
    folder = tmp_path / "vision-team"
    folder.mkdir()
    subprocess.run([GIT, "init", "-q", str(folder)], check=True, timeout=60)
    r = invoke(["init", str(folder)])
    assert r.exit_code == 0, r.output
    stack = folder / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text().replace("my-tpu-project", PROJECT))
    (folder / "models").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))        # no `pulumi` anywhere
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    monkeypatch.setenv("TPUCTL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(STACK_DIR_VAR, raising=False)
    return folder


def test_init_writes_the_starting_files_and_never_overwrites(team, tmp_path):
    stack = (team / "Pulumi.dev.yaml").read_text()
    assert "# least privilege per bucket" in stack and "tpuctl:region: us-central1" in stack   # the example's comments
    ignored = (team / ".gitignore").read_text().splitlines()
    assert {"runs/", ".tpuctl-cache/", ".pulumi/", "credentials.json", "*.pem", ".env"} <= set(ignored)
    # git itself leaves out the runs of the folder and of a subfolder (a run started in models/ writes models/runs/)
    subprocess.run([GIT, "init", "-q", str(team)], check=True)
    runs = ["runs/a/result.json", "models/runs/b/result.json"]
    checked = subprocess.run([GIT, "-C", str(team), "check-ignore", *runs], capture_output=True, text=True)
    assert checked.stdout.split() == runs, checked
    readme = (team / "README.md").read_text()
    assert '--config-file "$PWD/Pulumi.dev.yaml"' in readme and f"TPUCTL={REPO_ROOT}" in readme

    before = {p.name: p.read_bytes() for p in team.iterdir() if p.is_file()}
    r = invoke(["init", str(team)])
    assert "Pulumi.dev.yaml is already there" in error_line(r, alone=True)
    assert {p.name: p.read_bytes() for p in team.iterdir() if p.is_file()} == before

    other = tmp_path / "other"            # one of the three there: nothing written, not even the others
    other.mkdir()
    (other / "README.md").write_text("ours\n")
    r = invoke(["init", str(other), "--stack", "prod"])
    assert "README.md is already there" in error_line(r, alone=True)
    assert sorted(p.name for p in other.iterdir()) == ["README.md"]
    assert "a stack name is letters" in error_line(invoke(["init", str(tmp_path / "x"), "--stack", "a b"]))


def test_every_stack_command_finds_the_teams_stack(team, monkeypatch):
    monkeypatch.chdir(team / "models")       # below the folder, in its git repository
    r = invoke(["plan", "--stack", "dev"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"Plan stack dev ({team / 'Pulumi.dev.yaml'})")
    assert f"resources in project {PROJECT}" in " ".join(r.stdout.split())

    # needs the deployed stack: without the Pulumi CLI, one line saying what to install, and how to read the outputs
    # from this folder (the stack belongs to tpuctl's program: --cwd its checkout)
    line = error_line(invoke(["doctor", "--stack", "dev"]), alone=True)
    assert "`curl -fsSL https://get.pulumi.com | sh`" in line and f"--cwd {REPO_ROOT}" in line

    # a dry run: the outputs `tpuctl plan --stack dev` computes from the team's file (options.stack_outputs)
    r = invoke(["train", "--target", "vertex", "--stack", "dev", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith("no Pulumi CLI: using the outputs `tpuctl plan --stack dev` computes")
    job = json.loads(r.stdout)
    assert job["jobSpec"]["serviceAccount"] == f"tpuctl-trainer@{PROJECT}.iam.gserviceaccount.com"
    assert job["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"].startswith(f"gs://tpuctl-{PROJECT}-artifacts/")


def test_where_a_stack_is_looked_for_and_the_line_that_says_so(team, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere" / "deeper"     # no git repository: its parents are not searched
    elsewhere.mkdir(parents=True)
    (tmp_path / "elsewhere" / "Pulumi.dev.yaml").write_text((team / "Pulumi.dev.yaml").read_text())
    monkeypatch.chdir(elsewhere)
    line = error_line(invoke(["plan", "--stack", "dev"]), alone=True)
    assert f"no Pulumi.dev.yaml for stack dev: looked in {elsewhere}, {REPO_ROOT};" in line and STACK_DIR_VAR in line

    monkeypatch.setenv(STACK_DIR_VAR, str(team))        # named: found from anywhere
    r = invoke(["plan", "--stack", "dev", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["outputs"]["project"] == PROJECT

    monkeypatch.setenv(STACK_DIR_VAR, str(tmp_path / "elsewhere" / "deeper"))  # named: the only place looked in
    monkeypatch.chdir(team)
    line = error_line(invoke(["plan", "--stack", "dev"]), alone=True)
    assert line.startswith(f"error: no Pulumi.dev.yaml in {elsewhere} (${STACK_DIR_VAR})")

    monkeypatch.delenv(STACK_DIR_VAR)              # the checkout's own stacks are still found from the team folder
    r = invoke(["plan", "--stack", "example", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["outputs"]["project"] == "my-tpu-project"
