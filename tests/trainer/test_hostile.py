"""Hostile inputs and faults: unbounded numbers, manifests trusted too much, hangs, interrupts.

Every case here failed on the old code (a traceback, a segfault, a hang, or a folder a re-run refused);
now each is one ``error: …`` line, a documented exit code, and nothing half-created.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainer.image_sources import folder_from_script
from trainer import data
from trainer.errors import DataError

from procfixtures import wait_for


def _one_error_line(run_or_stderr) -> str:
    stderr = run_or_stderr if isinstance(run_or_stderr, str) else run_or_stderr.stderr
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


# ---------------------------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("flag, value", [
    ("--shuffle_buffer", str(2**63 - 1)),  # old: TensorFlow segfault (exit 139) after the data was read
    ("--seed", "-5"),  # old: numpy "Seed must be between 0 and 2**32 - 1" traceback
    ("--train_batch_size", str(2**63 - 1)),  # old: "Dimension size overflow" traceback from ParseExample
])
def test_numbers_that_crashed_tensorflow_are_refused_first(tools, demo_data, tmp_path, flag, value):
    run = tools.run_module(["trainer.task", *tools.fast_flags(demo_data, tmp_path / "m", flag, value)], timeout=120)
    assert run.returncode == 2, run.stderr[-3000:]
    assert flag in _one_error_line(run)


def test_batch_too_large_for_the_manifests_image_size_is_refused_before_reading(in_process, demo_data, tmp_path):
    # no --image_size: the size comes from the data's manifest, so the check runs after it is read
    data_dir = tmp_path / "data"
    shutil.copytree(demo_data, data_dir)
    manifest = json.loads((data_dir / "manifest.json").read_text())
    manifest["image_size"] = [512, 512]
    (data_dir / "manifest.json").write_text(json.dumps(manifest))
    run = in_process(["trainer.task", "--data_dir", str(data_dir), "--model_dir", str(tmp_path / "m"),
                      "--train_batch_size", "65536"])
    assert run.returncode == 2, run.stderr[-3000:]
    line = _one_error_line(run)      # the flag and its value, the image size, the memory it would take
    assert "--train_batch_size 65536" in line and "512x512" in line and "192 GiB" in line, line
    assert not (tmp_path / "m" / "checkpoints").exists()
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("module, args, flag", [
    ("trainer.make_tfrecords", ["{src}", "{out}", "--shard-mb", "nan"], "--shard-mb"),
    ("trainer.make_tfrecords", ["{src}", "{out}", "--shard-mb", "inf"], "--shard-mb"),
    ("trainer.make_tfrecords", ["{src}", "{out}", "--workers", "0"], "--workers"),
    ("trainer.make_tfrecords", ["{src}", "{out}", "--workers", "100000"], "--workers"),
    ("trainer.make_tfrecords", ["{src}", "{out}", "--validation-fraction", "nan"], "--validation-fraction"),
    ("trainer.make_tfrecords", ["{src}", "{out}", "--seed", "-1"], "--seed"),
    ("trainer.sample_data", ["--out", "{out}", "--validation-fraction", "nan"], "--validation-fraction"),
    ("trainer.sample_data", ["--out", "{out}", "--image-size", "1e9"], "--image-size"),
    ("trainer.sample_data", ["--out", "{out}", "--shards", "-1"], "--shards"),
    # found by test_fuzz: old code let sklearn raise "test_size = 8 should be >= the number of classes"
    ("trainer.sample_data", ["--out", "{out}", "--validation-fraction", "0.004"], "--validation-fraction"),
])
def test_data_tool_numbers_are_bounded(module, args, flag, tmp_path):
    """In-process (fast): the CLI's main() returns 2 with one line; old code accepted nan/huge values."""
    import importlib

    src = tmp_path / "src"
    for cls in ("a", "b"):
        (src / cls).mkdir(parents=True)
    argv = [a.format(src=src, out=tmp_path / "out") for a in args]
    main = importlib.import_module(module).main
    import io
    from contextlib import redirect_stderr

    err = io.StringIO()
    with redirect_stderr(err):
        rc = main(argv)
    assert rc == 2
    assert flag in _one_error_line(err.getvalue())
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- manifests
def _good_manifest() -> dict:
    return {"format_version": 1, "source": "test", "prefix": "p", "classes": ["a", "b"], "image_size": [8, 8],
            "splits": {"train": {"files": ["p-train-00000-of-00001.tfrecord"], "examples": 3, "shard_examples": [3]},
                       "validation": {"files": ["p-validation-00000-of-00001.tfrecord"], "examples": 1,
                                      "shard_examples": [1]}}}


def _with(path: str, value):
    doc = _good_manifest()
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[key]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return json.dumps(doc).encode()


_DELETE = object()


@pytest.mark.parametrize("raw, field", [
    (b"\xff\xfe{}", "not UTF-8"),
    (b"[" * 100_000, "nested too deeply"),  # old: RecursionError traceback
    (b"[]", "(top level)"),
    (_with("prefix", 7), "prefix"),
    (_with("prefix", "../evil"), "prefix"),
    (_with("classes", "ab"), "classes"),
    (_with("classes", ["a"]), "at least 2"),
    (_with("classes", ["a", "a"]), "unique"),
    (_with("classes", ["a", 3]), "classes[1]"),
    (_with("image_size", [8]), "image_size"),
    (_with("image_size", [8, "8"]), "image_size[1]"),  # old: accepted, int("8")
    (_with("image_size", [0, 8]), "image_size[0]"),
    (_with("image_size", [8, 10**9]), "image_size[1]"),
    (_with("image_size", [8, True]), "image_size[1]"),
    (_with("image_size", {"h": 8}), "image_size"),
    (_with("splits", []), "splits"),  # old: AttributeError traceback ('list' has no attribute 'get')
    (_with("splits.test", {}), "splits['test']"),
    (_with("splits.train", [1]), "splits.train"),  # old: AttributeError traceback
    (_with("splits.validation", _DELETE), "splits.validation"),
    (_with("splits.train.files", "p-train-00000-of-00001.tfrecord"), "splits.train.files"),
    (_with("splits.train.files", ["../../etc/passwd"]), "splits.train.files[0]"),
    (_with("splits.train.files", [{"x": 1}]), "splits.train.files[0]"),
    (_with("splits.train.examples", -3), "splits.train.examples"),
    (_with("splits.train.examples", "3"), "splits.train.examples"),
    (_with("splits.train.examples", 3.5), "splits.train.examples"),
    (_with("splits.train.examples", 0), "splits.train.examples"),
    (_with("splits.train.shard_examples", [1, 2]), "splits.train.shard_examples"),
    (_with("splits.train.shard_examples", [2]), "splits.train.shard_examples"),
    (_with("splits.train.shard_examples", [-3]), "splits.train.shard_examples"),
    (_with("format_version", 2), "format_version"),
])
def test_malformed_manifest_is_one_error_naming_file_and_field(raw, field):
    with pytest.raises(DataError) as err:
        data.parse_manifest(raw, "/d/manifest.json", "/d")
    message = str(err.value)
    assert message.startswith("/d/manifest.json") and field in message, message
    assert "\n" not in message and len(message) < 500


def test_valid_manifest_becomes_a_typed_object():
    manifest = data.parse_manifest(json.dumps(_good_manifest()).encode(), "/d/manifest.json", "/d")
    assert manifest.classes == ("a", "b") and manifest.image_size == (8, 8)
    assert manifest.splits["train"] == data.Split(("/d/p-train-00000-of-00001.tfrecord",), 3, (3,))
    with pytest.raises(AttributeError):
        manifest.prefix = "x"  # frozen


def _copy(demo_data, tmp_path) -> Path:
    folder = tmp_path / "data"
    shutil.copytree(demo_data, folder)
    return folder


def test_empty_shard_counted_in_the_manifest_is_named(demo_data, tmp_path):
    folder = _copy(demo_data, tmp_path)
    (folder / "digits-validation-00001-of-00002.tfrecord").write_bytes(b"")
    with pytest.raises(DataError, match=r"digits-validation-00001-of-00002.tfrecord is empty .*splits.validation"):
        data.read_manifest(str(folder))


def test_non_utf8_manifest_through_the_trainer(in_process, demo_data, tmp_path):
    folder = _copy(demo_data, tmp_path)
    (folder / "manifest.json").write_bytes(b'{"prefix": "digits\xff"}')
    run = in_process(["trainer.task", "--data_dir", str(folder), "--model_dir", str(tmp_path / "m")])
    assert run.returncode == 2
    line = _one_error_line(run)
    assert str(folder / "manifest.json") in line and "UTF-8" in line
    assert not (tmp_path / "m").exists()


def test_label_outside_the_listed_classes_names_the_shard(tools, demo_data, tmp_path):
    """Old code: an InvalidArgumentError traceback from deep inside the loss ("label value of 12 …")."""
    import tensorflow as tf

    folder = _copy(demo_data, tmp_path)
    shard = folder / "digits-train-00000-of-00002.tfrecord"
    raws = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
    ex = tf.train.Example.FromString(raws[5])
    ex.features.feature["image/class/label"].int64_list.value[0] = 12
    raws[5] = ex.SerializeToString()
    with tf.io.TFRecordWriter(str(shard)) as w:
        for r in raws:
            w.write(r)
    run = tools.run_module(["trainer.task", *tools.fast_flags(folder, tmp_path / "m", "--train_epochs", "1",
                                                               "--steps_per_epoch", "60")], timeout=240)
    assert run.returncode == 2, run.stderr[-3000:]
    line = _one_error_line(run)
    assert shard.name in line and "record 5" in line and "label outside the 10 classes" in line
    # With --skip_corrupt the record is skipped and counted.
    scan = data.scan_shards([str(shard)], (32, 32), num_classes=10)
    assert [(p.record, p.bad_records) for p in scan.problems] == [(5, 1)]


# ---------------------------------------------------------------------------------------------- one bounded reader
def _bounded(fn, seconds: float = 240):
    """``fn()`` in a daemon thread: a reader that blocks on a FIFO fails the test instead of hanging the suite
    (minutes: a loaded machine reads a manifest in well under one)."""
    import threading

    outcome = []

    def run():
        try:
            outcome.append(fn())
        except DataError as err:
            outcome.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, "the trainer blocked reading the data folder"
    return outcome[0]


def _drop_shard_counts(folder: Path) -> None:
    """A manifest without per-shard counts (allowed): only the split's total is known."""
    path = folder / "manifest.json"
    doc = json.loads(path.read_text())
    for split in doc["splits"].values():
        split.pop("shard_examples", None)
    path.write_text(json.dumps(doc))


SHARD = "digits-train-00000-of-00002.tfrecord"


@pytest.mark.parametrize("target, kind, expected", [
    ("manifest.json", "fifo", "is a FIFO"),          # old: train hung opening it
    ("manifest.json", "zero", "is a device"),        # old: read /dev/zero until memory ran out
    ("manifest.json", "huge", str(data.MAX_MANIFEST_BYTES)),  # 64 MiB + 1, sparse: refused by its size (was already)
    (SHARD, "fifo", "is a FIFO"),                    # old: passed the checks (no per-shard counts), then train hung
    (SHARD, "zero", "is a device"),
    ("manifest.json", "folder", "is a folder"),      # a fresh trial (issue 56): IsADirectoryError, a traceback
])
def test_a_special_or_huge_file_in_the_data_folder_is_one_line_naming_it(demo_data, tmp_path, target, kind, expected):
    folder = _copy(demo_data, tmp_path)
    _drop_shard_counts(folder)
    path = folder / target
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        with open(path, "wb") as fh:
            fh.truncate(data.MAX_MANIFEST_BYTES + 1)
    found = _bounded(lambda: data.read_manifest(str(folder)))
    assert isinstance(found, DataError), found
    message = str(found)
    assert str(path) in message and expected in message and "\n" not in message, message


def test_a_fifo_manifest_stops_train_in_one_line(tools, demo_data, tmp_path):
    folder = _copy(demo_data, tmp_path)
    (folder / "manifest.json").unlink()
    os.mkfifo(folder / "manifest.json")
    run = tools.run_module(["trainer.task", *tools.fast_flags(folder, tmp_path / "m")], timeout=300)
    assert run.returncode == 2, run.stderr[-3000:]
    assert "is a FIFO" in _one_error_line(run)
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("shard_counts", [False, True])
def test_an_example_count_the_shards_cannot_hold_is_refused_naming_the_file(demo_data, tmp_path, shard_counts):
    """A manifest claiming 2**50 examples made a one-epoch run endless (2**50 / batch steps): a record takes 16
    bytes at least, so a count over the shards' bytes / 16 is refused, naming the manifest and the split."""
    folder = _copy(demo_data, tmp_path)
    path = folder / "manifest.json"
    doc = json.loads(path.read_text())
    train = doc["splits"]["train"]
    if shard_counts:
        train["shard_examples"][0] += 2**50
    else:
        train.pop("shard_examples")
    train["examples"] += 2**50
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError) as err:
        data.read_manifest(str(folder))
    message = str(err.value)
    assert str(path) in message and "splits.train" in message and str(train["examples"] if not shard_counts
                                                                          else train["shard_examples"][0]) in message


# ---------------------------------------------------------------------------------------------- hangs
@pytest.mark.parametrize("index", [0, 1])  # 0 is the coordination leader: old code waited forever
def test_tf_config_peer_that_never_starts_fails_within_the_timeout(tools, demo_data, tmp_path, index):
    ports = [tools.free_port(), tools.free_port()]
    while ports[1] == ports[0]:
        ports[1] = tools.free_port()
    tf_config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": index}}
    start = time.monotonic()
    run = tools.run_module(["trainer.task", *tools.fast_flags(demo_data, tmp_path / "m", "--cluster_timeout_seconds",
                                                               "4")],
                           env={"TF_CONFIG": json.dumps(tf_config)}, timeout=240)
    elapsed = time.monotonic() - start
    assert run.returncode == 3, run.stderr[-3000:]
    line = _one_error_line(run)
    peer = 1 - index
    assert f"worker {peer} at 127.0.0.1:{ports[peer]}" in line and "within 4 s" in line, line
    assert elapsed < 150  # TensorFlow import + 4 s, never the old unbounded wait (generous: a loaded machine)
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("variable, value", [
    ("TPUCTL_TRAINER_TEST_STEP_PAUSE", "soon"),     # old: a float() traceback after TensorFlow loaded
    ("TPUCTL_TRAINER_TEST_STEP_PAUSE", "nan"),      # old: a pause the sleep refused at the first step
    ("TPUCTL_TRAINER_TEST_STEP_PAUSE", "1e9"),      # old: a run that never ended
    ("TPUCTL_TRAINER_TEST_STEP_PAUSE", "-1"),
    ("TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH", "two"),  # old: an int() traceback at the first epoch's end
    ("TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH", "0"),    # old: a hook that never fired
])
def test_a_test_hook_out_of_bounds_is_one_line_before_anything_is_written(in_process, tools, demo_data, tmp_path,
                                                                           variable, value):
    run = in_process(["trainer.task", *tools.fast_flags(demo_data, tmp_path / "m")], env={variable: value})
    assert run.returncode == 2, run.stderr[-3000:]
    assert variable in _one_error_line(run)
    assert not (tmp_path / "m").exists()


def test_invalid_tf_config_fails_before_tensorflow_starts(tools, demo_data, tmp_path):
    run = tools.run_module(["trainer.task", *tools.fast_flags(demo_data, tmp_path / "m")],
                           env={"TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, '
                                             '"task": {"type": "worker", "index": 2}}'}, timeout=60)
    assert run.returncode == 2
    assert "task.index" in _one_error_line(run)


def test_tpu_name_at_a_closed_port_fails_fast_with_the_address(tools, demo_data, tmp_path):
    port = tools.free_port()  # nothing listens there
    start = time.monotonic()
    run = tools.run_module(["trainer.task", *tools.fast_flags(demo_data, tmp_path / "m")],
                           env={"TPU_NAME": f"grpc://127.0.0.1:{port}"}, timeout=240)
    elapsed = time.monotonic() - start
    assert run.returncode == 3, run.stderr[-3000:]
    line = _one_error_line(run)
    assert f"127.0.0.1:{port}" in line and "connection refused" in line
    assert elapsed < 150  # the default timeout is 300 s: a refused port is not waited for


def test_an_impossible_tpu_address_fails_at_once_in_one_line(tools, demo_data, tmp_path):
    """TPU_NAME=grpc://999.0.0.1:1 is refused before TensorFlow starts (before: a name lookup retried for 300 s)."""
    from trainer import task
    from trainer.config import parse_args
    from trainer.errors import UsageError

    model_dir = tmp_path / "m"
    start = time.monotonic()
    with pytest.raises(UsageError) as err:
        task.run(parse_args(tools.fast_flags(demo_data, model_dir)), environ={"TPU_NAME": "grpc://999.0.0.1:1"})
    assert "TPU_NAME 'grpc://999.0.0.1:1'" in str(err.value) and "grpc://host:port" in str(err.value)
    assert err.value.exit_code == 2 and time.monotonic() - start < 5 and not model_dir.exists()


def test_a_tpu_host_name_that_does_not_resolve_is_final(monkeypatch):
    """The TPU probe gives up on a name no resolver knows at once, like on a refused port (not after 300 s)."""
    import socket

    from trainer import strategy
    from trainer.errors import HardwareError

    def no_such_host(address, timeout=None):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(strategy.socket, "create_connection", no_such_host)
    start = time.monotonic()
    with pytest.raises(HardwareError, match="host name does not resolve"):
        strategy._tpu_strategy("grpc://no-such-tpu.invalid:8470", timeout=300)
    assert time.monotonic() - start < 5


def test_address_probe_reports_what_never_answered():
    """The probe itself, in-process: an open port answers, a closed one is still missing at the deadline."""
    import socket

    from trainer.rendezvous import AddressProbe

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        open_port = listener.getsockname()[1]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed_port = s.getsockname()[1]  # bound, not listening: refused
            start = time.monotonic()
            probe = AddressProbe([("a", f"127.0.0.1:{open_port}"), ("b", f"127.0.0.1:{closed_port}")],
                                 time.monotonic() + 1.0)
            probe.run()
            assert probe.missing() == {"b": f"127.0.0.1:{closed_port}"}
            assert 0.9 <= time.monotonic() - start < 5
            final = AddressProbe([("b", f"127.0.0.1:{closed_port}")], time.monotonic() + 30, refused_is_final=True)
            final.run()
            assert final.refused == {"b": f"127.0.0.1:{closed_port}"} and not final.missing()


# ---------------------------------------------------------------------------------------------- interrupts
MAKE_IMAGES = r"""
import shutil, sys
from pathlib import Path
import numpy as np
from PIL import Image
root = Path(sys.argv[1])
ramp = np.linspace(0, 255, 1200, dtype=np.uint8)
pixels = np.stack([np.add.outer(ramp, ramp) // 2, np.add.outer(ramp[::-1], ramp) // 2,
                   np.tile(ramp, (1200, 1))], axis=-1).astype(np.uint8)
first = root / "seed.png"
root.mkdir(parents=True)
Image.fromarray(pixels).save(first)  # PNG: decoded and re-encoded as JPEG, ~tens of ms each
for cls in ("a", "b", "c"):
    (root / cls).mkdir()
    for i in range(40):
        shutil.copyfile(first, root / cls / f"{i:02d}.png")
first.unlink()
"""


@pytest.fixture(scope="module")
def slow_source(tools, tmp_path_factory):
    """120 large PNGs: converting them takes seconds, so the signal lands mid-way with shards open."""
    return folder_from_script(tools, tmp_path_factory, "slow", MAKE_IMAGES)


@pytest.mark.parametrize("signum, workers, group", [
    (signal.SIGINT, "2", False),  # old: the pool kept decoding every queued image before the process could exit
    (signal.SIGTERM, "2", False),  # old: killed at once, hidden .partial shards left; the re-run refused the folder
    # As tpuctl's supervisor stops it: SIGTERM to the whole process group, so the decoder workers die too. Old: a
    # multiprocessing.Pool whose worker died holding its result queue's lock hung in terminate() (on a loaded
    # machine), past the supervisor's grace, whose SIGKILL left the output folder's lock behind.
    (signal.SIGTERM, "2", True),
    (signal.SIGTERM, "1", False),
    (signal.SIGKILL, "1", False),  # cannot be handled: the re-run must still accept the leftovers as ours
])
def test_interrupted_conversion_leaves_nothing_that_blocks_a_rerun(tools, slow_source, tmp_path, signum, workers,
                                                                   group):
    src = slow_source
    dest = tmp_path / "out"
    args = ["trainer.make_tfrecords", str(src), str(dest), "--shard-mb", "0.05", "--validation-fraction", "0.25",
            "--workers", workers]
    proc = subprocess.Popen([sys.executable, "-m", *args], cwd=tools.REPO, env=tools.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=group)
    try:
        staging = dest.parent / f".{dest.name}.writing"  # trainer.atomicdir: written next to DEST
        # `or None`: an empty list is a value to wait_for; the staging folder exists before its first shard does
        first = wait_for(lambda: (staging.exists() and list(staging.glob(".*.partial"))) or None,
                         "the conversion's first shard", proc=proc)
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        signalled = time.monotonic()
        out, err = proc.communicate(timeout=60)
        assert time.monotonic() - signalled < 20  # promptly: the queued images are not all decoded first
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if signum == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        # left behind (nothing could clean up): the staging folder with the shards written so far (they are
        # renamed only at the end). Once seen empty on a loaded machine: what the tool said shows why.
        assert staging.is_dir() and list(staging.iterdir()), (f"seen before the kill: {first}; the tool's "
                                                              f"stderr: {err[-2000:]!r}")
    else:
        assert proc.returncode == 130, err[-3000:]
        assert _one_error_line(err) == "error: interrupted"
        assert not dest.exists()  # created by this run, and everything in it was ours
    assert "summary: " not in out  # it really was interrupted mid-way
    rerun = tools.run_module(args, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    summary = json.loads(rerun.stdout_lines[-1][len("summary: "):])
    assert summary["train"] + summary["validation"] == 120
    assert not list(dest.glob(".*")) and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
