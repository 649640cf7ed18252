"""`--provisioning`, `--reservation` and `--max-wait` on TPU VM slices: the queued resource as Google's types define it
(v2 for on-demand, Spot and reservations; v2alpha1 for flex-start, which only that version can express), created
through the real clients on the fake Cloud TPU API (conftest.py) and followed to the end; a slice still queued after
--max-wait moves to the next of --zones with --recover, and ends the run in one line without it."""

from __future__ import annotations

import json
import time

import pytest
from google.cloud import tpu_v2, tpu_v2alpha1
from resultfixtures import trainer_record, write_trainer_result

from ground.errors import UserError
from ground.outputs import read_outputs_file
from tpuctl.services.runs.target import Report, launch
from tpuctl.services.runs.tpuvm.target import TpuVmTarget

from clifixtures import error_line, invoke
from runfixtures import planned

PROJECT, ZONE, ZONE_B = "my-tpu-project", "us-central1-a", "us-central1-b"
ARTIFACTS = "tpuctl-my-tpu-project-artifacts"
NAME = "tpuctl-cap-run"
IMAGE = "us-central1-docker.pkg.dev/my-tpu-project/tpuctl-trainer/trainer-tpu:sha256-test"
RESULT = trainer_record(f"gs://{ARTIFACTS}/runs/{NAME}", 0.9)
#: what google-cloud-tpu 1.27's v2alpha1 types lack; the Cloud SDK's schema checks them (tests/ops/gcloud)
ALPHA_ONLY = ("provisioningModel", "runDuration")


def _qr(zone):
    return f"projects/{PROJECT}/locations/{zone}/queuedResources/{NAME}"


def _dry_run(outputs_file, *extra, accelerator="v6e-16") -> dict:
    """A dry run of a slice (v6e: no Autocheckpoint, so the v2 API unless flex-start)."""
    r = invoke(["train", "--target", "tpu-vm", "-a", accelerator, "--name", NAME, "--outputs", str(outputs_file),
                "--image", IMAGE, "--dry-run", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("extra, tier, reservation", [
    (["--provisioning", "on-demand"], None, ""),
    (["--provisioning", "spot"], "spot", ""),
    (["--spot"], "spot", ""),
    (["--reservation", "any"], None, f"projects/{PROJECT}/locations/{ZONE}/reservations/-"),
    (["--reservation", "team-v5e"], None, f"projects/{PROJECT}/locations/{ZONE}/reservations/team-v5e"),
    (["--reservation", "projects/shared-host/zones/us-central1-a/reservations/pool"], None,
     "projects/shared-host/locations/us-central1-a/reservations/pool"),
])
def test_v2_requests_parse_strictly(outputs_file, monkeypatch, extra, tier, reservation):
    monkeypatch.delenv("TPUCTL_TPU_ENDPOINT", raising=False)
    doc = _dry_run(outputs_file, *extra)
    assert doc["apiVersion"] == "v2"
    resource = tpu_v2.QueuedResource.from_json(json.dumps(doc["queuedResource"]), ignore_unknown_fields=False)
    assert ("spot" in resource) is (tier == "spot") and "guaranteed" not in resource
    assert resource.reservation_name == reservation


def test_a_flex_start_request_is_v2alpha1(outputs_file, monkeypatch):
    monkeypatch.delenv("TPUCTL_TPU_ENDPOINT", raising=False)
    doc = _dry_run(outputs_file, "--provisioning", "flex-start", "--max-wait", "90m", "--max-run-time", "3d")
    assert doc["apiVersion"] == "v2alpha1"
    body = doc["queuedResource"]
    assert body["provisioningModel"] == "FLEX_START" and body["runDuration"] == {"maxRunDuration": "259200s"}
    known = {k: v for k, v in body.items() if k not in ALPHA_ONLY}
    resource = tpu_v2alpha1.QueuedResource.from_json(json.dumps(known), ignore_unknown_fields=False)
    assert resource.queueing_policy.valid_until_duration.total_seconds() == 5400
    assert "spot" not in resource and "guaranteed" not in resource and not resource.reservation_name
    assert resource.tpu.node_spec[0].node.accelerator_type == "v6e-16"
    assert not resource.tpu.node_spec[0].node.autocheckpoint_enabled      # v6e: Google does not offer it


@pytest.mark.parametrize("extra, says", [
    (["--reservation", "projects/p-1234/zones/us-central1-f/reservations/r"], "--zone us-central1-f"),
    (["--reservation", "r1", "--spot", "--recover", "1", "--zones", ZONE_B], "--reservation"),
    (["--reservation", "r1", "--provisioning", "spot"], "--reservation runs on reserved capacity"),
    (["--recover", "1"], "--recover needs --spot or --provisioning flex-start"),
])
def test_what_a_model_rules_out_is_one_line(outputs_file, tpu_cloud, extra, says):
    fake = tpu_cloud()
    r = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--name", NAME, "--outputs", str(outputs_file),
                "--image", IMAGE, *extra])
    line = error_line(r, 2, alone=True)
    assert says in line, line
    assert fake.requests == []


def test_a_flex_start_zone_google_does_not_list_is_a_note(outputs_file, monkeypatch):
    monkeypatch.delenv("TPUCTL_TPU_ENDPOINT", raising=False)
    r = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--name", NAME, "--outputs", str(outputs_file),
                "--image", IMAGE, "--dry-run", "--provisioning", "flex-start"])
    assert r.exit_code == 0 and "request-using-flex-start" in r.stderr and "us-west4-a" in r.stderr, r.stderr


def _finish(gcs, on_create: int):
    """The hosts: the slice of create number ``on_create`` writes its exit reports and result.json once ACTIVE."""
    bucket = gcs.bucket(ARTIFACTS)

    def on_get(fake, state, n):
        if state == "ACTIVE" and len(fake.zones_created) == on_create:
            for worker in range(4):
                bucket.blob(f"runs/{NAME}/tpuctl/hosts/worker-{worker}.exit").upload_from_string("0\n")
            write_trainer_result(bucket, f"runs/{NAME}", RESULT)
    return on_get


@pytest.mark.parametrize("extra, path", [
    (["--provisioning", "flex-start"], "/v2alpha1/"), (["--reservation", "any"], "/v2/"),
    (["--provisioning", "on-demand"], "/v2/"), (["--provisioning", "spot"], "/v2/")])
def test_each_model_is_created_followed_to_the_end_and_deleted(outputs_file, tpu_cloud, gcs, extra, path):
    fake = tpu_cloud(plans=[["WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"]], on_get=_finish(gcs, 1))
    r = invoke(["train", "--target", "tpu-vm", "-a", "v6e-16", "--name", NAME, "--outputs", str(outputs_file),
                "--image", IMAGE, "--poll-seconds", "0.01", *extra])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == f"SavedModel: {RESULT['export_dir']}"
    [(_, url, body)] = fake.creates()
    assert url.startswith(f"{path}projects/{PROJECT}/locations/{ZONE}/queuedResources?"), url
    if path == "/v2/":
        tpu_v2.QueuedResource.from_json(json.dumps(body), ignore_unknown_fields=False)
    else:
        assert body["provisioningModel"] == "FLEX_START"
        assert "autocheckpointEnabled" not in body["tpu"]["nodeSpec"][0]["node"]
        tpu_v2alpha1.QueuedResource.from_json(json.dumps({k: v for k, v in body.items() if k not in ALPHA_ONLY}),
                                              ignore_unknown_fields=False)
    assert [name for name, _ in fake.deleted] == [_qr(ZONE)]


def test_tpu_list_names_a_flex_start_slice_as_such(outputs_file, tpu_cloud, gcs):
    """v2 (what `tpu list` reads through) has no flex-start field: the slice's label says it."""
    fake = tpu_cloud(plans=[["WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"]], on_get=_finish(gcs, 1))
    r = invoke(["train", "--target", "tpu-vm", "-a", "v6e-16", "--name", NAME, "--outputs", str(outputs_file),
                "--image", IMAGE, "--poll-seconds", "0.01", "--provisioning", "flex-start"])
    assert r.exit_code == 0, r.output
    [(_, _, body)] = fake.creates()
    assert body["tpu"]["nodeSpec"][0]["node"]["labels"]["tpuctl-provisioning"] == "flex-start"
    # the slice as the v2 API lists it while it runs: what v2 knows of the request (no provisioningModel)
    listed = {"name": _qr(ZONE), "createTime": "2026-11-27T10:00:00Z", "state": {"state": "ACTIVE"},
              "tpu": body["tpu"]}
    tpu_cloud(existing=[listed])
    r = invoke(["tpu", "list", "--outputs", str(outputs_file), "--json"])
    assert r.exit_code == 0, r.output
    assert [(row["name"], row["tier"], row["spot"]) for row in json.loads(r.stdout)] == [(NAME, "flex-start", False)]


def _target(outputs_file, gcs, lines, now, **flags) -> TpuVmTarget:
    """A flex-start run whose clock moves 10 minutes per poll (no real waiting)."""
    run = planned("tpu-vm", read_outputs_file(outputs_file), accelerator="v5litepod-16", name=NAME, image=IMAGE,
                  provisioning="flex-start", max_wait="30m", **flags)
    return TpuVmTarget(run, Report(note=lines.append), storage=gcs, poll_seconds=0, zone_order=[ZONE, ZONE_B],
                       sleep=lambda s: now.__setitem__(0, now[0] + 600.0), clock=lambda: now[0],
                       wall=time.time)


def test_a_flex_start_wait_past_max_wait_moves_to_the_next_zone_with_recover(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[["WAITING_FOR_RESOURCES"], ["WAITING_FOR_RESOURCES", "ACTIVE"]], on_get=_finish(gcs, 2))
    lines: list[str] = []
    outcome = launch(_target(outputs_file, gcs, lines, [0.0], recover=1, zones=ZONE_B))
    assert outcome.result == RESULT and outcome.recoveries == []      # nothing was trained: no recovery counted
    assert fake.zones_created == [ZONE, ZONE_B]
    assert all("/v2alpha1/" in url for _, url, _ in fake.creates())
    assert [name for name, _ in fake.deleted] == [_qr(ZONE), _qr(ZONE_B)]
    [moved] = [line for line in lines if "--max-wait" in line]
    assert "WAITING_FOR_RESOURCES" in moved and ZONE in moved and moved.endswith(f"trying {ZONE_B}"), moved


def test_without_recover_a_flex_start_wait_past_max_wait_ends_in_one_line(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[["WAITING_FOR_RESOURCES"]])
    with pytest.raises(UserError) as info:
        launch(_target(outputs_file, gcs, [], [0.0]))
    message = str(info.value)
    assert "\n" not in message and info.value.exit_code == 1
    assert "--max-wait" in message and "WAITING_FOR_RESOURCES" in message and "1800 s" in message, message
    assert f"deleted queued resource {NAME}" in message, message
    assert fake.zones_created == [ZONE] and [name for name, _ in fake.deleted] == [_qr(ZONE)]


def test_a_flex_start_slice_has_no_price_and_refuses_a_budget_in_one_line(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud()
    r = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--name", NAME, "--outputs", str(outputs_file),
                "--image", IMAGE, "--provisioning", "flex-start", "--budget", "10"])
    line = error_line(r, 2)
    assert "--budget" in line and "flex-start" in line, line
    assert "flex-start" in r.stderr.splitlines()[0] and fake.creates() == []


@pytest.mark.parametrize("accelerator, extra, version, enabled", [
    ("v5litepod-16", [], "v2alpha1", True),                    # v5e: Google offers Autocheckpoint
    ("v4-8", ["--spot"], "v2alpha1", True),
    ("v5litepod-16", ["--no-autocheckpoint"], "v2", False),
    ("v6e-8", [], "v2", False),                                # not offered: v2, as before
    ("v5p-8", [], "v2", False),
])
def test_autocheckpoint_is_requested_where_the_api_offers_it(outputs_file, monkeypatch, accelerator, extra, version,
                                                            enabled):
    monkeypatch.delenv("TPUCTL_TPU_ENDPOINT", raising=False)
    doc = _dry_run(outputs_file, *extra, accelerator=accelerator)
    assert doc["apiVersion"] == version
    types = tpu_v2alpha1 if version == "v2alpha1" else tpu_v2
    resource = types.QueuedResource.from_json(json.dumps(doc["queuedResource"]), ignore_unknown_fields=False)
    assert getattr(resource.tpu.node_spec[0].node, "autocheckpoint_enabled", False) is enabled


def test_an_autocheckpoint_slice_is_created_through_v2alpha1_and_followed_to_the_end(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(plans=[["PROVISIONING", "ACTIVE"]], on_get=_finish(gcs, 1))
    r = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--name", NAME, "--outputs", str(outputs_file),
                "--image", IMAGE, "--poll-seconds", "0.01", "--spot"])
    assert r.exit_code == 0, r.output
    [(_, url, body)] = fake.creates()
    assert url.startswith("/v2alpha1/")
    resource = tpu_v2alpha1.QueuedResource.from_json(json.dumps(body), ignore_unknown_fields=False)
    assert resource.tpu.node_spec[0].node.autocheckpoint_enabled and "spot" in resource
    assert "Autocheckpoint" in r.stderr and [name for name, _ in fake.deleted] == [_qr(ZONE)]
