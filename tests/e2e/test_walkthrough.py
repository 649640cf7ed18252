"""The README walkthrough as a new user runs it on a fresh clone, offline steps only (issue 28).

A fresh clone (``git clone`` of this checkout's committed tree: no Pulumi.dev.yaml, no runs, no caches), no Pulumi
CLI and no network (``netfixtures.OFFLINE``: DNS fails, only loopback connects). Each command is taken from README.md
as written (the test fails when the README no longer shows it) and what it prints is compared with what the README
says it does. The stack lives in the team's own folder outside the clone (issue 57: `tpuctl init` starts it), and
every command after step 2 runs from there. The steps that need Google (bootstrap, pulumi up, doctor, real cloud
runs) are left out; their offline failure is tests/ops/offline's.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from ground.envs import REPO_ROOT, ops_python

from netfixtures import OFFLINE

README = (REPO_ROOT / "README.md").read_text()


def _readme_command(pattern: str) -> str:
    """The README's own command (in backticks) matching ``pattern``; fails when the README lost it."""
    prose = re.sub(r"```.*?```", "", README, flags=re.S)        # inline code only, not the fenced blocks
    found = [c for c in re.findall(r"`([^`]+)`", prose) if re.fullmatch(pattern, c)]
    assert found, f"README.md no longer shows a command matching {pattern!r}"
    return found[0]


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    root = tmp_path_factory.mktemp("walkthrough")
    clone = root / "tpuctl"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO_ROOT), str(clone)], check=True, timeout=120,
                   capture_output=True)
    site = root / "offline"
    site.mkdir()
    (site / "sitecustomize.py").write_text(OFFLINE)
    env = {
        "PATH": "/usr/bin:/bin",                              # no pulumi, no gcloud credentials
        "HOME": str(root / "home"),
        "PYTHONPATH": f"{clone}{os.pathsep}{site}",           # the clone's sources, and no network
        "TPUCTL_CACHE_DIR": str(root / "cache"),
        "CLOUDSDK_CONFIG": str(root / "gcloud"),
        "COLUMNS": "80",
        "LANG": "C.UTF-8",
    }
    return clone, env


def tpuctl(line: str, here: Path, env: dict) -> subprocess.CompletedProcess:
    """``line`` (``tpuctl …``, a ``~/`` as the shell would expand it) run from the folder ``here`` with the clone's
    sources."""
    words = [word.replace("~/", env["HOME"] + "/", 1) if word.startswith("~/") else word for word in shlex.split(line)]
    assert words[0] == "tpuctl", line
    start = time.monotonic()
    proc = subprocess.run([str(ops_python()), "-m", "tpuctl.cli", *words[1:]], cwd=here, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    proc.seconds = time.monotonic() - start
    return proc


def test_the_offline_walkthrough_runs_as_written(fresh_clone):
    clone, env = fresh_clone
    assert not (clone / "Pulumi.dev.yaml").exists() and not (clone / "runs").exists()

    # 2. The team's own folder (its git repository) and its stack, outside the clone, as the README writes them
    team = Path(env["HOME"]) / "src" / "vision-team"
    git_init = _readme_command(r"git init ~/src/vision-team")
    subprocess.run(shlex.split(git_init.replace("~/", env["HOME"] + "/")), check=True, capture_output=True, timeout=60)
    init = tpuctl(_readme_command(r"tpuctl init ~/src/vision-team"), clone, env)
    assert init.returncode == 0, init.stderr
    assert (team / "Pulumi.dev.yaml").is_file() and "runs/" in (team / ".gitignore").read_text().splitlines()
    assert not (clone / "Pulumi.dev.yaml").exists()

    # 3. Preview without credentials, from the team's folder: every resource, the access map and the policy verdicts
    plan = tpuctl(_readme_command(r"tpuctl plan --stack dev"), team, env)
    assert plan.returncode == 0, plan.stderr
    assert "access" in plan.stdout.lower() and "polic" in plan.stdout.lower()

    # the route the prerequisites give without the Pulumi CLI: plan's outputs as an --outputs file
    assert "tpuctl plan --stack dev --json | jq .outputs > outputs.json" in README
    planned = tpuctl("tpuctl plan --stack dev --json", team, env)
    assert planned.returncode == 0, planned.stderr
    (team / "outputs.json").write_text(json.dumps(json.loads(planned.stdout)["outputs"]))

    note = ("no Pulumi CLI: using the outputs `tpuctl plan --stack dev` computes from Pulumi.dev.yaml (enough for a "
            "dry run; a real run needs the deployed stack)")

    # 9. Train on Vertex AI: `--dry-run` prints the CustomJob request and the cost estimate
    vertex = _readme_command(r"tpuctl train --target vertex --stack dev --accelerator tpu-v5e-4")
    assert "`--dry-run` prints the CustomJob request and the cost estimate" in README
    r = tpuctl(vertex + " --dry-run", team, env)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines()[0] == note and "cost estimate (Vertex AI" in r.stderr
    assert json.loads(r.stdout)["jobSpec"]["workerPoolSpecs"]

    # 10. Cheaper runs and tuning (dry runs)
    spot = _readme_command(r"tpuctl train --target vertex --stack dev --spot --max-run-time 2h --budget 5")
    r = tpuctl(spot + " --dry-run", team, env)
    assert r.stderr.splitlines()[0] == note
    # offline and before `tpuctl prices refresh` (the step's first command) no Vertex AI price is known, so the
    # --budget cannot be checked: one line that says to refresh, exit 2
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot check --budget $5.00") and last.endswith("run `tpuctl prices refresh`")
    r = tpuctl(_readme_command(r"tpuctl tune --stack dev --dry-run"), team, env)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines()[0] == note

    # 11. Past one host: a dry run of the TPU VM slice
    r = tpuctl(_readme_command(r"tpuctl train --target tpu-vm --stack dev --accelerator v5litepod-16") + " --dry-run",
               team, env)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines()[0] == note and "slice v5litepod-16" in r.stderr

    # 5. Check it: doctor needs the deployed stack, and says what to install
    r = tpuctl(_readme_command(r"tpuctl doctor --stack dev"), team, env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "curl -fsSL https://get.pulumi.com | sh" in r.stderr and "curl -fsSL https://get.pulumi.com | sh" in README
    r = tpuctl("tpuctl doctor --outputs outputs.json", team, env)   # ... or --outputs: offline, one error line
    assert r.returncode == 1 and r.seconds < 30, r.stderr     # offline fails fast (not the client's minutes)
    assert r.stderr.strip().splitlines()[-1].startswith("error: ")

    # 12. Compare runs: a new team folder has none
    r = tpuctl(_readme_command(r"tpuctl runs ls"), team, env)
    assert r.returncode == 0, r.stderr
