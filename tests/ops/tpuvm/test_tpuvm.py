"""`tpuctl train --target tpu-vm`, `tpuctl tpu list|delete` against the real TpuClient (REST) on a local fake of the Cloud TPU API and
the storage emulator: the request parses strictly into tpu_v2.QueuedResource, tpuctl waits and reports, and
it deletes what it created on success, refusal, preemption, timeout and Ctrl-C."""

from __future__ import annotations

import json
import subprocess

import pytest
from google.cloud import tpu_v2, tpu_v2alpha1
from resultfixtures import trainer_record, write_trainer_result

from ground.envs import ops_python
from ground.errors import UserError
from ground.outputs import read_outputs_file
from tpuctl.services.runs.target import Report, launch
from tpuctl.services.runs.tpuvm.script import build_queued_resource, startup_script
from tpuctl.services.runs.tpuvm.target import TpuVmTarget

from clifixtures import invoke, sigint_as_ctrl_c
from procfixtures import interrupt_when
from runfixtures import planned, tpu_vm_target

# The stack of the `outputs_file` fixture (conftest.py).
PROJECT, ZONE = "my-tpu-project", "us-central1-a"
ARTIFACTS, DATA = "tpuctl-my-tpu-project-artifacts", "tpuctl-my-tpu-project-data"
SA = "tpuctl-trainer@my-tpu-project.iam.gserviceaccount.com"

NAME = "tpuctl-test-run"
QR = f"projects/{PROJECT}/locations/{ZONE}/queuedResources/{NAME}"
RESULT = trainer_record(f"gs://{ARTIFACTS}/runs/{NAME}", 0.875, export_name="model")
FAST = ["--poll-seconds", "0.01"]


def _run_args(outputs_file, *extra):
    return ["train", "--target", "tpu-vm", "--accelerator", "v5litepod-16", "--name", NAME, "--outputs", str(outputs_file),
            "--image", "us-central1-docker.pkg.dev/my-tpu-project/tpuctl-trainer/trainer-tpu:sha256-test",
            *FAST, *extra]


def _write(gcs, path: str, text: str) -> None:
    gcs.bucket(ARTIFACTS).blob(path).upload_from_string(text)


def _strict(body: dict, version: str = "v2"):
    """What the fake received, parsed into Google's own type of the API version it went to; unknown fields fail. A
    v5e slice goes to v2alpha1: the only version with Autocheckpoint (``Node.autocheckpoint_enabled``)."""
    types = tpu_v2alpha1 if version == "v2alpha1" else tpu_v2
    return types.QueuedResource.from_json(json.dumps(body), ignore_unknown_fields=False)


def _created(fake, n: int = 0):
    """The n-th create the fake received, parsed strictly by the version of its URL."""
    _, url, body = fake.creates()[n]
    return _strict(body, url.split("/")[1])


def _hosts_finish(gcs, after: int = 2):
    """The TPU hosts' part: the chief writes result.json after the slice has been ACTIVE for a few polls."""
    active = []

    def on_get(fake, state, n):
        if state == "ACTIVE":
            active.append(n)
            if len(active) == after:
                write_trainer_result(gcs.bucket(ARTIFACTS), f"runs/{NAME}", RESULT)
    return on_get


def _error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_dry_run_prints_a_request_google_types_accept(outputs_file, monkeypatch):
    monkeypatch.delenv("TPUCTL_TPU_ENDPOINT", raising=False)
    r = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--spot", "--name", NAME, "--outputs", str(outputs_file),
                "--dry-run", "--epochs", "3", "--", "--learning_rate", "0.01"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    resource = _strict(doc["queuedResource"], doc["apiVersion"])
    assert doc["apiVersion"] == "v2alpha1" and resource.tpu.node_spec[0].node.autocheckpoint_enabled   # a v5e slice
    assert doc["parent"] == f"projects/{PROJECT}/locations/{ZONE}" and doc["queuedResourceId"] == NAME
    assert "spot" in resource and "guaranteed" not in resource
    spec = resource.tpu.node_spec[0]
    node = spec.node
    assert spec.parent == doc["parent"] and spec.node_id == NAME
    assert node.accelerator_type == "v5litepod-16" and node.runtime_version == "v2-alpha-tpuv5-lite"
    assert node.service_account.email == SA
    assert list(node.service_account.scope) == ["https://www.googleapis.com/auth/cloud-platform"]
    assert dict(node.labels) == {"managed-by": "tpuctl", "tpuctl-run": NAME, "stack": "dev", "tpuctl-command": "train",
                                 "accelerator": "tpu-v5e-16", "model": "small_cnn"}
    script = node.metadata["startup-script"]
    assert doc["hosts"] == 4 and doc["hostCommand"] in script
    command = doc["hostCommand"]
    assert command.startswith("docker run --rm --net=host --privileged ")
    # the image of `tpuctl image build --variant tpu` for the current sources
    assert doc["image"].startswith("us-central1-docker.pkg.dev/my-tpu-project/tpuctl-trainer/trainer-tpu:sha256-")
    for piece in ("--distribution_strategy tpu", f"--data_dir gs://{DATA}",
                  f"--model_dir gs://{ARTIFACTS}/runs/{NAME}", "--train_epochs 3", "--learning_rate 0.01",
                  f"-e TPU_NAME={NAME}", "-e TF_USE_LEGACY_KERAS=1", 'TPUCTL_TPU_WORKER="$WORKER"'):
        assert piece in command, piece
    assert "agent-worker-number" in script and f'gs://{ARTIFACTS}/runs/{NAME}/tpuctl/hosts/worker-"$WORKER".exit' in script
    assert "gcloud auth configure-docker us-central1-docker.pkg.dev" in script


def test_the_stack_tpu_zone_is_the_default_zone(outputs_file, tmp_path, monkeypatch):
    monkeypatch.delenv("TPUCTL_TPU_ENDPOINT", raising=False)
    doc = json.loads(outputs_file.read_text())
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps({**doc, "tpu_zone": "us-west4-a"}))     # tpuctl:tpuZone, outside the region
    r = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--name", NAME, "--outputs", str(moved), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["parent"] == f"projects/{PROJECT}/locations/us-west4-a"
    r = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--name", NAME, "--outputs", str(moved), "--zone", ZONE,
                "--dry-run"])
    assert json.loads(r.stdout)["parent"] == f"projects/{PROJECT}/locations/{ZONE}"      # --zone still wins
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**doc, "tpu_zone": "us-west4"}))
    r = invoke(["tpu", "list", "--outputs", str(bad)])
    assert r.exit_code == 2 and "tpu_zone" in r.stderr and r.stderr.count("\n") == 1


def test_single_host_on_demand_uses_the_local_tpu(outputs_file):
    run = planned("tpu-vm", read_outputs_file(outputs_file), accelerator="v6e-8", name=NAME,
                         image="img:1")
    resource = build_queued_resource(run)
    assert "spot" not in resource and "guaranteed" not in resource
    assert run.env["TPU_NAME"] == "local" and run.slice.vms == 1
    assert resource.tpu.node_spec[0].node.runtime_version == "v2-alpha-tpuv6e"


@pytest.mark.parametrize("accelerator, pjrt", [("v5litepod-8", True), ("v5p-8", True), ("v6e-8", True),
                                               ("v4-8", False)])
def test_tensorflow_gets_the_pjrt_switch_wherever_google_documents_pjrt(outputs_file, accelerator, pjrt):
    # Google documents TensorFlow on v6e, v5e and v5p only through PJRT (its -pjrt TPU software versions,
    # docs/frameworks-on-tpus.md); v4 and older keep TensorFlow's default runtime (issue 42: v5e only before).
    run = planned("tpu-vm", read_outputs_file(outputs_file), accelerator=accelerator, name=NAME,
                         image="img:1")
    wanted = {"NEXT_PLUGGABLE_DEVICE_USE_C_API": "true", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/lib/libtpu.so"}
    assert (wanted.items() <= run.env.items()) is pjrt and (pjrt or not wanted.keys() & run.env.keys())
    if pjrt:   # and the startup script passes them to the container
        script = startup_script(run)
        assert all(f"{k}={v}" in script for k, v in wanted.items()), script


@pytest.mark.parametrize("args, message", [
    (["-a", "tpu-v3-8"], "run through Vertex AI"),
    (["-a", "v5litepod-16", "--zone", "us-central1"], "zone 'us-central1'"),
    (["-a", "v5litepod-16", "--data-dir", "/tmp/data"], "gs://BUCKET/PATH"),
    (["-a", "v5litepod-16", "--name", "Bad_Name"], "--name 'Bad_Name'"),
    (["-a", "v5litepod-16", "stray"], "trainer flags go after `--`"),
])
def test_bad_input_is_one_line_and_creates_nothing(outputs_file, tpu_cloud, args, message):
    fake = tpu_cloud()
    r = invoke(["train", "--target", "tpu-vm", *args, "--outputs", str(outputs_file), "--image", "img:1"])
    assert r.exit_code == 2 and message in _error_line(r)
    assert fake.requests == []


def test_success_waits_reports_and_deletes(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(states=["ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"],
                     on_get=_hosts_finish(gcs))
    r = invoke(_run_args(outputs_file, "--", "--train_epochs", "2"))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"SavedModel: {RESULT['export_dir']}", "validation accuracy: 0.8750"]
    progress = r.stderr
    assert progress.index("queued: ACCEPTED") < progress.index("provisioning") < progress.index("\nactive")
    assert "queued: WAITING" not in progress  # one line per phase
    assert f"waiting for gs://{ARTIFACTS}/runs/{NAME}/result.json" in progress
    assert f"deleted queued resource {NAME}" in progress
    # one create, parsed strictly, with the id in the query; one forced delete of exactly that resource
    (_, path, _), = fake.creates()
    assert f"queuedResourceId={NAME}" in path
    resource = _created(fake)
    assert resource.tpu.node_spec[0].node_id == NAME and "spot" not in resource
    assert fake.deleted == [(QR, {"force": ["true"]})]


def test_keep_keeps_the_slice_and_says_how_to_delete_it(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(states=["PROVISIONING", "ACTIVE"], on_get=_hosts_finish(gcs, after=1))
    r = invoke(_run_args(outputs_file, "--keep"))
    assert r.exit_code == 0, r.output
    assert fake.deleted == [] and QR in fake.resources
    assert f"`tpuctl tpu delete {NAME} --zone {ZONE}`" in r.stderr and "billed" in r.stderr


def test_refusal_reports_the_apis_reason_and_deletes(outputs_file, tpu_cloud, gcs):
    reason = "There is no more capacity in the zone \"us-central1-a\"; you can try in another zone"
    fake = tpu_cloud(states=["ACCEPTED", {"state": "FAILED", "failedData": {"error": {"code": 8, "message": reason}}}])
    r = invoke(_run_args(outputs_file))
    assert r.exit_code == 1
    line = _error_line(r)
    assert "refused v5litepod-16 in us-central1-a" in line and "no more capacity" in line
    assert f"deleted queued resource {NAME}" in line
    assert fake.deleted == [(QR, {"force": ["true"]})]


def test_spot_preemption_says_how_to_resume_and_deletes(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(states=["PROVISIONING", "ACTIVE", "ACTIVE",
                             {"state": "SUSPENDING", "stateInitiator": "SERVICE"},
                             {"state": "SUSPENDED", "stateInitiator": "SERVICE"}])
    r = invoke(_run_args(outputs_file, "--spot"))
    assert r.exit_code == 1
    line = _error_line(r)
    assert "(Spot)" in line and f"gs://{ARTIFACTS}/runs/{NAME}" in line, line     # where the checkpoints are
    assert "again" in line and f"--name {NAME}" in line, line                     # how to resume
    assert fake.deleted == [(QR, {"force": ["true"]})]
    assert "spot" in _created(fake)


def test_a_failed_host_ends_the_run(outputs_file, tpu_cloud, gcs):
    def on_get(fake, state, n):
        if state == "ACTIVE":
            _write(gcs, f"runs/{NAME}/tpuctl/hosts/worker-0.exit", "0\n")
            _write(gcs, f"runs/{NAME}/tpuctl/hosts/worker-2.exit", "3\n")

    fake = tpu_cloud(states=["ACTIVE"], on_get=on_get)
    r = invoke(_run_args(outputs_file))
    assert r.exit_code == 1
    line = _error_line(r)
    assert "trainer failed" in line and "(worker-2 exited 3)" in line, line
    assert [name for name, _ in fake.deleted] == [QR]


def test_a_chief_that_ends_well_without_its_completion_record_fails_the_run(outputs_file, tpu_cloud, gcs):
    """Issue 56: a plug-in that ends the trainer with exit status 0 (at import, in its model function, os._exit(0))
    leaves no result.json. The chief host's exit 0 without the trainer's completion record is a failure at once (it
    was a wait until --max-run-time, the slice billed), the slice deleted; other hosts still training change
    nothing."""
    def on_get(fake, state, n):
        if state == "ACTIVE":
            _write(gcs, f"runs/{NAME}/tpuctl/hosts/worker-0.exit", "0\n")

    fake = tpu_cloud(states=["ACTIVE"], on_get=on_get)
    r = invoke(_run_args(outputs_file))
    assert r.exit_code == 1
    line = _error_line(r)
    assert "worker-0 exited 0 without the trainer's completion record" in line and "result.json" in line, line
    assert "SavedModel" not in r.stdout and [name for name, _ in fake.deleted] == [QR]


def test_a_users_program_ends_when_every_host_reported_exit_0(outputs_file, tpu_cloud, gcs, tmp_path, monkeypatch):
    """--command: the user's program writes no completion record of the trainer's; the run ends well when every
    host of the slice reported exit 0 (four VMs of v5litepod-16), not before."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hello')\n")
    monkeypatch.chdir(project)
    reported = []

    def on_get(fake, state, n):
        if state == "ACTIVE" and len(reported) < 4:
            _write(gcs, f"runs/{NAME}/tpuctl/hosts/worker-{len(reported)}.exit", "0\n")
            reported.append(n)

    fake = tpu_cloud(states=["ACTIVE"], on_get=on_get)
    r = invoke(_run_args(outputs_file, "--command", "python train.py"))
    assert r.exit_code == 0, r.output
    assert len(reported) == 4 and "training finished" in r.stdout
    assert [name for name, _ in fake.deleted] == [QR]


def test_provisioning_timeout_names_what_it_waited_for(outputs_file, tpu_cloud, gcs):
    """--max-wait 2m, each status read half a minute apart (an injected clock)."""
    fake = tpu_cloud(states=["WAITING_FOR_RESOURCES"])
    now = [0.0]
    target = tpu_vm_target(read_outputs_file(outputs_file), accelerator="v5litepod-16", name=NAME, image="img:1",
                           max_wait="2m", storage=gcs, poll_seconds=0, progress=lambda _: None,
                           sleep=lambda _: now.__setitem__(0, now[0] + 30), clock=lambda: now[0])
    with pytest.raises(UserError) as err:
        launch(target)
    assert err.value.exit_code == 1
    msg = str(err.value)
    assert "WAITING_FOR_RESOURCES" in msg and "120 s" in msg, msg             # the state it stayed in, how long
    assert "v5litepod-16 in us-central1-a" in msg and "ACTIVE" in msg, msg     # what it waited for
    assert [name for name, _ in fake.deleted] == [QR]


def test_an_existing_name_is_refused_and_left_alone(outputs_file, tpu_cloud, gcs):
    existing = {"name": QR, "state": {"state": "ACTIVE"}, "tpu": {"nodeSpec": [{"parent": f"projects/{PROJECT}/locations/{ZONE}",
                "nodeId": NAME, "node": {"acceleratorType": "v5litepod-16", "labels": {"managed-by": "tpuctl"}}}]}}
    fake = tpu_cloud(existing=[existing])
    r = invoke(_run_args(outputs_file))
    assert r.exit_code == 2 and "already exists" in _error_line(r)
    assert fake.creates() == [] and fake.deleted == []


def test_ctrl_c_in_process_deletes_and_exits_130(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(states=["ACCEPTED", "PROVISIONING"])
    run = planned("tpu-vm", read_outputs_file(outputs_file), accelerator="v5litepod-16", name=NAME,
                         image="img:1")

    def progress(line):
        if line == "provisioning":
            raise KeyboardInterrupt

    with pytest.raises(UserError) as err:
        launch(TpuVmTarget(run, Report(note=progress), poll_seconds=0.01))
    assert err.value.exit_code == 130 and str(err.value) == f"interrupted; deleted queued resource {NAME}"
    assert [name for name, _ in fake.deleted] == [QR]


def test_sigint_to_a_real_process_deletes_what_it_created(outputs_file, tpu_cloud, gcs):
    fake = tpu_cloud(states=["WAITING_FOR_RESOURCES"])
    script = ("import sys\nfrom tpuctl import cli\nfrom tpuctl.commands import tpu\n"
              "if not any(g.name == 'tpu' for g in cli.app.registered_groups):\n    tpu.register(cli.app)\n"
              "sys.exit(cli.run(sys.argv[1:]))\n")
    import os

    env = {**os.environ, **fake.env()}
    proc = subprocess.Popen([str(ops_python()), "-c", script, *_run_args(outputs_file, "--poll-seconds", "0.05")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_ctrl_c)
    out, err = interrupt_when(proc, lambda: bool(fake.creates() and fake.gets),
                              "the process created the queued resource", timeout=60)
    assert proc.returncode == 130, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    [line] = errors
    assert "interrupted" in line and line.endswith(f"deleted queued resource {NAME}"), err
    assert "Traceback" not in err
    assert [name for name, _ in fake.deleted] == [QR]


def test_list_and_delete_touch_only_tpuctl_resources(outputs_file, tpu_cloud):
    parent = f"projects/{PROJECT}/locations/{ZONE}"

    def resource(rid, labels, spot=False):
        body = {"name": f"{parent}/queuedResources/{rid}", "createTime": "2026-11-22T10:00:00Z",
                "state": {"state": "ACTIVE"},
                "tpu": {"nodeSpec": [{"parent": parent, "nodeId": rid,
                                      "node": {"acceleratorType": "v5litepod-8", "labels": labels}}]}}
        if spot:
            body["spot"] = {}
        return body

    fake = tpu_cloud(existing=[resource("ours", {"managed-by": "tpuctl", "tpuctl-run": "ours"}, spot=True),
                               resource("theirs", {"team": "research"})])
    r = invoke(["tpu", "list", "--outputs", str(outputs_file), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [{"name": "ours", "state": "ACTIVE", "accelerator": "v5litepod-8", "spot": True,
                                     "run": "ours", "create_time": "2026-11-22T10:00:00+00:00", "tier": "spot"}]
    r = invoke(["tpu", "list", "--outputs", str(outputs_file)])
    assert r.exit_code == 0 and "ours" in r.stdout and "theirs" not in r.stdout

    r = invoke(["tpu", "delete", "theirs", "--outputs", str(outputs_file)])
    assert r.exit_code == 2 and "not created by tpuctl" in _error_line(r)
    r = invoke(["tpu", "delete", "missing", "--outputs", str(outputs_file)])
    assert r.exit_code == 2
    line = _error_line(r)
    assert "no queued resource" in line and "missing" in line and "us-central1-a" in line, line
    assert fake.deleted == []
    r = invoke(["tpu", "delete", "ours", "--outputs", str(outputs_file)])
    assert r.exit_code == 0 and f"deleting {parent}/queuedResources/ours" in r.stdout
    assert fake.deleted == [(f"{parent}/queuedResources/ours", {"force": ["true"]})]


def test_a_finished_run_is_refused_and_an_interrupted_ones_host_reports_do_not_end_the_wait(outputs_file, tpu_cloud,
                                                                                            gcs):
    """The same --name again continues an interrupted run; a finished one (its result.json) is refused before
    anything is created, since training there again would start over. The hosts' exit files of the interrupted
    launch stay: an earlier failed host is not this launch's."""
    write_trainer_result(gcs.bucket(ARTIFACTS), f"runs/{NAME}", {**RESULT, "val_accuracy": 0.5})
    fake = tpu_cloud(states=["PROVISIONING", "ACTIVE"], on_get=_hosts_finish(gcs, after=3))
    r = invoke(_run_args(outputs_file))
    assert r.exit_code == 2 and "holds a finished run" in _error_line(r) and fake.creates() == []
    gcs.bucket(ARTIFACTS).blob(f"runs/{NAME}/result.json").delete()
    _write(gcs, f"runs/{NAME}/tpuctl/hosts/worker-1.exit", "137\n")
    r = invoke(_run_args(outputs_file))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"SavedModel: {RESULT['export_dir']}", "validation accuracy: 0.8750"]
    assert fake.gets[QR] >= 4   # provisioning, then ACTIVE until the new result.json appeared on the third
