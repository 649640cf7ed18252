"""`runs show RUN` prints a TPU VM run's recovery history (`<model_dir>/tpuctl/recoveries.json`, written by
`tpu run --recover`): zone, what happened, time lost. The file is validated on read; a bad one is one line."""

from __future__ import annotations

import json
import os

import pytest

from tpuctl.services.runs import records as runs

from clifixtures import invoke, shown_rows

GOOD = {"export_dir": "gs://b/runs/spot/export/small_cnn/1", "val_accuracy": 0.9, "epochs": 3}
HISTORY = {"run": "spot", "recoveries": [
    {"zone": "us-central1-a", "what": "preempted (Spot), SUSPENDED", "seconds_trained": 600.0,
     "seconds_lost": 42.0, "since": "last backup", "resumed_zone": "us-central1-b", "seconds_down": 95.0},
    {"zone": "us-central1-b", "what": "FAILED: host gone", "seconds_trained": 300.0, "seconds_lost": 18.5,
     "since": "last backup", "resumed_zone": "us-central1-a", "seconds_down": 60.0, "spent_usd": 2.55},
]}


@pytest.fixture(autouse=True)
def _no_curves(monkeypatch):
    monkeypatch.setattr(runs, "scalars", lambda found: {})   # curves need the trainer environment: not read here


def _run(base, history):
    folder = base / "spot"
    (folder / "tpuctl").mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps(GOOD))
    (folder / "tpuctl-run.json").write_text(json.dumps({"target": "tpu-vm"}))
    if history is not None:
        (folder / "tpuctl" / "recoveries.json").write_text(history if isinstance(history, str) else json.dumps(history))
    return folder


_rows = shown_rows          # `runs show`'s rows, label -> value


def _recovery(row: str, what: str, zone: str, resumed: str, *figures: str) -> None:
    """A recovery row: what happened (the record's words) in which zone, then where it resumed, and its figures
    (time trained, time lost, downtime, spend)."""
    assert row.startswith(what) and zone in row and resumed in row, row
    assert row.index(zone) < row.index(resumed, row.index(zone) + len(zone)), row
    assert all(figure in row for figure in figures), (figures, row)


def test_show_prints_each_recovery_with_its_zone_and_time_lost(tmp_path):
    _run(tmp_path, HISTORY)
    r = invoke(["runs", "show", "spot", "--dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    rows = _rows(r.stdout)
    _recovery(rows["recovery 1"], "preempted (Spot), SUSPENDED", "us-central1-a", "us-central1-b",
              "10m00s", "lost 42s", "last backup", "1m35s")
    _recovery(rows["recovery 2"], "FAILED: host gone", "us-central1-b", "us-central1-a", "1m00s", "$2.55")
    assert "$" not in rows["recovery 1"]      # no spend recorded for it, none shown
    assert rows["time lost"].startswith("1m00s") and "2 preemption(s)" in rows["time lost"], rows


def test_a_run_without_recoveries_shows_none(tmp_path):
    _run(tmp_path, None)
    r = invoke(["runs", "show", "spot", "--dir", str(tmp_path)])
    assert r.exit_code == 0 and "recovery" not in r.stdout and "time lost" not in r.stdout


@pytest.mark.parametrize("bad, says", [
    ('{"recoveries": [{"zone": "a", "what": "x", "seconds_trained": "long", "seconds_lost": 1.0}]}',
     "recoveries.0.seconds_trained"),
    ('{"recoveries": [{"zone": "a", "what": "x", "seconds_trained": 1.0, "seconds_lost": NaN}]}',
     "recoveries.0.seconds_lost"),
    ('{"recoveries": [{"zone": "a", "what": "x", "seconds_trained": 1.0, "seconds_lost": 1.0, "spent_usd": -3}]}',
     "recoveries.0.spent_usd"),
    ('{"run": "spot"}', "recoveries: Field required"),
    ("[" * 100_000, "not valid JSON"),
    ('{"recoveries": [', "not valid JSON"),
    ("fifo", "not a regular file"),
    ("link", "links out of the run folder"),
])
def test_a_bad_history_is_one_line_never_a_traceback(tmp_path, bad, says):
    folder = _run(tmp_path, None if bad in ("fifo", "link") else bad)
    if bad == "fifo":
        os.mkfifo(folder / "tpuctl" / "recoveries.json")
    elif bad == "link":
        (folder / "tpuctl" / "recoveries.json").symlink_to("/etc/hostname")
    r = invoke(["runs", "show", "spot", "--dir", str(tmp_path)])
    assert r.exit_code != 0 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "recoveries.json" in r.stderr and says in r.stderr, r.stderr


def test_show_reads_the_history_of_a_run_in_a_bucket(monkeypatch):
    from gcsfixtures import emulated_buckets

    with emulated_buckets(monkeypatch, ("runs-bucket",)) as client:
        bucket = client.bucket("runs-bucket")
        bucket.blob("runs/spot/result.json").upload_from_string(json.dumps(GOOD))
        bucket.blob("runs/spot/tpuctl/recoveries.json").upload_from_string(json.dumps(HISTORY))
        bucket.blob("runs/huge/result.json").upload_from_string(json.dumps(GOOD))
        bucket.blob("runs/huge/tpuctl/recoveries.json").upload_from_string(b" " * (runs.MAX_RUN_FILE_BYTES + 1))
        found = {r.name: r for r in runs.list_runs("gs://runs-bucket/runs", storage_client=client)}
        assert [e["resumed_zone"] for e in runs.recoveries(found["spot"], storage_client=client)] == [
            "us-central1-b", "us-central1-a"]
        r = invoke(["runs", "show", "spot", "--dir", "gs://runs-bucket/runs"])
        assert r.exit_code == 0, r.output
        _recovery(_rows(r.stdout)["recovery 1"], "preempted (Spot), SUSPENDED", "us-central1-a", "us-central1-b",
                  "lost 42s", "last backup")
        r = invoke(["runs", "show", "huge", "--dir", "gs://runs-bucket/runs"])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "larger than" in r.stderr, r.stderr
