"""Local tuning's trial folders (issue 27, class 3): a trial resumes a folder's backup only when the folder was made
for the same hyperparameters (else it gets a fresh one), concurrent tunes claim trial folders atomically, and a
tune whose every trial failed exits non-zero. The trainer is stood in for (``training.run_local``): what is tested
is which folder each trial gets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ground.errors import UserError
from tpuctl.services.runs import local as training
from tpuctl.services.runs.tuning import local as tuning
from tpuctl.services.runs.tuning.spec import LearningRate, Parameters, TuneSpec
from tpuctl.services.runs.tuning.vertex import resolve_job_name
from tpuctl.services.supervisor import RunOutcome, TaskFailed

from clifixtures import invoke
from runfixtures import planned

SPEC = TuneSpec(parameters=Parameters(learning_rate=LearningRate(min=1e-4, max=1e-1)),
                       max_trials=2, parallel_trials=1)


@pytest.fixture
def fake_trainer(monkeypatch, tmp_path):
    """``training.run_local`` stand-in: records each trial's args and leaves a backup in its model folder, as an
    interrupted trainer would; ``fail`` makes every trial fail."""
    calls: list[dict] = []
    state = {"fail": False}

    def run_local(args, **_kw):
        model_dir = Path(args[args.index("--model_dir") + 1])
        lr = next(a.split("=", 1)[1] for a in args if a.startswith("--learning_rate="))
        backup = model_dir / "checkpoints" / "backup"
        calls.append({"dir": model_dir, "lr": lr, "resumed_from": sorted(p.name for p in backup.glob("*"))})
        backup.mkdir(parents=True, exist_ok=True)
        (backup / f"trained-with-{lr}").write_text("weights")
        if state["fail"]:
            raise TaskFailed("trainer exited 1", 1)
        return RunOutcome(0, {"val_accuracy": 0.5, "export_dir": str(model_dir / "export")}, [])

    monkeypatch.setattr(training, "run_local", run_local)
    data = tmp_path / "data"
    data.mkdir()
    return calls, state, data


def _tune(data, model_dir, seed):
    return tuning.run_local_tuning(planned(data_dir=str(data), model_dir=str(model_dir), plan_as="tune"), SPEC, trials=2,
                                   seed=seed)


def test_a_backup_made_with_other_hyperparameters_is_never_resumed(fake_trainer, tmp_path):
    calls, _, data = fake_trainer
    _tune(data, tmp_path / "tune", seed=1)
    first = {c["dir"]: c["lr"] for c in calls}
    calls.clear()
    _tune(data, tmp_path / "tune", seed=2)             # other learning rates, same --model-dir
    for call in calls:
        assert call["dir"] not in first, "a trial reused a folder made for other hyperparameters"
        assert call["resumed_from"] == []
    calls.clear()
    _tune(data, tmp_path / "tune", seed=1)             # the first tune again: its trials resume their own backups
    assert {c["dir"]: c["lr"] for c in calls} == first
    assert all(c["resumed_from"] == [f"trained-with-{c['lr']}"] for c in calls)


def test_a_folder_without_a_trial_record_is_not_resumed(fake_trainer, tmp_path):
    calls, _, data = fake_trainer
    old = tmp_path / "tune" / "trial-1" / "checkpoints" / "backup"
    old.mkdir(parents=True)
    (old / "someone-elses").write_text("weights")
    _tune(data, tmp_path / "tune", seed=1)
    assert calls[0]["dir"].name == "trial-1-2" and calls[0]["resumed_from"] == []


def test_a_trial_folder_in_use_is_never_shared(tmp_path):
    record = {"hyperparameters": {"learning_rate": 0.01}, "args": []}
    held, lock, resumed = tuning.claim_trial_dir(tmp_path, 1, record)
    try:
        other, other_lock, _ = tuning.claim_trial_dir(tmp_path, 1, record)   # same hyperparameters, still in use
        other_lock.close()
        assert other != held and not resumed
    finally:
        lock.close()
    again, lock, resumed = tuning.claim_trial_dir(tmp_path, 1, record)        # free again: resumed
    lock.close()
    assert again == held and resumed


_CLAIM = """
import sys, time
from pathlib import Path
from tpuctl.services.runs.tuning.local import claim_trial_dir
folder, lock, _ = claim_trial_dir(Path(sys.argv[1]), 1, {"hyperparameters": {"learning_rate": 0.01}, "args": []})
print(folder, flush=True)
time.sleep(1.5)
"""


def test_concurrent_tunes_claim_distinct_trial_folders(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", _CLAIM, str(tmp_path)], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    folders = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(folders)) == 3, folders


def test_a_tune_whose_every_trial_failed_exits_non_zero(fake_trainer, tmp_path, monkeypatch):
    calls, state, data = fake_trainer
    state["fail"] = True
    monkeypatch.chdir(tmp_path)
    r = invoke(["tune", "--target", "local", "--data-dir", str(data), "--trials", "2"])
    assert r.exit_code == 1, r.output
    assert "every trial failed (2 of 2" in r.stderr.splitlines()[-1] and len(calls) == 2


def test_the_tuning_folder_is_claimed_atomically(tmp_path, monkeypatch):
    """Searches started in the same second get runs/tune-<timestamp>, -2, -3: each claimed by making it."""
    from tpuctl.services.runs import spec

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(spec, "timestamp", lambda: "20261124-120000")
    taken = [planned(plan_as="tune", claim=True).model_dir for _ in range(3)]
    assert [Path(t).name for t in taken] == ["tune-20261124-120000", "tune-20261124-120000-2", "tune-20261124-120000-3"]
    assert all(Path(t).is_dir() for t in taken)


def test_an_unreadable_base_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="cannot create"):
        tuning.claim_trial_dir(tmp_path / "file", 1, {})


@pytest.mark.parametrize("job, fragment", [
    ("projects/x y/locations/us-central1/hyperparameterTuningJobs/1", "project id 'x y'"),
    ("projects/p-123456/locations/EU!/hyperparameterTuningJobs/1", "region 'EU!'"),
    ("projects/p-123456/locations/us-central1/hyperparameterTuningJobs/1;x", "is a number"),
])
def test_tune_status_checks_the_job_name_before_any_credentials(job, fragment, monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    r = invoke(["tune", "status", job])
    assert r.exit_code == 2 and fragment in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_a_job_name_with_a_project_number_is_accepted():
    name = "projects/123456789012/locations/us-central1/hyperparameterTuningJobs/42"
    assert resolve_job_name(name, project=None, region=None) == name
    assert resolve_job_name("42", project="p-123456", region="us-central1") == \
        "projects/p-123456/locations/us-central1/hyperparameterTuningJobs/42"
