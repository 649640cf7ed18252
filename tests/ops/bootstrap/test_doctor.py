"""tpuctl doctor against the local fake Google APIs: one line per check, fixes, exit status."""

from __future__ import annotations

import base64
import hashlib
import json

import google_crc32c

from ground import domain

from clifixtures import invoke

PROJECT = "my-proj-1"
NUMBER = "777000777"
AGENT = f"service-{NUMBER}@gcp-sa-tpu.iam.gserviceaccount.com"
SA = f"tpuctl-trainer@{PROJECT}.iam.gserviceaccount.com"
HANDLE = "https://tfhub.dev/google/tiny/1"
REQUIRED = ["tpu.googleapis.com", "aiplatform.googleapis.com", "storage.googleapis.com", "iam.googleapis.com",
            "cloudquotas.googleapis.com", "serviceusage.googleapis.com", "compute.googleapis.com",
            "artifactregistry.googleapis.com", "cloudbuild.googleapis.com"]


def run(*args):
    return invoke(args)


def setup(fake, iam_admin, tmp_path, data_roles):
    fake.add_project(PROJECT, NUMBER, [{"role": "roles/cloudtpu.serviceAgent", "members": [f"serviceAccount:{AGENT}"]}])
    fake.services[PROJECT] = set(REQUIRED)
    iam_admin.accounts[SA] = {"project": PROJECT}
    key = hashlib.sha1(HANDLE.encode()).hexdigest()
    fake.add_bucket("p-data", [{"role": r, "members": [f"serviceAccount:{AGENT}", f"serviceAccount:{SA}"]}
                               for r in data_roles])
    fake.add_bucket("p-art", [{"role": "roles/storage.objectUser",
                               "members": [f"serviceAccount:{AGENT}", f"serviceAccount:{SA}"]}])
    # a complete model folder as `hub-cache add` leaves it: the file, then its manifest (written last)
    crc = base64.b64encode(google_crc32c.Checksum(b"0123456789").digest()).decode()
    manifest = domain.hub_manifest(HANDLE, {"saved_model.pb": (10, crc)}, "test", None).encode()
    fake.add_bucket("p-hub", [{"role": "roles/storage.objectViewer",
                               "members": [f"serviceAccount:{AGENT}", f"serviceAccount:{SA}"]}],
                    objects=[{"name": f"model-cache/{key}/saved_model.pb", "size": "10", "crc32c": crc},
                             {"name": f"model-cache/{key}/{domain.HUB_MANIFEST}", "size": str(len(manifest)),
                              "data": manifest}])
    fake.quota_preferences[PROJECT] = [{
        "name": "t4", "quotaId": "NVIDIA-T4-GPUS-per-project-region", "dimensions": {"region": "us-central1"},
        "quotaConfig": {"preferredValue": "4", "grantedValue": "4"}, "service": "compute.googleapis.com"}]
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({
        "project": PROJECT, "project_number": NUMBER,
        "buckets": {"data": "p-data", "artifacts": "p-art", "hub-cache": "p-hub"},
        "principals": {"tpu-vm-agent": AGENT, "training-sa": SA},
        "hub_cache_prefix": "model-cache", "hub_models": [HANDLE],
    }))
    return outputs


def test_doctor_reports_missing_objects_get_with_fix_then_passes(fake, google_env, iam_admin, tmp_path):
    # the classic tutorial roles: legacy bucket reader/writer give no storage.objects.get
    outputs = setup(fake, iam_admin, tmp_path, ["roles/storage.legacyBucketReader"])
    r = run("doctor", "--outputs", str(outputs))
    assert r.exit_code == 1, r.output
    lines = r.stdout.splitlines()
    fails = [line for line in lines if line.startswith("FAIL")]
    assert fails == [
        "FAIL  tpu-vm-agent on gs://p-data (data): missing storage.objects.get (has: roles/storage.legacyBucketReader)"
        f"  -> fix: tpuctl grant-access --project {PROJECT} --read-bucket p-data --principal tpu-vm-agent --yes",
        "FAIL  training-sa on gs://p-data (data): missing storage.objects.get (has: roles/storage.legacyBucketReader)"
        f"  -> fix: tpuctl grant-access --project {PROJECT} --read-bucket p-data --principal training-sa --yes",
    ]
    assert any(line.startswith("PASS  credentials:") for line in lines)
    assert "PASS  apis: all 9 required APIs enabled" in lines
    assert f"PASS  tpu-vm-agent exists: {AGENT} (holds IAM bindings)" in lines
    assert f"PASS  training-sa exists: {SA}" in lines
    assert any(line.startswith(f"PASS  hub cache {HANDLE}:") for line in lines)
    assert "PASS  quota compute.googleapis.com/NVIDIA-T4-GPUS-per-project-region [region=us-central1]: 4 granted" in lines
    assert "2 check(s) failed" in r.stderr

    # the fix it printed works
    fix = run("grant-access", "--project", PROJECT, "--read-bucket", "p-data", "--principal", "tpu-vm-agent",
              "--principal", "training-sa", "--outputs", str(outputs), "--yes")
    assert fix.exit_code == 0, fix.output
    r = run("doctor", "--outputs", str(outputs))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == "all checks passed"


def test_doctor_fails_on_apis_missing_hub_model_and_sa(fake, google_env, iam_admin, tmp_path):
    outputs = setup(fake, iam_admin, tmp_path, ["roles/storage.objectViewer"])
    fake.services[PROJECT] -= {"tpu.googleapis.com", "cloudquotas.googleapis.com"}
    fake.buckets["p-hub"]["objects"] = []
    del iam_admin.accounts[SA]
    fake.quota_preferences[PROJECT][0]["reconciling"] = True
    r = run("doctor", "--outputs", str(outputs))
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert ("FAIL  apis: not enabled: tpu.googleapis.com, cloudquotas.googleapis.com  -> fix: gcloud services "
            f"enable tpu.googleapis.com cloudquotas.googleapis.com --project {PROJECT}") in lines
    assert (f"FAIL  hub cache {HANDLE}: not in the cache (no saved_model.pb)  -> fix: tpuctl hub-cache add {HANDLE} "
            "--bucket p-hub --prefix model-cache") in lines
    assert any(line.startswith(f"FAIL  training-sa exists: {SA} does not exist  -> fix: gcloud iam service-accounts create tpuctl-trainer")
               for line in lines)
    assert any(line.startswith("WARN  quota compute.googleapis.com/NVIDIA-T4") and "under review" in line
               for line in lines)
    assert fake.set_calls == {}           # doctor only reads


def test_doctor_needs_a_target():
    r = run("doctor")
    assert r.exit_code == 2 and "--stack" in r.stderr


def test_a_missing_tpu_vm_agent_says_google_also_creates_it_with_the_first_tpu_vm():
    from bootstrap import doctor

    [check] = doctor.check_agent("tpu-vm-agent", AGENT, domain.SERVICE_AGENTS["tpu-vm-agent"], PROJECT,
                                 "us-central1-a", False, None)
    assert check.status == "fail"
    assert check.detail.endswith("it may not exist yet (Google also creates it with the project's first TPU VM)")
    assert check.fix.startswith(f"gcloud compute tpus tpu-vm service-identity create --zone=us-central1-a --project={PROJECT}")


def test_a_principal_that_cannot_pull_is_told_where_it_pulls(monkeypatch, tmp_path):
    # Vertex AI pulls with its service agent (a custom service account cannot pull); the training SA pulls only
    # on TPU VM hosts (vertex-ai/docs/general/custom-service-account)
    from bootstrap import doctor

    from buildfakes import FakeBuildCloud
    from httpfakes import fake_factory

    agent = f"service-{NUMBER}@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"
    with fake_factory(FakeBuildCloud, monkeypatch, ["TPUCTL_ARTIFACTREGISTRY_ENDPOINT"],
                      credentials=tmp_path / "none.json") as make:
        fake = make()
        fake.repositories[f"projects/{PROJECT}/locations/us-central1/repositories/imgs"] = []
        checks = {c.name: c for c in doctor.check_image_repository(
            PROJECT, "us-central1", "imgs", {"training-sa": SA, "vertex-agent": agent})}
    assert checks["training-sa pulls from imgs"].detail == (
        f"serviceAccount:{SA} cannot pull the trainer image for TPU VMs (docker pull on the host as the VM's "
        "service account)")
    vertex_line = checks["vertex-agent pulls from imgs"].detail
    assert vertex_line.startswith(
        f"serviceAccount:{agent} cannot pull the trainer image for Vertex AI jobs (Vertex pulls with its service agent")
    # which Vertex agent pulls is not on Google's page: the line does not hide that it rests on tpuctl's reading
    assert "that it is this agent is unconfirmed" in vertex_line
