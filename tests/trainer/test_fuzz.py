"""Property-based fuzzing of every input edge of the trainer: flags, manifests, TF_CONFIG.

Property: a non-zero exit comes with exactly one ``error: …`` line and no traceback; exit 0 only for
input that is valid by the documented ranges (checked here against an independent table, not the
trainer's own). Most examples run the validation functions in-process; a few run the real CLIs.
Bounded by the ``trainer`` profile (conftest.py); ``--hypothesis-profile=long`` runs many more.
"""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trainer.cluster import parse_tf_config, validate_environment
from trainer.config import parse_args
from trainer.data import Manifest, parse_manifest
from trainer.errors import DataError, TrainerError, UsageError, run_cli

#: docs/trainer.md's ranges, written out independently of trainer.config.
DOCUMENTED = {
    "train_epochs": (1, 100_000), "train_batch_size": (1, 65_536), "validation_batch_size": (1, 65_536),
    "num_gpus": (0, 64), "steps_per_epoch": (0, 1_000_000), "shuffle_buffer": (1, 1_000_000),
    "seed": (0, 2**32 - 1), "cluster_timeout_seconds": (1, 3600), "early_stopping_patience": (0, 100_000),
    "backup_every_steps": (0, 1_000_000),
}
NUMERIC_FLAGS = [*DOCUMENTED, "learning_rate", "warmup_epochs", "backup_every_minutes", "image_size"]


def _assert_one_error(rc: int, stderr: str) -> str:
    assert rc != 0
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


def _cli(fn) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        rc = run_cli(fn)
    return rc, err.getvalue()


# ---------------------------------------------------------------------------------------------- flags
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.integers(min_value=-3, max_value=70_000).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "0x10", "1_000", " 7 ", "", "٣", "9" * 5000, "8x8", "224x",
                     "1e3", "--seed"]),
    st.text(max_size=12),
)
flag_values = st.lists(st.tuples(st.sampled_from(NUMERIC_FLAGS), numbers), max_size=4)


def _valid_image_size(value) -> bool:
    return value is None or (len(value) == 2 and all(8 <= v <= 2048 for v in value))


@given(flag_values)
def test_fuzz_trainer_flags_in_process(pairs):
    argv = ["--model_dir", "m", "--data_dir", "d"] + [f"--{name}={value}" for name, value in pairs]
    cfgs = []
    rc, stderr = _cli(lambda: cfgs.append(parse_args(argv)))
    if rc:
        line = _assert_one_error(rc, stderr)
        assert any(f"--{name}" in line for name, _ in pairs), line
        return
    assert stderr == ""
    cfg = cfgs[0]
    for name, (low, high) in DOCUMENTED.items():
        value = getattr(cfg, name)
        assert value is None and name == "seed" or (type(value) is int and low <= value <= high), (name, value)
    assert math.isfinite(cfg.learning_rate) and 0 < cfg.learning_rate < 10
    assert math.isfinite(cfg.warmup_epochs) and 0 <= cfg.warmup_epochs <= 1000
    assert math.isfinite(cfg.backup_every_minutes) and 0 <= cfg.backup_every_minutes <= 10_080
    assert _valid_image_size(cfg.image_size)


@settings(max_examples=6)
@given(st.sampled_from(["trainer.task", "trainer.make_tfrecords", "trainer.sample_data"]), flag_values)
def test_fuzz_cli_flags_in_a_real_process(tools, module, pairs):
    """The same property through ``python -m``: bad flags never reach TensorFlow, so this stays fast."""
    assume(all("\x00" not in value for _, value in pairs))  # an argv cannot carry NUL (exec refuses it)
    names = {"trainer.task": None,
             "trainer.make_tfrecords": ["shard-mb", "validation-fraction", "workers", "seed", "max-side"],
             "trainer.sample_data": ["validation-fraction", "shards", "image-size"]}[module]
    if names is None:
        args = ["--model_dir", "/nonexistent/m", "--data_dir", "/nonexistent/d", "--distribution_strategy", "cpu"]
        args += [f"--{n}={v}" for n, v in pairs]
    else:
        args = ["/nonexistent/src", "/nonexistent/dest"] if module.endswith("tfrecords") else ["--out", "/dev/null/o"]
        args += [f"--{names[i % len(names)]}={v}" for i, (_, v) in enumerate(pairs)]
    run = subprocess.run([sys.executable, "-m", module, *args], cwd=tools.REPO, env=tools.env(),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0  # no source at /nonexistent, no folder can be made under /dev/null
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in run.stderr and len(errors) == 1, run.stderr[-2000:]


@given(st.sampled_from(["make_tfrecords", "sample_data"]),
       st.lists(st.tuples(st.integers(0, 3), numbers), min_size=1, max_size=3))
def test_fuzz_data_tool_flags_in_process(tool, picks):
    """Out-of-range numbers name their flag; in-range ones get as far as the (missing) source."""
    import importlib

    names = {"make_tfrecords": ["--shard-mb", "--validation-fraction", "--workers", "--seed", "--max-side"],
             "sample_data": ["--validation-fraction", "--shards", "--image-size"]}[tool]
    flags = [(names[i % len(names)], value) for i, value in picks]
    base = ["/nonexistent/src", "/nonexistent/dest"] if tool == "make_tfrecords" else ["--out", "/dev/null/o"]
    argv = base + [f"{flag}={value}" for flag, value in flags]
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        rc = importlib.import_module(f"trainer.{tool}").main(argv)
    line = _assert_one_error(rc, err.getvalue())
    assert rc == 2
    if not any(flag in line for flag, _ in flags):  # accepted: every value really is in its documented range
        for flag, value in flags:
            number = float(value)
            assert math.isfinite(number), (flag, value)
            low, high = {"--shard-mb": (0.001, 10_000), "--workers": (1, 256), "--seed": (0, 2**32 - 1),
                         "--validation-fraction": (0, 1) if tool == "make_tfrecords" else (0.01, 0.99),
                         "--shards": (1, 100), "--image-size": (8, 512), "--max-side": (8, 65_500)}[flag]
            assert low <= number <= high, (flag, value)


# ---------------------------------------------------------------------------------------------- manifests
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(), st.text(max_size=20))
json_value = st.recursive(json_leaf, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                           st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                          max_leaves=12)


def _good_manifest() -> dict:
    return {"format_version": 1, "source": "fuzz", "prefix": "p", "classes": ["a", "b", "c"], "image_size": [8, 8],
            "splits": {"train": {"files": ["p-train-00000-of-00002.tfrecord", "p-train-00001-of-00002.tfrecord"],
                                 "examples": 5, "shard_examples": [3, 2]},
                       "validation": {"files": ["p-validation-00000-of-00001.tfrecord"], "examples": 1,
                                      "shard_examples": [1]}}}


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from _paths(child, (*prefix, i))


MANIFEST_PATHS = [p for p in _paths(_good_manifest()) if p]


@st.composite
def manifests(draw) -> bytes:
    kind = draw(st.sampled_from(["mutate", "mutate", "mutate", "bytes", "truncate", "deep"]))
    good = json.dumps(_good_manifest()).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "truncate":
        return good[: draw(st.integers(0, len(good)))]
    if kind == "deep":
        depth = draw(st.integers(1, 200_000))
        return b'{"prefix": ' + b"[" * depth + b"]" * draw(st.sampled_from([0, depth]))
    doc = _good_manifest()
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(MANIFEST_PATHS))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            action = draw(st.sampled_from(["replace", "delete"]))
            if action == "delete" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(json_value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this path
    return json.dumps(doc).encode()


def _check_manifest_invariants(m: Manifest) -> None:
    assert len(m.classes) >= 2 and len(set(m.classes)) == len(m.classes)
    assert all(isinstance(c, str) and c.strip() for c in m.classes)
    assert m.image_size is None or all(type(s) is int and 1 <= s <= 65535 for s in m.image_size)
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", m.prefix)
    assert set(m.splits) == {"train", "validation"}
    for name, split in m.splits.items():
        assert type(split.examples) is int and split.examples >= 0
        assert (split.examples == 0) == (not split.files)
        for f in split.files:
            assert f.startswith(f"/d/{m.prefix}-{name}-") and "/" not in f[len("/d/"):]
        if split.shard_examples is not None:
            assert len(split.shard_examples) == len(split.files) and sum(split.shard_examples) == split.examples


@given(manifests())
def test_fuzz_manifest(raw):
    try:
        manifest = parse_manifest(raw, "/d/manifest.json", "/d")
    except DataError as err:
        message = str(err)
        assert message.startswith("/d/manifest.json") and "\n" not in message and len(message) < 600, message
        return
    _check_manifest_invariants(manifest)


# ---------------------------------------------------------------------------------------------- TF_CONFIG
ports = st.one_of(st.integers(-5, 70_000), st.sampled_from([0, 1, 65535, 65536]))
hosts = st.one_of(st.sampled_from(["127.0.0.1", "localhost", "w-0.svc", "[::1]", "::1", "", "a b", "-x", "é"]),
                  st.text(max_size=10))
addresses = st.one_of(st.builds(lambda h, p: f"{h}:{p}", hosts, ports), json_leaf)
clusters = st.dictionaries(st.sampled_from(["chief", "worker", "ps", "evaluator", "master", ""]),
                           st.one_of(st.lists(addresses, max_size=3), json_leaf), max_size=3)
tasks = st.one_of(st.fixed_dictionaries({"type": st.one_of(st.sampled_from(["chief", "worker", "ps", "x"]), json_leaf),
                                         "index": st.one_of(st.integers(-2, 4), json_leaf)}), json_value)
tf_configs = st.one_of(
    st.builds(lambda c, t: json.dumps({"cluster": c, "task": t}), clusters, tasks),
    json_value.map(json.dumps),
    st.text(max_size=40),
)
_ADDRESS = re.compile(r"(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):(\d{1,5})")


@given(tf_configs)
def test_fuzz_tf_config(raw):
    env = {"TF_CONFIG": raw}
    rc, stderr = _cli(lambda: validate_environment(env) and None)
    if rc:
        assert rc == 2
        assert _assert_one_error(rc, stderr).startswith("error: TF_CONFIG: ")
        return
    cluster = parse_tf_config(env)
    if cluster is None:
        return
    for job, addrs in cluster.jobs.items():
        assert job in ("chief", "worker", "ps", "evaluator") and addrs
        for address in addrs:
            m = _ADDRESS.fullmatch(address)
            assert m and 1 <= int(m.group(1)) <= 65535, address
    assert cluster.task_type in cluster.jobs and 0 <= cluster.task_index < len(cluster.jobs[cluster.task_type])
    assert cluster.size >= 1


def test_usage_and_data_errors_are_trainer_errors():
    """run_cli turns exactly these into one line; anything else would be a traceback."""
    assert issubclass(UsageError, TrainerError) and issubclass(DataError, TrainerError)
