"""`tpuctl tpu attach NAME`: follow a managed run that another tpuctl process started and no longer watches (a
laptop that slept, a closed terminal): the slice is found in the run's zones, the result read, a preemption
recovered as the run was started (--recover, --zones), and the slice deleted at the end. Against the fake Cloud
TPU API and the storage emulator; the "other process" is a run left mid-training in this one."""

from __future__ import annotations

import json

import pytest
from resultfixtures import trainer_record, write_trainer_result

from clifixtures import error_line, invoke

PROJECT, ZONE, ZONE_B = "my-tpu-project", "us-central1-a", "us-central1-b"
ARTIFACTS = "tpuctl-my-tpu-project-artifacts"
NAME = "tpuctl-away"
# the exported epoch measured exactly (0.875); Keras' epoch-end figure was 0.8
RESULT = trainer_record(f"gs://{ARTIFACTS}/runs/{NAME}", 0.875, best_val_accuracy=0.8, last_val_accuracy=0.8)
SUSPENDED = {"state": "SUSPENDED", "stateInitiator": "SERVICE"}


class Detached(BaseException):
    """The launching process goes away without cleaning up (its cleanup runs only for Ctrl-C and errors)."""


def _qr(zone):
    return f"projects/{PROJECT}/locations/{zone}/queuedResources/{NAME}"


def _start_and_leave(outputs_file, gcs, *, recover=0, zones=()):
    """`train --target tpu-vm` of NAME that is left as soon as training starts: the slice stays, the plan is in the folder."""
    from ground.outputs import read_outputs_file
    from tpuctl.services.runs.target import launch

    from runfixtures import tpu_vm_target

    def progress(line):
        if line.startswith("training on"):
            raise Detached

    target = tpu_vm_target(read_outputs_file(outputs_file), accelerator="v5litepod-16", spot=True,
                         name=NAME, image="us-central1-docker.pkg.dev/p/r/trainer-tpu:1", recover=recover,
                         zones=",".join(zones) if zones else None, progress=progress, poll_seconds=0.01,
                         storage=gcs)
    with pytest.raises(Detached):
        launch(target)


def _finish(gcs, on_create: int, at_get: int):
    bucket = gcs.bucket(ARTIFACTS)

    def on_get(fake, state, n):
        if state == "SUSPENDED":
            bucket.blob(f"runs/{NAME}/tpuctl/hosts/worker-1.exit").upload_from_string("143\n")
        if state == "ACTIVE" and len(fake.zones_created) == on_create and n == at_get:
            for worker in range(4):
                bucket.blob(f"runs/{NAME}/tpuctl/hosts/worker-{worker}.exit").upload_from_string("0\n")
            write_trainer_result(bucket, f"runs/{NAME}", RESULT)
    return on_get


def test_attach_follows_a_run_left_mid_training_to_its_result_and_deletes_the_slice(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(states=["ACTIVE"], on_get=_finish(gcs, on_create=1, at_get=3))
    _start_and_leave(outputs_file, gcs)
    assert fake.deleted == [] and list(fake.resources) == [_qr(ZONE)]   # what a vanished process leaves
    r = invoke(["tpu", "attach", NAME, "--outputs", str(outputs_file), "--poll-seconds", "0.01"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"SavedModel: {RESULT['export_dir']}", "validation accuracy: 0.8750"]
    assert f"found queued resource {NAME} in {ZONE}: ACTIVE" in r.stderr
    assert fake.zones_created == [ZONE] and [name for name, _ in fake.deleted] == [_qr(ZONE)]


def test_attach_recovers_a_slice_preempted_while_nobody_watched(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[["ACTIVE", SUSPENDED], ["ACTIVE"]], on_get=_finish(gcs, on_create=2, at_get=1))
    _start_and_leave(outputs_file, gcs, recover=1, zones=[ZONE_B])
    r = invoke(["tpu", "attach", NAME, "--outputs", str(outputs_file), "--poll-seconds", "0.01"])
    assert r.exit_code == 0, r.output
    [line] = [line for line in r.stderr.splitlines() if line.startswith("preemption 1/1: ")]
    assert "(Spot)" in line and "SUSPENDED in us-central1-a" in line, line
    assert fake.zones_created == [ZONE, ZONE]
    assert [name for name, _ in fake.deleted] == [_qr(ZONE), _qr(ZONE)]
    record = json.loads(gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/tpuctl/recoveries.json").download_as_bytes())
    assert [h["zone"] for h in record["recoveries"]] == [ZONE]


def test_attach_to_a_run_that_never_was_is_one_line_and_touches_nothing(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud()
    r = invoke(["tpu", "attach", "tpuctl-nothing", "--outputs", str(outputs_file)])
    line = error_line(r, 2, alone=True)
    assert "TPU VM run tpuctl-nothing" in line, line
    assert fake.creates() == []


def test_attach_to_a_run_whose_slice_is_gone_says_so(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(states=["ACTIVE"])
    _start_and_leave(outputs_file, gcs)
    fake.resources.clear()          # deleted outside tpuctl meanwhile
    r = invoke(["tpu", "attach", NAME, "--outputs", str(outputs_file), "--poll-seconds", "0.01"])
    line = error_line(r, 1)
    assert f"run {NAME} " in line and "no queued resource" in line and ZONE in line, line
    assert fake.deleted == []


@pytest.mark.parametrize("args, message", [
    (["Bad_Name"], "Bad_Name"),
    ([NAME, "--model-dir", "/tmp/runs/x"], "--model-dir /tmp/runs/x: TPU VMs write to Cloud Storage"),
    ([NAME, "--model-dir", "gs://"], "bucket name is empty"),
])
def test_a_bad_name_or_model_dir_is_one_line_and_reads_nothing(outputs_file, tpu_cloud, gcs, args, message):
    fake = tpu_cloud()
    r = invoke(["tpu", "attach", *args, "--outputs", str(outputs_file)])
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and message in r.stderr, r.stderr
    assert fake.creates() == [] and fake.deleted == []


@pytest.mark.parametrize("field, value", [("budget", -1), ("budget", "NaN"), ("budget", 1e999),
                                          ("max_run_time", "-PT1H"), ("max_run_time", "PT0S")])
def test_a_tampered_plan_is_refused_before_anything_is_touched(outputs_file, tpu_cloud, gcs, field, value):
    """A run plan read back from the bucket is checked with the bounds of the flag that wrote it (issue 43: a NaN
    or negative budget or run time made attach delete the live slice at its first poll)."""
    fake = tpu_cloud(states=["ACTIVE"])
    _start_and_leave(outputs_file, gcs)
    blob = gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/tpuctl/tpu-vm-run.json")
    text = blob.download_as_text()
    plan = json.loads(text)
    plan["spec"][field] = value
    raw = json.dumps(plan).replace('"NaN"', "NaN").replace("1e999", "Infinity").replace("Infinity", "1e999")
    blob.upload_from_string(raw, content_type="application/json")
    r = invoke(["tpu", "attach", NAME, "--outputs", str(outputs_file), "--poll-seconds", "0.01"])
    line = error_line(r, 2, alone=True)
    assert "tpu-vm-run.json" in line and f"spec.{field}" in line, line
    assert fake.deleted == [] and list(fake.resources) == [_qr(ZONE)]


def _backdate(gcs, hours: float) -> float:
    """The run's plan says its first slice was queued ``hours`` ago (a run started long before the attach): when."""
    blob = gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/tpuctl/tpu-vm-run.json")
    plan = json.loads(blob.download_as_text())
    plan["submitted"] -= hours * 3600
    blob.upload_from_string(json.dumps(plan), content_type="application/json")
    return plan["submitted"]


def _epochs_logged(logs, submitted: float) -> None:
    """Host 0 (the chief) logged two epochs of 12 s each, the first 50 minutes before the attach; host 1 its own."""
    from loggingfakes import docker_entry

    lines = [(0, "epoch-start: 1/2"), (6, "progress: 1/1"), (12, "epoch-end: 1/2 accuracy=0.6000 loss=0.8000 "
                                                                "val_accuracy=0.7000"),
             (600, "epoch-start: 2/2"), (612, "epoch-end: 2/2 accuracy=0.7000 loss=0.7000 val_accuracy=0.8000")]
    for i, (after, text) in enumerate(lines):
        logs.add(docker_entry(PROJECT, NAME, 0, text, submitted + 600 + after, 2 * i))
        logs.add(docker_entry(PROJECT, NAME, 1, "epoch-start: 9/9", submitted + 600 + after, 2 * i + 1))


def test_attach_shows_the_live_display_from_the_runs_start(outputs_file, tpu_cloud, gcs, logging_api):
    """The epochs done before the attach (read from the run's first submission, not from now) are epoch lines, timed
    by their log entries; the run summary follows, as after `train`. Host 1's lines drive nothing."""
    tpu_cloud(states=["ACTIVE"], on_get=_finish(gcs, on_create=1, at_get=3))
    _start_and_leave(outputs_file, gcs)
    logs = logging_api()
    _epochs_logged(logs, _backdate(gcs, 1.0))
    r = invoke(["tpu", "attach", NAME, "--outputs", str(outputs_file), "--poll-seconds", "0.01"])
    assert r.exit_code == 0, r.output
    err = r.stderr.splitlines()
    epochs = [line for line in err if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["epoch 1/2", "epoch 2/2"], r.stderr
    assert epochs[0].endswith("(12.0s)") and "val_accuracy=0.7000" in epochs[0], epochs
    summary = err[err.index("run summary"):]
    assert summary[1].split() == ["best", "val_accuracy", "0.8000", "(epoch", "2)"], summary
    assert "9/9" not in r.stderr and "epoch-start" not in r.stderr       # protocol lines drive, they are not shown
    assert r.stdout.splitlines() == [f"SavedModel: {RESULT['export_dir']}", "validation accuracy: 0.8750"]
    # host 0's lines, from the run's start (an hour ago) on
    assert all('tpuctl_worker="0"' in q["filter"] for q in logs.requests)


def test_attach_verbose_shows_the_raw_log_lines(outputs_file, tpu_cloud, gcs, logging_api):
    tpu_cloud(states=["ACTIVE"], on_get=_finish(gcs, on_create=1, at_get=3))
    _start_and_leave(outputs_file, gcs)
    _epochs_logged(logging_api(), _backdate(gcs, 1.0))
    r = invoke(["tpu", "attach", NAME, "-v", "--outputs", str(outputs_file), "--poll-seconds", "0.01"])
    assert r.exit_code == 0, r.output
    raw = [line for line in r.stderr.splitlines() if line.startswith("[host 0] ")]
    assert raw[0] == "[host 0] epoch-start: 1/2" and len(raw) == 5, r.stderr
    assert not [line for line in r.stderr.splitlines() if line.startswith("epoch ")]


def test_attach_with_unreadable_logs_is_one_note_and_goes_on(outputs_file, tpu_cloud, gcs, logging_api):
    fake = tpu_cloud(states=["ACTIVE"], on_get=_finish(gcs, on_create=1, at_get=3))
    _start_and_leave(outputs_file, gcs)
    logging_api(deny=True)
    r = invoke(["tpu", "attach", NAME, "--outputs", str(outputs_file), "--poll-seconds", "0.01"])
    assert r.exit_code == 0, r.output
    notes = [line for line in r.stderr.splitlines() if line.startswith("note: ") and "Cloud Logging" in line]
    assert len(notes) == 1 and "no live progress" in notes[0] and "logging.logEntries.list" in notes[0], r.stderr
    assert r.stdout.splitlines() == [f"SavedModel: {RESULT['export_dir']}", "validation accuracy: 0.8750"]
    assert [name for name, _ in fake.deleted] == [_qr(ZONE)]
