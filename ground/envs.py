"""Where things are: the repository, the two environments, the local cache."""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: Repository root (tpuctl is installed editable into .venv, so this is the checkout).
REPO_ROOT = Path(__file__).resolve().parents[1]
#: The packages of the ops environment, from the top layer down (pyproject.toml's import contracts); ``trainer`` ships
#: apart, in its own environment.
OPS_PACKAGES = ("tpuctl", "bootstrap", "infra", "policy", "cloud", "ground")


def ops_python() -> Path:
    """Interpreter of the ops environment: $TPUCTL_OPS_PYTHON, else the one running now (ops code runs in it)."""
    configured = os.environ.get("TPUCTL_OPS_PYTHON")
    return Path(configured) if configured else Path(sys.executable)


def trainer_python() -> Path:
    """Interpreter of the trainer environment: $TPUCTL_TRAINER_PYTHON, else <repo>/.venv-trainer."""
    configured = os.environ.get("TPUCTL_TRAINER_PYTHON")
    return Path(configured) if configured else REPO_ROOT / ".venv-trainer" / "bin" / "python"


def trainer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a trainer process: the source tree on PYTHONPATH, tf_keras selected."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TF_USE_LEGACY_KERAS", "1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if extra:
        env.update(extra)
    return env


def cache_dir() -> Path:
    """Local cache (demo dataset, fetched hub models): $TPUCTL_CACHE_DIR, else ~/.cache/tpuctl."""
    configured = os.environ.get("TPUCTL_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tpuctl"
