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
