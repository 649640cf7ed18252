"""A run killed after an epoch's backup resumes from BackupAndRestore at the interrupted epoch."""

from __future__ import annotations

import json


def test_killed_run_resumes_at_the_interrupted_epoch(tools, demo_data, tmp_path):
    model_dir = tmp_path / "model"
    flags = tools.fast_flags(demo_data, model_dir, "--train_epochs", "3")
    # The test hook hard-exits the process (os._exit, no cleanup) right after epoch 2's backup.
    killed = tools.run_module(["trainer.task", *flags], env={"TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH": "2"})
    assert killed.returncode == 75, killed.stderr[-2000:]
    assert [l for l in killed.stdout_lines if l.startswith("epoch-start:")] == ["epoch-start: 1/3", "epoch-start: 2/3"]
    assert not (model_dir / "result.json").exists()
    assert not (model_dir / "export").exists()
    assert (model_dir / "checkpoints" / "backup" / "chief").is_dir()
    def loss(run, epoch):
        [line] = [l for l in run.stdout_lines if l.startswith(f"epoch-end: {epoch}/3")]
        return float(line.split(" loss=")[1].split()[0])

    resumed = tools.run_module(["trainer.task", *flags])
    result = resumed.result
    # Only the interrupted epoch runs: epochs 1-2 are restored, not redone.
    assert [l for l in resumed.stdout_lines if l.startswith("epoch-start:")] == ["epoch-start: 3/3"]
    assert result["epochs"] == 3
    assert json.loads((model_dir / "result.json").read_text()) == result
    assert sorted(p.name for p in (model_dir / "checkpoints").glob("ckpt-*.index")) == [
        "ckpt-0001.index", "ckpt-0002.index", "ckpt-0003.index"]
    # Restored weights, not a fresh model: epoch 3 continues below where epoch 1 started.
    assert loss(resumed, 3) < loss(killed, 1)
    # A finished run removes its backup: the next run in this folder starts from epoch 1.
    assert not list((model_dir / "checkpoints" / "backup").rglob("*.index"))
