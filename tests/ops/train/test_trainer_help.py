"""`tpuctl train -- --help` shows the trainer's flags and starts no run (before: an empty run that reported
"training finished" and left a runs/<timestamp> folder)."""

from __future__ import annotations

import pytest

from clifixtures import invoke


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_trainer_help_is_shown_and_nothing_is_created(flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["tpuctl", "train", "--", flag])   # train reads sys.argv for the `--`
    result = invoke(["train", "--", flag], env={"TPUCTL_CACHE_DIR": str(tmp_path / "cache")})
    assert result.exit_code == 0, result.output
    assert "usage: python -m trainer.task" in result.stdout and "--early_stopping_patience" in result.stdout
    assert "training finished" not in result.output and "run summary" not in result.output
    assert list(tmp_path.iterdir()) == []     # no runs/<timestamp>, no demo data, no launch record
