"""Flags -> TrainConfig, output folders, TF_CONFIG parsing (no TensorFlow needed)."""

from __future__ import annotations

import dataclasses
import json

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


def _tf(cluster, task=None, **extra) -> dict:
    doc = {"cluster": cluster, **({"task": task} if task is not None else {}), **extra}
    return {"TF_CONFIG": json.dumps(doc)}


def test_tf_config_parsing_and_roles():
    from trainer.cluster import parse_tf_config
    from trainer.strategy import _task_role, cluster_size

    assert parse_tf_config({}) is None and parse_tf_config({"TF_CONFIG": "{}"}) is None
    two = parse_tf_config(_tf({"worker": ["a:1", "b:2"]}, {"type": "worker", "index": 1}))
    assert cluster_size(two) == 2 and _task_role(two) == ("worker", 1, False)
    assert two.peers() == [("worker", 0, "a:1")]
    with_chief = parse_tf_config(_tf({"chief": ["c:1"], "worker": ["a:1"], "evaluator": ["e:1"]},
                                     {"type": "chief", "index": 0}, environment="cloud", job={}))
    assert cluster_size(with_chief) == 2 and _task_role(with_chief)[2] is True
    assert _task_role(parse_tf_config(_tf({"worker": ["a:1"]}, {"type": "worker", "index": 0})))[2] is True
    ipv6 = parse_tf_config(_tf({"worker": ["[::1]:5000", "10.0.0.2:5000"]}, {"type": "worker", "index": 0}))
    assert ipv6.peers() == [("worker", 1, "10.0.0.2:5000")]


@pytest.mark.parametrize("raw, field", [
    ("{broken", "not valid JSON"),
    ("[" * 50_000, "nested too deeply"),
    ("[1, 2]", "JSON object"),
    ('"worker"', "JSON object"),
    ('{"cluster": ["a:1"], "task": {"type": "worker", "index": 0}}', "cluster must be"),
    ('{"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}}', "cluster.worker must be"),
    ('{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}', "cluster.worker must be"),
    ('{"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}', "cluster.worker[0]"),
    ('{"cluster": {"worker": ["a:0"]}, "task": {"type": "worker", "index": 0}}', "port from 1 to 65535"),
    ('{"cluster": {"worker": ["a:65536"]}, "task": {"type": "worker", "index": 0}}', "port from 1 to 65535"),
    ('{"cluster": {"worker": ["a:1", 7]}, "task": {"type": "worker", "index": 0}}', "cluster.worker[1]"),
    ('{"cluster": {"worker": ["a b:1"]}, "task": {"type": "worker", "index": 0}}', "cluster.worker[0]"),
    ('{"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}', "is also"),
    ('{"cluster": {"gpu": ["a:1"]}, "task": {"type": "gpu", "index": 0}}', "unknown job"),
    ('{"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}}', "at most one"),
    ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}', "no chief or worker"),
    ('{"cluster": {"worker": ["a:1"]}}', "task must be"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}', "task.type"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": ["worker"], "index": 0}}', "task.type"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}', "task.index"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}}', "task.index"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}}', "task.index"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": true}}', "task.index"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0.5}}', "task.index"),
])
def test_bad_tf_config_is_one_line_naming_the_field(raw, field):
    """Each of these used to pass the old check (or raise a traceback) and hang or crash in TensorFlow."""
    from trainer.cluster import parse_tf_config

    with pytest.raises(UsageError) as err:
        parse_tf_config({"TF_CONFIG": raw})
    assert str(err.value).startswith("TF_CONFIG: ") and field in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name, ok", [
    ("my-tpu", True), ("local", True), ("grpc://10.1.2.3:8470", True), ("grpc://[::1]:8470", True),
    ("grpc://10.1.2.3", False), ("grpc://10.1.2.3:0", False), ("grpc://h:99999", False), ("my tpu", False),
    ("tpu\x00", False),
    # a numeric top label is an IPv4 address: 999.0.0.1 can never answer (before: waited the full 300 s)
    ("grpc://999.0.0.1:1", False), ("grpc://1.2.3:8470", False), ("grpc://10.0.0.256:1", False),
    ("grpc://tpu-1.internal:8470", True), ("grpc://1tpu.example:8470", True),
])
def test_tpu_name_is_checked(name, ok):
    from trainer.cluster import parse_tpu_name

    if ok:
        assert parse_tpu_name({"TPU_NAME": name}) == name
    else:
        with pytest.raises(UsageError, match="TPU_NAME"):
            parse_tpu_name({"TPU_NAME": name})


@pytest.mark.parametrize("environ, expected", [
    ({}, None),
    ({"TPU_CONFIG": '{"project": "tenant-project-xyz", "zone": "us-central1-b", "tpu_node_name": "my-first-tpu-node"}'},
     ("my-first-tpu-node", "us-central1-b", "tenant-project-xyz")),
    ({"TPU_NODE_NAME": "my-first-tpu-node"}, ("my-first-tpu-node", None, None)),
    ({"TPU_CONFIG": "not json"}, "is not JSON"),
    ({"TPU_CONFIG": '{"zone": "us-central1-b"}'}, "has no tpu_node_name"),
    ({"TPU_NODE_NAME": "bad name"}, "is not a TPU node name"),
])
def test_vertex_ais_tpu_description_names_the_slice_of_a_multi_vm_replica(environ, expected):
    # Vertex AI's TPU VM training page: the container gets TPU_NODE_NAME and TPU_CONFIG {project, zone, tpu_node_name}
    from trainer.cluster import parse_vertex_tpu, validate_environment

    if isinstance(expected, str):
        with pytest.raises(UsageError, match=expected):
            validate_environment(environ)
        return
    found = parse_vertex_tpu(environ)
    assert (None if found is None else (found.name, found.zone, found.project)) == expected
    # TPU_NAME, when set, is what the trainer uses: Vertex AI's description is not even read
    assert validate_environment({**environ, "TPU_NAME": "local", "TPU_CONFIG": "ignored"}) is None


# --------------------------------------------------------------------------------------- numeric bounds
BASE = ["--model_dir", "m", "--data_dir", "d"]


@pytest.mark.parametrize("flag, bad", [
    ("--train_epochs", ["0", "-1", "100001", "1e3", "1.5", "nan", "9" * 5000]),
    ("--train_batch_size", ["0", "-3", "65537", "9223372036854775807"]),
    ("--validation_batch_size", ["0", "65537"]),
    ("--num_gpus", ["-1", "65"]),
    ("--learning_rate", ["0", "-1", "10", "nan", "inf", "-inf", "1e400", "x"]),
    ("--steps_per_epoch", ["-1", "1000001"]),
    ("--shuffle_buffer", ["0", "1000001", "9223372036854775807", "-5"]),
    ("--seed", ["-1", "4294967296", "99999999999999999999"]),
    ("--cluster_timeout_seconds", ["0", "-1", "3601", "inf"]),
    ("--image_size", ["7", "2049", "0x0", "-8", "99999999", "224x", "nanxnan"]),
])
def test_every_numeric_flag_is_bounded(flag, bad):
    """Old code: a negative seed / 2**63-1 shuffle buffer / huge epochs were accepted and crashed later
    (numpy ValueError traceback, TensorFlow segfault); now each is one UsageError naming the flag."""
    for value in bad:
        with pytest.raises(UsageError) as err:
            parse_args([*BASE, flag, value])
        message = str(err.value)
        assert flag in message and "\n" not in message, message
        assert len(message) < 400  # a 5000-digit value is shortened, not echoed


@pytest.mark.parametrize("flag, good, attr, expected", [
    ("--seed", "0", "seed", 0), ("--seed", "4294967295", "seed", 2**32 - 1),
    ("--shuffle_buffer", "1000000", "shuffle_buffer", 1_000_000), ("--num_gpus", "0", "num_gpus", 0),
    ("--learning_rate", "9.99", "learning_rate", 9.99), ("--cluster_timeout_seconds", "1", "cluster_timeout_seconds", 1),
    ("--image_size", "2048x8", "image_size", (2048, 8)), ("--steps_per_epoch", "0", "steps_per_epoch", 0),
])
def test_bounds_are_inclusive_where_documented(flag, good, attr, expected):
    assert getattr(parse_args([*BASE, flag, good]), attr) == expected


@pytest.mark.parametrize("text, expected", [("128.0", 128), ("5.", 5), ("+3.000", 3), ("64", 64)])
def test_integer_flags_take_a_whole_number_written_with_a_point(text, expected):
    """Vertex AI hands a tuning trial its DISCRETE (and perhaps INTEGER) values as float text: --x=128.0."""
    assert parse_args([*BASE, "--train_batch_size", text]).train_batch_size == expected
    assert isinstance(parse_args([*BASE, "--train_epochs", text]).train_epochs, int)


@pytest.mark.parametrize("text", ["128.5", "1e3", "128.0.0", ".0", "0.0", "65537.0", "nan.0"])
def test_a_point_does_not_let_anything_else_through(text):
    with pytest.raises(UsageError, match="--train_batch_size"):
        parse_args([*BASE, "--train_batch_size", text])


def test_help_documents_every_range(capsys):
    from trainer.config import TASK_BOUNDS

    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, bound in TASK_BOUNDS.items():
        assert f"--{name}" in text and bound.describe() in text, name


@pytest.mark.parametrize("field, value", [
    ("train_epochs", 0), ("train_batch_size", True), ("learning_rate", float("nan")), ("seed", -1),
    ("shuffle_buffer", 2**63 - 1), ("image_size", (4, 4)), ("model_dir", "a\x00b"),
])
def test_config_built_in_code_is_validated_too(field, value):
    from trainer.config import validate

    cfg = dataclasses.replace(TrainConfig(model_dir="m", data_dir="d"), **{field: value})
    with pytest.raises(UsageError):
        validate(cfg)


def test_batch_times_image_size_is_bounded():
    base = ["--model_dir", "m", "--data_dir", "d"]
    # 65,536 x 512 x 512 x 3 float32 = 192 GiB: refused naming the flag and the product
    with pytest.raises(UsageError, match=r"--train_batch_size 65536\b.*\b512x512\b.*\b192 GiB"):
        parse_args([*base, "--train_batch_size", "65536", "--image_size", "512"])
    with pytest.raises(UsageError, match=r"--validation_batch_size 32768\b.*\b512x512\b.*\b96 GiB"):
        parse_args([*base, "--validation_batch_size", "32768", "--image_size", "512"])
    # the largest batches that fit: a pod-sized batch at 224x224, and 4,096 at 512x512 (exactly 12 GiB)
    assert parse_args([*base, "--train_batch_size", "65536", "--image_size", "224"]).train_batch_size == 65536
    assert parse_args([*base, "--train_batch_size", "4096", "--image_size", "512"]).train_batch_size == 4096
