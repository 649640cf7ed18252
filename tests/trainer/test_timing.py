"""The run's timing in result.json (trainer/timing.py): when its first step ended, its steady step time and
examples/s, the steps trained; a run resumed from its backup keeps the first process's first step and records each
resume."""

from __future__ import annotations

import json
import time


def test_a_resumed_run_keeps_its_first_processes_first_step_and_records_each_resume(tools, demo_data, tmp_path):
    """Killed after epoch 2, resumed and killed after epoch 3, resumed again: the first step stays the first process's,
    and each resume is recorded (the steps its backup held, when the backup was written, when training went on)."""
    flags = tools.fast_flags(demo_data, tmp_path / "m", "--train_epochs", "4")
    backup = tmp_path / "m" / "checkpoints" / "backup" / "chief"
    killed = tools.run_module(["trainer.task", *flags], env={"TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH": "2"})
    assert killed.returncode == 75, killed.stderr[-2000:]
    first = float((tmp_path / "m" / "checkpoints" / "first-step").read_text())
    backed_up = [p.stat().st_mtime for p in backup.glob("*.index")]
    killed = tools.run_module(["trainer.task", *flags], env={"TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH": "3"})
    assert killed.returncode == 75, killed.stderr[-2000:]
    backed_up += [p.stat().st_mtime for p in backup.glob("*.index")]
    resumed = tools.run_module(["trainer.task", *flags]).result["timing"]
    assert resumed["first_step_at"] == round(first, 3) < resumed["process_first_step_at"]
    assert resumed["steps"] == 5 and resumed["total_steps"] == 20      # epochs 1-3 came from the backup
    one, two = resumed["resumes"]
    assert (one["from_step"], two["from_step"]) == (10, 15)
    for event, written in zip((one, two), backed_up):
        assert event["backup_at"] == round(written, 3) < event["resumed_at"]
        assert event["seconds_lost"] == round(event["resumed_at"] - event["backup_at"], 1)
    assert one["resumed_at"] < two["backup_at"] and two["resumed_at"] == resumed["process_first_step_at"]
    # A second run in the finished folder restores nothing: its first step is its own, it has no resume, and its
    # steady step time is measured between steps (4 intervals an epoch of 5 steps), never zero.
    before = time.time()
    again = tools.run_module(["trainer.task", *flags, "--train_batch_size", "16"]).result["timing"]
    after = time.time()
    assert before < again["first_step_at"] == again["process_first_step_at"] < after
    assert again["first_step_at"] > resumed["process_first_step_at"]
    assert again["resumes"] == [] and not (tmp_path / "m" / "checkpoints" / "resumes.json").exists()
    assert again["steps"] == again["total_steps"] == 20
    assert 0 < again["step_seconds"] < after - before
    assert abs(again["examples_per_second"] - 16 / again["step_seconds"]) < 1e-3 * again["examples_per_second"]
    assert json.loads((tmp_path / "m" / "result.json").read_text())["timing"] == again
