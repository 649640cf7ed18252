"""A run killed after an epoch's backup resumes from BackupAndRestore at the interrupted epoch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def test_killed_run_resumes_at_the_interrupted_epoch_and_a_killed_rerun_keeps_its_result(tools, demo_data, tmp_path):
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

    # A re-run over the finished run's folder, killed mid-training: the finished run's result.json and export are
    # untouched (before, the re-run deleted result.json at its start and the run vanished from `runs ls`).
    before = (model_dir / "result.json").read_text()
    rerun = tools.run_module(["trainer.task", *flags], env={"TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH": "1"})
    assert rerun.returncode == 75, rerun.stderr[-2000:]
    assert [l for l in rerun.stdout_lines if l.startswith("epoch-start:")] == ["epoch-start: 1/3"]
    assert (model_dir / "result.json").read_text() == before
    assert sorted(p.name for p in (model_dir / "export" / "small_cnn").iterdir()) == ["1"]


def _variables(path) -> dict:
    """Checkpoint (or SavedModel variables) values keyed by their object path below the model."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(path))
    out = {}
    for key in reader.get_variable_to_shape_map():
        if "layer_with_weights" in key and "/.OPTIMIZER_SLOT/" not in key and key.endswith("VARIABLE_VALUE"):
            out[key[key.index("layer_with_weights"):]] = reader.get_tensor(key)
    return out


def test_the_best_epoch_survives_a_preemption_and_is_exported(tools, demo_data, tmp_path):
    """Killed after epoch 2, resumed: the best epoch (1 or 2) comes from the backup, not from this process's
    history, and its weights (ckpt-000<best>) are what is exported, not the last epoch's."""
    import numpy as np

    model_dir = tmp_path / "model"
    flags = tools.fast_flags(demo_data, model_dir, "--train_epochs", "4", "--steps_per_epoch", "30",
                             "--warmup_epochs", "0")
    killed = tools.run_module(["trainer.task", *flags], env={"TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH": "2"})
    assert killed.returncode == 75, killed.stderr[-2000:]

    def accuracies(run):
        return {int(l.split()[1].split("/")[0]): float(l.split(" val_accuracy=")[1].split()[0])
                for l in run.stdout_lines if l.startswith("epoch-end:")}

    before = accuracies(killed)
    # The resumed epochs are made to diverge (a learning rate of 9.9; the cosine schedule is not part of the
    # backup, the step counter is), so the best epoch is one the resumed process never ran.
    resumed = tools.run_module(["trainer.task", *flags, "--learning_rate", "9.9"])
    result = resumed.result
    after = accuracies(resumed)
    assert sorted(after) == [3, 4]
    best = max(before, key=before.get)
    assert max(before.values()) > max(after.values()) + 0.2, (before, after)   # clearly, not by chance
    assert result["exported_epoch"] == result["best_epoch"] == best
    assert result["val_accuracy"] == result["best_val_accuracy"]
    assert abs(result["val_accuracy"] - before[best]) < 1e-4
    assert abs(result["last_val_accuracy"] - after[4]) < 1e-4 and result["epochs"] == 4
    exported = _variables(model_dir / "export" / "small_cnn" / "1" / "variables" / "variables")
    chosen = _variables(model_dir / "checkpoints" / f"ckpt-{best:04d}")
    last = _variables(model_dir / "checkpoints" / "ckpt-0004")
    assert exported and exported.keys() == chosen.keys()
    assert all(np.array_equal(exported[k], chosen[k]) for k in chosen)
    assert not all(np.array_equal(exported[k], last[k]) for k in last)


def test_a_second_trainer_on_a_claimed_model_dir_refuses_in_one_line(tools, demo_data, tmp_path):
    """Two trainers on one --model_dir: the second is refused at once (before, both trained on the same backup
    and both reported success); nothing of the first run's is touched."""
    from trainer.task import claim_model_dir

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "result.json").write_text('{"first": true}\n')
    with claim_model_dir(str(model_dir)):      # the first run, training
        second = tools.run_module(["trainer.task", *tools.fast_flags(demo_data, model_dir)])
    assert second.returncode == 2, second.stderr[-2000:]
    line = second.error_line()
    assert str(model_dir) in line and "another training run" in line, line
    assert (model_dir / "result.json").read_text() == '{"first": true}\n'
    assert not (model_dir / "export").exists() and not (model_dir / "checkpoints").exists()
    # Released (or its process gone): the folder is free again (a new claim on it holds; a held one would raise).
    with claim_model_dir(str(model_dir)):
        pass


def test_a_model_dir_on_a_file_system_without_locks_still_trains(tmp_path, monkeypatch):
    """flock can fail with ENOLCK/EOPNOTSUPP (gcsfuse, some network mounts): the run goes on unclaimed."""
    import errno
    import fcntl

    from trainer.task import claim_model_dir

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with claim_model_dir(str(tmp_path)):
        pass


@pytest.mark.parametrize("damage", ["another-model", "cut-short"])
def test_a_backup_another_model_wrote_or_cut_short_is_one_line(in_process, demo_data, tmp_path, damage):
    """Issue 56 (round 4's leftover): a preemption backup in --model_dir that another model wrote (another --model, other
    classes) or that is cut short was a traceback after a page of TensorFlow's warnings; now one line naming the backup
    folder and what to do, exit 2. The backup is written as tf_keras' BackupAndRestore writes it (its model and its
    two counters, through a CheckpointManager)."""
    import tensorflow as tf
    import tf_keras as keras

    from trainer import models

    backup = tmp_path / "m" / "checkpoints" / "backup" / "chief"
    model = (keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(), keras.layers.Dense(10)])
             if damage == "another-model" else models.small_cnn((32, 32), 10))
    state = tf.train.Checkpoint(model=model, ckpt_saved_epoch=tf.Variable(0, dtype=tf.int64),
                                ckpt_saved_batch=tf.Variable(2, dtype=tf.int64))
    path = tf.train.CheckpointManager(state, str(backup), max_to_keep=1).save()
    if damage == "cut-short":
        data = Path(f"{path}.data-00000-of-00001")
        data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
    run = in_process(["trainer.task", "--data_dir", str(demo_data), "--model_dir", str(tmp_path / "m"),
                      "--train_epochs", "2", "--steps_per_epoch", "5"])
    assert run.returncode == 2, run.stderr[-3000:]
    line = run.error_line()
    assert "Traceback" not in run.stderr and "WARNING" not in run.stderr, run.stderr[-3000:]
    assert f"preemption backup in {backup}" in line and "remove that folder" in line, line
    assert not (tmp_path / "m" / "result.json").exists()


@pytest.mark.parametrize("where, damage", [
    ("checkpoints/backup/chief/checkpoint", "fifo"),
    ("checkpoints/backup/chief/ckpt-1.index", "fifo"),
    ("checkpoints/first-step", "fifo"),
    ("checkpoints/backup/chief/checkpoint", "garbage"),
    ("checkpoints/ckpt-0001.index", "random"),      # a trial: "not an sstable" traceback when --export best read it
    ("checkpoints/checkpoint", "folder"),           # a trial: "Is a directory" traceback at the first checkpoint
    ("checkpoints/backup/chief/checkpoint", "elsewhere"),   # a sixth trial: resumed from files outside the run
    ("checkpoints/backup/chief/checkpoint", "up-and-out"),
])
def test_a_run_folder_whose_checkpoints_cannot_be_read_back_is_one_line(in_process, demo_data, tmp_path, where,
                                                                         damage):
    """Issue 56 (a fresh trial): a FIFO among a run's checkpoints hung its resume for good, and a damaged checkpoint
    state file was a warning after which the backup was dropped and the run trained again from epoch 1; an epoch's
    checkpoint index of random bytes, and a folder where TensorFlow keeps its state file, were tracebacks (after
    training, or at its first checkpoint). Now one line naming the file and what to do, exit 2, before anything
    trains (the files' shape is looked at before TensorFlow reads them); nothing else in the folder is touched."""
    path = tmp_path / "m" / where
    path.parent.mkdir(parents=True)
    if damage == "fifo":
        os.mkfifo(path)
    elif damage == "folder":
        path.mkdir()
    elif damage == "random":
        path.write_bytes(os.urandom(100))
    elif damage in ("elsewhere", "up-and-out"):
        named = str(tmp_path / "outside" / "ckpt-1") if damage == "elsewhere" else "../../../../outside/ckpt-1"
        path.write_text(f'model_checkpoint_path: "{named}"\nall_model_checkpoint_paths: "{named}"\n')
    else:
        path.write_text("garbage {{{\n")
    run = in_process(["trainer.task", "--data_dir", str(demo_data), "--model_dir", str(tmp_path / "m"),
                      "--train_epochs", "1", "--steps_per_epoch", "2"])
    assert run.returncode == 2, run.stderr[-3000:]
    line = run.error_line()
    assert str(path) in line and "remove " in line, line
    assert ("outside its folder" in line) is (damage in ("elsewhere", "up-and-out")), line
    assert ("not a regular file" in line) is (damage == "fifo") and "Traceback" not in run.stderr, line
    assert not (tmp_path / "m" / "result.json").exists() and not (tmp_path / "m" / "export").exists()
