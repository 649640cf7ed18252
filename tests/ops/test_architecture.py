"""The layers contract (pyproject.toml [tool.importlinter]) and ruff bite: a deliberately wrong import (or an
unused one, or a ``noqa`` that suppresses nothing) in a copy of the tree fails the same check CI runs.
That the tree itself is clean is scripts/test.sh's lint step (run before every suite), not repeated here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ground.envs import OPS_PACKAGES, REPO_ROOT, ops_python

PACKAGES = (*OPS_PACKAGES, "trainer")


def _copy_tree(dest: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(REPO_ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    script = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([str(ops_python()), "-c", script, "--no-cache"], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


@pytest.mark.parametrize("target, line, contract", [
    # the ground layer may not reach up into the CLI toolkit ...
    ("ground/errors.py", "import typer", "Only the CLI renders"),
    # ... nor into the layers above it
    ("ground/outputs.py", "from infra import config", "Folders are layers"),
    # ... nor into the Google client adapter above it
    ("ground/files.py", "from cloud import clients", "Folders are layers"),
    # bootstrap acts on live APIs; it does not call the CLI
    ("bootstrap/state.py", "from tpuctl.commands import access", "Folders are layers"),
    # infra and policy are independent siblings
    ("policy/rules/buckets.py", "from infra import buckets", "Folders are layers"),
    # no circle between the modules of a package, not even through a function-local import
    ("tpuctl/services/runs/spec.py", "def _later():\n    from tpuctl.services.runs import local", "No circles"),
    # a Google library is imported in the adapter only
    ("bootstrap/quotas.py", "from google.cloud import storage", "in the adapter"),
    # the trainer ships alone
    ("trainer/task.py", "from ground import domain", "The trainer ships alone"),
    ("trainer/data.py", "import google.cloud.storage", "The trainer ships alone"),
    # the ops side knows the trainer only through its line protocol
    ("bootstrap/hubcache/model.py", "from trainer import data", "line protocol"),
])
def test_a_wrong_import_breaks_its_contract(tmp_path, target, line, contract):
    tree = _copy_tree(tmp_path)
    _append(tree / target, line)
    proc = _lint_imports(tree)
    assert proc.returncode != 0, proc.stdout[-2000:]
    broken = proc.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, proc.stdout[-3000:]


def test_ruff_catches_an_unused_import_and_a_noqa_that_suppresses_nothing(tmp_path):
    ruff = [str(ops_python()), "-m", "ruff", "check", "--no-cache", "--output-format", "concise"]
    tree = _copy_tree(tmp_path)
    _append(tree / "ground/envs.py", "import json")
    _append(tree / "ground/errors.py", "ANSWER = 42  # noqa: E501")
    dirty = subprocess.run([*ruff, "."], cwd=tree, capture_output=True, text=True, timeout=300)
    assert dirty.returncode != 0, dirty.stdout[-2000:]
    assert "envs.py" in dirty.stdout and "F401" in dirty.stdout, dirty.stdout[-2000:]
    assert "errors.py" in dirty.stdout and "RUF100" in dirty.stdout, dirty.stdout[-2000:]
