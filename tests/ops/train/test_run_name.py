"""`tpuctl train --name NAME` (issue 28): a local run's folder is runs/NAME; a taken or unsafe name is one line."""

from __future__ import annotations

import pytest

from ground.errors import UserError

from clifixtures import invoke
from runfixtures import planned


def test_a_named_run_is_its_folder_continued_until_it_finished(tmp_path, monkeypatch):
    """--name NAME is runs/NAME on every target: made by the first run, continued (its backup) by the same command
    after an interruption, refused once the trainer's result.json says the run finished (training again there
    would start over at epoch 1 over its checkpoints)."""
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    first = planned(data_dir=str(data), name="digits-lr0.01", claim=True)
    assert first.model_dir == str(tmp_path / "runs" / "digits-lr0.01") and first.claimed
    assert (tmp_path / "runs" / "digits-lr0.01").is_dir()
    (tmp_path / "runs" / "digits-lr0.01" / "checkpoints").mkdir()
    again = planned(data_dir=str(data), name="digits-lr0.01", claim=True)
    assert again.model_dir == first.model_dir and not again.claimed     # continued, and never removed by it
    (tmp_path / "runs" / "digits-lr0.01" / "result.json").write_text("{}")
    with pytest.raises(UserError, match="holds a finished run"):
        planned(data_dir=str(data), name="digits-lr0.01", claim=True)
    with pytest.raises(UserError, match="holds a finished run"):
        planned(data_dir=str(data), model_dir=first.model_dir, claim=True)


@pytest.mark.parametrize("args, fragment", [
    (["--name", "../up"], "--name '../up': use 1-63 letters"),
    (["--name", "a/b"], "--name 'a/b': use 1-63 letters"),
    (["--name", "x" * 64], "use 1-63 letters"),
    (["--name", "ok", "--model-dir", "m"], "give --name or --model-dir, not both"),
    (["--name", "Bad_Name", "--target", "vertex", "--dry-run"], "--name 'Bad_Name': on vertex use 1-63 lowercase"),
])
def test_bad_names_are_one_line_and_create_nothing(args, fragment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    r = invoke(["train", "--data-dir", str(tmp_path / "data"), *args])
    assert r.exit_code == 2 and fragment in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "m").exists()
