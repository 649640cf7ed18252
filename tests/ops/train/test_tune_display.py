"""`tpuctl tune --target local` is as clean as `train` (issue 28): one line per trial and the ranking table; none
of TensorFlow's start-up notices, the protocol lines (progress:, epoch-start:, tpuctl-result:) or Keras' lines;
`-v` shows the trainer's output as printed. The trainer is fake_trainer.py in its "chatty" mode (real noise)."""

from __future__ import annotations


def _tune(tools, env, tmp_path, *extra):
    return tools.run_cli(["tune", "--target", "local", "--trials", "2", "--seed", "1", "--model-dir",
                          str(tmp_path / "tune"), *extra], env=dict(env, FAKE_MODE="chatty"), cwd=tmp_path, timeout=120)


def test_local_tuning_shows_one_line_per_trial_and_the_ranking(fake_trainer, tools, tmp_path):
    proc = _tune(tools, fake_trainer, tmp_path)
    assert proc.returncode == 0, proc.stderr
    trial_lines = [line for line in proc.stderr.splitlines() if line.startswith("trial ")]
    assert [line.split(":")[0] for line in trial_lines] == ["trial 1/2", "trial 2/2"]
    assert "started trainer" not in proc.stderr     # a trial shows its one line, not a line per process
    screen = proc.stdout + proc.stderr
    for noise in ("cuInit", "oneDNN", "Could not find cuda", "progress:", "epoch-start:", "epoch-end:",
                  "tpuctl-result:", "Epoch 1/2", "3/3 - 1s", "training: model="):
        assert noise not in screen, noise
    assert "a real problem the user must see" in proc.stderr      # a real TensorFlow error is still shown
    assert "local tuning: " in proc.stdout and "SUCCEEDED" in proc.stdout and "best trial:" in proc.stdout
    assert len(screen.splitlines()) <= 25, screen


def test_local_tuning_verbose_shows_the_raw_output(fake_trainer, tools, tmp_path):
    proc = _tune(tools, fake_trainer, tmp_path, "-v")
    assert proc.returncode == 0, proc.stderr
    screen = proc.stdout + proc.stderr
    assert "failed call to cuInit" in screen and "progress: 3/3" in screen and "Epoch 2/2" in screen


def test_verbose_is_refused_for_a_vertex_tuning_job():
    from clifixtures import error_line, invoke

    line = error_line(invoke(["tune", "--target", "vertex", "-v", "--dry-run"]), 2, alone=True)
    assert "--verbose" in line and "--target local" in line and "console" in line, line


def test_trials_get_a_launch_record_so_runs_ls_shows_their_data_folder(fake_trainer, tools, tmp_path):
    import json

    proc = _tune(tools, fake_trainer, tmp_path)
    assert proc.returncode == 0, proc.stderr
    listed = tools.run_cli(["runs", "ls", "--dir", str(tmp_path / "tune" / ".."), "--json"], cwd=tmp_path)
    rows = {row["run"]: row for row in json.loads(listed.stdout)}
    assert rows["tune/trial-1"]["data"] and rows["tune/trial-1"]["accelerator"] == "auto", rows
