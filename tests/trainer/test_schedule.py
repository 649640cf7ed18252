"""The learning-rate schedule (trainer.models.learning_rate_schedule): warm-up, decay, batch scaling."""

from __future__ import annotations

import math

import pytest

from trainer import models
from trainer.config import TrainConfig, parse_args


def _rates(cfg: TrainConfig, steps_per_epoch: int) -> list[float]:
    schedule = models.learning_rate_schedule(cfg, steps_per_epoch)
    total = cfg.train_epochs * steps_per_epoch
    return [float(schedule(step)) if callable(schedule) else schedule for step in range(total + 1)]


def test_default_warms_up_over_one_epoch_then_decays_to_zero():
    cfg = TrainConfig(model_dir="m", data_dir="d")           # 5 epochs, batch 32, 3e-3, cosine, 1 warm-up epoch
    rates = _rates(cfg, 44)
    assert rates[0] == 0.0 and rates[22] == pytest.approx(1.5e-3, rel=1e-3)
    assert max(rates) == pytest.approx(3e-3, rel=1e-6) and rates.index(max(rates)) == 44
    assert all(a >= b for a, b in zip(rates[44:], rates[45:]))   # never rises again
    assert rates[-1] == pytest.approx(0.0, abs=1e-9)


def test_the_peak_scales_with_the_square_root_of_the_global_batch():
    for batch, factor in ((32, 1.0), (128, 2.0), (8, 0.5), (4096, math.sqrt(128))):
        cfg = TrainConfig(model_dir="m", data_dir="d", train_batch_size=batch)
        assert models.peak_learning_rate(cfg) == pytest.approx(3e-3 * factor)


def test_step_and_constant_schedules_and_a_warm_up_capped_at_half_of_training():
    step = _rates(TrainConfig(model_dir="m", data_dir="d", lr_schedule="step", warmup_epochs=0, train_epochs=4), 10)
    assert step[0] == step[19] == pytest.approx(3e-3) and step[20] == pytest.approx(3e-4)
    assert step[30] == pytest.approx(3e-5)
    flat = models.learning_rate_schedule(TrainConfig(model_dir="m", data_dir="d", lr_schedule="constant",
                                                     warmup_epochs=0), 10)
    assert flat == pytest.approx(3e-3)
    capped = _rates(TrainConfig(model_dir="m", data_dir="d", warmup_epochs=50, train_epochs=2), 10)
    assert capped.index(max(capped)) == 10                 # half of 20 steps, not 500


def test_new_flags_parse_and_are_refused_out_of_range():
    cfg = parse_args(["--model_dir", "m", "--data_dir", "d", "--lr_schedule", "step", "--warmup_epochs", "0.5",
                      "--export", "last", "--early_stopping_patience", "3"])
    assert (cfg.lr_schedule, cfg.warmup_epochs, cfg.export, cfg.early_stopping_patience) == ("step", 0.5, "last", 3)
    for argv in (["--lr_schedule", "linear"], ["--export", "first"], ["--warmup_epochs", "nan"],
                 ["--early_stopping_patience", "-1"]):
        with pytest.raises(Exception) as err:
            parse_args(["--model_dir", "m", "--data_dir", "d", *argv])
        assert argv[0] in str(err.value)


def test_central_storage_uses_an_optimizer_that_takes_the_schedule(tmp_path):
    """tf_keras' current Adam fails under CentralStorageStrategy with a schedule (a replica-context assign
    to an aggregating variable); the legacy one is used there and follows the same schedule."""
    import tensorflow as tf

    strategy = tf.distribute.experimental.CentralStorageStrategy(compute_devices=["/cpu:0"],
                                                                 parameter_device="/cpu:0")
    cfg = TrainConfig(model_dir=str(tmp_path), data_dir=str(tmp_path), seed=1)
    with strategy.scope():
        model = models.build_model(cfg, 3, (8, 8), steps_per_epoch=4)
    assert "legacy" in type(model.optimizer).__module__
    images, labels = tf.random.uniform((8, 8, 8, 3)), tf.constant([0, 1, 2, 0, 1, 2, 0, 1])
    model.fit(tf.data.Dataset.from_tensor_slices((images, labels)).batch(2).repeat(), epochs=1, steps_per_epoch=4,
              verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 4
