"""Run records as a hostile folder holds them (issue 27, classes 2, 5, 6, 7, 8): every record is validated on read,
a bad one is listed as bad and never hides the others, special files are never read, symlinks never followed out
of a run, and text from the records reaches the terminal without its escape sequences or rich markup. In-process
and without the trainer: the records are written by hand."""

from __future__ import annotations

import json
import os

import pytest

from tpuctl.services.runs import records as runs

from clifixtures import invoke, shown_rows

GOOD = {"export_dir": "/x/export/small_cnn/1", "val_accuracy": 0.75, "epochs": 2, "model": "small_cnn",
        "strategy": "cpu", "num_workers": 1}


def _run(base, name, result=GOOD, launch=None):
    folder = base / name
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(result if isinstance(result, str) else json.dumps(result))
    if launch is not None:
        (folder / "tpuctl-run.json").write_text(launch if isinstance(launch, str) else json.dumps(launch))
    return folder


BAD_LAUNCHES = {
    "yesterday": '{"started": "yesterday"}',
    "nan": '{"started": NaN, "finished": NaN}',
    "huge": '{"started": 1e20}',
    "inf": '{"started": 1e400}',
    "dict-target": '{"target": {"a": 1}}',
    "bool-workers": '{"workers": true}',
    "deep": "[" * 100_000,
    "digits": '{"workers": ' + "9" * 400 + "}",
}


@pytest.fixture
def hostile_runs(tmp_path):
    base = tmp_path / "runs"
    _run(base, "good", launch={"target": "local", "started": 1_761_991_200.0, "finished": 1_761_991_275.0})
    for name, launch in BAD_LAUNCHES.items():
        _run(base, name, launch=launch)
    _run(base, "nan-accuracy", '{"val_accuracy": NaN}')
    _run(base, "list-result", "[1, 2]")
    (base / "zero").mkdir()
    (base / "zero" / "result.json").symlink_to("/dev/zero")
    (base / "fifo").mkdir()
    os.mkfifo(base / "fifo" / "result.json")
    (base / "fifo-launch").mkdir()
    (base / "fifo-launch" / "result.json").write_text(json.dumps(GOOD))
    os.mkfifo(base / "fifo-launch" / "tpuctl-run.json")
    outside = _run(tmp_path, "elsewhere")
    (base / "linked").symlink_to(outside)
    (base / "not-a-run").mkdir()
    # tpuctl's record of an unfinished run (no result.json) that cannot be read: listed as bad too (issue 56: it
    # vanished from runs ls)
    (base / "unfinished-edited").mkdir()
    (base / "unfinished-edited" / "tpuctl-run.json").write_text('{"started": "yesterday", "state": "interrupted"}')
    (base / "unfinished-fifo").mkdir()
    os.mkfifo(base / "unfinished-fifo" / "tpuctl-run.json")
    return base


def test_bad_records_are_listed_as_bad_and_never_hide_the_others(hostile_runs):
    found = {r.name: r for r in runs.list_runs(str(hostile_runs))}
    assert "not-a-run" not in found
    assert found["good"].problem is None and found["good"].seconds == 75.0
    bad = {name for name, r in found.items() if r.problem}
    assert bad == {*BAD_LAUNCHES, "nan-accuracy", "list-result", "zero", "fifo", "fifo-launch", "linked",
                   "unfinished-edited", "unfinished-fifo"}
    assert "started" in found["yesterday"].problem and "not a regular file" in found["fifo"].problem
    assert "started" in found["unfinished-edited"].problem
    assert "not a regular file" in found["unfinished-fifo"].problem
    assert "links out of" in found["linked"].problem and "links out of" in found["zero"].problem

    table = invoke(["runs", "ls", "--dir", str(hostile_runs)])
    assert table.exit_code == 0, table.output
    assert "1 run(s)" in table.stdout and f"{len(bad)} bad run record(s)" in table.stdout
    listed = json.loads(invoke(["runs", "ls", "--dir", str(hostile_runs), "--json"]).stdout)
    assert {row["run"] for row in listed if row["problem"]} == bad
    assert [row["run"] for row in listed if not row["problem"]] == ["good"]


def test_show_of_a_bad_record_is_one_line_naming_the_field(hostile_runs):
    r = invoke(["runs", "show", "yesterday", "--dir", str(hostile_runs)])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1
    assert "bad record" in r.stderr and "started" in r.stderr


def test_json_out_is_strict_even_for_a_nan_in_a_record(tmp_path):
    from tpuctl.commands.options import strict_json

    assert json.loads(strict_json({"a": [float("nan"), float("inf"), 1.5]})) == {"a": [None, None, 1.5]}
    base = tmp_path / "runs"
    _run(base, "fine")
    text = invoke(["runs", "ls", "--dir", str(base), "--json"]).stdout
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))


def test_terminal_text_from_records_loses_escape_sequences_and_markup(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")      # no folding inside a cell
    base = tmp_path / "runs"
    evil = "\x1b]0;owned\x07\x1b[31m[bold red]EVIL[/]\x1b[0m\x07"
    folder = _run(base, "evil", {**GOOD, "model": evil, "export_dir": evil},
                  {"target": evil, "accelerator": evil, "args": ["--x", evil]})
    # the curves' tags come from event files (read by the trainer environment): the same text, stood in here
    monkeypatch.setattr(runs, "scalars", lambda found: {str(folder): {f"train/epoch_{evil}": [[1, 0.5], [2, 0.25]]}})
    for args in (["runs", "ls"], ["runs", "show", "evil"]):
        r = invoke([*args, "--dir", str(base)])
        assert r.exit_code == 0, r.output
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout, args
        assert "[bold red]EVIL[/]" in r.stdout, args        # shown as text, not applied as markup


def test_a_logs_symlink_out_of_the_run_is_never_walked(tmp_path):
    base = tmp_path / "runs"
    folder = _run(base, "linked-logs")
    (folder / "logs").symlink_to("/usr")
    run = runs.find_run(runs.list_runs(str(base)), "linked-logs")
    assert "symbolic link" in runs.logs_problem(run)
    assert runs.scalars([run]) == {}          # no reader started on /usr
    r = invoke(["runs", "show", "linked-logs", "--dir", str(base)])
    assert r.exit_code == 0 and "not read" in r.stdout
    r = invoke(["board", "linked-logs", "--dir", str(base)])
    assert r.exit_code == 2 and "symbolic link" in r.stderr


def test_an_event_file_that_is_a_fifo_is_never_read(tmp_path):
    folder = _run(tmp_path / "runs", "fifo-events")
    (folder / "logs" / "train").mkdir(parents=True)
    os.mkfifo(folder / "logs" / "train" / "events.out.tfevents.1")
    run = runs.find_run(runs.list_runs(str(tmp_path / "runs")), "fifo-events")
    assert "not a regular file" in runs.logs_problem(run)
    assert runs.scalars([run]) == {}


def test_board_on_every_run_refuses_a_folder_that_links_out(tmp_path):
    base = tmp_path / "runs"
    _run(base, "fine")
    (base / "elsewhere").symlink_to("/usr", target_is_directory=True)
    r = invoke(["board", "--dir", str(base)])
    assert r.exit_code == 2 and "symbolic link" in r.stderr and r.stderr.count("\n") == 1


def test_bad_records_in_a_bucket_are_listed_as_bad_too(monkeypatch):
    from gcsfixtures import emulated_buckets

    with emulated_buckets(monkeypatch, ("runs-bucket",)) as client:
        bucket = client.bucket("runs-bucket")
        bucket.blob("runs/good/result.json").upload_from_string(json.dumps(GOOD))
        bucket.blob("runs/nan/result.json").upload_from_string(json.dumps(GOOD))
        bucket.blob("runs/nan/tpuctl-run.json").upload_from_string('{"started": NaN}')
        bucket.blob("runs/huge/result.json").upload_from_string(b" " * (runs.MAX_RUN_FILE_BYTES + 1))
        found = {r.name: r for r in runs.list_runs("gs://runs-bucket/runs", storage_client=client)}
    assert found["good"].problem is None
    assert "started" in found["nan"].problem and "larger than" in found["huge"].problem


def test_a_launch_record_without_a_target_is_a_local_run(tmp_path):
    _run(tmp_path / "runs", "plain", launch={"started": 1_761_991_200.0})     # no target in the record
    row = runs.list_runs(str(tmp_path / "runs"))[0].row()
    assert row["target"] == "local" and row["val_accuracy"] == 0.75 and row["seconds"] is None
    _run(tmp_path / "runs", "vertex", launch={"target": "vertex"})
    assert runs.find_run(runs.list_runs(str(tmp_path / "runs")), "vertex").row()["target"] == "vertex"


@pytest.mark.parametrize("timing, field", [
    ({"step_seconds": "fast"}, "timing.step_seconds"), ({"first_step_at": 1e20}, "timing.first_step_at"),
    ({"total_steps": -1}, "timing.total_steps"), ({"step_seconds": 0}, "timing.step_seconds"),
    ([1, 2], "timing"), ({"resumes": [{"from_step": -1, "resumed_at": 5.0}]}, "timing.resumes.0.from_step"),
    ({"resumes": [{"from_step": 3, "resumed_at": 5.0, "seconds_lost": float("nan")}]}, "timing.resumes.0.seconds_lost"),
])
def test_a_bad_timing_is_a_bad_record_naming_its_field(tmp_path, timing, field):
    _run(tmp_path / "runs", "good", launch={"target": "local", "started": 1000.0, "finished": 1100.0})
    _run(tmp_path / "runs", "bad", result={**GOOD, "timing": timing})
    found = {r.name: r for r in runs.list_runs(str(tmp_path / "runs"))}
    assert found["good"].problem is None and field in found["bad"].problem, found["bad"].problem
    r = invoke(["runs", "show", "bad", "--dir", str(tmp_path / "runs")])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and field in r.stderr, r.output


def test_timings_that_cannot_hold_are_not_shown(tmp_path, monkeypatch):
    """A first step before the submission (a clock off, a record edited), no launch times: `-`, never negative."""
    monkeypatch.setattr(runs, "scalars", lambda found: {})
    _run(tmp_path / "runs", "skewed", result={**GOOD, "timing": {"first_step_at": 900.0, "step_seconds": 0.5,
                                                                 "total_steps": 10}},
         launch={"target": "local", "started": 1000.0, "finished": 1004.0})
    row = runs.list_runs(str(tmp_path / "runs"))[0].row()
    assert row["to_first_step"] is None and row["goodput"] == 1.0          # 5 s of steps in 4 s: at most 100 %
    _run(tmp_path / "runs", "no-times", result={**GOOD, "timing": {"step_seconds": 0.5, "total_steps": 10}})
    row = runs.find_run(runs.list_runs(str(tmp_path / "runs")), "no-times").row()
    assert row["goodput"] is None and row["to_first_step"] is None and row["step_seconds"] == 0.5


def test_a_continued_runs_times_are_in_order(tmp_path):
    """Issue 57: `runs show` of a run continued after an interruption said "provisioned" later than "first step" (the
    provisioned time was the second process's, the first step the first one's). A continued run's record keeps its
    first provisioned time; an older record whose provisioned time is after the first step shows none."""
    folder = _run(tmp_path / "runs", "continued", result={**GOOD, "timing": {"first_step_at": 1005.0}})
    (folder / "result.json").unlink()                 # interrupted: its record, no result yet
    runs.write_launch_record(str(folder), runs.LaunchRecord(target="local", started=1000.0, provisioned=1001.0,
                                                            state="interrupted", args=[]))
    (folder / "result.json").write_text(json.dumps({**GOOD, "timing": {"first_step_at": 1005.0}}))
    runs.write_launch_record(str(folder), runs.LaunchRecord(target="local", started=1000.0, provisioned=1060.0,
                                                            finished=1090.0, args=[]))
    assert json.loads((folder / "tpuctl-run.json").read_text())["provisioned"] == 1001.0
    shown = shown_rows(invoke(["runs", "show", "continued", "--dir", str(tmp_path / "runs")]).stdout)
    assert (shown["provisioned"], shown["first step"]) == ("1s after submission", "5s after submission"), shown

    older = _run(tmp_path / "runs", "older", result={**GOOD, "timing": {"first_step_at": 1005.0}},
                 launch={"target": "local", "started": 1000.0, "provisioned": 1060.0, "finished": 1090.0})
    row = runs.find_run(runs.list_runs(str(tmp_path / "runs")), older.name).row()
    assert row["to_provisioned"] is None and row["to_first_step"] == 5.0
