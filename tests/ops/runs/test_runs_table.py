"""`tpuctl runs ls` readable at 80 columns (issue 28): a run name is never broken over lines (columns are dropped
instead, and the line under the table says which), --json keeps everything; local tune trials are runs
(`tune-…/trial-<n>`), listed and showable."""

from __future__ import annotations

import json
import re
from pathlib import Path

from clifixtures import invoke, shown_rows


def _run(folder: Path, accuracy: float, **launch) -> None:
    (folder / "logs").mkdir(parents=True)     # no event files: `runs show` has no curves to read
    (folder / "result.json").write_text(json.dumps({
        "export_dir": str(folder / "export" / "small_cnn" / "1"), "val_accuracy": accuracy, "epochs": 2,
        "model": "small_cnn", "strategy": "default", "num_workers": 1}))
    if launch:
        (folder / "tpuctl-run.json").write_text(json.dumps(launch))


def _runs_folder(tmp_path: Path) -> Path:
    base = tmp_path / "runs"
    _run(base / "20261124-101500-flowers-resnet50", 0.91,
         target="local", accelerator="gpu-t4x2", workers=1, started=1.79e9, finished=1.79e9 + 75,
         args=["--data_dir", "/data/flowers-tfrecords", "--model_dir", "x"])
    _run(base / "tune-20261124-120000" / "trial-1", 0.5)
    _run(base / "tune-20261124-120000" / "trial-2", 0.75)
    return base


def test_runs_ls_at_80_columns_never_breaks_a_run_name(tmp_path, monkeypatch):
    base = _runs_folder(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    r = invoke(["runs", "ls", "--dir", str(base)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), r.stdout
    for name in ("20261124-101500-flowers-resnet50", "tune-20261124-120000/trial-1",
                 "tune-20261124-120000/trial-2"):
        assert any(re.search(rf"│ {re.escape(name)}\s+│", line) for line in lines), (name, r.stdout)
    assert "…" not in r.stdout
    [hidden] = [line for line in lines if "hidden" in line]      # the width, the columns left out
    assert "80 columns" in hidden and "date, target, model, accelerator, time, export" in hidden, hidden
    wide = invoke(["runs", "ls", "--dir", str(base)], env={"COLUMNS": "400"})
    assert "hidden at" not in wide.stdout and "export" in wide.stdout and "gpu-t4x2" in wide.stdout


def test_tune_trials_are_listed_and_showable(tmp_path):
    base = _runs_folder(tmp_path)
    listed = json.loads(invoke(["runs", "ls", "--dir", str(base), "--json"]).stdout)
    names = {row["run"] if "run" in row else row["name"] for row in listed}
    assert {"tune-20261124-120000/trial-1", "tune-20261124-120000/trial-2"} <= names
    r = invoke(["runs", "show", "tune-20261124-120000/trial-2", "--dir", str(base)])
    assert r.exit_code == 0, r.output
    assert "val_accuracy  0.7500" in r.stdout


def test_the_data_folder_is_a_column_so_a_digits_run_and_a_flowers_run_differ(tmp_path, monkeypatch):
    base = _runs_folder(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    r = invoke(["runs", "ls", "--dir", str(base)])
    assert re.search(r"│ 20261124-101500-flowers-resnet50\s+│ flowers-tfrecords\s+│", r.stdout), r.stdout
    rows = json.loads(invoke(["runs", "ls", "--dir", str(base), "--json"]).stdout)
    assert {row["run"]: row["data"] for row in rows}["20261124-101500-flowers-resnet50"] == \
        "flowers-tfrecords"


def test_an_empty_default_folder_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke(["runs", "ls"])
    assert r.exit_code == 0
    [line] = r.stdout.splitlines()     # the folder read, what writes there, the flag reading another
    assert f"{tmp_path / 'runs'} " in line and "tpuctl train" in line and "--dir DIR" in line, line


def test_an_interrupted_run_is_listed_as_interrupted(tmp_path, monkeypatch):
    """Ctrl-C during `tpuctl train` after the trainer wrote a checkpoint: the run is listed as interrupted (it was
    hidden: no result.json); a run stopped before writing anything leaves no folder and no row."""
    from tpuctl.services.runs import local as training

    def interrupted_after_a_checkpoint(args, **_kw):
        model_dir = Path(args[args.index("--model_dir") + 1])
        (model_dir / "checkpoints").mkdir(parents=True)
        (model_dir / "checkpoints" / "ckpt-1.index").write_text("x")
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    monkeypatch.setattr(training, "run_local", interrupted_after_a_checkpoint)
    r = invoke(["train", "--data-dir", str(tmp_path / "data"), "--name", "stopped", "-w", "2"])
    assert r.exit_code == 130 and "interrupted" in r.stderr
    rows = json.loads(invoke(["runs", "ls", "--json"]).stdout)
    assert [(row["run"], row["state"], row["data"]) for row in rows] == [("stopped", "interrupted", "data")]
    # what its record says (issue 57: the listing showed no model and no workers for an interrupted run): the model
    # the trainer was asked for (none given: its default) and the workers
    assert (rows[0]["model"], rows[0]["workers"]) == ("small_cnn", 2), rows
    listed = invoke(["runs", "ls"], env={"COLUMNS": "120"}).stdout
    assert re.search(r"│ stopped\s+│.*│ small_cnn\s+│.*│ interrupted\s+│", listed), listed
    show = invoke(["runs", "show", "stopped"])         # no logs yet: no curves, and no error (it was exit 2)
    assert show.exit_code == 0, show.output
    shown = shown_rows(show.stdout)
    assert (shown["model"], shown["workers"], shown["state"]) == ("small_cnn", "2", "interrupted"), shown

    def interrupted_at_once(args, **_kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(training, "run_local", interrupted_at_once)
    assert invoke(["train", "--data-dir", str(tmp_path / "data"), "--name", "nothing"]).exit_code == 130
    assert not (tmp_path / "runs" / "nothing").exists()


def test_a_curve_that_diverged_is_drawn_with_its_nan_and_inf_points_marked():
    """A loss that went to NaN or infinity (issue 43's hostile trial: `runs show` ended in a traceback)."""
    from tpuctl.commands.runs import sparkline

    line = sparkline([1.0, 0.5, float("nan"), float("inf"), 0.25])
    assert len(line) == 5 and line[2] == line[3] == "×" and line[0] == "█" and line[4] == "▁", line
    assert sparkline([float("nan")] * 3) == "×××" and sparkline([]) == ""
