"""`tpuctl --help` stays fast: no TensorFlow, Pulumi provider or Vertex AI client is imported for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("tensorflow", "pulumi_gcp", "google.cloud.aiplatform", "google.cloud.aiplatform_v1", "google.cloud.storage")

PROBE = """
import json, sys
from tpuctl.cli import app
try:
    app(args=sys.argv[1:], prog_name="tpuctl")
except SystemExit:
    pass
print("MODULES=" + json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("args", [["--help"], ["train", "--help"], ["data", "--help"], ["data", "make-tfrecords", "--help"]])
def test_help_does_not_import_heavy_modules(args):
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES="))
    modules = set(json.loads(line[len("MODULES="):]))
    assert "tpuctl.cli" in modules  # the probe really loaded the CLI
    loaded = sorted(m for m in modules for heavy in HEAVY if m == heavy or m.startswith(heavy + "."))
    assert loaded == [], f"`tpuctl {' '.join(args)}` imported {loaded[:5]}"
