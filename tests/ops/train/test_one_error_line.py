"""One error, one line (issue 57): every process of a local cluster fails on the same bad input with the same
`error: …` line (a plug-in model that raises, a TPU that is not there); the screen showed it once per process."""

from __future__ import annotations


def test_the_same_error_from_every_worker_is_shown_once(fake_trainer, tools, tmp_path):
    env = dict(fake_trainer, FAKE_MODE="fail")          # chief and worker 0 both print the same error and exit 3
    proc = tools.run_cli(["train", "--workers", "2", "--model-dir", str(tmp_path / "m")], env=env, cwd=tmp_path,
                         timeout=60)
    assert proc.returncode == 3
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr
    assert errors[0].endswith("] error: --distribution_strategy tpu: no TPU found (fake)"), errors


def test_an_error_line_that_holds_brackets_is_not_said_again(fake_trainer, tools, tmp_path):
    """Issue 56 (a fresh trial): TensorFlow's messages end "[Op:ReduceDataset] name:"; the "] " in them was taken for
    the end of a process label, and the trainer's line was repeated in a second one ("trainer (pid N) exited …")."""
    env = dict(fake_trainer, FAKE_MODE="fail",
               FAKE_ERROR="data.py: reading the train split failed: expected 10 elements [Op:ReduceDataset] name:")
    proc = tools.run_cli(["train", "--model-dir", str(tmp_path / "m")], env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 3
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert errors == ["error: data.py: reading the train split failed: expected 10 elements [Op:ReduceDataset] name:"], \
        proc.stderr
