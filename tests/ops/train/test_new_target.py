"""A run target is one module and one line in the registry (issue 54): a stand-in target nobody in tpuctl knows
(``standin_target.py``) is added to ``targets.REGISTRY`` and nothing else; the real CLI then offers it as a
``--target`` with its own flag (refused for the other targets, in the same one line), plans it through the one
planner, prints its request with ``--dry-run``, and runs and follows it to its result."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tpuctl.services.runs import targets

from clifixtures import error_line, invoke


@pytest.fixture
def stand_in(monkeypatch):
    spec = importlib.util.spec_from_file_location("standin_target", Path(__file__).with_name("standin_target.py"))
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "standin_target", module)
    spec.loader.exec_module(module)
    monkeypatch.setitem(targets.REGISTRY["train"], "stand-in", module.StandInTarget)    # the one registry line
    return module


def test_a_new_target_is_one_module_and_one_registry_line(stand_in, fake_trainer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dry = invoke(["train", "--target", "stand-in", "--greeting", "hi there", "--name", "s1", "--epochs", "2",
                  "--dry-run"], env=fake_trainer)
    assert dry.exit_code == 0, dry.output
    request = json.loads(dry.stdout)
    assert request["target"] == "stand-in" and request["greeting"] == "hi there"
    assert request["command"][3:] == ["--distribution_strategy", "auto", "--data_dir", request["command"][6],
                                      "--model_dir", str(tmp_path / "runs" / "s1"), "--train_epochs", "2"]
    assert "stand-in says hi there" in dry.stderr
    assert not (tmp_path / "runs" / "s1").exists()          # a dry run claims nothing

    # its flag belongs to it: the other targets refuse it in the same one line
    line = error_line(invoke(["train", "--greeting", "hi", "--dry-run"]), 2, alone=True)
    assert line.startswith("error: --greeting ") and "--target stand-in" in line, line
    assert "stand-in" in invoke(["train", "--help"], env={"COLUMNS": "200"}).stdout

    run = invoke(["train", "--target", "stand-in", "--name", "s1", "--epochs", "1"], env=fake_trainer)
    assert run.exit_code == 0, run.output
    assert "SavedModel:" in run.stdout and "run summary" in run.stderr
    called = json.loads((Path(fake_trainer["FAKE_LOG_DIR"]) / "chief-0.json").read_text())
    assert called["args"][called["args"].index("--model_dir") + 1] == str(tmp_path / "runs" / "s1")
