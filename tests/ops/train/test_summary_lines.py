"""The run summary says which epoch was exported and with what validation accuracy (trainer --export)."""

from __future__ import annotations

from tpuctl.commands.display import EpochStats, summary_lines


def _history():
    return [EpochStats(epoch=1, epochs=3, metrics={"val_accuracy": 0.9}, seconds=1.0),
            EpochStats(epoch=2, epochs=3, metrics={"val_accuracy": 0.97}, seconds=1.0),
            EpochStats(epoch=3, epochs=3, metrics={"val_accuracy": 0.8}, seconds=1.0)]


def test_the_summary_names_the_exported_epoch_and_its_accuracy():
    result = {"export_dir": "/m/export/small_cnn/1", "val_accuracy": 0.97, "exported_epoch": 2, "export": "best",
              "stopped_early": False}
    lines = summary_lines(result, _history(), 12.0, "/m", None)
    assert "  exported           epoch 2, val_accuracy 0.9700 (--export best)" in lines
    assert "  best val_accuracy  0.9700 (epoch 2)" in lines


def test_an_early_stopped_last_epoch_export_says_so_and_an_old_result_adds_nothing():
    result = {"val_accuracy": 0.8, "exported_epoch": 3, "export": "last", "stopped_early": True}
    assert "  exported           epoch 3, val_accuracy 0.8000 (--export last, stopped early)" in summary_lines(
        result, _history(), 1.0, "/m", None)
    old = summary_lines({"val_accuracy": 0.8, "export_dir": "/m/e/1"}, _history(), 1.0, "/m", None)
    assert not any("exported " in line for line in old)
