"""`tpuctl plan`: the plain function, the command's text and JSON output, and its three exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ground import domain
from ground.access import LOGS_ACCESS, PROJECT_CELL
from ground.outputs import OUTPUT_KEYS, load_outputs, parse_outputs
from infra.buckets import ACCESS_LOG_WRITER
from tpuctl.services.plan import plan

from clifixtures import invoke
from stackfixtures import write_stack

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def example_file(tmp_path):
    return write_stack(tmp_path / "Pulumi.dev.yaml", tmp_path / "hub")


@pytest.fixture
def greedy_file(tmp_path):
    """Valid stack config whose GPU request breaks the policy cap (maxGpuQuota defaults to 16)."""
    return write_stack(tmp_path / "greedy.yaml", tmp_path / "hub", gpuQuotas=["nvidia-tesla-t4:us-central1:64"])


# --- the plain function ------------------------------------------------------------------------

def test_plan_of_the_example_stack(example_file):
    result = plan(config_file=example_file)
    assert result.exit_code == 0 and result.mandatory == []
    assert result.stack == "dev"
    by_component: dict[str, set[str]] = {}
    for res in result.resources:
        by_component.setdefault(res.component, set()).add(res.short_type)
    assert "storage.Bucket" in by_component["TrainingBuckets buckets"]
    assert "storage.BucketIAMMember" in next(t for c, t in by_component.items() if c.startswith("AccessGrants"))
    assert "storage.BucketObject" in next(t for c, t in by_component.items() if c.startswith("HubModelCache"))
    bucket = next(r for r in result.resources if r.short_type == "storage.Bucket" and r.name == "artifacts")
    assert bucket.properties["versioning.enabled"] is True
    assert bucket.properties["publicAccessPrevention"] == "enforced"


def test_access_map_is_derived_from_the_registered_grants(example_file):
    result = plan(config_file=example_file)
    access = result.access_json()
    principals = result.outputs["principals"]
    buckets = result.outputs["buckets"]
    # the example stack keeps access logs: GCS's log writer may only create objects in the access-log bucket
    assert access.pop(ACCESS_LOG_WRITER) == {f"tpuctl-{result.outputs['project']}-access-logs": {
        "purpose": None, "roles": ["roles/storage.objectCreator"], "access": "create"}}
    builder = access.pop(domain.member_for_email(result.outputs["image_builder_service_account"]))
    repository = result.outputs["trainer_image_repository"]
    writes_logs = {"purpose": "project", "roles": ["roles/logging.logWriter"], "access": LOGS_ACCESS}
    assert builder == {buckets["staging"]: {"purpose": "staging", "roles": ["roles/storage.objectViewer"],
                                            "access": "read,list"},        # the build context, push, its build logs
                       repository: {"purpose": domain.TRAINER_IMAGES_PURPOSE,
                                    "roles": ["roles/artifactregistry.writer"], "access": "pull,push"},
                       PROJECT_CELL: writes_logs}
    assert set(access) == {domain.member_for_email(e) for e in principals.values()}
    # the project cell: who may write log entries there; the training account's TPU VM hosts and Vertex AI jobs log
    # with it (granted by the stack), the TPU VM agent through its service-agent role
    loggers = {member: cells.pop(PROJECT_CELL) for member, cells in access.items() if PROJECT_CELL in cells}
    assert loggers == {domain.member_for_email(principals["training-sa"]): writes_logs,
                       domain.member_for_email(principals["tpu-vm-agent"]): {
                           "purpose": "project", "roles": ["roles/cloudtpu.serviceAgent"], "access": LOGS_ACCESS}}
    # the trainer image repository: exactly the principals that run jobs may pull from it
    repository = result.outputs["trainer_image_repository"]
    pullers = {member for member, cells in access.items() if repository in cells}
    assert pullers == {domain.member_for_email(principals[k]) for k in ("training-sa", "vertex-agent")}
    for member in pullers:
        assert access[member].pop(repository) == {"purpose": domain.TRAINER_IMAGES_PURPOSE,
                                                  "roles": ["roles/artifactregistry.reader"], "access": "pull"}
    for member, per_bucket in access.items():
        assert {cell["purpose"] for cell in per_bucket.values()} == set(domain.BUCKET_PURPOSES)
        for name, cell in per_bucket.items():
            expected = "read,list" if cell["purpose"] in domain.READ_BUCKETS else "read,list,write"
            assert cell["access"] == expected, (member, name)
            # same roles as the program's own access_map output, computed independently from the resources
            assert sorted(cell["roles"]) == sorted(result.outputs["access_map"][member][name])
    assert set(buckets.values()) == {name for cells in access.values() for name in cells}


def test_project_mode_access_comes_from_project_roles(tmp_path):
    result = plan(config_file=write_stack(tmp_path / "p.yaml", tmp_path / "hub", accessMode="project"))
    assert result.exit_code == 0
    rows = [row for row in result.access if row["keyword"] == "training-sa"    # the image repository (pull) and
            and row["purpose"] not in (domain.TRAINER_IMAGES_PURPOSE, "project")]  # the project (logs): both modes
    assert {row["access"] for row in rows} == {"read,list,write"}  # storage.admin on every bucket
    [logs] = [row for row in result.access if row["keyword"] == "training-sa" and row["bucket"] == PROJECT_CELL]
    assert (logs["roles"], logs["access"]) == (["roles/logging.logWriter"], LOGS_ACCESS)   # roles/viewer gives none
    assert all("roles/storage.admin" in row["roles"] for row in rows)
    assert {v.rule for v in result.violations} == {"project-mode-broad-roles"}


def test_stack_name_reads_pulumi_stack_file_from_the_current_folder(tmp_path, monkeypatch):
    write_stack(tmp_path / "Pulumi.team.yaml", tmp_path / "hub")
    monkeypatch.chdir(tmp_path)
    result = plan(stack="team")
    assert result.stack == "team" and result.source == "stack team (Pulumi.team.yaml)"


# --- the command: text, JSON, exit codes ----------------------------------------------------------

def test_text_output_and_exit_0(example_file):
    res = invoke(["plan", "--config", str(example_file)])
    assert res.exit_code == 0, res.output
    out = res.stdout
    for fragment in ("TrainingBuckets buckets", "storage.Bucket", "Access map", "training-sa", "read,list,write",
                     "gs://tpuctl-my-tpu-project-artifacts", "Policy: passed"):
        assert fragment in out, fragment
    # the training account's row says it may write logs to the project, and the legend says what that cell is
    [row] = [line for line in out.splitlines() if line.lstrip().startswith("training-sa:")]
    assert f" {PROJECT_CELL}={LOGS_ACCESS}" in row, row     # 120 columns: one paragraph per principal
    [legend] = [line for line in out.splitlines() if line.lstrip().startswith(f"{PROJECT_CELL} = ")]
    assert "project my-tpu-project" in legend and domain.LOG_WRITE_PERMISSION in legend, legend


def test_json_output_shape_and_outputs_accepted_by_outputs_file(example_file, tmp_path):
    res = invoke(["plan", "--config", str(example_file), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc) == {"resources", "access", "violations", "outputs"}
    assert doc["violations"] == []
    assert {r["type"] for r in doc["resources"]} >= {"gcp:storage/bucket:Bucket", "gcp:storage/bucketIAMMember:BucketIAMMember"}
    assert set(doc["outputs"]) == set(OUTPUT_KEYS)
    parsed = parse_outputs(doc["outputs"])
    assert parsed.bucket("data") == "tpuctl-my-tpu-project-data"
    assert parsed.principals["training-sa"] == "tpuctl-trainer@my-tpu-project.iam.gserviceaccount.com"
    outputs_file = tmp_path / "outputs.json"
    outputs_file.write_text(json.dumps(doc["outputs"]))
    loaded = load_outputs(outputs_file=outputs_file)
    assert loaded.access_mode == "bucket" and loaded.tfhub_cache_dir.endswith("/model-cache")


def test_mandatory_violation_exits_1_in_text_and_json(greedy_file):
    res = invoke(["plan", "--config", str(greedy_file)])
    assert res.exit_code == 1, res.output
    assert "gpu-quota-preference" in res.stdout and "mandatory" in res.stdout
    assert "would be blocked" in res.stdout
    res = invoke(["plan", "--config", str(greedy_file), "--json"])
    assert res.exit_code == 1
    violations = json.loads(res.stdout)["violations"]
    assert [(v["rule"], v["level"]) for v in violations] == [("gpu-quota-preference", "mandatory")]
    assert "maxGpuQuota=16" in violations[0]["message"] and violations[0]["resource"]


def test_no_policy_skips_the_rules(greedy_file):
    res = invoke(["plan", "--config", str(greedy_file), "--no-policy", "--json"])
    assert res.exit_code == 0
    assert json.loads(res.stdout)["violations"] == []
    res = invoke(["plan", "--config", str(greedy_file), "--no-policy"])
    assert res.exit_code == 0 and "skipped" in res.stdout


@pytest.mark.parametrize("args,fragment", [
    (["--config", "{bad}"], "tpuctl:region"),
    (["--config", "{missing}"], "does not exist"),
    (["--stack", "no-such-stack"], "no Pulumi.no-such-stack.yaml for stack no-such-stack: looked in "),
    (["--stack", "my stack"], "a stack name is letters, digits"),
    (["--stack", "example", "--config", "{bad}"], "either --stack or --config"),
    (["--config", "{folder}"], "is a folder"),
])
def test_invalid_config_exits_2_with_one_line(tmp_path, args, fragment):
    bad = write_stack(tmp_path / "bad.yaml", tmp_path / "hub", region="us-centrall1")
    args = [a.format(bad=bad, missing=tmp_path / "missing.yaml", folder=tmp_path) for a in args]
    res = invoke(["plan", *args])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
    assert res.stdout == ""


def test_command_module_imports_no_pulumi_or_policy():
    probe = ("import sys, tpuctl.commands.plan; "
             "bad = [m for m in sys.modules if m.split('.')[0] in ('pulumi', 'pulumi_gcp', 'pulumi_policy', 'policy', 'infra')]; "
             "print(bad)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_acl_route_marks_read_that_covers_only_new_objects(tmp_path):
    config = write_stack(tmp_path / "acl.yaml", tmp_path / "hub", existingDataBucket="legacy-training-data",
                         existingDataBucketAccess="acl")
    res = invoke(["plan", "--config", str(config), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    cells = [per_bucket["legacy-training-data"] for member, per_bucket in doc["access"].items()
             if member != ACCESS_LOG_WRITER and "tpuctl-builder@" not in member]
    assert cells and all(c["roles"] == ["bucket:READER", "defaultObject:READER"] for c in cells)
    assert all(c["access"] == "read,list" and "written before the grant" in c["note"] for c in cells)
    assert all("note" not in c for per in doc["access"].values() for b, c in per.items() if b != "legacy-training-data")
    assert {v["rule"] for v in doc["violations"]} == {"acl-on-existing-bucket"}
    text = invoke(["plan", "--config", str(config)]).stdout
    assert "read,list*" in text
    [legend] = [line for line in text.splitlines() if line.lstrip().startswith("* ")]   # what the * marks
    assert "objects.get" in legend and "default object ACL" in legend, legend


@pytest.mark.parametrize("fmt", [["--json"], ["--format", "tfplan"]])
def test_blocking_violation_with_a_document_on_stdout_still_says_why_on_stderr(tmp_path, fmt):
    # fuzz finding: `plan --json` with no principals exited 1 with nothing on stderr
    stack = write_stack(tmp_path / "Pulumi.np.yaml", tmp_path / "hub", principals=[])
    r = invoke(["plan", "--config", str(stack), *fmt])
    assert r.exit_code == 1
    json.loads(r.stdout)                     # the document is still printed whole
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "training-principals-storage-access" in lines[0]
