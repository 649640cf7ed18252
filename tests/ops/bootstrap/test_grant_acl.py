"""grant-access --via acl on a fine-grained bucket (gcp-storage-emulator), refused on a uniform one."""

from __future__ import annotations

from clifixtures import error_line, invoke

SA = "trainer@my-proj-1.iam.gserviceaccount.com"


def run(*args):
    return invoke(args)


def entries(acl):
    acl.reload()
    return {(e["entity"], e["role"]) for e in acl}


def test_acl_mode_bucket_default_and_existing_objects(emulator):
    bucket = emulator.create_bucket("legacy-data")
    bucket.acl.reload()
    bucket.acl.user("owner@example.com").grant_owner()
    bucket.acl.save()
    for i in range(5):
        bucket.blob(f"train/part-{i}.tfrecord").upload_from_string(b"x" * 10)

    dry = run("grant-access", "--via", "acl", "--read-bucket", "legacy-data", "--principal", SA,
              "--existing-objects", "--dry-run")
    assert dry.exit_code == 0, dry.output
    *plan, existing, last = dry.stdout.splitlines()
    assert plan == [
        "gs://legacy-data (bucket ACL)",
        f"  + user-{SA} READER",
        "gs://legacy-data (default object ACL)",
        f"  + user-{SA} READER",
    ]
    assert existing.startswith("gs://legacy-data (existing objects): ") and f"READER for user-{SA}" in existing
    assert last.startswith("dry run: 2 change(s)"), last
    assert (f"user-{SA}", "READER") not in entries(bucket.acl)

    r = run("grant-access", "--via", "acl", "--read-bucket", "legacy-data", "--principal", SA, "--existing-objects", "--yes")
    assert r.exit_code == 0, r.output
    assert "gs://legacy-data: 5 existing object(s) updated" in r.stdout
    assert {(f"user-{SA}", "READER"), ("user-owner@example.com", "OWNER")} <= entries(bucket.acl)
    assert (f"user-{SA}", "READER") in entries(bucket.default_object_acl)
    for blob in emulator.list_blobs("legacy-data"):
        assert (f"user-{SA}", "READER") in entries(blob.acl)

    again = run("grant-access", "--via", "acl", "--read-bucket", "legacy-data", "--principal", SA, "--yes")
    assert again.exit_code == 0 and "everything is already granted; nothing written" in again.stdout

    rev = run("grant-access", "--via", "acl", "--read-bucket", "legacy-data", "--principal", SA, "--revoke", "--yes")
    assert rev.exit_code == 0, rev.output
    assert (f"user-{SA}", "READER") not in entries(bucket.acl)
    assert ("user-owner@example.com", "OWNER") in entries(bucket.acl)


def test_acl_mode_refused_on_uniform_bucket(emulator):
    bucket = emulator.create_bucket("uniform-data")
    bucket.iam_configuration.uniform_bucket_level_access_enabled = True
    bucket.patch()
    r = run("grant-access", "--via", "acl", "--read-bucket", "uniform-data", "--principal", SA, "--yes")
    line = error_line(r, 2, alone=True)
    assert "uniform-data" in line and "uniform bucket-level access" in line and "ACLs" in line, line


def test_acl_mode_refuses_a_kubernetes_service_account(emulator):
    # Valid for bucket IAM (GKE Workload Identity) but an ACL entity needs an e-mail: one line, nothing written.
    bucket = emulator.create_bucket("legacy-ksa")
    before = entries(bucket.acl)
    r = run("grant-access", "--via", "acl", "--read-bucket", "legacy-ksa", "--principal",
            "serviceAccount:my-proj-1.svc.id.goog[ml/trainer]", "--yes")
    assert r.exit_code == 2, r.output
    assert "cannot be given an ACL entry" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert entries(bucket.acl) == before
