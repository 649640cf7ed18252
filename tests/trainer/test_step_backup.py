"""--backup_every_steps: a run killed (SIGKILL) in the middle of an epoch resumes within N steps of where it
stopped, with the step counter restored (no step counted twice) and the best epoch kept for --export best."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

STEPS = 40  # per epoch: a progress line after every step (progress_every(40) == 1)
EVERY = 5


def _accuracies(lines):
    return {int(l.split()[1].split("/")[0]): float(l.split(" val_accuracy=")[1].split()[0])
            for l in lines if l.startswith("epoch-end:")}


def _iterations(checkpoint) -> int:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(checkpoint))
    [key] = [k for k in reader.get_variable_to_shape_map() if k.startswith(("optimizer/iter/", "optimizer/_iterations/"))]
    return int(reader.get_tensor(key))


def test_a_run_killed_mid_epoch_resumes_within_backup_every_steps(tools, demo_data, tmp_path):
    model_dir = tmp_path / "model"
    flags = tools.fast_flags(demo_data, model_dir, "--train_epochs", "3", "--steps_per_epoch", str(STEPS),
                             "--backup_every_steps", str(EVERY))
    proc = subprocess.Popen([sys.executable, "-m", "trainer.task", *flags], cwd=tools.REPO, env=tools.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    killed_lines = []
    try:
        for line in proc.stdout:
            killed_lines.append(line.strip())
            if line.startswith("progress: 17/") and "epoch-start: 2/3" in killed_lines:
                os.kill(proc.pid, signal.SIGKILL)   # a preemption: no handler, no cleanup
                break
        killed_lines += [l.strip() for l in proc.stdout]
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, killed_lines[-5:]
    in_epoch_2 = killed_lines[killed_lines.index("epoch-start: 2/3"):]
    stopped = max(int(l.split()[1].split("/")[0]) for l in in_epoch_2 if l.startswith("progress:"))
    assert stopped >= 17 and not (model_dir / "result.json").exists()

    resumed = tools.run_module(["trainer.task", *flags])
    result = resumed.result
    lines = resumed.stdout_lines
    # Epoch 1 is not redone; epoch 2 resumes after the last backed-up step, not at its first step.
    assert [l for l in lines if l.startswith("epoch-start:")] == ["epoch-start: 2/3", "epoch-start: 3/3"]
    first = int(next(l for l in lines if l.startswith("progress:")).split()[1].split("/")[0])
    restored = first - 1
    assert restored % EVERY == 0 and stopped - EVERY < restored <= stopped + EVERY, (stopped, first)
    # Every step counted once: epoch 2's end checkpoint holds the optimizer's step counter at 2 epochs.
    assert _iterations(model_dir / "checkpoints" / "ckpt-0002") == 2 * STEPS
    assert _iterations(model_dir / "checkpoints" / "ckpt-0003") == 3 * STEPS
    # --export best over the resume: epoch 1 was judged before the kill (the backup carries it).
    seen = {**_accuracies(killed_lines), **_accuracies(lines)}
    assert sorted(seen) == [1, 2, 3]
    best = max(seen, key=seen.get)
    assert result["best_epoch"] == result["exported_epoch"] == best
    assert abs(result["best_val_accuracy"] - seen[best]) < 1e-4
    assert not list((model_dir / "checkpoints" / "backup").rglob("*.index"))
