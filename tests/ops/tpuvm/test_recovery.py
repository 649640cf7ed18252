"""`tpuctl train --target tpu-vm --spot --recover N [--zones …]`: a preempted slice is deleted and re-queued (the same
zone first, then the others in the order given), the trainer resumes from the run's gs:// backup, every
preemption is one line with the time lost. Against the fake Cloud TPU API (conftest.py: one plan of states
per create) and the storage emulator, with the hosts' backup, exit files and result.json written there."""

from __future__ import annotations

import json
import re

import pytest
from resultfixtures import trainer_record, write_trainer_result

from tpuctl.services.runs.target import Report

from clifixtures import error_line, invoke
from runfixtures import planned
from tpufakes import CreateRefusal, not_offered, permission_denied, quota_exceeded

PROJECT, ZONE, ZONE_B = "my-tpu-project", "us-central1-a", "us-central1-b"
ARTIFACTS = "tpuctl-my-tpu-project-artifacts"
NAME = "tpuctl-spot-run"
RESULT = trainer_record(f"gs://{ARTIFACTS}/runs/{NAME}", 0.9)
SUSPENDED = {"state": "SUSPENDED", "stateInitiator": "SERVICE"}
NO_CAPACITY = {"state": "FAILED", "failedData": {"error": {"code": 8, "message": "There is no more capacity in the "
                                                                                   "zone \"us-central1-a\""}}}


def _qr(zone):
    return f"projects/{PROJECT}/locations/{zone}/queuedResources/{NAME}"


def _args(outputs_file, *extra):
    return ["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--spot", "--name", NAME, "--outputs", str(outputs_file),
            "--image", "us-central1-docker.pkg.dev/my-tpu-project/tpuctl-trainer/trainer-tpu:sha256-test",
            "--poll-seconds", "0.01", *extra]


def _hosts(gcs, finish_on_create: int | None):
    """The hosts' part: on each slice's first ACTIVE poll the chief backs up, a preempted slice's container
    reports its kill (143), the slice of create number ``finish_on_create`` (1-based) writes result.json."""
    bucket = gcs.bucket(ARTIFACTS)

    def on_get(fake, state, n):
        if state == "SUSPENDED":   # the preemption stops the containers
            bucket.blob(f"runs/{NAME}/tpuctl/hosts/worker-1.exit").upload_from_string("143\n")
        if state != "ACTIVE":
            return
        created = len(fake.zones_created)
        if n == 1 or (n == 0 and created == finish_on_create):
            bucket.blob(f"runs/{NAME}/checkpoints/backup/chief/checkpoint").upload_from_string(f"create {created}")
        if created == finish_on_create and n == 2:
            for worker in range(4):
                bucket.blob(f"runs/{NAME}/tpuctl/hosts/worker-{worker}.exit").upload_from_string("0\n")
            write_trainer_result(bucket, f"runs/{NAME}", RESULT)
    return on_get


def test_preempted_twice_recovers_once_in_another_zone_and_finishes(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[
        ["PROVISIONING", "ACTIVE", "ACTIVE", SUSPENDED],            # zone a: preempted mid-run
        ["ACCEPTED", NO_CAPACITY],                                   # zone a again: no capacity
        ["PROVISIONING", "ACTIVE", "ACTIVE", SUSPENDED],            # zone b: preempted too
        ["PROVISIONING", "ACTIVE", "ACTIVE", "ACTIVE"],             # zone a: trains to the end
    ], on_get=_hosts(gcs, finish_on_create=4))
    r = invoke(_args(outputs_file, "--recover", "2", "--zones", ZONE_B))
    assert r.exit_code == 0, r.output
    # One result, one export.
    assert r.stdout.splitlines() == [f"SavedModel: {RESULT['export_dir']}", "validation accuracy: 0.9000"]
    assert fake.zones_created == [ZONE, ZONE, ZONE_B, ZONE]
    # Every slice runs the same trainer command on the same gs:// folder: a re-queued slice resumes from the run's
    # backup exactly as the trainer's own kill-and-resume tests do (tests/trainer/test_step_backup.py: the resumed
    # run trains the batches an uninterrupted one would, and ends with its metrics).
    scripts = {body["tpu"]["nodeSpec"][0]["node"]["metadata"]["startup-script"] for _, _, body in fake.creates()}
    assert len(fake.creates()) == 4 and len(scripts) == 1
    assert f"--model_dir gs://{ARTIFACTS}/runs/{NAME}" in scripts.pop()
    assert [name for name, _ in fake.deleted] == [_qr(ZONE), _qr(ZONE), _qr(ZONE_B), _qr(ZONE)]
    assert all(how == {"force": ["true"]} for _, how in fake.deleted)
    err = r.stderr
    preemptions = [line for line in err.splitlines() if line.startswith("preemption ")]
    assert len(preemptions) == 2, err
    for n, (line, zone) in enumerate(zip(preemptions, [ZONE, ZONE_B]), 1):
        assert line.startswith(f"preemption {n}/2: ") and "(Spot)" in line and f"SUSPENDED in {zone}" in line, line
        # the time lost and the spend so far on the same line; it ends with the zones it re-queues in, in order
        assert re.search(r"\blost (\d+[dhm])?\d+[hms]\b", line) and re.search(r"\$\d+\.\d\d\b", line), line
        assert line.endswith(f"{ZONE}, {ZONE_B}"), line
    [refused] = [line for line in err.splitlines() if "There is no more capacity" in line]   # Google's own words
    assert f"v5litepod-16 in {ZONE}" in refused and refused.endswith(ZONE_B), refused
    assert f"recovered in {ZONE_B}: training again" in err and f"recovered in {ZONE}: training again" in err
    [summary] = [line for line in err.splitlines() if line.startswith("recovered from ")]
    assert "2 preemption(s)" in summary and "lost" in summary, summary
    # The earlier slices' exit files (143: a container killed by the preemption) did not end the run.
    assert "trainer failed" not in err
    # The history is kept with the run.
    record = json.loads(gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/tpuctl/recoveries.json").download_as_bytes())
    assert record["run"] == NAME
    assert [(h["zone"], h["resumed_zone"]) for h in record["recoveries"]] == [(ZONE, ZONE_B), (ZONE_B, ZONE)]
    assert all(h["seconds_lost"] >= 0 and h["since"] == "last backup" for h in record["recoveries"])


def test_recoveries_stop_at_recover_n(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[["ACTIVE", "ACTIVE", SUSPENDED], ["ACTIVE", "ACTIVE", SUSPENDED]],
                     on_get=_hosts(gcs, finish_on_create=None))
    r = invoke(_args(outputs_file, "--recover", "1"))
    assert r.exit_code == 1
    [line] = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert "(Spot)" in line and "--recover" in line and "1 recoveries" in line, line
    assert f"deleted queued resource {NAME}" in line
    assert fake.zones_created == [ZONE, ZONE] and [n for n, _ in fake.deleted] == [_qr(ZONE), _qr(ZONE)]


def test_without_recover_a_preemption_still_ends_the_run(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[["ACTIVE", "ACTIVE", SUSPENDED]], on_get=_hosts(gcs, finish_on_create=None))
    r = invoke(_args(outputs_file))
    assert r.exit_code == 1 and "run the same command again" in r.stderr
    assert fake.zones_created == [ZONE]


@pytest.mark.parametrize("extra, message", [
    (["--recover", "1", "--zones", "europe-west4-a"], "--zones europe-west4-a is not in us-central1"),
    (["--recover", "1", "--zones", "us-central1-b,,"], "has an empty entry"),
    (["--zones", ZONE_B], "--zones needs --recover"),
    (["--recover", "101"], "--recover"),
])
def test_bad_recovery_flags_are_one_line_and_create_nothing(outputs_file, tpu_cloud, gcs, extra, message):
    fake = tpu_cloud()
    r = invoke(_args(outputs_file, *extra))
    assert r.exit_code == 2 and message in r.output, r.output
    assert fake.creates() == []


def test_recover_needs_spot(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud()
    args = [a for a in _args(outputs_file, "--recover", "1") if a != "--spot"]
    r = invoke(args)
    assert r.exit_code == 2 and "--recover needs --spot" in r.stderr
    assert fake.creates() == []


def test_the_time_lost_is_the_training_since_the_last_backup(outputs_file, tpu_cloud, gcs):
    """Each poll is 10 minutes of (injected) training time; the hosts back up on the first ACTIVE poll and the
    preemption is seen 5, then 15 minutes (injected wall clock) after that backup: those are the times lost,
    in the run's history and on the preemption lines."""
    import time

    from ground.outputs import read_outputs_file
    from tpuctl.services.runs.target import launch
    from tpuctl.services.runs.tpuvm.target import TpuVmTarget

    now, shift = [0.0], [0.0]
    hosts = _hosts(gcs, finish_on_create=3)

    def on_get(fake, state, n):
        hosts(fake, state, n)
        if state == "SUSPENDED":
            shift[0] = 300.0 if len(fake.zones_created) == 1 else 900.0

    tpu_cloud(plans=[["ACTIVE", "ACTIVE", "ACTIVE", SUSPENDED], ["ACTIVE", "ACTIVE", "ACTIVE", SUSPENDED],
                     ["ACTIVE", "ACTIVE", "ACTIVE"]], on_get=on_get)
    run = planned("tpu-vm", read_outputs_file(outputs_file), accelerator="v5litepod-16", spot=True, recover=2,
                  name=NAME, image="us-central1-docker.pkg.dev/p/r/trainer-tpu:1")
    lines: list[str] = []
    outcome = launch(TpuVmTarget(run, Report(note=lines.append), storage=gcs, poll_seconds=0,
                                 zone_order=[ZONE, ZONE_B], sleep=lambda s: now.__setitem__(0, now[0] + 600.0),
                                 clock=lambda: now[0], wall=lambda: time.time() + shift[0]))
    assert outcome.result == RESULT
    first, second = outcome.recoveries
    assert first["zone"] == ZONE and second["zone"] == ZONE and first["resumed_zone"] == ZONE
    assert first["seconds_lost"] == pytest.approx(300, abs=5) and second["seconds_lost"] == pytest.approx(900, abs=5)
    assert first["seconds_trained"] == 1200 and first["since"] == "last backup"
    preemptions = [line for line in lines if line.startswith("preemption ")]

    def lost(line: str) -> int:
        """The seconds a line says were lost: the injected 5 or 15 minutes plus the real seconds between the
        backup's upload and the check (a second or two on a loaded machine)."""
        minutes, seconds = re.search(r"lost (\d+)m(\d+)s", line).groups()
        return int(minutes) * 60 + int(seconds)

    assert "20m00s" in preemptions[0] and 300 <= lost(preemptions[0]) <= 305 and "backup" in preemptions[0]
    assert 900 <= lost(preemptions[1]) <= 905 and "backup" in preemptions[1]
    assert "2 preemption(s)" in lines[-2] and lines[-2].endswith(" in all"), lines[-2]
    assert 1200 <= lost(lines[-2]) <= 1210, lines[-2]
    # Two slices ACTIVE 20 minutes each and the last one 10 (the injected clock: its hosts report their end and the
    # result in the poll that reads the reports, which then reads the result at once): the spend counts exactly that.
    assert lines[-1].startswith("spent $") and "50m00s" in lines[-1], lines[-1]
    assert re.search(r"\$\d+\.\d{4}/h\b", lines[-1]) and "list price" in lines[-1], lines[-1]


def test_train_target_tpu_vm_recovers_too(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[["ACTIVE", "ACTIVE", SUSPENDED], ["ACTIVE", "ACTIVE", "ACTIVE"]],
                     on_get=_hosts(gcs, finish_on_create=2))
    r = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--spot", "--recover", "1",
                "--name", NAME, "--outputs", str(outputs_file), "--poll-seconds", "0.01",
                "--image", "us-central1-docker.pkg.dev/my-tpu-project/tpuctl-trainer/trainer-tpu:sha256-test"])
    assert r.exit_code == 0, r.output
    [line] = [line for line in r.stderr.splitlines() if line.startswith("preemption 1/1: ")]
    assert "(Spot)" in line and "SUSPENDED in us-central1-a" in line, line
    assert fake.zones_created == [ZONE, ZONE]


def test_train_refuses_recover_off_tpu_vm(outputs_file, tpu_cloud):
    fake = tpu_cloud()
    r = invoke(["train", "--target", "vertex", "--recover", "1", "--outputs", str(outputs_file)])
    line = error_line(r, 2)
    assert "--recover" in line and "--target tpu-vm" in line, line
    assert fake.requests == []


def test_ctrl_c_while_recovering_deletes_the_slice_in_the_zone_it_was_queued_in(outputs_file, tpu_cloud, gcs):
    from ground.errors import UserError
    from ground.outputs import read_outputs_file
    from tpuctl.services.runs.target import launch
    from tpuctl.services.runs.tpuvm.target import TpuVmTarget

    fake = tpu_cloud(plans=[["ACTIVE", "ACTIVE", SUSPENDED], ["ACCEPTED", NO_CAPACITY], ["WAITING_FOR_RESOURCES"]],
                     on_get=_hosts(gcs, finish_on_create=None))
    run = planned("tpu-vm", read_outputs_file(outputs_file), accelerator="v5litepod-16", spot=True, recover=3,
                  name=NAME, image="us-central1-docker.pkg.dev/p/r/trainer-tpu:1")

    def progress(line):
        if line.startswith("queued: WAITING") and fake.zones_created == [ZONE, ZONE, ZONE_B]:
            raise KeyboardInterrupt

    with pytest.raises(UserError) as err:
        launch(TpuVmTarget(run, Report(note=progress), storage=gcs, poll_seconds=0.01, zone_order=[ZONE, ZONE_B]))
    assert err.value.exit_code == 130 and str(err.value) == f"interrupted; deleted queued resource {NAME}"
    assert [name for name, _ in fake.deleted] == [_qr(ZONE), _qr(ZONE), _qr(ZONE_B)]
    assert fake.resources == {}


def test_a_capacity_refusal_on_the_first_launch_moves_on_to_the_next_zone(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[["ACCEPTED", NO_CAPACITY], ["WAITING_FOR_RESOURCES", "ACTIVE", "ACTIVE", "ACTIVE"]],
                     on_get=_hosts(gcs, finish_on_create=2))
    r = invoke(_args(outputs_file, "--recover", "1", "--zones", ZONE_B))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"SavedModel: {RESULT['export_dir']}", "validation accuracy: 0.9000"]
    assert fake.zones_created == [ZONE, ZONE_B]
    assert [name for name, _ in fake.deleted] == [_qr(ZONE), _qr(ZONE_B)] and fake.resources == {}
    [refused] = [line for line in r.stderr.splitlines() if "There is no more capacity" in line]   # Google's words
    assert f"v5litepod-16 in {ZONE}" in refused and refused.endswith(ZONE_B), refused
    # Not a preemption: nothing was trained, no recovery is counted or recorded.
    assert not any(line.startswith(("preemption ", "recovered")) for line in r.stderr.splitlines()), r.stderr
    assert gcs.bucket(ARTIFACTS).get_blob(f"runs/{NAME}/tpuctl/recoveries.json") is None


def test_a_first_launch_refused_in_every_zone_is_one_line_and_leaves_nothing(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[[NO_CAPACITY], [NO_CAPACITY]], on_get=_hosts(gcs, finish_on_create=None))
    r = invoke(_args(outputs_file, "--recover", "1", "--zones", ZONE_B))
    assert r.exit_code == 1
    [line] = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert f"refused v5litepod-16 in {ZONE_B}" in line and f"deleted queued resource {NAME}" in line
    assert fake.zones_created == [ZONE, ZONE_B] and fake.resources == {}


def test_without_recover_a_first_launch_refusal_ends_the_run(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[[NO_CAPACITY]], on_get=_hosts(gcs, finish_on_create=None))
    r = invoke(_args(outputs_file))
    assert r.exit_code == 1 and f"refused v5litepod-16 in {ZONE}" in r.stderr
    assert fake.zones_created == [ZONE] and fake.resources == {}


def _host_goes(gcs, how):
    """Create 1's slice stays ACTIVE but loses a host on its third poll (``how``: "exit" writes worker-1's exit file
    143 as the container killed by the VM's shutdown; "preempted" writes what its preemption watcher reports when the
    metadata server's flag turns TRUE, test_preemption_watch.py; "node" makes the node PREEMPTED with no exit file;
    "mixed" has another host fail for real too); create 2's slice finishes."""
    hosts = _hosts(gcs, finish_on_create=2)
    bucket = gcs.bucket(ARTIFACTS)

    def on_get(fake, state, n):
        hosts(fake, state, n)
        if len(fake.zones_created) == 1 and n == 2:
            if how in ("exit", "mixed"):
                bucket.blob(f"runs/{NAME}/tpuctl/hosts/worker-1.exit").upload_from_string("143\n")
            if how == "preempted":
                bucket.blob(f"runs/{NAME}/tpuctl/hosts/worker-1.exit").upload_from_string("preempted\n")
            if how == "mixed":
                bucket.blob(f"runs/{NAME}/tpuctl/hosts/worker-2.exit").upload_from_string("1\n")
            if how == "node":
                fake.nodes[f"projects/{PROJECT}/locations/{ZONE}/nodes/{NAME}"] = {"state": "PREEMPTED"}
    return on_get


@pytest.mark.parametrize("how, what", [("exit", "host gone (worker-1 exited 143)"), ("node", "host gone (node PREEMPTED)"),
                                       ("preempted", "host gone (worker-1 reported preempted)")])
def test_a_host_gone_while_the_slice_stays_active_is_recovered(outputs_file, tpu_cloud, gcs, how, what):
    fake = tpu_cloud(plans=[["ACTIVE"] * 6, ["ACTIVE"] * 3], on_get=_host_goes(gcs, how))
    r = invoke(_args(outputs_file, "--recover", "1"))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"SavedModel: {RESULT['export_dir']}", "validation accuracy: 0.9000"]
    assert fake.zones_created == [ZONE, ZONE] and fake.resources == {}
    assert f"preemption 1/1: {what} in {ZONE} after " in r.stderr, r.stderr
    assert "trainer failed" not in r.stderr
    record = json.loads(gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/tpuctl/recoveries.json").download_as_bytes())
    assert [h["what"] for h in record["recoveries"]] == [what]


def test_without_recover_a_host_gone_ends_as_a_preemption_with_the_resume_line(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[["ACTIVE"] * 6], on_get=_host_goes(gcs, "exit"))
    r = invoke(_args(outputs_file))
    assert r.exit_code == 1
    [line] = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert "host" in line and "(worker-1 exited 143)" in line and NAME in line, line
    assert "run the same command again" in line and "trainer failed" not in line
    assert fake.zones_created == [ZONE] and fake.resources == {}


def test_a_host_that_failed_for_real_next_to_a_killed_one_is_a_trainer_failure(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[["ACTIVE"] * 6], on_get=_host_goes(gcs, "mixed"))
    r = invoke(_args(outputs_file, "--recover", "1"))
    assert r.exit_code == 1
    line = error_line(r, 1)
    assert "trainer failed" in line and "(worker-1 exited 143, worker-2 exited 1)" in line, line
    assert not any(line.startswith("preemption ") for line in r.stderr.splitlines()) and fake.zones_created == [ZONE]


# --------------------------------------------------------------------------------------------
# The create call itself refused (quota, a zone without the accelerator): conftest.FakeTpuCloud(refuse=…)
# --------------------------------------------------------------------------------------------

def _posted_zones(fake):
    return [path.split("/locations/")[1].split("/")[0] for _, path, _ in fake.creates()]


def test_the_fake_refuses_a_create_as_google_does_through_the_real_client(tpu_cloud):
    from google.api_core import exceptions

    from tpuctl.services.runs.tpuvm.api import tpu_client

    tpu_cloud(refuse={ZONE: quota_exceeded(ZONE), ZONE_B: not_offered("v5litepod-16", ZONE_B)})
    client = tpu_client()
    for zone, kind, words in [(ZONE, exceptions.TooManyRequests, "Quota limit"),
                              (ZONE_B, exceptions.BadRequest, "was not found in zone")]:
        with pytest.raises(kind) as err:
            client.create_queued_resource(parent=f"projects/{PROJECT}/locations/{zone}", queued_resource_id=NAME,
                                          queued_resource={})
        assert words in err.value.message


def test_a_create_refused_for_quota_moves_on_to_the_next_zone(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(refuse={ZONE: quota_exceeded(ZONE)}, plans=[["WAITING_FOR_RESOURCES", "ACTIVE", "ACTIVE"]],
                     on_get=_hosts(gcs, finish_on_create=1))
    r = invoke(_args(outputs_file, "--recover", "1", "--zones", ZONE_B))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"SavedModel: {RESULT['export_dir']}", "validation accuracy: 0.9000"]
    assert _posted_zones(fake) == [ZONE, ZONE_B] and fake.zones_created == [ZONE_B]
    # Nothing existed in the refusing zone: nothing to delete there.
    assert [name for name, _ in fake.deleted] == [_qr(ZONE_B)] and fake.resources == {}
    [moved] = [line for line in r.stderr.splitlines() if "(HTTP 429)" in line]
    # The refusal as Google gave it (status, its message naming the quota), then the zone tried next.
    assert f"v5litepod-16 in {ZONE} (HTTP 429)" in moved and moved.endswith(ZONE_B), moved
    assert "'TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI'" in moved, moved
    assert not any(line.startswith(("preemption ", "recovered")) for line in r.stderr.splitlines()), r.stderr
    assert gcs.bucket(ARTIFACTS).get_blob(f"runs/{NAME}/tpuctl/recoveries.json") is None


def test_a_re_queue_refused_by_the_create_call_moves_on_to_the_next_zone(outputs_file, tpu_cloud, gcs):
    hosts = _hosts(gcs, finish_on_create=2)

    def on_get(fake, state, n):
        hosts(fake, state, n)
        if state == "SUSPENDED":   # the zone's Spot quota is gone by the time the slice is queued again
            fake.refuse[ZONE] = quota_exceeded(ZONE)

    fake = tpu_cloud(plans=[["ACTIVE", "ACTIVE", SUSPENDED], ["ACTIVE", "ACTIVE", "ACTIVE"]], on_get=on_get)
    r = invoke(_args(outputs_file, "--recover", "1", "--zones", ZONE_B))
    assert r.exit_code == 0, r.output
    assert _posted_zones(fake) == [ZONE, ZONE, ZONE_B] and fake.zones_created == [ZONE, ZONE_B]
    assert [name for name, _ in fake.deleted] == [_qr(ZONE), _qr(ZONE_B)] and fake.resources == {}
    [moved] = [line for line in r.stderr.splitlines() if "(HTTP 429)" in line]     # the create call refused
    assert f"v5litepod-16 in {ZONE} (HTTP 429)" in moved and moved.endswith(ZONE_B), moved
    assert f"recovered in {ZONE_B}: training again" in r.stderr
    record = json.loads(gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/tpuctl/recoveries.json").download_as_bytes())
    assert [(h["zone"], h["resumed_zone"]) for h in record["recoveries"]] == [(ZONE, ZONE_B)]


def test_without_recover_a_create_refusal_is_one_line_and_leaves_nothing(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(refuse={ZONE: not_offered("v5litepod-16", ZONE)})
    r = invoke(_args(outputs_file))
    assert r.exit_code == 1
    [line] = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert f"v5litepod-16 in {ZONE} (HTTP 400)" in line, line
    assert "Cloud TPU received a bad request." in line and line.endswith(f"was not found in zone {ZONE}"), line
    assert _posted_zones(fake) == [ZONE] and fake.deleted == [] and fake.resources == {}


def test_a_re_queue_refused_in_every_zone_ends_with_the_resume_line(outputs_file, tpu_cloud, gcs):
    hosts = _hosts(gcs, finish_on_create=None)

    def on_get(fake, state, n):
        hosts(fake, state, n)
        if state == "SUSPENDED":
            fake.refuse.update({ZONE: quota_exceeded(ZONE), ZONE_B: not_offered("v5litepod-16", ZONE_B)})

    fake = tpu_cloud(plans=[["ACTIVE", "ACTIVE", SUSPENDED]], on_get=on_get)
    r = invoke(_args(outputs_file, "--recover", "2", "--zones", ZONE_B))
    assert r.exit_code == 1
    [line] = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert f"v5litepod-16 in {ZONE_B} (HTTP 400)" in line, line
    assert f"gs://{ARTIFACTS}/runs/{NAME}" in line and "run the same command again" in line, line
    assert _posted_zones(fake) == [ZONE, ZONE, ZONE_B] and fake.resources == {}


def test_a_bad_request_that_is_not_the_zones_does_not_move_on(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(refuse={ZONE: CreateRefusal(400, "INVALID_ARGUMENT", "Invalid value at 'queued_resource.tpu'")})
    r = invoke(_args(outputs_file, "--recover", "1", "--zones", ZONE_B))
    assert r.exit_code == 1
    [line] = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert "Google API error 400: " in line and line.endswith("Invalid value at 'queued_resource.tpu'")
    assert "trying" not in r.stderr
    assert _posted_zones(fake) == [ZONE] and fake.resources == {} and fake.deleted == []


def test_a_create_refused_for_permission_names_the_role_google_documents(outputs_file, tpu_cloud, gcs):
    # Google's Cloud TPU roles list no tpu.queuedResources.* permission (issue 42): the line names roles/tpu.admin
    # and actAs on the training account, and nothing is retried or left behind.
    fake = tpu_cloud(refuse={ZONE: permission_denied(ZONE)})
    r = invoke(_args(outputs_file))
    line = error_line(r, 2)
    assert "roles/tpu.admin" in line and "iam.serviceAccounts.actAs" in line, line
    assert "tpu.queuedResources.create" not in line, line
    assert fake.zones_created == [] and fake.resources == {}
