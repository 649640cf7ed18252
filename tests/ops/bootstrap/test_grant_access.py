"""grant-access against a local server that enforces IAM etags (tests/ops/bootstrap/fakegoogle.py)."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from ground.envs import ops_python

from clifixtures import error_line, invoke

TPUCTL = [str(ops_python()), "-m", "tpuctl.cli"]

CONDITIONAL = {
    "role": "roles/storage.objectViewer",
    "members": ["group:ml-readers@example.com"],
    "condition": {"title": "until-2030", "expression": "request.time < timestamp(\"2030-01-01T00:00:00Z\")"},
}
PRE_EXISTING = [
    {"role": "roles/storage.legacyBucketOwner", "members": ["projectOwner:data-team-prj"]},
    {"role": "roles/storage.objectViewer", "members": ["user:alice@example.com"]},
    CONDITIONAL,
]
SA = "trainer@my-proj-1.iam.gserviceaccount.com"
SA_MEMBER = f"serviceAccount:{SA}"


def run(*args: str):
    return invoke(args)


def unconditional(bindings, role):
    out = set()
    for b in bindings:
        if b["role"] == role and not b.get("condition"):
            out |= set(b["members"])
    return out


@pytest.mark.slow
def test_sixteen_concurrent_processes_keep_every_binding(fake, google_env):
    fake.add_bucket("shared-data", PRE_EXISTING)
    members = [f"serviceAccount:worker-{i:02d}@my-proj-1.iam.gserviceaccount.com" for i in range(16)]
    cmd = [*TPUCTL, "grant-access", "--read-bucket", "gs://shared-data", "--role", "roles/storage.objectViewer", "--yes"]

    def one(member: str):
        return subprocess.run(cmd + ["--principal", member], env=google_env, capture_output=True, text=True, timeout=240)

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(one, members))
    for r in results:
        assert r.returncode == 0, r.stderr
    bindings = fake.bucket_bindings("shared-data")
    assert unconditional(bindings, "roles/storage.objectViewer") == {"user:alice@example.com", *members}
    # pre-existing bindings untouched: the owner binding and the conditional one, byte for byte
    assert {"role": "roles/storage.legacyBucketOwner", "members": ["projectOwner:data-team-prj"]} in bindings
    assert CONDITIONAL in bindings
    assert fake.set_calls["gs://shared-data"] == 16          # exactly one successful write per process
    print("stale-etag rejections retried:", fake.conflicts.get("gs://shared-data", 0))

    # second identical run (all 16 at once): zero setIamPolicy calls
    again = subprocess.run(cmd + [a for m in members for a in ("--principal", m)], env=google_env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "everything is already granted; nothing written" in again.stdout
    assert fake.set_calls["gs://shared-data"] == 16

    # revoke removes only what it names
    revoke = run("grant-access", "--read-bucket", "shared-data", "--role", "roles/storage.objectViewer", "--revoke",
                 "--yes", "--principal", members[3], "--principal", members[7], "--principal", "group:ml-readers@example.com")
    assert revoke.exit_code == 0, revoke.output
    after = fake.bucket_bindings("shared-data")
    assert unconditional(after, "roles/storage.objectViewer") == {"user:alice@example.com", *members} - {members[3], members[7]}
    assert CONDITIONAL in after     # the same group in a conditional binding is not "the named role" grant
    assert {"role": "roles/storage.legacyBucketOwner", "members": ["projectOwner:data-team-prj"]} in after


def test_conflict_reapplies_only_own_change(fake, google_env):
    fake.add_bucket("data-bkt", PRE_EXISTING)
    # another tool writes a binding between our read and our write: our set gets 412, we re-read
    fake.interfere["gs://data-bkt"] = [{"role": "roles/storage.objectAdmin", "members": ["user:carol@example.com"]}]
    r = run("grant-access", "--read-bucket", "data-bkt", "--principal", SA, "--yes")
    assert r.exit_code == 0, r.output
    assert fake.conflicts["gs://data-bkt"] == 1 and fake.set_calls["gs://data-bkt"] == 1
    b = fake.bucket_bindings("data-bkt")
    assert {"role": "roles/storage.objectAdmin", "members": ["user:carol@example.com"]} in b
    assert unconditional(b, "roles/storage.objectViewer") == {"user:alice@example.com", SA_MEMBER}
    assert unconditional(b, "roles/storage.legacyBucketReader") == {SA_MEMBER}
    assert CONDITIONAL in b


def test_dry_run_prints_exact_diff_and_writes_nothing(fake, google_env):
    fake.add_bucket("data-bkt", PRE_EXISTING)
    fake.add_bucket("out-bkt", [{"role": "roles/storage.objectUser", "members": [SA_MEMBER]}])
    r = run("grant-access", "--read-bucket", "gs://data-bkt", "--write-bucket", "out-bkt",
            "--principal", SA, "--principal", "user:alice@example.com", "--dry-run")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [
        "gs://data-bkt",
        "  + serviceAccount:trainer@my-proj-1.iam.gserviceaccount.com roles/storage.legacyBucketReader",
        "  + serviceAccount:trainer@my-proj-1.iam.gserviceaccount.com roles/storage.objectViewer",
        "  + user:alice@example.com roles/storage.legacyBucketReader",
        "gs://out-bkt",
        "  + user:alice@example.com roles/storage.objectUser",
        "dry run: 4 change(s) shown, nothing written",
    ]
    assert fake.set_calls == {}
    # revoke dry run shows '-' lines for what is there, only for the named member
    r = run("grant-access", "--write-bucket", "out-bkt", "--principal", SA, "--revoke", "--dry-run")
    assert r.stdout.splitlines() == [
        "gs://out-bkt",
        f"  - {SA_MEMBER} roles/storage.objectUser",
        "dry run: 1 change(s) shown, nothing written",
    ]
    assert fake.set_calls == {}


def test_without_yes_and_without_terminal_refuses(fake, google_env):
    fake.add_bucket("data-bkt")
    r = run("grant-access", "--read-bucket", "data-bkt", "--principal", SA)
    assert r.exit_code == 2
    assert "stdin is not a terminal" in r.stderr and "--yes" in r.stderr
    assert fake.set_calls == {}


@pytest.mark.parametrize("args, message", [
    (["--read-bucket", "data-bkt", "--principal", "tpu-agnet"], "unknown principal 'tpu-agnet'"),
    (["--read-bucket", "Data_Bkt!", "--principal", SA], "bucket name 'Data_Bkt!'"),
    (["--read-bucket", "missing-bkt", "--principal", SA], "bucket gs://missing-bkt does not exist"),
    (["--read-bucket", "secret-bkt", "--principal", SA], "permission denied reading the IAM policy of gs://secret-bkt"),
    (["--project", "Bad_Project", "--read-bucket", "data-bkt", "--principal", SA], "project id 'Bad_Project'"),
    (["--read-bucket", "data-bkt", "--principal", "allUsers"], "public"),
    (["--mode", "everything", "--read-bucket", "data-bkt", "--principal", SA], "access mode 'everything'"),
])
def test_bad_input_one_line_exit_2_nothing_written(fake, google_env, args, message):
    fake.add_bucket("data-bkt", PRE_EXISTING)
    fake.add_bucket("secret-bkt")
    fake.forbidden_policy_read.add("secret-bkt")
    # the valid bucket comes first: a later bad one must still stop everything before any write
    r = run("grant-access", "--write-bucket", "data-bkt", *args, "--yes")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr
    assert fake.set_calls == {}
    assert fake.bucket_bindings("data-bkt") == PRE_EXISTING


def test_keywords_resolve_via_project_number_and_create_agents(fake, google_env, iam_admin):
    fake.add_project("my-proj-1", "123456789012")
    fake.add_bucket("data-bkt")
    dry = run("grant-access", "--project", "my-proj-1", "--read-bucket", "data-bkt",
              "--principal", "tpu-vm-agent", "--principal", "training-sa", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "serviceAccount:service-123456789012@gcp-sa-tpu.iam.gserviceaccount.com roles/storage.objectViewer" in dry.stdout
    assert "serviceAccount:tpuctl-trainer@my-proj-1.iam.gserviceaccount.com roles/storage.objectViewer" in dry.stdout
    # the agent's own service-agent role on the project is part of the plan (it is not granted when created on request)
    assert "projects/my-proj-1\n  + serviceAccount:service-123456789012@gcp-sa-tpu.iam.gserviceaccount.com " \
           "roles/cloudtpu.serviceAgent" in dry.stdout
    assert fake.identity_calls == [] and fake.tpu_identity_calls == [] and iam_admin.created == []  # dry run: nothing
    assert fake.set_calls.get("projects/my-proj-1", 0) == 0

    r = run("grant-access", "--project", "my-proj-1", "--read-bucket", "data-bkt",
            "--principal", "tpu-vm-agent", "--principal", "training-sa", "--yes")
    assert r.exit_code == 0, r.output
    # gcp-sa-tpu comes from the Cloud TPU v2 API (google-cloud-tpu), not Service Usage (which returns cloud-tpu)
    assert fake.tpu_identity_calls == [("my-proj-1", "us-central1-a")] and fake.identity_calls == []
    agent = "serviceAccount:service-123456789012@gcp-sa-tpu.iam.gserviceaccount.com"
    assert unconditional(fake.project_bindings("my-proj-1"), "roles/cloudtpu.serviceAgent") == {agent}
    assert iam_admin.created == ["tpuctl-trainer@my-proj-1.iam.gserviceaccount.com"]
    assert unconditional(fake.bucket_bindings("data-bkt"), "roles/storage.objectViewer") == {
        "serviceAccount:service-123456789012@gcp-sa-tpu.iam.gserviceaccount.com",
        "serviceAccount:tpuctl-trainer@my-proj-1.iam.gserviceaccount.com",
    }
    # the training SA is looked up, not created twice
    r = run("grant-access", "--project", "my-proj-1", "--read-bucket", "data-bkt", "--principal", "training-sa", "--yes")
    assert r.exit_code == 0 and "already granted" in r.stdout
    assert iam_admin.created == ["tpuctl-trainer@my-proj-1.iam.gserviceaccount.com"]


def test_agent_role_is_granted_once_never_revoked_and_can_be_left_out(fake, google_env):
    fake.add_project("my-proj-1", "777")
    fake.add_bucket("data-bkt")
    agent = "serviceAccount:service-777@cloud-tpu.iam.gserviceaccount.com"
    r = run("grant-access", "--project", "my-proj-1", "--read-bucket", "data-bkt", "--principal", "tpu-agent", "--yes")
    assert r.exit_code == 0, r.output
    assert fake.identity_calls == [("my-proj-1", "tpu.googleapis.com")]   # the primary agent: Service Usage
    assert unconditional(fake.project_bindings("my-proj-1"), "roles/tpu.serviceAgent") == {agent}
    again = run("grant-access", "--project", "my-proj-1", "--read-bucket", "data-bkt", "--principal", "tpu-agent",
                "--yes")
    assert again.exit_code == 0 and "everything is already granted" in again.stdout
    assert fake.set_calls["projects/my-proj-1"] == 1
    # --revoke takes the bucket roles away, never the agent's own role (the service needs it)
    rev = run("grant-access", "--project", "my-proj-1", "--read-bucket", "data-bkt", "--principal", "tpu-agent",
              "--revoke", "--yes")
    assert rev.exit_code == 0, rev.output
    assert unconditional(fake.bucket_bindings("data-bkt"), "roles/storage.objectViewer") == set()
    assert unconditional(fake.project_bindings("my-proj-1"), "roles/tpu.serviceAgent") == {agent}
    # a caller who may not read the project policy: one line naming the permission and the way out
    fake.forbidden_policy_read.add("my-proj-1")
    denied = run("grant-access", "--project", "my-proj-1", "--read-bucket", "data-bkt", "--principal", "tpu-agent",
                 "--yes")
    assert denied.exit_code == 2 and denied.stderr.count("\n") == 1
    assert "resourcemanager.projects.getIamPolicy" in denied.stderr and "--no-agent-roles" in denied.stderr
    assert unconditional(fake.bucket_bindings("data-bkt"), "roles/storage.objectViewer") == set()  # nothing written
    bucket_only = run("grant-access", "--project", "my-proj-1", "--read-bucket", "data-bkt", "--principal",
                      "tpu-agent", "--no-agent-roles", "--yes")
    assert bucket_only.exit_code == 0, bucket_only.output
    assert "projects/my-proj-1" not in bucket_only.stdout
    assert unconditional(fake.bucket_bindings("data-bkt"), "roles/storage.objectViewer") == {agent}


def test_the_training_account_gets_the_log_writer_the_stack_gives_it(fake, google_env, iam_admin):
    # its TPU VM hosts (Docker's gcplogs driver, the VM's service account) and Vertex AI jobs log with it: the same
    # project step as the agents' service-agent roles, never revoked, left out with --no-agent-roles
    fake.add_project("my-proj-1", "123456789012")
    fake.add_bucket("data-bkt")
    sa = "serviceAccount:tpuctl-trainer@my-proj-1.iam.gserviceaccount.com"
    args = ("grant-access", "--project", "my-proj-1", "--read-bucket", "data-bkt", "--principal", "training-sa")
    dry = run(*args, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f"projects/my-proj-1\n  + {sa} roles/logging.logWriter" in dry.stdout, dry.stdout
    assert fake.set_calls.get("projects/my-proj-1", 0) == 0
    bucket_only = run(*args, "--no-agent-roles", "--yes")
    assert bucket_only.exit_code == 0, bucket_only.output
    assert "projects/my-proj-1" not in bucket_only.stdout and fake.set_calls.get("projects/my-proj-1", 0) == 0
    r = run(*args, "--yes")
    assert r.exit_code == 0, r.output
    assert unconditional(fake.project_bindings("my-proj-1"), "roles/logging.logWriter") == {sa}
    rev = run(*args, "--revoke", "--yes")
    assert rev.exit_code == 0, rev.output
    assert unconditional(fake.bucket_bindings("data-bkt"), "roles/storage.objectViewer") == set()
    assert unconditional(fake.project_bindings("my-proj-1"), "roles/logging.logWriter") == {sa}


def test_a_caller_who_may_not_create_the_training_sa_gets_one_line(fake, google_env, iam_admin):
    fake.add_project("my-proj-1", "123456789012")
    fake.add_bucket("data-bkt")
    iam_admin.deny_create = True
    r = run("grant-access", "--project", "my-proj-1", "--read-bucket", "data-bkt", "--principal", "training-sa",
            "--yes")
    line = error_line(r, 1, alone=True)      # denied what, on which account, the permission it takes
    assert "permission denied" in line and "tpuctl-trainer@my-proj-1.iam.gserviceaccount.com" in line, line
    assert "iam.serviceAccounts.create" in line, line
    assert fake.bucket_bindings("data-bkt") == [] and iam_admin.created == []    # nothing granted to a missing SA


def test_custom_roles_are_looked_up(fake, google_env, iam_admin):
    fake.add_bucket("data-bkt")
    iam_admin.roles.add("projects/my-proj-1/roles/tpuReader")
    r = run("grant-access", "--read-bucket", "data-bkt", "--principal", SA, "--role", "projects/my-proj-1/roles/nope", "--yes")
    line = error_line(r, 2)
    assert "custom role" in line and "projects/my-proj-1/roles/nope" in line and "not exist" in line, line
    r = run("grant-access", "--read-bucket", "data-bkt", "--principal", SA, "--role", "projects/my-proj-1/roles/tpuReader", "--yes")
    assert r.exit_code == 0, r.output
    assert unconditional(fake.bucket_bindings("data-bkt"), "projects/my-proj-1/roles/tpuReader") == {SA_MEMBER}


def test_outputs_file_supplies_buckets_and_principals(fake, google_env, iam_admin, tmp_path):
    outputs = {
        "project": "my-proj-1", "project_number": "42424242", "access_mode": "bucket",
        "buckets": {"data": "p-data", "hub-cache": "p-hub", "artifacts": "p-art", "staging": "p-stage"},
        "principals": {"tpu-vm-agent": "service-42424242@gcp-sa-tpu.iam.gserviceaccount.com",
                       "training-sa": "tpuctl-trainer@my-proj-1.iam.gserviceaccount.com"},
    }
    iam_admin.accounts["tpuctl-trainer@my-proj-1.iam.gserviceaccount.com"] = {"project": "my-proj-1"}
    fake.add_project("my-proj-1", "42424242")
    for name in ("p-data", "p-hub", "p-art", "p-stage"):
        fake.add_bucket(name)
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    r = run("grant-access", "--outputs", str(path), "--yes")
    assert r.exit_code == 0, r.output
    agent = "serviceAccount:service-42424242@gcp-sa-tpu.iam.gserviceaccount.com"
    sa = "serviceAccount:tpuctl-trainer@my-proj-1.iam.gserviceaccount.com"
    for name in ("p-data", "p-hub"):
        b = fake.bucket_bindings(name)
        assert unconditional(b, "roles/storage.objectViewer") == {agent, sa}
        assert unconditional(b, "roles/storage.legacyBucketReader") == {agent, sa}
        assert unconditional(b, "roles/storage.objectUser") == set()
    for name in ("p-art", "p-stage"):
        assert unconditional(fake.bucket_bindings(name), "roles/storage.objectUser") == {agent, sa}
    assert iam_admin.created == []


def test_project_mode_against_resource_manager_rest(fake, google_env):
    project_conditional = {"role": "roles/storage.admin", "members": ["user:ops@example.com"],
                           "condition": {"title": "temp", "expression": "request.time < timestamp(\"2031-01-01T00:00:00Z\")"}}
    fake.add_project("my-proj-1", "555", [{"role": "roles/owner", "members": ["user:boss@example.com"]},
                                          project_conditional])
    fake.interfere["projects/my-proj-1"] = [{"role": "roles/browser", "members": ["user:dave@example.com"]}]
    r = run("grant-access", "--project", "my-proj-1", "--mode", "project", "--principal", "tpu-agent", "--yes")
    assert r.exit_code == 0, r.output
    assert fake.conflicts["projects/my-proj-1"] == 1 and fake.set_calls["projects/my-proj-1"] == 1
    agent = "serviceAccount:service-555@cloud-tpu.iam.gserviceaccount.com"
    b = fake.project_bindings("my-proj-1")
    assert unconditional(b, "roles/viewer") == {agent} and unconditional(b, "roles/storage.admin") == {agent}
    assert {"role": "roles/owner", "members": ["user:boss@example.com"]} in b
    assert {"role": "roles/browser", "members": ["user:dave@example.com"]} in b
    assert any(x.get("condition") == project_conditional["condition"] and x["members"] == ["user:ops@example.com"] for x in b)

    again = run("grant-access", "--project", "my-proj-1", "--mode", "project", "--principal", "tpu-agent", "--yes")
    assert again.exit_code == 0 and "everything is already granted" in again.stdout
    assert fake.set_calls["projects/my-proj-1"] == 1

    rev = run("grant-access", "--project", "my-proj-1", "--mode", "project", "--principal", "tpu-agent",
              "--role", "roles/viewer", "--revoke", "--yes")
    assert rev.exit_code == 0, rev.output
    b = fake.project_bindings("my-proj-1")
    assert unconditional(b, "roles/viewer") == set() and unconditional(b, "roles/storage.admin") == {agent}
    assert {"role": "roles/owner", "members": ["user:boss@example.com"]} in b


def test_project_mode_concurrent_processes(fake, google_env):
    fake.add_project("my-proj-1", "555", [{"role": "roles/owner", "members": ["user:boss@example.com"]}])
    members = [f"serviceAccount:job-{i}@my-proj-1.iam.gserviceaccount.com" for i in range(6)]
    cmd = [*TPUCTL, "grant-access", "--project", "my-proj-1", "--mode", "project", "--yes"]
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda m: subprocess.run(cmd + ["--principal", m], env=google_env,
                                                         capture_output=True, text=True, timeout=240), members))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    b = fake.project_bindings("my-proj-1")
    assert unconditional(b, "roles/viewer") == set(members) == unconditional(b, "roles/storage.admin")
    assert {"role": "roles/owner", "members": ["user:boss@example.com"]} in b
    assert fake.set_calls["projects/my-proj-1"] == 6


def test_missing_credentials_is_one_line(monkeypatch, tmp_path):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    r = run("grant-access", "--read-bucket", "data-bkt", "--principal", SA, "--yes")
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("error: no Google credentials") and "gcloud auth application-default login" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_service_account_member_with_a_bad_email_is_one_line_and_nothing_is_read(fake, google_env):
    fake.add_bucket("data-bkt", PRE_EXISTING)
    r = run("grant-access", "--read-bucket", "gs://data-bkt", "--principal", "serviceAccount:not-an-email", "--yes")
    line = error_line(r, 2, alone=True)
    assert "principal 'serviceAccount:not-an-email'" in line and "e-mail" in line, line


def test_a_write_whose_answer_was_lost_is_reported_as_written(fake, google_env):
    """setIamPolicy applied, its answer lost (a 503 after the commit; issue 43, defect 4): the library retries with
    the old etag (412), the re-read shows the bindings in place, and the run says it wrote them (was: 0 written)."""
    fake.add_bucket("data-bkt", PRE_EXISTING)
    fake.lost_answers["gs://data-bkt"] = 1
    r = run("grant-access", "--read-bucket", "data-bkt", "--principal", SA, "--yes")
    assert r.exit_code == 0, r.output
    assert fake.set_calls["gs://data-bkt"] == 1 and fake.lost_answers["gs://data-bkt"] == 0
    [written] = [line for line in (r.stdout + r.stderr).splitlines() if "binding change(s) written" in line]
    assert written.startswith("gs://data-bkt: ") and " 2 binding change(s)" in written, written
    b = fake.bucket_bindings("data-bkt")
    assert SA_MEMBER in unconditional(b, "roles/storage.objectViewer") and CONDITIONAL in b


@pytest.mark.parametrize("cause, key", [
    ("ServiceUnavailable", "HTTP 503"), ("TooManyRequests", "HTTP 429"), ("Aborted", "kept changing")])
def test_a_retry_that_gives_up_says_outage_or_conflict_by_its_cause(cause, key):
    """The client library's retry deadline on a 503 is an outage, not "it kept changing under us" (issue 43)."""
    from bootstrap import grants
    from cloud.google import api_exceptions
    from ground.errors import UserError

    class Target:
        resource, write_permission = "gs://data-bkt", "storage.buckets.setIamPolicy"

        def read(self):
            return {}

        def changes(self, state, wanted, revoke):
            return [grants.Change(self.resource, "+", m, r) for m, r in wanted]

        def write(self, state, changes):
            raise api_exceptions.RetryError("Deadline of 120.0s exceeded", getattr(api_exceptions, cause)("down"))

    with pytest.raises(UserError) as err:
        grants.apply(Target(), [(SA_MEMBER, "roles/storage.objectViewer")], revoke=False)
    assert key in str(err.value) and "gs://data-bkt" in str(err.value), err.value
