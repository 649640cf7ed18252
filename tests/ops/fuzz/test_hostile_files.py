"""Files a user names, hostile (issue 27, classes 2 and 9): one bounded reader (regular files only, a size cap,
a FIFO never blocks, /dev/zero never read) and one line for every bad spec, manifest or outputs file; hypothesis
mutates tuning specs as bytes. In-process, quick."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ground.errors import UserError
from ground.files import read_file
from tpuctl.services import serving
from tpuctl.services.runs.tuning import spec as tuning

from clifixtures import invoke


def _one_line(result, code=2):
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.fixture
def special(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return {"fifo": fifo, "zero": Path("/dev/zero"), "folder": tmp_path}


def _bounded(fn):
    """Run ``fn`` in a thread: a reader that blocks on a FIFO fails the test instead of hanging the suite."""
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(_capture(fn)), daemon=True)
    thread.start()
    thread.join(10)
    assert outcome, "the reader blocked"
    return outcome[0]


def _capture(fn):
    try:
        return fn()
    except UserError as exc:
        return exc


@pytest.mark.parametrize("kind", ["fifo", "zero", "folder"])
def test_the_reader_refuses_special_files_without_blocking(special, kind):
    found = _bounded(lambda: read_file(special[kind], "tuning spec", 1024, hint="give a YAML file"))
    assert isinstance(found, UserError)
    assert ("is a folder" if kind == "folder" else "not a regular file") in str(found)


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_spec_manifest_and_outputs_refuse_special_files(special, kind):
    path = str(special[kind])
    image = special["folder"] / "x.jpg"
    image.write_bytes(b"\xff\xd8\xff" + bytes(20))
    for args in (["tune", "--spec", path], ["predict", "http://127.0.0.1:1/v1/models/m:predict", path],
                 ["predict", "http://127.0.0.1:1/v1/models/m:predict", "--manifest", path, str(image)],
                 ["runs", "ls", "--outputs", path]):
        assert "not a regular file" in _bounded(lambda a=args: _one_line(invoke(a))), args
    assert isinstance(_bounded(lambda: serving.read_class_names(path)), UserError)


def test_a_huge_spec_is_refused_by_its_size_before_parsing(tmp_path):
    spec = tmp_path / "huge.yaml"
    with open(spec, "wb") as fh:
        fh.truncate(300 * 1024 * 1024)          # 300 MB, sparse: never read
    assert "larger than" in _one_line(invoke(["tune", "--target", "vertex", "--spec", str(spec)]))


@pytest.mark.parametrize("content, fragment", [
    (b"\xff\xfeparameters: {}", "not UTF-8"),
    (b"[" * 60_000, "nested more than 16 levels"),
    (b"parameters: {epochs: {min: 1, max: " + b"9" * 400 + b"}}", "epochs.max"),
    (b"parameters: {epochs: {min: 1, max: " + b"9" * 5000 + b"}}", "YAML cannot carry"),
    (b"parameters: {learning_rate: {min: .nan, max: 1e400}}", "learning_rate"),
    (b"\x00\x01\x02", "not valid YAML"),
    (b"parameters: {hparams: {units: {values: [.nan, 2]}}}", "units.values.0: Input should be a finite number"),
    (b"parameters: {hparams: {units: {min: 1, max: .inf}}}", "units.max: Input should be a finite number"),
    (b"parameters: {epochs: {min: 1, max: 2}}\nmax_trials: -.inf", "max_trials: Input should be a finite number"),
    (b"parameters: {units: {values: [32, 64]}}", "goes under parameters.hparams.units"),   # issue 57
    (b"parameters: {hparams: {units: {values: [1" + b"0" * 400 + b"]}}}", "within"),    # old: passed to the trial
    (b"learning_rate: {min: 0.01, max: 0.1}", "'learning_rate' belongs under parameters, not the top level"),
    (b"parameters: {max_trials: 3, epochs: {min: 1, max: 2}}", "'max_trials' belongs at the top level"),
    (b"parameters: {learning_rate: {min: 0.01, max: 0.1, step: 2}}", "(its keys: min, max, values)"),
])
def test_hostile_specs_are_one_line(tmp_path, content, fragment):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(content)
    assert fragment in _one_line(invoke(["tune", "--target", "vertex", "--spec", str(spec)]))


_YAML_BITS = st.sampled_from([b"parameters:", b" learning_rate:", b" {min: ", b"max: ", b"values: [", b"]", b"}",
                              b" hparams:", b" units:", b".inf", b"-.Inf",
                              b"\n", b"  ", b"&a ", b"*a", b"!!python/object:os.system", b"1e400", b".nan", b"-",
                              b"9" * 40, b"\xff\xfe", b"\x00", b"'", b'"', b"[" * 50, b"{" * 50, b"? ", b"batch_size:",
                              b"epochs:", b"2020-13-45", b"0x1F", b"~"])


@given(st.lists(st.one_of(_YAML_BITS, st.binary(max_size=8)), max_size=30).map(b"".join))
def test_any_spec_bytes_give_a_spec_or_one_line(tmp_path_factory, data):
    spec = tmp_path_factory.mktemp("spec") / "spec.yaml"
    spec.write_bytes(data)
    try:
        found = tuning.load_spec(spec)
    except UserError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(found, tuning.TuneSpec)
        assert "nan" not in found.model_dump_json() and "inf" not in found.model_dump_json().lower(), found


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=12)
_FIELDS = st.sampled_from(["started", "finished", "target", "accelerator", "workers", "args", "val_accuracy",
                           "epochs", "model", "export_dir", "num_workers", "strategy"])
_RECORD = st.one_of(
    st.dictionaries(_FIELDS, _JSON, max_size=6).map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=40),
    st.sampled_from([b"[" * 50_000, b'{"started": 1e400}', b'{"started": NaN}', b'{"workers": ' + b"9" * 5000 + b"}",
                     b"\x1b]0;owned\x07", b'{"model": "\\u001b[2J[bold]x"}']),
)


def test_any_run_folder_is_listed_good_or_bad_never_fatal(tmp_path_factory):
    @given(result=_RECORD, launch=st.one_of(st.none(), _RECORD))
    def check(result, launch):
        base = tmp_path_factory.mktemp("runs")
        for name in ("a-run", "z-good"):
            (base / name).mkdir()
        (base / "z-good" / "result.json").write_text('{"val_accuracy": 0.5}')
        (base / "a-run" / "result.json").write_bytes(result)
        if launch is not None:
            (base / "a-run" / "tpuctl-run.json").write_bytes(launch)
        r = invoke(["runs", "ls", "--dir", str(base), "--json"])
        assert r.exit_code == 0 and "Traceback" not in r.output, r.output[-2000:]
        rows = {row["run"]: row for row in json.loads(r.stdout, parse_constant=lambda c: pytest.fail(c))}
        assert set(rows) == {"a-run", "z-good"} and rows["z-good"]["problem"] is None
        table = invoke(["runs", "ls", "--dir", str(base)])
        assert table.exit_code == 0 and "\x1b" not in table.stdout and "Traceback" not in table.output

    check()


@pytest.mark.parametrize("accuracy", [float("nan"), float("inf"), "0.9", True, None])
def test_a_result_accuracy_that_is_not_a_finite_number_is_unknown(capsys, accuracy):
    from tpuctl.commands.options import echo_result

    echo_result({"export_dir": "gs://b/x\x1b[2J", "val_accuracy": accuracy})
    out = capsys.readouterr().out
    assert "validation accuracy: unknown" in out and "nan" not in out and "inf" not in out and "\x1b" not in out


def test_a_small_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """The one write-beside-swap (files.write_atomically) behind the run record, the price cache, trial markers and
    the batching file: a failed write leaves the old file and no temporary; two writers never share a temporary."""
    from ground.files import write_atomically

    target = tmp_path / "runs" / "tpuctl-run.json"
    assert write_atomically(target, "old\n") == target and target.read_text() == "old\n"

    def disk_full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(type(target), "write_bytes", disk_full)
        with pytest.raises(OSError):
            write_atomically(target, "new\n")
    assert target.read_text() == "old\n" and sorted(os.listdir(target.parent)) == ["tpuctl-run.json"]
    seen = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (seen.append(str(src)), real_replace(src, dst)))
    write_atomically(target, "new\n")
    assert target.read_text() == "new\n" and f".{os.getpid()}." in seen[0]
    assert sorted(os.listdir(target.parent)) == ["tpuctl-run.json"]
    write_atomically(target, b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes"


def test_a_folder_is_replaced_whole_or_put_back(tmp_path, monkeypatch):
    """files.replace_folder (the demo dataset, a hub model in the local cache): the earlier folder is replaced whole,
    and when the move of the new one fails the earlier one is back where it was, nothing else left."""
    from ground.files import replace_folder

    dest, new = tmp_path / "model", tmp_path / ".staging"
    new.mkdir()
    (new / "a").write_text("1")
    assert replace_folder(new, dest) is False and (dest / "a").read_text() == "1"
    new.mkdir()
    (new / "b").write_text("2")
    assert replace_folder(new, dest) is True and sorted(os.listdir(dest)) == ["b"]
    assert sorted(os.listdir(tmp_path)) == ["model"]
    new.mkdir()
    (new / "c").write_text("3")
    real_replace = os.replace

    def fail_the_new_one(src, dst):
        if str(src) == str(new):
            raise OSError(18, "Invalid cross-device link")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", fail_the_new_one)
    with pytest.raises(OSError):
        replace_folder(new, dest)
    assert sorted(os.listdir(dest)) == ["b"] and sorted(os.listdir(tmp_path)) == [".staging", "model"]


@pytest.mark.parametrize("kind", ["fifo", "folder", "socket"])
def test_a_file_to_write_that_is_not_a_file_is_one_line_and_left_alone(tmp_path, kind):
    """``plan --checkov-baseline`` (issue 56, class 7; the one writer, files.write_atomically): a FIFO was replaced
    by a file (a folder: an IsADirectoryError); now refused before the plan's work, and left as it was. (Never a
    device here: the old writer, run as root, replaced /dev/null with a file.)"""
    import socket

    target = {"fifo": tmp_path / "baseline", "folder": tmp_path, "socket": tmp_path / "s.sock"}[kind]
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        held = socket.socket(socket.AF_UNIX)
        held.bind(str(target))
        held.close()
    line = _one_line(invoke(["plan", "--checkov-baseline", str(target)]))
    assert str(target) in line and ("FIFO" in line or "folder" in line), line
    assert (kind != "fifo" or target.is_fifo()) and (kind != "socket" or target.is_socket())
