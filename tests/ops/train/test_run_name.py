"""`tpuctl train --name NAME` (issue 28): a local run's folder is runs/NAME; a taken or unsafe name is one line."""

from __future__ import annotations

import pytest

from tpuctl.ground.errors import UserError
from tpuctl.services.training import TrainOptions, plan_local

from clifixtures import invoke


def test_a_named_local_run_claims_runs_name_and_a_second_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    plan = plan_local(TrainOptions(data_dir=str(data), name="digits-lr0.01"))
    assert plan.model_dir == str(tmp_path / "runs" / "digits-lr0.01") and plan.claimed
    assert (tmp_path / "runs" / "digits-lr0.01").is_dir()
    with pytest.raises(UserError, match=r"run 'digits-lr0.01' exists .*pick another --name, or continue that run "
                                        r"with --model-dir"):
        plan_local(TrainOptions(data_dir=str(data), name="digits-lr0.01"))


@pytest.mark.parametrize("args, fragment", [
    (["--name", "../up"], "--name '../up': use 1-63 letters"),
    (["--name", "a/b"], "--name 'a/b': use 1-63 letters"),
    (["--name", "x" * 64], "use 1-63 letters"),
    (["--name", "ok", "--model-dir", "m"], "give --name or --model-dir, not both"),
    (["--name", "ok", "--target", "vertex", "--dry-run"], "--name only applies to --target local"),
])
def test_bad_names_are_one_line_and_create_nothing(args, fragment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    r = invoke(["train", "--data-dir", str(tmp_path / "data"), *args])
    assert r.exit_code == 2 and fragment in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "m").exists()
