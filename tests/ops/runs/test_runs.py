"""`tpuctl runs ls|show|compare` and `tpuctl board` on runs the real trainer produced."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request

import pytest

from ground.envs import trainer_env
from tpuctl.commands import runs as runs_cli
from tpuctl.services.runs import board
from tpuctl.services.runs import records as runs

from clifixtures import error_line, invoke, run_in_terminal, wider_than
from procfixtures import wait_for
from runfixtures import trainer_digits

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("history")
    python, data = trainer_digits(root)
    base = root / "runs"
    for name, epochs, started in (("20261101-100000", "2", 1_761_991_200), ("20261102-100000", "3", 1_762_077_600)):
        model_dir = base / name
        proc = subprocess.run([str(python), "-m", "trainer.task", "--data_dir", str(data), "--model_dir",
                               str(model_dir), "--train_epochs", epochs, "--steps_per_epoch", "4", "--seed", "1",
                               "--distribution_strategy", "cpu"], env=trainer_env(), capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.write_launch_record(str(model_dir), runs.LaunchRecord(target="local", accelerator="cpu", workers=1,
                                                                   args=["--train_epochs", epochs], started=started,
                                                                   finished=started + 75))
    (base / "not-a-run").mkdir()
    (base / "broken").mkdir()
    (base / "broken" / "result.json").write_text("{not json")
    return base


def test_ls_lists_runs_newest_first_with_their_results(two_runs):
    r = invoke(["runs", "ls", "--dir", str(two_runs), "--json"])
    assert r.exit_code == 0, r.output
    listed = json.loads(r.stdout)
    assert [row["run"] for row in listed if row["problem"]] == ["broken"]      # listed as bad; foreign left out
    rows = [row for row in listed if not row["problem"]]
    assert [row["run"] for row in rows] == ["20261102-100000", "20261101-100000"]
    for row, epochs in zip(rows, (3, 2)):
        result = json.loads((two_runs / row["run"] / "result.json").read_text())
        assert row["epochs"] == epochs and row["val_accuracy"] == result["val_accuracy"]
        assert row["export_dir"] == result["export_dir"] and row["seconds"] == 75.0
        assert (row["target"], row["accelerator"], row["model"]) == ("local", "cpu", result["model"])
    table = invoke(["runs", "ls", "--dir", str(two_runs)])
    assert table.exit_code == 0 and "2 run(s)" in table.stdout and "1m15s" in table.stdout


def test_show_prints_settings_and_a_curve_per_metric(two_runs):
    r = invoke(["runs", "show", "20261101", "--dir", str(two_runs)])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("run 20261101-100000")
    curves = {line.split()[0]: line for line in r.stdout.splitlines() if "epoch_" in line}
    assert "train/epoch_loss" in curves and "validation/epoch_accuracy" in curves
    read = runs.scalars([runs.find_run(runs.list_runs(str(two_runs)), "20261101-100000")])
    series = next(iter(read.values()))["train/epoch_loss"]
    assert [step for step, _ in series] == [1, 2]          # one point per epoch, as the trainer wrote them
    scalars = next(iter(read.values()))
    assert [step for step, _ in scalars["train/epoch_learning_rate"]] == [1, 2]
    assert all(value > 0 for _, value in scalars["train/epoch_examples_per_second"])
    assert f"{series[0][1]:.4f} -> {series[-1][1]:.4f}" in curves["train/epoch_loss"]


def test_show_fits_an_80_column_terminal_without_folding_a_word(two_runs, tmp_path):
    """Issue 57: the trainer's arguments (168 characters) and a resume's line ran past 80 columns and the terminal
    folded them mid-word; a long run's curve ran past it too. In a pseudo-terminal of 80 columns: nothing wider, each
    argument whole on a line, and a curve of 40 epochs charted within the line."""
    base = tmp_path / "runs"
    shutil.copytree(two_runs / "20261101-100000", base / "long")
    args = ["--distribution_strategy", "auto", "--data_dir", "/root/.cache/tpuctl/demo-data", "--model_dir",
            "/home/ana/src/vision-team/runs/long", "--train_epochs", "30", "--steps_per_epoch", "3", "--seed", "1"]
    runs.write_launch_record(str(base / "long"), runs.LaunchRecord(target="local", accelerator="cpu", workers=1,
                                                                   args=args, started=1_761_991_200))
    code, lines = run_in_terminal(["runs", "show", "long", "--dir", base], columns=80)
    screen = "\n".join(lines)
    assert code == 0, screen
    assert not wider_than(lines, 80), screen
    words = [w for line in lines for w in line.split()]
    assert all(arg in words for arg in args), screen
    bars = runs_cli.sparkline([float(v) for v in range(40)], 20)
    assert len(bars) == 20 and bars[0] == "▁" and bars[-1] == "█"


def test_compare_puts_two_runs_side_by_side(two_runs, tmp_path):
    r = invoke(["runs", "compare", "20261101-100000", "20261102-100000", "--dir", str(two_runs)], env={"COLUMNS": "500"})
    # Wide enough for both export paths whatever the temporary folder's path (CI's is longer than a desktop's).
    assert r.exit_code == 0, r.output
    assert "20261101-100000 vs 20261102-100000" in r.stdout
    assert "train/epoch_loss" in r.stdout and "val_accuracy" in r.stdout

    # Issue 57: in a real 80-column terminal the run names, the export paths and the longest curve tags were folded or
    # cut with "…". Runs named as users name them, their exports at the paths the trainer wrote.
    base = tmp_path / "runs"
    names = ("20261101-100000-flowers-resnet50-lr0.003", "20261102-100000-flowers-resnet50-lr0.01")
    for old, new in zip(("20261101-100000", "20261102-100000"), names):
        shutil.copytree(two_runs / old, base / new)
    code, lines = run_in_terminal(["runs", "compare", *names, "--dir", base], columns=80)
    screen = "\n".join(lines)
    assert code == 0, screen
    assert not wider_than(lines, 80) and "…" not in screen, screen
    assert all(name in screen for name in names), screen
    tags = json.loads(invoke(["runs", "ls", "--dir", str(base), "--json"]).stdout)
    exports = [row["export_dir"] for row in tags]
    assert all(any(line.strip() == export or line.endswith(f" {export}") for line in lines) for export in exports), screen
    for tag in ("train/epoch_examples_per_second", "final/training/hptuning/metric", "validation/epoch_accuracy"):
        assert re.search(rf"(^|\s){re.escape(tag)}\s", screen), (tag, screen)
    # names that fit head their columns (A and B only when they would send more values under the table)
    for old, new in zip(("20261101-100000", "20261102-100000"), ("intr", "second-run")):
        shutil.copytree(two_runs / old, base / new)
    code, lines = run_in_terminal(["runs", "compare", "intr", "second-run", "--dir", base], columns=80)
    screen = "\n".join(lines)
    assert code == 0 and "intr vs second-run" in screen and "A: intr" not in screen, screen
    assert not wider_than(lines, 80) and "…" not in screen, screen


def test_unknown_and_ambiguous_runs_are_one_line(two_runs):
    r = invoke(["runs", "show", "nope", "--dir", str(two_runs)])
    assert r.exit_code == 2 and r.stderr.startswith("error: no run 'nope'") and r.stderr.count("\n") == 1
    r = invoke(["runs", "show", "2026110", "--dir", str(two_runs)])
    assert r.exit_code == 2 and "ambiguous" in r.stderr


def test_board_serves_the_runs_scalars(two_runs):
    handle = board.start(str(two_runs), timeout=180)

    def ask(path):
        with urllib.request.urlopen(handle.url + path, timeout=10) as resp:
            return json.loads(resp.read())

    def curves():
        tags = {run: set(t) for run, t in ask("data/plugin/scalars/tags").items()}
        train = any(run.endswith("20261101-100000/logs/train") and "epoch_loss" in t for run, t in tags.items())
        validation = any(run.endswith("logs/validation") and "epoch_accuracy" in t for run, t in tags.items())
        return tags if train and validation else None

    def graphs():
        train = {run: info for run, info in ask("data/plugin/graphs/info").items() if run.endswith("logs/train")}
        return train if len(train) == 2 else None

    try:
        # TensorBoard loads event files in the background: asked until what the runs hold is all there
        wait_for(curves, "a run's training loss and validation accuracy in TensorBoard", interval=1)
        # The Graphs tab: each run's train/ folder has the op graph and the Keras conceptual graph.
        train = wait_for(graphs, "both runs' graphs in TensorBoard", interval=1)
        for info in train.values():
            assert info["run_graph"] is True
            assert info["tags"]["keras"]["conceptual_graph"] is True
    finally:
        handle.stop()
    assert handle.task.proc.poll() is not None


@pytest.mark.parametrize("args, key", [
    (["runs", "show", ""], "name a run"),
    (["runs", "show", "base", "--dir", "/nonexistent/runs"], "--dir /nonexistent/runs does not exist"),
    (["runs", "ls", "--dir", "/nonexistent/runs"], "--dir /nonexistent/runs does not exist"),
])
def test_a_run_or_folder_that_is_not_named_or_not_there_says_so(tmp_path, monkeypatch, args, key):
    """Issue 56 (a fresh trial): `runs show ''` said the run was ambiguous, a --dir that is not there said no such
    run."""
    monkeypatch.chdir(tmp_path)
    result = invoke(args)
    assert result.exit_code == 2 and key in error_line(result), result.output
    # a folder named from the home folder is the folder it names
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mine").mkdir()
    assert invoke(["runs", "ls", "--dir", "~/mine"]).exit_code == 0
