"""`tpuctl` on PATH after setup (scripts/link-cli.sh, run by scripts/setup.sh) and hints printed with the invocation
that works here (issue 28)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ground.envs import REPO_ROOT
from tpuctl.commands.options import program

LINK = REPO_ROOT / "scripts" / "link-cli.sh"
TPUCTL = REPO_ROOT / ".venv" / "bin" / "tpuctl"


def _link(home: Path, path: str, **extra) -> subprocess.CompletedProcess:
    env = {"HOME": str(home), "PATH": path, **extra}
    return subprocess.run(["bash", str(LINK)], env=env, capture_output=True, text=True, timeout=30)


def test_setup_links_tpuctl_into_local_bin_when_that_is_on_path(tmp_path):
    bin_dir = tmp_path / ".local" / "bin"
    r = _link(tmp_path, f"{bin_dir}:/usr/bin:/bin")
    assert r.returncode == 0, r.stderr
    assert (bin_dir / "tpuctl").resolve() == TPUCTL.resolve()
    # and the link works from any folder, as a user would type it
    version = subprocess.run(["tpuctl", "--version"], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("tpuctl ")
    assert _link(tmp_path, f"{bin_dir}:/usr/bin:/bin").stdout.startswith("setup: tpuctl is on PATH")   # idempotent


def test_setup_says_how_when_local_bin_is_not_on_path_and_never_replaces_another_tpuctl(tmp_path):
    r = _link(tmp_path, "/usr/bin:/bin")
    assert r.returncode == 0 and not (tmp_path / ".local").exists()
    assert f"run tpuctl as {TPUCTL}" in r.stdout and "ln -s" in r.stdout
    bin_dir = tmp_path / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "tpuctl").write_text("#!/bin/sh\necho another\n")
    r = _link(tmp_path, f"{bin_dir}:/usr/bin:/bin")
    assert "another program, left alone" in r.stdout and (bin_dir / "tpuctl").read_text().endswith("another\n")
    assert _link(tmp_path / "x", f"{tmp_path}/x/.local/bin:/bin", TPUCTL_NO_LINK="1").stdout.startswith(
        "setup: run tpuctl as")
    assert not (tmp_path / "x").exists()


def test_hints_name_the_program_as_it_can_be_typed(tmp_path, monkeypatch):
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "tool").write_text("#!/bin/sh\n")
    (venv_bin / "tool").chmod(0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert program("tool", venv_bin) == str(venv_bin / "tool")              # not on PATH: its full path
    monkeypatch.chdir(tmp_path)
    assert program("tool", venv_bin) == os.path.join("venv", "bin", "tool")  # below the current folder: relative
    on_path = tmp_path / "on-path"
    on_path.mkdir()
    (on_path / "tool").symlink_to(venv_bin / "tool")
    monkeypatch.setenv("PATH", f"{on_path}:/usr/bin:/bin")
    assert program("tool", venv_bin) == "tool"                              # PATH finds this very program
