"""`tpuctl data` plumbing with a stand-in for the trainer tools: flags passed through, progress lines drive the
bar, the summary table, a failing tool's error line. (test_data_commands.py runs the real tools.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from clifixtures import error_line

FAKE = Path(__file__).resolve().parents[1] / "train" / "fake_trainer.py"


@pytest.fixture
def fake_env(tmp_path):
    wrapper = tmp_path / "fake-python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    wrapper.chmod(0o755)
    return {"TPUCTL_TRAINER_PYTHON": str(wrapper), "FAKE_LOG_DIR": str(tmp_path / "log")}


@pytest.fixture
def src(tmp_path):
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "b").mkdir()
    return tmp_path / "src"


def test_flags_progress_and_summary_table(cli, fake_env, src, tmp_path):
    proc = cli(["data", "make-tfrecords", str(src), str(tmp_path / "out"), "--shard-mb", "0.5",
                "--validation-fraction", "0.25", "--max-side", "512"], env=fake_env)
    assert proc.returncode == 0, proc.stderr
    args = json.loads((Path(fake_env["FAKE_LOG_DIR"]) / "make_tfrecords.json").read_text())["args"]
    assert args == [str(src), str(tmp_path / "out"), "--shard-mb", "0.5", "--validation-fraction", "0.25",
                    "--max-side", "512"]
    assert "converting images" in proc.stderr and "3/3" in proc.stderr
    assert f"written to: {tmp_path / 'out'}" in proc.stdout
    for text in ("train examples", "validation examples", "2: a, b", "skipped files"):
        assert text in proc.stdout, text
    # each skipped file with the tool's reason for it (old: "unreadable image" for all)
    assert f"skipped: {src / 'b' / 'bad.jpg'}: truncated after 9 bytes (no end-of-image marker)" in proc.stdout
    assert f"skipped: {src / 'b' / '[red]x.jpg'}: not an image: a text file" in proc.stdout   # no rich markup


def test_tool_error_becomes_one_line_with_its_exit_code(cli, fake_env, src, tmp_path):
    proc = cli(["data", "make-tfrecords", str(src), str(tmp_path / "out")], env={**fake_env, "FAKE_MODE": "fail"})
    line = error_line(proc, 2, alone=True)     # the tool, its exit status, then its own words (fake_trainer.py)
    assert "trainer.make_tfrecords" in line and "(exit 2)" in line and line.endswith(f"no images found under {src}")
