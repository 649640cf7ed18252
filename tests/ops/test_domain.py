"""The shared catalogue: naming rules, role sets, agents, accelerators, hub hashing."""

import hashlib
import re
from pathlib import Path

import pytest

from ground import domain
from ground.envs import OPS_PACKAGES
from ground.errors import DomainError


@pytest.mark.parametrize("name", ["abc", "my-bucket_1", "a.b.c", "x" * 63, "tpuctl-proj-123-data"])
def test_valid_bucket_names(name):
    domain.validate_bucket_name(name)


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("ab", "3-63"),
        ("x" * 64, "3-63"),
        ("Upper", "lowercase"),
        ("-lead", "start and end"),
        ("goog-data", "goog"),
        ("my-google-bucket", "google"),
        ("192.168.1.1", "IP address"),
        ("a..b", ".."),
        ("has space", "lowercase"),
    ],
)
def test_invalid_bucket_names_say_what_rule(name, fragment):
    with pytest.raises(DomainError, match=fragment.replace(".", r"\.")):
        domain.validate_bucket_name(name)


def test_bucket_name_from_gs_url():
    assert domain.bucket_name_from("gs://my-data/some/path") == "my-data"
    assert domain.bucket_name_from("my-data") == "my-data"
    with pytest.raises(DomainError):
        domain.bucket_name_from("gs://Bad_Name")


def test_project_region_zone():
    domain.validate_project_id("my-project-123")
    for bad in ("short", "1starts-with-digit", "ends-with-", "UPPER-case-id"):
        with pytest.raises(DomainError, match="project id"):
            domain.validate_project_id(bad)
    domain.validate_region("europe-west4")
    with pytest.raises(DomainError, match="not a Google Cloud region"):
        domain.validate_region("us-central9")
    with pytest.raises(DomainError, match="not a region name"):
        domain.validate_region("us_central1")
    domain.validate_zone("us-central1-b", "us-central1")
    with pytest.raises(DomainError, match="not in region"):
        domain.validate_zone("europe-west4-a", "us-central1")


def test_legacy_roles_cannot_read_objects_but_bucket_mode_roles_can():
    legacy = domain.storage_permissions(domain.LEGACY_BUCKET_ROLES)
    assert "objects.get" not in legacy
    assert not domain.REQUIRED_READ_PERMISSIONS <= legacy
    assert domain.REQUIRED_READ_PERMISSIONS <= domain.storage_permissions(domain.roles_for("bucket", "data"))
    assert domain.REQUIRED_WRITE_PERMISSIONS <= domain.storage_permissions(domain.roles_for("bucket", "artifacts"))
    assert not domain.REQUIRED_WRITE_PERMISSIONS <= domain.storage_permissions(domain.roles_for("bucket", "hub-cache"))
    assert domain.access_summary(domain.storage_permissions(["roles/storage.objectUser"])) == "read,list,write"
    assert domain.access_summary(domain.storage_permissions(["roles/storage.legacyBucketReader"])) == "list"


def test_agent_emails_and_principals():
    assert domain.agent_email("tpu-agent", 123) == "service-123@cloud-tpu.iam.gserviceaccount.com"
    assert domain.agent_email("tpu-vm-agent", "123") == "service-123@gcp-sa-tpu.iam.gserviceaccount.com"
    assert domain.agent_email("vertex-agent", 9) == "service-9@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"
    assert domain.classify_principal("training-sa") == ("keyword", "training-sa")
    assert domain.classify_principal("a@p.iam.gserviceaccount.com") == ("member", "serviceAccount:a@p.iam.gserviceaccount.com")
    assert domain.classify_principal("alice@example.com") == ("member", "user:alice@example.com")
    assert domain.classify_principal("group:ml@example.com") == ("member", "group:ml@example.com")
    for bad in ("tpu", "allUsers", "robot:x@y.z"):
        with pytest.raises(DomainError):
            domain.classify_principal(bad)


def test_accelerators():
    t4x2 = domain.parse_accelerator("gpu-t4x2")
    assert (t4x2.kind, t4x2.gpu.vertex_accelerator, t4x2.gpu_count, t4x2.machine_type) == (
        "gpu", "NVIDIA_TESLA_T4", 2, "n1-standard-16")
    assert domain.parse_accelerator("gpu").gpu.name == "nvidia-tesla-t4"
    v38 = domain.parse_accelerator("tpu-v3-8")
    assert (v38.machine_type, v38.tpu.vertex.accelerator_type, v38.tpu.vertex.accelerator_count) == ("cloud-tpu", "TPU_V3", 8)
    assert domain.parse_accelerator("tpu-v5e-4").tpu.topology == "2x2"
    with pytest.raises(DomainError, match="unknown accelerator"):
        domain.parse_accelerator("tpu-v9-1")
    with pytest.raises(DomainError, match="counts"):
        domain.parse_accelerator("gpu-h100x3")
    # a region Google's table does not list: a warning naming the table's date, not a refusal
    assert "as read on" in domain.check_accelerator_region(v38, "asia-south1")
    assert domain.check_accelerator_region(v38, "us-central1") is None
    # a region Google marks "not available for training": refused, naming the regions that work
    with pytest.raises(DomainError, match=r"not available for training in europe-west4.*us-central1, us-east1"):
        domain.check_accelerator_region(domain.parse_accelerator("tpu-v5e-4"), "europe-west4")


def test_gpu_quota_spec():
    q = domain.parse_gpu_quota("nvidia-tesla-t4:us-central1:4")
    # Vertex AI custom training's own quota, not Compute Engine's NVIDIA-T4-GPUS-per-project-region
    assert (q.metric, q.region, q.count) == ("aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus",
                                             "us-central1", 4)
    for bad, frag in [("t4:us-central1", "GPU_TYPE:REGION:COUNT"), ("nvidia-x:us-central1:1", "unknown GPU"),
                      ("t4:us-central1:0", "1 to 100,000"), ("t4:us-central1:-2", "1 to 100,000"),
                      ("t4:us-central1:100001", "1 to 100,000"),
                      ("t4:mars-north1:1", "region"), ("t4:us-central1:two", "whole number")]:
        with pytest.raises(DomainError, match=frag):
            domain.parse_gpu_quota(bad)


def test_hub_cache_key_is_sha1_of_exact_handle():
    handle = "https://tfhub.dev/google/imagenet/resnet_v2_50/feature_vector/4"
    assert domain.hub_cache_key(handle) == hashlib.sha1(handle.encode()).hexdigest()
    assert domain.hub_cache_key(handle) != domain.hub_cache_key(handle + "/")
    assert domain.is_hub_cache_key(domain.hub_cache_key(handle))
    assert domain.hub_object_name("model-cache", handle, "variables/variables.index") == (
        f"model-cache/{domain.hub_cache_key(handle)}/variables/variables.index")
    with pytest.raises(DomainError):
        domain.validate_hub_prefix("/abs")


# --------------------------------------------------------------------------------------------
# Predefined roles: the checked-in snapshot of Google's role definitions
# --------------------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
SCANNED = (*OPS_PACKAGES, "docs", "tests", "scripts", "trainer")
#: "roles/..." text that is not a predefined role: placeholders in messages and prose.
NOT_ROLES = {"roles/NAME", "roles/members", "roles/x"}   # roles/x: a wrong-typed value in the fuzz inputs
#: A predefined role; "projects/P/roles/R" (a custom role) is excluded by the look-behind.
ROLE_TEXT = re.compile(r"(?<![\w/])roles/[A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z][A-Za-z0-9_]*)*")


def _role_strings_in_tree() -> dict[str, str]:
    found: dict[str, str] = {}
    files = [REPO / "README.md", *REPO.glob("Pulumi*.yaml")]
    for top in SCANNED:
        files += [f for f in (REPO / top).rglob("*") if f.is_file() and f.suffix in {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt"}]
    for path in files:
        if "__pycache__" in path.parts:
            continue
        for role in ROLE_TEXT.findall(path.read_text(errors="replace")):
            found.setdefault(role, str(path.relative_to(REPO)))
    return {role: where for role, where in found.items() if role not in NOT_ROLES}


def test_role_snapshot_covers_every_role_in_the_code():
    found = _role_strings_in_tree()
    assert "roles/storage.objectViewer" in found and "roles/viewer" in found  # the scan really reads the tree
    missing = {role: where for role, where in found.items() if role not in domain.ROLE_PERMISSIONS}
    assert missing == {}, "add these roles to ground/domain/data/predefined_roles.json"


def test_role_snapshot_names_its_source_and_keeps_full_permission_lists():
    source = domain.PREDEFINED_ROLES_SOURCE
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]) and source["commit"] in source["url"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", source["commit_date"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", source["retrieved"])
    # full lists, not only storage: other checks (e.g. who may create Vertex jobs) can use them
    assert "aiplatform.customJobs.create" in domain.ROLE_PERMISSIONS["roles/aiplatform.user"]
    assert "iam.serviceAccounts.actAs" in domain.ROLE_PERMISSIONS["roles/iam.serviceAccountUser"]
    for role, perms in domain.ROLE_PERMISSIONS.items():
        assert domain.ROLE_STORAGE_PERMISSIONS[role] == {p[len("storage."):] for p in perms if p.startswith("storage.")}
    domain.validate_role("roles/storage.objectViewer")
    with pytest.raises(DomainError, match="not in tpuctl's role catalogue"):
        domain.validate_role("roles/" + "storage.notARole")


# One test per fact the hand-typed table had wrong (each fails on the old table).

def test_viewer_lists_buckets_but_cannot_get_one():
    viewer = domain.ROLE_STORAGE_PERMISSIONS["roles/viewer"]
    assert "buckets.list" in viewer
    assert "buckets.get" not in viewer
    assert not {p for p in viewer if p.startswith("objects.")}


@pytest.mark.parametrize("role", ["roles/editor", "roles/owner"])
def test_editor_and_owner_carry_no_object_permissions(role):
    perms = domain.ROLE_STORAGE_PERMISSIONS[role]
    assert {p for p in perms if p.startswith("objects.")} == set()
    assert {"buckets.create", "buckets.list"} <= perms
    assert domain.access_summary(perms) == "-"


def test_basic_roles_map_to_bucket_convenience_members():
    assert domain.BASIC_ROLE_CONVENIENCE_MEMBERS == {
        "roles/viewer": "projectViewer", "roles/editor": "projectEditor", "roles/owner": "projectOwner"}
    assert domain.convenience_member_type("projectEditor:my-proj") == "projectEditor"
    assert domain.convenience_member_type("user:projectEditor@example.com") is None
    viewer = domain.storage_permissions(domain.DEFAULT_CONVENIENCE_BINDINGS["projectViewer"])
    owner = domain.storage_permissions(domain.DEFAULT_CONVENIENCE_BINDINGS["projectOwner"])
    assert domain.access_summary(viewer) == "read,list" and domain.access_summary(owner) == "read,list,write"


def test_bucket_viewer_is_get_and_list_only():
    assert domain.ROLE_STORAGE_PERMISSIONS["roles/storage.bucketViewer"] == {"buckets.get", "buckets.list"}


@pytest.mark.parametrize("role", ["roles/aiplatform.customCodeServiceAgent", "roles/ml.serviceAgent"])
def test_vertex_and_ml_service_agent_roles_carry_broad_storage_permissions(role):
    perms = domain.ROLE_STORAGE_PERMISSIONS[role]
    assert {"objects.get", "objects.list", "objects.create", "objects.delete", "buckets.get", "buckets.create"} <= perms


def test_acl_entries_equal_their_legacy_roles():
    for key, role in domain.ACL_EQUIVALENT_ROLES.items():
        assert domain.ACL_PERMISSIONS[key] == domain.ROLE_STORAGE_PERMISSIONS[role]
    assert domain.access_summary(domain.ACL_PERMISSIONS["bucket:READER"]) == "list"
    assert domain.access_summary(domain.ACL_PERMISSIONS["defaultObject:READER"]) == "read"


# --------------------------------------------------------------------------------------------
# GPUs: the catalogue's machine types come from this table
# --------------------------------------------------------------------------------------------

#: Google's "GPU compatibility table" for Vertex AI custom training, rows for the GPU types and
#: machine families tpuctl uses: (acceleratorType, machineType) -> GPU counts Vertex accepts.
#: Source: https://cloud.google.com/vertex-ai/docs/training/configure-compute#gpu-compatibility-table,
#: copied 2026-11-22. Verified facts: T4 attaches 1, 2 or 4 per VM (no 8: n1-standard-64 with 8 T4 is
#: rejected); H100 80GB runs on a3-highgpu-1g/2g/4g/8g; the A2/A3/G2 machine types have their GPU count
#: built in (Compute Engine, cloud.google.com/compute/docs/gpus). The N1 rows' per-machine count limits
#: (which counts each n1-standard size takes) could not be re-read from the live page when this was
#: written and are as last recorded by the project: re-check them when the page changes.
VERTEX_GPU_TABLE: dict[tuple[str, str], tuple[int, ...]] = {
    ("NVIDIA_TESLA_T4", "n1-standard-4"): (1, 2, 4),
    ("NVIDIA_TESLA_T4", "n1-standard-8"): (1, 2, 4),
    ("NVIDIA_TESLA_T4", "n1-standard-16"): (1, 2, 4),
    ("NVIDIA_TESLA_T4", "n1-standard-32"): (2, 4),
    ("NVIDIA_TESLA_T4", "n1-standard-64"): (4,),
    ("NVIDIA_TESLA_T4", "n1-standard-96"): (4,),
    ("NVIDIA_TESLA_V100", "n1-standard-4"): (1, 2, 4, 8),
    ("NVIDIA_TESLA_V100", "n1-standard-8"): (1, 2, 4, 8),
    ("NVIDIA_TESLA_V100", "n1-standard-16"): (2, 4, 8),
    ("NVIDIA_TESLA_V100", "n1-standard-32"): (4, 8),
    ("NVIDIA_TESLA_V100", "n1-standard-64"): (8,),
    ("NVIDIA_TESLA_V100", "n1-standard-96"): (8,),
    ("NVIDIA_TESLA_P100", "n1-standard-4"): (1, 2, 4),
    ("NVIDIA_TESLA_P100", "n1-standard-8"): (1, 2, 4),
    ("NVIDIA_TESLA_P100", "n1-standard-16"): (1, 2, 4),
    ("NVIDIA_TESLA_P100", "n1-standard-32"): (2, 4),
    ("NVIDIA_TESLA_P100", "n1-standard-64"): (4,),
    ("NVIDIA_L4", "g2-standard-4"): (1,),
    ("NVIDIA_L4", "g2-standard-8"): (1,),
    ("NVIDIA_L4", "g2-standard-12"): (1,),
    ("NVIDIA_L4", "g2-standard-16"): (1,),
    ("NVIDIA_L4", "g2-standard-24"): (2,),
    ("NVIDIA_L4", "g2-standard-32"): (1,),
    ("NVIDIA_L4", "g2-standard-48"): (4,),
    ("NVIDIA_L4", "g2-standard-96"): (8,),
    ("NVIDIA_TESLA_A100", "a2-highgpu-1g"): (1,),
    ("NVIDIA_TESLA_A100", "a2-highgpu-2g"): (2,),
    ("NVIDIA_TESLA_A100", "a2-highgpu-4g"): (4,),
    ("NVIDIA_TESLA_A100", "a2-highgpu-8g"): (8,),
    ("NVIDIA_TESLA_A100", "a2-megagpu-16g"): (16,),
    ("NVIDIA_A100_80GB", "a2-ultragpu-1g"): (1,),
    ("NVIDIA_A100_80GB", "a2-ultragpu-2g"): (2,),
    ("NVIDIA_A100_80GB", "a2-ultragpu-4g"): (4,),
    ("NVIDIA_A100_80GB", "a2-ultragpu-8g"): (8,),
    ("NVIDIA_H100_80GB", "a3-highgpu-1g"): (1,),
    ("NVIDIA_H100_80GB", "a3-highgpu-2g"): (2,),
    ("NVIDIA_H100_80GB", "a3-highgpu-4g"): (4,),
    ("NVIDIA_H100_80GB", "a3-highgpu-8g"): (8,),
    # read 2026-11-26 (stored copy of docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/
    # training/configure-compute, the compatibility table's accelerator-optimized and G4 rows)
    ("NVIDIA_H100_MEGA_80GB", "a3-megagpu-8g"): (8,),
    ("NVIDIA_H200_141GB", "a3-ultragpu-8g"): (8,),
    ("NVIDIA_B200", "a4-highgpu-8g"): (8,),
    ("NVIDIA_GB200", "a4x-highgpu-4g"): (4,),
    ("NVIDIA_RTX_PRO_6000", "g4-standard-48"): (1,),
    ("NVIDIA_RTX_PRO_6000", "g4-standard-96"): (2,),
    ("NVIDIA_RTX_PRO_6000", "g4-standard-192"): (4,),
    ("NVIDIA_RTX_PRO_6000", "g4-standard-384"): (8,),
}
#: GPU counts per GPU type that the catalogue deliberately leaves out (none since a2-megagpu-16g is offered).
NOT_OFFERED: set[tuple[str, int]] = set()
@pytest.mark.parametrize("gpu", list(domain.GPU_TYPES.values()), ids=lambda g: g.short)
def test_gpu_machine_types_and_counts_are_rows_of_the_vertex_table(gpu):
    rows = {machine: counts for (enum, machine), counts in VERTEX_GPU_TABLE.items() if enum == gpu.vertex_accelerator}
    assert rows, f"{gpu.vertex_accelerator} has no row in the table"
    counts = {c for cs in rows.values() for c in cs} - {c for e, c in NOT_OFFERED if e == gpu.vertex_accelerator}
    assert set(gpu.machine_types) == counts
    for count, machine in gpu.machine_types.items():
        assert count in rows.get(machine, ()), f"{machine} with {count} x {gpu.vertex_accelerator} is not in the table"


def test_t4x8_is_rejected_with_the_valid_counts():
    with pytest.raises(DomainError, match=r"gpu-t4x8\b.*\b1, 2, 4$"):
        domain.parse_accelerator("gpu-t4x8")
    assert domain.parse_accelerator("gpu-t4x4").machine_type == "n1-standard-32"


def test_h100_runs_on_every_a3_highgpu_size():
    assert {c: domain.parse_accelerator(f"gpu-h100x{c}").machine_type for c in (1, 2, 4, 8)} == {
        1: "a3-highgpu-1g", 2: "a3-highgpu-2g", 4: "a3-highgpu-4g", 8: "a3-highgpu-8g"}


@pytest.mark.parametrize("value, fragment", [
    ("serviceAccount:not-an-email", "is not an e-mail address"),
    ("user:alice", "is not an e-mail address"),
    ("group:@example.com", "is not an e-mail address"),
    ("serviceAccount:bot@example.com", "end in .gserviceaccount.com"),
    ("domain:not a domain", "is not a domain name"),
    ("serviceAccount:p.svc.id.goog[ns]", "is not an e-mail address"),       # a KSA needs NAMESPACE/NAME
])
def test_member_strings_with_a_bad_identifier_are_one_line(value, fragment):
    with pytest.raises(DomainError, match=fragment) as info:
        domain.classify_principal(value)
    assert "\n" not in str(info.value)


def test_good_member_strings_pass_unchanged():
    for value in ("serviceAccount:t@p.iam.gserviceaccount.com", "user:alice@example.com",
                  "group:ml@example.com", "domain:example.com", "domain:Example.COM",
                  # GKE Workload Identity's Kubernetes service account member (cloud.google.com/iam/docs/principal-identifiers)
                  "serviceAccount:my-project.svc.id.goog[ml/trainer]",
                  "serviceAccount:example.com:my-project.svc.id.goog[default/ksa]"):
        assert domain.classify_principal(value) == ("member", value)


# --------------------------------------------------------------------------------------------
# Issue 26: facts corrected from Google's own pages (each test fails on the catalogue before it)
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("zone, region", [("us-central1-ai1a", "us-central1"), ("us-south1-ai1b", "us-south1")])
def test_ai_zones_are_zones(zone, region):
    # Google's AI zones (compute/docs/regions-zones/ai-zones; TPU7x and v6e rows of tpu/docs/regions-zones)
    domain.validate_zone(zone, region)
    assert domain.validate_tpu_vm_zone(zone) == zone
    assert domain.parse_tpu_vm_quota(f"v6e:{zone}:8").zone == zone
    for bad in ("us-central1-ai", "us-central1-aia", "us-central1-ai1", "us-central1-1a", "us-central1-ab"):
        with pytest.raises(DomainError, match="not a zone name"):
            domain.validate_zone(bad)


def _vcpus(machine: str) -> int | None:
    m = re.fullmatch(r"(?:n1|g2|g4)-standard-(\d+)", machine)
    return int(m.group(1)) if m else None


@pytest.mark.parametrize("gpu", list(domain.GPU_TYPES.values()), ids=lambda g: g.short)
def test_gpu_machine_type_is_the_smallest_row_with_the_vcpus_per_gpu_tpuctl_wants(gpu):
    # not "the smallest machine type listed": the table lists n1-standard-4 for 1/2/4 T4, V100, P100 and
    # g2-standard-4 for one L4; tpuctl's rule (domain.MIN_VCPUS_PER_GPU) is the smallest with 8 vCPUs per GPU
    rows = {m: counts for (enum, m), counts in VERTEX_GPU_TABLE.items() if enum == gpu.vertex_accelerator}
    for count, machine in gpu.machine_types.items():
        fitting = [m for m, counts in rows.items() if count in counts
                   and (_vcpus(m) is None or _vcpus(m) >= domain.MIN_VCPUS_PER_GPU * count)]
        assert machine == min(fitting, key=lambda m: _vcpus(m) or 0), (gpu.short, count)
    if gpu.short in ("t4", "v100", "p100", "l4"):
        smallest = min((m for m, counts in rows.items() if 1 in counts), key=lambda m: _vcpus(m) or 0)
        assert smallest != gpu.machine_types[1] and _vcpus(smallest) == 4


def test_the_training_sa_pulls_the_image_only_on_tpu_vms():
    # Vertex AI pulls with its own service agent; a custom service account cannot be configured for pulling
    # (vertex-ai/docs/general/custom-service-account). The training SA needs the reader role for `docker pull`
    # on TPU VM hosts only.
    assert set(domain.IMAGE_PULLERS) == {"training-sa", "vertex-agent"}
    assert "TPU VM" in domain.IMAGE_PULLERS["training-sa"] and "Vertex" not in domain.IMAGE_PULLERS["training-sa"]
    assert "service agent" in domain.IMAGE_PULLERS["vertex-agent"]


def test_the_tpu_vm_agent_also_appears_with_the_first_tpu_vm():
    # `gcloud compute tpus tpu-vm service-identity create --help`: "The Cloud TPU VM creates a service identity
    # ... when the first Cloud TPU VM is created in a project"
    agent = domain.SERVICE_AGENTS["tpu-vm-agent"]
    assert agent.created_on_request and agent.first_use == "the project's first TPU VM"
    assert domain.SERVICE_AGENTS["tpu-agent"].first_use == ""
    assert "first Vertex AI custom job" in domain.SERVICE_AGENTS["vertex-agent"].create_command("p")


#: "you need PERMISSION (e.g. roles/NAME)" in an error hint or doc: the role must carry the permission.
_PERMISSION_HINT = re.compile(r"\b([a-z]+(?:\.[A-Za-z]+){2,})[^\"\n`]{0,40}?\(e\.g\.,? ?(roles/[A-Za-z.]+)")


def test_every_role_named_for_a_permission_grants_it():
    found = []
    for top in (*OPS_PACKAGES, "docs"):
        for path in (REPO / top).rglob("*"):
            if path.suffix in {".py", ".md"}:
                found += [(str(path.relative_to(REPO)), *m.groups())
                          for m in _PERMISSION_HINT.finditer(path.read_text(errors="replace"))]
    assert len(found) >= 5      # the scan really finds the hints (bootstrap/grants.py, state.py, doctor.py …)
    wrong = [(where, perm, role) for where, perm, role in found if perm not in domain.ROLE_PERMISSIONS.get(role, ())]
    assert wrong == []


def test_tpu_admin_is_not_offered_for_the_tpu_vm_agent():
    # the snapshot of roles/tpu.admin lists no tpu.queuedResources.* and no generateServiceIdentity permission
    from google.api_core import exceptions

    from bootstrap import principals
    from ground.errors import UserError

    perms = domain.ROLE_PERMISSIONS["roles/tpu.admin"]
    assert not {p for p in perms if "queuedResources" in p or "generateServiceIdentity" in p}

    class Refusing:
        def generate_service_identity(self, request):
            raise exceptions.PermissionDenied("caller lacks permission")

    with pytest.raises(UserError) as info:
        principals.generate_tpu_identity("my-project-1", "us-central1-a", client=Refusing())
    message = str(info.value)
    assert "roles/" not in message and "\n" not in message
    assert "`gcloud compute tpus tpu-vm service-identity create --zone=us-central1-a --project=my-project-1`" in message


# --------------------------------------------------------------------------------------------
# The unverified list: every fact the catalogue marks unverified is named, listed and documented
# --------------------------------------------------------------------------------------------

#: Catalogue modules and their list of facts no Google page confirmed (prices.py keeps its own notes).
UNVERIFIED_LISTS = {"quotas": "UNVERIFIED_QUOTA_FACTS", "storage_iam": "UNVERIFIED_IAM_FACTS",
                    "tpu": "UNVERIFIED_TPU_FACTS", "prediction": "UNVERIFIED_PREDICTION_FACTS",
                    "tpuvm": "UNVERIFIED_TPUVM_FACTS", "capacity": "UNVERIFIED_CAPACITY_FACTS",
                    "accelerators": "UNVERIFIED_VERTEX_FACTS", "frameworks": "UNVERIFIED_FRAMEWORK_FACTS"}
_MARKER = re.compile(r"\[unverified: ([a-z0-9-]+)\]")
_UNMARKED = re.compile(r"(?i)\bun-?verified\b|\bnot (?:re-)?verified\b|\bnot re-checked\b|\bnot from a google\b")


def test_every_unverified_fact_is_marked_listed_and_documented():
    import importlib

    docs = "\n".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    for module_name in ("accelerators", "quotas", "tpu", "names", "storage_iam", "principals", "apis", "tpuvm", "hub",
                        "prediction", "capacity", "frameworks"):
        module = importlib.import_module(f"ground.domain.{module_name}")
        listed = getattr(module, UNVERIFIED_LISTS.get(module_name, ""), {})
        marked = set()
        for number, line in enumerate(Path(module.__file__).read_text().splitlines(), 1):
            marked |= set(_MARKER.findall(line)) - {"id"}      # "[unverified: id]": the marker explained
            if _UNMARKED.search(line) and not _MARKER.search(line) and "UNVERIFIED" not in line:
                pytest.fail(f"{module_name}.py:{number} says a fact is unverified without a [unverified: id] marker")
        assert marked == set(listed), module_name
        assert [fact for fact in listed if f"`{fact}`" not in docs] == [], f"{module_name}: document these in docs/"
    assert domain.UNVERIFIED_TPU_FACTS and domain.UNVERIFIED_QUOTA_FACTS


def test_the_hub_layout_is_one_description_for_every_writer():
    from bootstrap.hubcache import handle_from_descriptor

    handle = "https://tfhub.dev/google/x/1"
    key = domain.hub_cache_key(handle)
    files = {"saved_model.pb": (10, "AAAAAA=="), "variables/variables.index": (3, "BBBBBB=="),
             domain.HUB_MANIFEST: (99, "CCCCCC==")}     # a local manifest (hub-cache fetch) is not a model file
    bucket = domain.hub_layout("model-cache", handle, files, "pulumi up", None)
    assert bucket.files == {"saved_model.pb": f"model-cache/{key}/saved_model.pb",
                            "variables/variables.index": f"model-cache/{key}/variables/variables.index"}
    assert bucket.descriptor[0] == domain.hub_descriptor_name("model-cache", handle)
    assert bucket.manifest[0] == domain.hub_manifest_name("model-cache", handle)
    assert set(domain.parse_hub_manifest(bucket.manifest[1], handle)) == set(bucket.files)
    assert handle_from_descriptor(bucket.descriptor[1]) == handle          # what tensorflow_hub's first line says
    assert bucket == domain.hub_layout("model-cache", handle, files, "pulumi up", None)   # deterministic
    local = domain.hub_layout("", handle, files, "tpuctl hub-cache fetch", "2026-11-24T00:00:00+00:00")
    assert local.folder == f"{key}/" and local.descriptor[0] == f"{key}.descriptor.txt"
    assert "2026-11-24" in local.descriptor[1] and "2026-11-24" in local.manifest[1]
