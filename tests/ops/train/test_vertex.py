"""`tpuctl train --target vertex` against a local stand-in for the Vertex AI REST API (real aiplatform_v1
JobServiceClient, REST transport, TPUCTL_VERTEX_ENDPOINT) and gcp-storage-emulator (nothing is staged: the job runs
an image)."""

from __future__ import annotations

import json

import pytest
from google.cloud.aiplatform_v1 import AcceleratorType, CustomJob
from resultfixtures import trainer_record

from ground import domain

from clifixtures import error_line, invoke_as_process

PROJECT = "my-project-1"
STAGING = "tpuctl-my-project-1-staging"
OUTPUTS = {
    "project": PROJECT, "project_number": "123456789012", "region": "us-central1", "zone": "us-central1-b",
    "buckets": {"data": "tpuctl-my-project-1-data", "staging": STAGING,
                "artifacts": "tpuctl-my-project-1-artifacts", "hub-cache": "tpuctl-my-project-1-hub-cache"},
    "training_service_account": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
    "tfhub_cache_dir": "gs://tpuctl-my-project-1-hub-cache/model-cache",
    "labels": {"app": "tpuctl", "env": "test"},
}
def _error_line(proc) -> str:
    [line] = [l for l in proc.stderr.splitlines() if l.startswith("error: ")]
    return line


CREATE_PATH = f"/v1/projects/{PROJECT}/locations/us-central1/customJobs"
#: An image tpuctl did not build (--image): Vertex AI's to find, so no registry is asked (the trainer's own image
#: and its build: test_vertex_container.py).
IMAGE = "us-docker.pkg.dev/my-project-1/team-images/trainer:7"


@pytest.fixture
def vertex(gcs, fake_vertex, tmp_path, tools):
    url, client = gcs
    client.create_bucket(STAGING)
    client.create_bucket(OUTPUTS["buckets"]["artifacts"])   # the runs' folders: the trainer writes its result there
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))

    class Ctx:
        storage = client
        fake = None

        @staticmethod
        def run(*args, **fake_kw):
            Ctx.fake = fake_vertex(**fake_kw)
            env = {"TPUCTL_VERTEX_ENDPOINT": Ctx.fake.url, "STORAGE_EMULATOR_HOST": url}
            return invoke_as_process(["train", "--target", "vertex", "--outputs", str(outputs), "--poll-seconds",
                                      "0.01", "--image", IMAGE, *args], env=env, cwd=tmp_path)

        @staticmethod
        def staged():
            return [b.name for b in client.list_blobs(STAGING)]

    return Ctx


ENV = [{"name": "TFHUB_CACHE_DIR", "value": "gs://tpuctl-my-project-1-hub-cache/model-cache"},
       {"name": "TF_USE_LEGACY_KERAS", "value": "1"}]


def _expected(job, accelerator, pools, args):
    body = {
        "displayName": job,
        "jobSpec": {
            "workerPoolSpecs": [],
            "serviceAccount": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
            "baseOutputDirectory": {"outputUriPrefix": f"gs://tpuctl-my-project-1-artifacts/runs/{job}"},
        },
        "labels": {"app": "tpuctl", "env": "test", "tpuctl-command": "train", "accelerator": accelerator,
                   "model": "small_cnn", "managed-by": "tpuctl", "tpuctl-run": job},
    }
    for machine, replicas, env in pools:
        body["jobSpec"]["workerPoolSpecs"].append({
            "machineSpec": machine,
            "replicaCount": str(replicas),
            "containerSpec": {"imageUri": IMAGE, "args": args, "env": env},
        })
    return body


def test_tpu_v3_8_job_body_upload_and_follow(vertex):
    proc = vertex.run("--accelerator", "tpu-v3-8", "--name", "flowers-tpu", "--epochs", "10")
    assert proc.returncode == 0, proc.stderr
    posts = vertex.fake.posts()
    assert len(posts) == 1 and posts[0][1] == CREATE_PATH
    assert posts[0][2] == _expected(
        "flowers-tpu", "tpu-v3-8",
        [({"machineType": "cloud-tpu", "acceleratorType": int(AcceleratorType.TPU_V3), "acceleratorCount": 8}, 1,
          ENV + [{"name": "TPU_NAME", "value": "local"}])],
        ["--distribution_strategy", "tpu", "--data_dir", "gs://tpuctl-my-project-1-data",
         "--model_dir", "gs://tpuctl-my-project-1-artifacts/runs/flowers-tpu", "--train_epochs", "10"],
    )
    # Followed until it ended, with the console link printed.
    gets = [r for r in vertex.fake.requests if r[0] == "GET"]
    assert len(gets) == 3
    states = [line.split()[-1] for line in proc.stdout.splitlines() if "JOB_STATE_" in line]
    assert states == ["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"], proc.stdout
    assert ("console: https://console.cloud.google.com/agent-platform/locations/us-central1/training/1000"
            "?project=my-project-1") in proc.stdout
    assert vertex.staged() == []       # the image carries the trainer: nothing is staged


def test_two_t4_gpu_job_body(vertex):
    proc = vertex.run("--accelerator", "gpu-t4x2", "--name", "t4-pair")
    assert proc.returncode == 0, proc.stderr
    assert vertex.fake.posts()[0][2] == _expected(
        "t4-pair", "gpu-t4x2",
        [({"machineType": "n1-standard-16", "acceleratorType": int(AcceleratorType.NVIDIA_TESLA_T4),
           "acceleratorCount": 2}, 1, ENV)],
        ["--distribution_strategy", "gpu", "--num_gpus", "2", "--data_dir", "gs://tpuctl-my-project-1-data",
         "--model_dir", "gs://tpuctl-my-project-1-artifacts/runs/t4-pair"],
    )


def test_multi_worker_gpu_job_body_and_dry_run_equals_submitted(vertex):
    args = ("--accelerator", "gpu-l4", "--workers", "3", "--name", "l4-cluster", "--", "--learning_rate", "0.01")
    dry = vertex.run("--dry-run", *args)
    assert dry.returncode == 0, dry.stderr
    assert vertex.fake.requests == [] and vertex.staged() == []  # dry run: nothing uploaded or sent

    proc = vertex.run(*args)
    assert proc.returncode == 0, proc.stderr
    posted = vertex.fake.posts()[0][2]
    machine = {"machineType": "g2-standard-8", "acceleratorType": int(AcceleratorType.NVIDIA_L4), "acceleratorCount": 1}
    assert posted == _expected(
        "l4-cluster", "gpu-l4", [(machine, 1, ENV), (machine, 2, ENV)],
        # no --num_gpus: each worker uses every GPU it has, and the trainer refuses a GPU count beside multi_worker
        # (this job's workers all failed at start until the planner read its command line with the trainer's parser)
        ["--distribution_strategy", "multi_worker", "--data_dir", "gs://tpuctl-my-project-1-data",
         "--model_dir", "gs://tpuctl-my-project-1-artifacts/runs/l4-cluster", "--learning_rate", "0.01"],
    )
    printed = json.loads(dry.stdout)
    assert printed["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] == "NVIDIA_L4"
    assert CustomJob.from_json(json.dumps(printed)) == CustomJob.from_json(json.dumps(posted))


def test_tpu_v5e_uses_machine_type_and_topology_in_region(vertex):
    dry = vertex.run("--dry-run", "--accelerator", "tpu-v5e-4", "--region", "us-west4", "--name", "v5e")
    assert dry.returncode == 0, dry.stderr
    pool = json.loads(dry.stdout)["jobSpec"]["workerPoolSpecs"]
    assert len(pool) == 1
    assert pool[0]["machineSpec"] == {"machineType": "ct5lp-hightpu-4t", "tpuTopology": "2x2"}
    assert pool[0]["containerSpec"]["imageUri"] == IMAGE


def test_a_region_googles_table_does_not_list_is_a_warning_naming_the_tables_date(vertex):
    # tpu-v3-8 in europe-west1: Google's locations table lists no TPU v3 there, and marks nothing either
    dry = vertex.run("--dry-run", "--accelerator", "tpu-v3-8", "--region", "europe-west1", "--name", "v3")
    assert dry.returncode == 0, dry.stderr
    warning = [line for line in dry.stderr.splitlines() if line.startswith("warning: tpu-v3-8 in europe-west1")]
    assert warning and f"as read on {domain.vertex_tables().read_on.isoformat()}" in warning[0]
    assert "us-central1" in warning[0]
    assert vertex.fake.requests == []


@pytest.mark.parametrize("args, fragment", [
    (["--accelerator", "tpu-v4-8"], "unknown accelerator 'tpu-v4-8'"),
    (["--accelerator", "tpu-v5e-4", "--region", "europe-west4"], "not available for training in europe-west4"),
    (["--accelerator", "gpu-l4", "--region", "us-west4"], "not available for training in us-west4"),
    (["--accelerator", "gpu-p100"], "reached its end of support on 2026-09-15"),
    (["--accelerator", "tpu-v5e-4", "--workers", "2"], "--workers 2 cannot be combined with tpu-v5e-4"),
    (["--accelerator", "gpu-t4x8"], "comes in counts 1, 2, 4"),
    (["--data-dir", "/local/data"], "a Vertex AI job reads from Cloud Storage"),
    (["--model-dir", "runs/x"], "a Vertex AI job writes to Cloud Storage"),
    (["--hub-cache-dir", "/home/me/hub"], "a Vertex AI job reads hub models from Cloud Storage"),
    (["--name", "Bad_Name"], "--name 'Bad_Name'"),
])
def test_bad_input_fails_before_any_upload_or_request(vertex, args, fragment):
    proc = vertex.run(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ") and fragment in proc.stderr
    assert vertex.fake.requests == []
    assert vertex.staged() == []


def test_vertex_needs_stack_outputs(tools, tmp_path):
    proc = tools.run_cli(["train", "--target", "vertex", "--dry-run"], cwd=tmp_path)
    line = error_line(proc, 2)
    assert "--target vertex" in line and "--stack NAME" in line and "--outputs FILE" in line, line


def test_failed_job_is_reported_with_its_error(vertex):
    proc = vertex.run("--accelerator", "gpu", "--name", "doomed",
                      states=("JOB_STATE_RUNNING", "JOB_STATE_FAILED"), error="The replica workerpool0-0 exited with a non-zero status of 3.")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "projects/my-project-1/locations/us-central1/customJobs/1000" in last
    assert "JOB_STATE_FAILED" in last, last
    assert "exited with a non-zero status of 3" in last


def test_a_job_that_succeeds_without_the_trainers_completion_record_fails(vertex):
    """Issue 56: a plug-in that ends the trainer with status 0 (os._exit(0) in its model function) makes the job
    SUCCEEDED to Vertex AI, but the trainer wrote no result.json: the run failed, one line, exit 1, nothing shown as
    a result. With the record, the run's result is shown as a local run's is."""
    proc = vertex.run("--accelerator", "gpu", "--name", "no-record", result=None)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = _error_line(proc)
    assert "JOB_STATE_SUCCEEDED" in line and "no completion record" in line and "no-record/result.json" in line, line
    assert "SavedModel" not in proc.stdout
    done = vertex.run("--accelerator", "gpu", "--name", "with-record")
    assert done.returncode == 0, done.stderr
    assert f"SavedModel: gs://{OUTPUTS['buckets']['artifacts']}/runs/with-record/export/small_cnn/1" in done.stdout
    assert "validation accuracy: 0.8750" in done.stdout


@pytest.mark.parametrize(("forge", "export", "key"), [
    # a plug-in that wrote a record of its own shape into the run's folder and ended the process (a sixth trial)
    (lambda folder, args: {"export_dir": f"{folder}/export/small_cnn/1", "val_accuracy": 1.0}, True, "'exported_epoch'"),
    # the trainer's shape, no SavedModel where it says: nothing a launcher could serve
    (lambda folder, args: trainer_record(folder), False, "saved_model.pb"),
    # another run's record and export (its folder elsewhere in the bucket)
    (lambda folder, args: trainer_record(folder.replace("/runs/", "/runs/other-")), True, "not in the run's folder"),
])
def test_a_job_whose_completion_record_does_not_stand_fails(vertex, forge, export, key):
    """Issue 56: Vertex AI's SUCCEEDED and a result.json are a finished run only when the record is the trainer's of
    this run (every field, this --model) and names a SavedModel in the run's own folder, as a local run's is."""
    proc = vertex.run("--accelerator", "gpu", "--name", "forged", result=forge, write_export=export)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = _error_line(proc)
    assert "does not stand" in line and key in line, line
    assert "SavedModel" not in proc.stdout and "validation accuracy" not in proc.stdout


def test_no_wait_submits_and_returns(vertex):
    proc = vertex.run("--name", "fire-and-forget", "--no-wait")
    assert proc.returncode == 0, proc.stderr
    assert [r[0] for r in vertex.fake.requests] == ["POST"]
    body = vertex.fake.posts()[0][2]
    assert body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] == {"machineType": "n1-standard-4"}
    # cpu, the default on Vertex AI: the same strategy a local `-a cpu` run gets
    assert body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"][:2] == ["--distribution_strategy", "cpu"]
    assert "console: https://console.cloud.google.com/" in proc.stdout


def test_transient_errors_while_following_are_retried(vertex):
    proc = vertex.run("--name", "flaky", unavailable_gets=2)
    assert proc.returncode == 0, proc.stderr
    gets = [r for r in vertex.fake.requests if r[0] == "GET"]
    assert len(gets) == 2 + 3  # two 503s retried, then PENDING, RUNNING, SUCCEEDED
    assert "state: JOB_STATE_SUCCEEDED" in proc.stdout
