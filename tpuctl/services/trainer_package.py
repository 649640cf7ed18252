"""The trainer as a Python source distribution (``--python-package``): ``trainer/`` packed with setuptools'
PEP 517 backend for Vertex AI's prebuilt TensorFlow images, which run ``python -m trainer.task`` from it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from ground.envs import REPO_ROOT
from ground.errors import UserError
from tpuctl import __version__

TRAINER_MODULE = "trainer.task"
SDIST_NAME = "tpuctl_trainer"


def _pyproject(tensorflow: str) -> str:
    # The prebuilt image brings TensorFlow; tf-keras must match its minor version (tf_keras is
    # what the trainer uses, see REFERENCE.md), tensorflow-hub loads hub models.
    return textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{SDIST_NAME}"
        version = "{__version__}"
        description = "tpuctl's bundled TensorFlow trainer (python -m {TRAINER_MODULE})"
        requires-python = ">=3.9"
        dependencies = ["tf-keras~={tensorflow}.0", "tensorflow-hub>=0.16"]

        [tool.setuptools.packages.find]
        include = ["trainer", "trainer.*"]
        """)


def build_trainer_sdist(dest_dir: Path, tensorflow: str, source: Path | None = None) -> Path:
    """Build ``tpuctl-trainer-<version>.tar.gz`` of ``trainer/`` into ``dest_dir``; no network needed.

    Uses setuptools' PEP 517 backend in a subprocess (the ops interpreter), on a copy of trainer/
    without caches, so the checkout is never written to.
    """
    source = source or REPO_ROOT / "trainer"
    if not (source / "task.py").is_file():
        raise UserError(f"{source} has no task.py: the trainer package is missing from this checkout")
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tpuctl-sdist-") as tmp:
        root = Path(tmp)
        shutil.copytree(source, root / "trainer",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
        (root / "pyproject.toml").write_text(_pyproject(tensorflow))
        code = (
            "import sys; from setuptools import build_meta; "
            "print(build_meta.build_sdist(sys.argv[1]))"
        )
        proc = subprocess.run([sys.executable, "-c", code, str(root / "dist")], cwd=root,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            detail = (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
            raise UserError(f"building the trainer package failed: {detail}")
        name = proc.stdout.strip().splitlines()[-1]
        target = dest_dir / name
        shutil.copy2(root / "dist" / name, target)
    return target


def sdist_filename() -> str:
    """File name setuptools gives the trainer sdist (known before building, for --dry-run)."""
    return f"{SDIST_NAME}-{__version__}.tar.gz"
