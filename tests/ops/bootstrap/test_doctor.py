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
            "artifactregistry.googleapis.com", "cloudbuild.googleapis.com", "cloudbilling.googleapis.com"]


def run(*args):
    return invoke(args)


def _checks(stdout: str) -> dict[str, tuple[str, str, str | None]]:
    """doctor's report by check name: (status, detail, fix). Its line format (doctor.Check.line) is
    ``STATUS  name: detail`` with ``  -> fix: command`` after a failure or a warning."""
    checks = {}
    for line in stdout.splitlines():
        status, sep, rest = line.partition("  ")
        if status in ("PASS", "FAIL", "WARN") and sep:
            name, _, detail = rest.partition(": ")
            detail, _, fix = detail.partition("  -> fix: ")
            checks[name] = (status, detail, fix or None)
    return checks


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
    checks = _checks(r.stdout)
    failed = {name: (detail, fix) for name, (status, detail, fix) in checks.items() if status == "FAIL"}
    assert sorted(failed) == ["tpu-vm-agent on gs://p-data (data)", "training-sa on gs://p-data (data)"], r.stdout
    for principal in ("tpu-vm-agent", "training-sa"):
        detail, fix = failed[f"{principal} on gs://p-data (data)"]
        # the permission missing, the role it has instead; the fix is the exact command
        assert "storage.objects.get" in detail and "roles/storage.legacyBucketReader" in detail, detail
        assert fix == f"tpuctl grant-access --project {PROJECT} --read-bucket p-data --principal {principal} --yes"
    assert checks["credentials"][0] == "PASS"
    assert checks["apis"][0] == "PASS" and str(len(REQUIRED)) in checks["apis"][1]
    status, detail, _ = checks["tpu-vm-agent exists"]
    assert status == "PASS" and detail.startswith(AGENT) and "IAM bindings" in detail, detail
    assert checks["training-sa exists"][:2] == ("PASS", SA)
    assert checks[f"hub cache {HANDLE}"][0] == "PASS"
    status, detail, _ = checks["quota compute.googleapis.com/NVIDIA-T4-GPUS-per-project-region [region=us-central1]"]
    assert status == "PASS" and "4 granted" in detail, detail
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
    checks = _checks(r.stdout)
    status, detail, fix = checks["apis"]          # the APIs not enabled; the fix is the exact command
    assert status == "FAIL" and "tpu.googleapis.com, cloudquotas.googleapis.com" in detail, detail
    assert fix == f"gcloud services enable tpu.googleapis.com cloudquotas.googleapis.com --project {PROJECT}"
    status, detail, fix = checks[f"hub cache {HANDLE}"]
    assert status == "FAIL" and "saved_model.pb" in detail, detail
    assert fix == f"tpuctl hub-cache add {HANDLE} --bucket p-hub --prefix model-cache"
    status, detail, fix = checks["training-sa exists"]
    assert status == "FAIL" and detail.startswith(SA) and fix.startswith("gcloud iam service-accounts create "
                                                                       "tpuctl-trainer"), (detail, fix)
    assert any(line.startswith("WARN  quota compute.googleapis.com/NVIDIA-T4") and "under review" in line
               for line in lines)
    assert fake.set_calls == {}           # doctor only reads


def test_a_training_account_that_cannot_write_logs_is_a_warning_with_its_fix(fake, google_env, iam_admin, tmp_path):
    # TPU VM hosts log through Docker's gcplogs driver as the VM's service account (the training account), Vertex AI
    # jobs run as it: without logging.logEntries.create their lines never reach Cloud Logging, the run still trains
    outputs = setup(fake, iam_admin, tmp_path, ["roles/storage.objectViewer"])
    policy = fake.projects[PROJECT]["policy"]
    member = f"serviceAccount:{SA}"
    # a conditional grant is not counted (the access model's rule), nor a role without the permission
    policy["bindings"] += [{"role": "roles/logging.logWriter", "members": [member],
                            "condition": {"title": "t", "expression": "request.time < timestamp('2027-01-01T00:00:00Z')"}},
                           {"role": "roles/logging.viewer", "members": [member]}]
    r = run("doctor", "--outputs", str(outputs))
    assert r.exit_code == 0, r.output              # a warning: everything else passes, the run would train
    status, detail, fix = _checks(r.stdout)["training-sa writes logs"]
    assert status == "WARN" and detail.startswith(f"{member} lacks {domain.LOG_WRITE_PERMISSION} on {PROJECT}"), detail
    assert "tpuctl logs" in detail and "TPU VM" in detail and "Vertex AI" in detail, detail
    assert fix == f"gcloud projects add-iam-policy-binding {PROJECT} --member {member} --role roles/logging.logWriter"
    assert r.stdout.splitlines()[-1] == "all checks passed"

    policy["bindings"].append({"role": "roles/logging.logWriter", "members": [member]})   # what the stack grants
    r = run("doctor", "--outputs", str(outputs))
    assert r.exit_code == 0, r.output
    assert _checks(r.stdout)["training-sa writes logs"] == ("PASS", f"via roles/logging.logWriter on {PROJECT}", None)


def test_doctor_needs_a_target():
    r = run("doctor")
    assert r.exit_code == 2 and "--stack" in r.stderr


def test_a_missing_tpu_vm_agent_says_google_also_creates_it_with_the_first_tpu_vm():
    from bootstrap import doctor

    [check] = doctor.check_agent("tpu-vm-agent", AGENT, domain.SERVICE_AGENTS["tpu-vm-agent"], PROJECT,
                                 "us-central1-a", False, None)
    assert check.status == "fail"
    assert "may not exist yet" in check.detail and "first TPU VM" in check.detail, check.detail
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
    # who cannot pull, for what: the TPU VM host pulls as the VM's service account, Vertex AI with its service agent
    tpu_line = checks["training-sa pulls from imgs"].detail
    assert tpu_line.startswith(f"serviceAccount:{SA} ") and "cannot pull" in tpu_line and "TPU VMs" in tpu_line
    assert "service account" in tpu_line, tpu_line
    vertex_line = checks["vertex-agent pulls from imgs"].detail
    assert vertex_line.startswith(f"serviceAccount:{agent} ") and "cannot pull" in vertex_line, vertex_line
    assert "Vertex AI" in vertex_line and "service agent" in vertex_line, vertex_line
    # which Vertex agent pulls is not on Google's page: the line does not hide that it rests on tpuctl's reading
    assert "unconfirmed" in vertex_line


def test_the_image_builder_is_checked_for_push_logs_and_the_build_context(monkeypatch, tmp_path):
    # A user-specified Cloud Build account needs roles/artifactregistry.writer (push) and roles/logging.logWriter
    # (CLOUD_LOGGING_ONLY builds), and reads the build context (cloud.google.com/build/docs/securing-builds/
    # configure-user-specified-service-accounts); doctor used to check pull access only.
    from bootstrap import doctor

    from buildfakes import FakeBuildCloud
    from httpfakes import fake_factory

    builder = f"tpuctl-builder@{PROJECT}.iam.gserviceaccount.com"
    member = f"serviceAccount:{builder}"
    staging = "tpuctl-staging"
    repo = f"projects/{PROJECT}/locations/us-central1/repositories/imgs"

    def run(repo_bindings, project_bindings, staging_bindings):
        with fake_factory(FakeBuildCloud, monkeypatch, ["TPUCTL_ARTIFACTREGISTRY_ENDPOINT"],
                          credentials=tmp_path / "none.json") as make:
            fake = make()
            fake.repositories[repo] = repo_bindings
            who = doctor.Builder(builder, project_bindings, staging, staging_bindings)
            return {c.name: c for c in doctor.check_image_repository(PROJECT, "us-central1", "imgs", {}, builder=who)}

    # a builder with pull access only (what the training account had): three failures, each with its fix
    checks = run([{"role": "roles/artifactregistry.reader", "members": [member]}], [], [])
    push, logs, context = (checks[f"image builder {what}"] for what in
                           ("pushes to imgs", "writes build logs", "reads the build context"))
    assert (push.status, logs.status, context.status) == ("fail", "fail", "fail")
    assert "artifactregistry.repositories.uploadArtifacts" in push.detail
    assert push.fix.endswith(f"--member {member} --role roles/artifactregistry.writer")
    assert logs.fix == f"gcloud projects add-iam-policy-binding {PROJECT} --member {member} --role roles/logging.logWriter"
    assert context.fix.endswith("--role roles/storage.objectViewer") and f"gs://{staging}" in context.fix
    # what the stack grants: all three pass
    checks = run([{"role": "roles/artifactregistry.writer", "members": [member]}],
                 [{"role": "roles/logging.logWriter", "members": {member}, "condition": False}],
                 [{"role": "roles/storage.objectViewer", "members": {member}, "condition": False}])
    assert {name: c.status for name, c in checks.items() if name.startswith("image builder")} == {
        "image builder pushes to imgs": "pass", "image builder writes build logs": "pass",
        "image builder reads the build context": "pass"}
