"""The run summary says which epoch was exported and with what validation accuracy (trainer --export)."""

from __future__ import annotations

from tpuctl.commands.display import EpochStats, summary_lines


def _history():
    return [EpochStats(epoch=1, epochs=3, metrics={"val_accuracy": 0.9}, seconds=1.0),
            EpochStats(epoch=2, epochs=3, metrics={"val_accuracy": 0.97}, seconds=1.0),
            EpochStats(epoch=3, epochs=3, metrics={"val_accuracy": 0.8}, seconds=1.0)]


def _row(lines: list[str], label: str) -> str:
    """The value column of the summary row ``label`` (the summary is a two-column table, labels indented)."""
    [row] = [line for line in lines if line.startswith(f"  {label}  ")]
    return row[len(label) + 2:].strip()


def test_the_summary_names_the_exported_epoch_and_its_accuracy():
    result = {"export_dir": "/m/export/small_cnn/1", "val_accuracy": 0.97, "exported_epoch": 2, "export": "best",
              "stopped_early": False}
    lines = summary_lines(result, _history(), 12.0, "/m", None)
    exported, best = _row(lines, "exported"), _row(lines, "best val_accuracy")
    assert "epoch 2" in exported and "val_accuracy 0.9700" in exported and "--export best" in exported, exported
    assert best.startswith("0.9700") and "epoch 2" in best, best


def test_an_early_stopped_last_epoch_export_says_so_and_an_old_result_adds_nothing():
    result = {"val_accuracy": 0.8, "exported_epoch": 3, "export": "last", "stopped_early": True}
    exported = _row(summary_lines(result, _history(), 1.0, "/m", None), "exported")
    assert "epoch 3" in exported and "val_accuracy 0.8000" in exported and "--export last" in exported, exported
    assert "stopped early" in exported, exported
    old = summary_lines({"val_accuracy": 0.8, "export_dir": "/m/e/1"}, _history(), 1.0, "/m", None)
    assert not any("exported " in line for line in old)


def test_after_a_resume_the_summary_tells_the_whole_runs_story():
    """Issue 57: after a resume the summary said "best (epoch 4)" and "exported epoch 1": the best came from this
    process's epochs only. The trainer's result covers the whole run (the best epoch may be one trained before the
    stop); this process's last epoch gives the final metrics."""
    resumed = [EpochStats(epoch=4, epochs=5, metrics={"val_accuracy": 0.95}, seconds=1.0),
               EpochStats(epoch=5, epochs=5, metrics={"val_accuracy": 0.9, "loss": 0.3}, seconds=1.0)]
    result = {"export_dir": "/m/export/small_cnn/1", "val_accuracy": 0.97, "exported_epoch": 1, "best_epoch": 1,
              "best_val_accuracy": 0.97, "last_val_accuracy": 0.9, "epochs": 5, "export": "best",
              "timing": {"resumes": [{"from_step": 132}]}}
    lines = summary_lines(result, resumed, 12.0, "/m", "run", width=None)
    assert _row(lines, "best val_accuracy") == "0.9700 (epoch 1)"
    assert _row(lines, "exported").startswith("epoch 1, val_accuracy 0.9700")
    assert _row(lines, "final") == "epoch 5: loss=0.3000, val_accuracy=0.9000"
    assert _row(lines, "resumed").startswith("1 time(s)")
    # every epoch done before the stop: this process trained none, the result says how the run ended
    assert _row(summary_lines(result, [], 1.0, "/m", "run", width=None), "final") == "epoch 5: val_accuracy=0.9000"
    # its time is the whole run's, as `runs ls` counts it (issue 57: 27.2s in the summary, 57s in the listing)
    assert _row(lines, "time") == "12.0s"
    whole = summary_lines(result, resumed, 12.0, "/m", "run", width=None, since_first=57.4)
    assert _row(whole, "time") == "57s since the run first started (12.0s this time)"


def test_the_summary_fits_80_columns_without_cutting_a_metric_or_a_command():
    history = [EpochStats(epoch=5, epochs=5, metrics={"loss": 0.2, "accuracy": 0.95, "val_loss": 0.3,
                                                      "val_accuracy": 0.91, "learning_rate": 0.0,
                                                      "examples_per_second": 1234.0}, seconds=2.0)]
    export = "/home/someone/projects/flowers/runs/20261207-101500-resnet/export/flowers/1"
    lines = summary_lines({"export_dir": export, "val_accuracy": 0.91, "exported_epoch": 5, "epochs": 5}, history,
                          9.0, "/m", "20261207-101500-resnet", width=80)
    assert all(len(line) <= 80 for line in lines), lines
    text = " ".join(line.strip().removesuffix("\\") for line in lines)
    for metric in ("loss=0.2000", "accuracy=0.9500", "val_loss=0.3000", "val_accuracy=0.9100", "learning_rate=0.0000"):
        assert metric in text, lines
    assert f" --dir {export} --tag_set serve --signature_def serving_default" in " ".join(text.split()), lines
