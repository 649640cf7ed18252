"""tpuctl bootstrap: APIs via serviceusage (local fake) and the state bucket in gcp-storage-emulator."""

from __future__ import annotations

import pytest

from clifixtures import invoke


def run(*args):
    return invoke(args)


def test_bootstrap_dry_run_then_create_then_idempotent(fake, emulator):
    fake.add_project("my-proj-1", "1")
    fake.services["my-proj-1"] = {"storage.googleapis.com"}

    dry = run("bootstrap", "--project", "my-proj-1", "--dry-run")
    assert dry.exit_code == 0, dry.output
    *plan, bucket_line, last = dry.stdout.splitlines()
    assert plan == [
        "project my-proj-1",
        "  + enable cloudresourcemanager.googleapis.com",
        "  + enable serviceusage.googleapis.com",
        "    storage.googleapis.com: enabled",
        "  + enable iam.googleapis.com",
        "  + enable cloudquotas.googleapis.com",
    ]
    # the state bucket to create: its name, location and the three protections it gets
    assert bucket_line.startswith("  + ") and "gs://my-proj-1-pulumi-state in US" in bucket_line, bucket_line
    assert all(p in bucket_line for p in ("uniform access", "public access prevention", "versioning")), bucket_line
    assert last == "dry run: nothing changed"
    assert fake.enable_calls == [] and list(emulator.list_buckets()) == []

    refused = run("bootstrap", "--project", "my-proj-1")
    assert refused.exit_code == 2 and "--yes" in refused.stderr

    r = run("bootstrap", "--project", "my-proj-1", "--yes")
    assert r.exit_code == 0, r.output
    assert fake.enable_calls == [("my-proj-1", ["cloudresourcemanager.googleapis.com", "serviceusage.googleapis.com",
                                                "iam.googleapis.com", "cloudquotas.googleapis.com"])]
    bucket = emulator.get_bucket("my-proj-1-pulumi-state")
    assert bucket.versioning_enabled and bucket.iam_configuration.uniform_bucket_level_access_enabled
    assert bucket.iam_configuration.public_access_prevention == "enforced"
    # (labels are sent at creation; the emulator ignores bucket metadata on insert, so not asserted here)
    assert r.stdout.splitlines()[-1] == "pulumi login gs://my-proj-1-pulumi-state"

    again = run("bootstrap", "--project", "my-proj-1", "--yes")
    assert again.exit_code == 0, again.output
    assert "already bootstrapped; nothing to do" in again.stdout
    assert len(fake.enable_calls) == 1

    # an existing state bucket without versioning gets it turned on, nothing else changes
    bucket.versioning_enabled = False
    bucket.patch()
    fixed = run("bootstrap", "--project", "my-proj-1", "--yes")
    [changed] = [line for line in fixed.stdout.splitlines() if line.startswith("  ~ ")]
    assert "gs://my-proj-1-pulumi-state" in changed and "versioning" in changed, fixed.output
    assert emulator.get_bucket("my-proj-1-pulumi-state").versioning_enabled


@pytest.mark.parametrize("args, message", [
    (["--project", "Bad_Proj"], "project id 'Bad_Proj'"),
    (["--project", "my-proj-1", "--bucket", "goog-state"], "must not start with 'goog'"),
])
def test_bootstrap_bad_input(fake, emulator, args, message):
    r = run("bootstrap", *args, "--yes")
    assert r.exit_code == 2 and message in r.stderr
    assert fake.enable_calls == [] and list(emulator.list_buckets()) == []


def test_bootstrap_agents_created_through_their_own_apis_with_their_roles(fake, emulator):
    fake.add_project("my-proj-1", "31337", [{"role": "roles/owner", "members": ["user:boss@example.com"]}])
    fake.services["my-proj-1"] = {"cloudresourcemanager.googleapis.com", "serviceusage.googleapis.com",
                                  "storage.googleapis.com", "iam.googleapis.com", "cloudquotas.googleapis.com"}
    emulator.create_bucket("my-proj-1-pulumi-state")
    bucket = emulator.get_bucket("my-proj-1-pulumi-state")
    bucket.versioning_enabled = True
    bucket.iam_configuration.public_access_prevention = "enforced"
    bucket.patch()
    primary = "service-31337@cloud-tpu.iam.gserviceaccount.com"
    vm = "service-31337@gcp-sa-tpu.iam.gserviceaccount.com"

    dry = run("bootstrap", "--project", "my-proj-1", "--agents", "--zone", "europe-west4-a", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "  + enable tpu.googleapis.com" in dry.stdout.splitlines()
    # each agent: created through which API (the TPU VM one in the zone), and the role it is granted
    [agent] = [line for line in dry.stdout.splitlines() if line.startswith(f"  + tpu-agent {primary}: ")]
    assert "Service Usage" in agent and agent.endswith("roles/tpu.serviceAgent"), agent
    [vm_agent] = [line for line in dry.stdout.splitlines() if line.startswith(f"  + tpu-vm-agent {vm}: ")]
    assert "Cloud TPU v2 API" in vm_agent and "europe-west4-a" in vm_agent, vm_agent
    assert vm_agent.endswith("roles/cloudtpu.serviceAgent"), vm_agent
    assert fake.identity_calls == [] and fake.tpu_identity_calls == [] and fake.set_calls == {}

    r = run("bootstrap", "--project", "my-proj-1", "--agents", "--zone", "europe-west4-a", "--yes")
    assert r.exit_code == 0, r.output
    assert fake.enable_calls == [("my-proj-1", ["tpu.googleapis.com"])]
    assert fake.identity_calls == [("my-proj-1", "tpu.googleapis.com")]          # primary agent: Service Usage
    assert fake.tpu_identity_calls == [("my-proj-1", "europe-west4-a")]          # gcp-sa-tpu: Cloud TPU v2 API
    bindings = fake.project_bindings("my-proj-1")
    assert {"role": "roles/tpu.serviceAgent", "members": [f"serviceAccount:{primary}"]} in bindings
    assert {"role": "roles/cloudtpu.serviceAgent", "members": [f"serviceAccount:{vm}"]} in bindings
    assert {"role": "roles/owner", "members": ["user:boss@example.com"]} in bindings   # additive

    again = run("bootstrap", "--project", "my-proj-1", "--agents", "--zone", "europe-west4-a", "--yes")
    assert again.exit_code == 0 and "already bootstrapped; nothing to do" in again.stdout, again.output
    [present] = [line for line in again.stdout.splitlines() if line.startswith(f"    tpu-vm-agent {vm}: ")]
    assert "present" in present and present.endswith("roles/cloudtpu.serviceAgent"), present
    assert len(fake.tpu_identity_calls) == 1 and fake.set_calls["projects/my-proj-1"] == 2

    bad = run("bootstrap", "--project", "my-proj-1", "--agents", "--zone", "Mars-1", "--yes")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "Mars-1" in bad.stderr
