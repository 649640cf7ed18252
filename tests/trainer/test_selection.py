"""The best-epoch selection in-process: early stopping by patience, --export best|last (trainer.task)."""

from __future__ import annotations

import types

import pytest
import tf_keras as keras

from trainer import models, task
from trainer.callbacks import training_callbacks
from trainer.config import OutputDirs, TrainConfig


def _setup(tmp_path, **overrides):
    cfg = TrainConfig(model_dir=str(tmp_path), data_dir=str(tmp_path), train_epochs=6, **overrides)
    model = models.build_model(cfg, 3, (8, 8), steps_per_epoch=2)
    info = types.SimpleNamespace(kind="default", is_chief=False, num_workers=1)
    callbacks = training_callbacks(keras, cfg, OutputDirs.resolve(str(tmp_path), {}), info, 2)
    [best] = [c for c in callbacks if type(c).__name__ == "BestEpoch"]
    best.set_model(model)
    return cfg, model, best


def _feed(model, best, values):
    ran = []
    for epoch, value in enumerate(values):
        best.on_epoch_end(epoch, {"val_accuracy": value})
        ran.append(epoch)
        if model.stop_training:
            break
    return ran


def test_patience_counts_epochs_since_the_best_one(tmp_path):
    _, model, best = _setup(tmp_path, early_stopping_patience=2)
    ran = _feed(model, best, [0.5, 0.7, 0.6, 0.65, 0.9, 0.95])
    assert ran == [0, 1, 2, 3]                      # epochs 3 and 4 brought nothing better than epoch 2
    assert int(model.tpuctl_selection.epoch.numpy()) == 2
    assert float(model.tpuctl_selection.value.numpy()) == pytest.approx(0.7)


def test_no_patience_never_stops_and_nan_is_never_best(tmp_path):
    _, model, best = _setup(tmp_path)
    ran = _feed(model, best, [0.5, float("nan"), 0.4, 0.3, 0.2, 0.1])
    assert ran == [0, 1, 2, 3, 4, 5] and int(model.tpuctl_selection.epoch.numpy()) == 1


@pytest.mark.parametrize("export, exported, value", [("best", 2, 0.7), ("last", 4, 0.65)])
def test_select_export_reports_the_chosen_epoch(tmp_path, monkeypatch, export, exported, value):
    cfg, model, best = _setup(tmp_path, export=export, early_stopping_patience=2)
    _feed(model, best, [0.5, 0.7, 0.6, 0.65])
    loaded = []
    monkeypatch.setattr(model, "load_weights", lambda path: loaded.append(path))
    history = types.SimpleNamespace(epoch=[0, 1, 2, 3], history={"val_accuracy": [0.5, 0.7, 0.6, 0.65]})
    chosen = task.select_export(model, cfg, OutputDirs.resolve(str(tmp_path), {}), history, lambda: 0.0)
    assert chosen == {"val_accuracy": pytest.approx(value), "exported_epoch": exported, "best_epoch": 2,
                      "best_val_accuracy": pytest.approx(0.7), "last_val_accuracy": pytest.approx(0.65),
                      "epochs": 4, "stopped_early": True}
    assert loaded == ([f"{tmp_path}/checkpoints/ckpt-0002"] if export == "best" else [])


def test_a_resumed_epoch_counts_only_the_steps_it_ran_in_examples_per_second(tmp_path, monkeypatch):
    """An epoch resumed at step 30 of 40 from a mid-epoch backup ran 10 steps, not 40."""
    cfg = TrainConfig(model_dir=str(tmp_path), data_dir=str(tmp_path), train_epochs=2, train_batch_size=8)
    model = models.build_model(cfg, 3, (8, 8), steps_per_epoch=40)
    info = types.SimpleNamespace(kind="default", is_chief=False, num_workers=1)
    callbacks = training_callbacks(keras, cfg, OutputDirs.resolve(str(tmp_path), {}), info, 40)
    [log] = [c for c in callbacks if type(c).__name__ == "EpochLog"]
    log.set_model(model)
    now = [100.0]
    monkeypatch.setattr(task.time, "monotonic", lambda: now[0])
    for first, expected in ((30, 8 * 10 / 2.0), (0, 8 * 40 / 2.0)):
        log.on_epoch_begin(1)
        for batch in range(first, 40):
            log.on_train_batch_end(batch)
        now[0] += 2.0
        logs = {}
        log.on_epoch_end(1, logs)
        assert logs["examples_per_second"] == pytest.approx(expected)
