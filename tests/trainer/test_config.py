"""Flags -> TrainConfig, output folders, TF_CONFIG parsing (no TensorFlow needed)."""

from __future__ import annotations

import pytest

from trainer.config import OutputDirs, TrainConfig, parse_args
from trainer.errors import UsageError


def test_seed_style_flags_map_one_to_one():
    cfg = parse_args(["--model_dir=gs://b/run", "--data_dir", "gs://b/data", "--distribution_strategy=tpu",
                      "--train_epochs=10", "--train_batch_size", "128", "--validation_batch_size=40",
                      "--num_gpus", "0", "--fine_tuning_choice=False", "--model", "hub",
                      "--hub_handle", "https://tfhub.dev/x/y/1", "--image_size", "224x160",
                      "--learning_rate", "0.05", "--steps_per_epoch", "7", "--skip_corrupt"])
    assert cfg == TrainConfig(model_dir="gs://b/run", data_dir="gs://b/data", distribution_strategy="tpu",
                              train_epochs=10, train_batch_size=128, validation_batch_size=40, num_gpus=0,
                              fine_tuning_choice=False, model="hub", hub_handle="https://tfhub.dev/x/y/1",
                              image_size=(224, 160), learning_rate=0.05, steps_per_epoch=7, skip_corrupt=True)


@pytest.mark.parametrize("flag, expected", [
    (["--fine_tuning_choice"], True), (["--fine_tuning_choice=true"], True), (["--fine_tuning_choice", "1"], True),
    (["--fine_tuning_choice=False"], False), (["--nofine_tuning_choice"], False), ([], False),
])
def test_boolean_flag_forms(flag, expected):
    cfg = parse_args(["--model_dir", "m", "--data_dir", "d", "--model", "resnet50", *flag])
    assert cfg.fine_tuning_choice is expected


def test_defaults_are_the_fast_demo():
    cfg = parse_args(["--model_dir", "m", "--data_dir", "d"])
    assert (cfg.model, cfg.distribution_strategy, cfg.image_size) == ("small_cnn", "auto", None)
    assert cfg.train_epochs <= 5


@pytest.mark.parametrize("argv, needle", [
    ([], "--model_dir"),
    (["--model_dir", "m", "--data_dir", "d", "--train_batch_size", "0"], "--train_batch_size"),
    (["--model_dir", "m", "--data_dir", "d", "--learning_rate", "-1"], "--learning_rate"),
    (["--model_dir", "m", "--data_dir", "d", "--image_size", "3"], "--image_size"),
    (["--model_dir", "m", "--data_dir", "d", "--hub_handle", "https://x"], "--hub_handle"),
    (["--model_dir", "m", "--data_dir", "d", "--model", "hub", "--hub_handle", " https://x"], "spaces"),
    (["--model_dir", "m", "--data_dir", "d", "--num_gpus", "2", "--distribution_strategy", "tpu"], "--num_gpus"),
    (["--model_dir", "m", "--data_dir", "d", "--unknown_flag", "1"], "unrecognized"),
    (["--model_dir", "", "--data_dir", "d"], "--model_dir"),
])
def test_bad_flags_raise_usage_error(argv, needle):
    with pytest.raises(UsageError, match=needle.replace("-", r"\-")):
        parse_args(argv)


def test_vertex_dirs_win_over_model_dir():
    plain = OutputDirs.resolve("gs://b/run/", {})
    assert (plain.export_base, plain.checkpoints, plain.logs) == ("gs://b/run/export", "gs://b/run/checkpoints",
                                                                 "gs://b/run/logs")
    vertex = OutputDirs.resolve("gs://b/run", {"AIP_MODEL_DIR": "gs://v/model/", "AIP_CHECKPOINT_DIR": "gs://v/ckpt/",
                                               "AIP_TENSORBOARD_LOG_DIR": "gs://v/logs/"})
    assert (vertex.export_base, vertex.checkpoints, vertex.logs) == ("gs://v/model", "gs://v/ckpt", "gs://v/logs")


def test_tf_config_parsing_and_roles():
    from trainer.strategy import _task_role, cluster_size, parse_tf_config

    assert parse_tf_config({}) is None
    two = parse_tf_config({"TF_CONFIG": '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}'})
    assert cluster_size(two) == 2 and _task_role(two) == ("worker", 1, False)
    with_chief = {"cluster": {"chief": ["c:1"], "worker": ["a:1"], "evaluator": ["e:1"]}, "task": {"type": "chief", "index": 0}}
    assert cluster_size(with_chief) == 2 and _task_role(with_chief)[2] is True
    assert _task_role({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})[2] is True
    with pytest.raises(UsageError, match="TF_CONFIG"):
        parse_tf_config({"TF_CONFIG": "{broken"})
