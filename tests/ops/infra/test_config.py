"""Config loading: defaults from Pulumi.yaml, accepted spellings, and every rule -> one ConfigError
naming the key, raised before a single resource is registered."""

from __future__ import annotations

import json

import pytest

from ground import domain
from ground.settings import StackSettings
from infra.config import ConfigError, load_config
from infra.mocks import run_program

PROJECT = "my-tpu-project"
T4 = "nvidia-tesla-t4:us-central1:4"


def test_defaults_come_from_pulumi_yaml_and_agree_with_domain(tmp_path):
    infra = load_config({"project": PROJECT}, base_dir=tmp_path)
    cfg = infra.settings
    assert cfg.region == "us-central1" and cfg.zone == "us-central1-a"
    assert cfg.name_prefix == "tpuctl"
    assert cfg.access_mode == domain.DEFAULT_ACCESS_MODE
    assert cfg.principals == domain.PRINCIPAL_KEYWORDS
    assert cfg.training_sa_id == domain.DEFAULT_TRAINING_SA_ID
    assert cfg.max_gpu_quota == domain.DEFAULT_MAX_GPU_QUOTA
    assert cfg.hub_cache_prefix == domain.DEFAULT_HUB_CACHE_PREFIX
    assert cfg.staging_retention_days == 7 and cfg.soft_delete_retention_days == 7
    assert cfg.gpu_quota_requests() == () and infra.hub_models == ()
    assert cfg.label_map() == {"managed-by": "tpuctl"}
    assert cfg.existing_data_bucket == "" and cfg.existing_data_bucket_access == "iam"
    assert cfg.buckets() == {p: domain.default_bucket_name("tpuctl", PROJECT, p) for p in domain.BUCKET_PURPOSES}
    assert infra.hub_cache_source == tmp_path / ".tpuctl-cache" / "hub"
    assert cfg.location == "US-CENTRAL1"


def test_bare_and_namespaced_keys_other_namespaces_ignored(tmp_path):
    a = load_config({"project": PROJECT, "region": "europe-west4", "zone": "europe-west4-a"}, base_dir=tmp_path)
    b = load_config({"tpuctl:project": PROJECT, "tpuctl:region": "europe-west4", "tpuctl:zone": "europe-west4-a",
                     "gcp:project": PROJECT, "gcp:region": "asia-east1"}, base_dir=tmp_path)
    assert a == b and a.settings.region == "europe-west4"


def test_one_project_key_tpuctl_project_defaults_to_gcp_project(tmp_path):
    assert load_config({"gcp:project": PROJECT}, base_dir=tmp_path).settings.project == PROJECT
    with pytest.raises(ConfigError) as info:
        load_config({"tpuctl:project": PROJECT, "gcp:project": "someone-elses-project"}, base_dir=tmp_path)
    assert info.value.key == "tpuctl:project" and "'my-tpu-project'" in str(info.value)
    assert "gcp:project 'someone-elses-project'" in str(info.value)
    with pytest.raises(ConfigError, match=r"^gcp:project: "):
        load_config({"tpuctl:project": PROJECT, "gcp:project": "Not_A_Project"}, base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^gcp:project: "):
        load_config({"gcp:project": "x"}, base_dir=tmp_path)


def test_engine_spellings_arrays_as_json_and_integers_as_text(tmp_path):
    cfg = load_config({
        "tpuctl:project": PROJECT,
        "tpuctl:principals": json.dumps(["training-sa"]),
        "tpuctl:gpuQuotas": json.dumps(["t4:us-central1:2", "nvidia-l4:europe-west4:1"]),
        "tpuctl:quotaContactEmail": "ml@example.com",
        "tpuctl:stagingRetentionDays": "3",
        "tpuctl:labels": '["team=vision", "env=dev"]',
    }, base_dir=tmp_path).settings
    assert cfg.principals == ("training-sa",)
    assert [(q.gpu.name, q.region, q.count) for q in cfg.gpu_quota_requests()] == [
        ("nvidia-tesla-t4", "us-central1", 2), ("nvidia-l4", "europe-west4", 1)]
    assert cfg.staging_retention_days == 3
    assert cfg.label_map() == {"team": "vision", "env": "dev"}


def test_bucket_overrides_and_existing_data_bucket(tmp_path):
    cfg = load_config({"project": PROJECT, "stagingBucket": "my-staging", "existingDataBucket": "gs://shared-data/x"},
                      base_dir=tmp_path).settings
    assert cfg.buckets()["staging"] == "my-staging"
    assert cfg.buckets()["data"] == "shared-data" == cfg.existing_data_bucket
    assert cfg.created_purposes == ("staging", "artifacts", "hub-cache")


def test_empty_principal_list_switches_every_principal_off(tmp_path):
    cfg = load_config({"project": PROJECT, "principals": []}, base_dir=tmp_path).settings
    assert cfg.principals == () and not cfg.wants_training_sa and cfg.agents == ()


def test_hub_models_found_in_cache_layout(tmp_path, hub_folder, handles):
    root = hub_folder(list(handles))
    cfg = load_config({"project": PROJECT, "hubModels": list(handles), "hubCacheSource": str(root)})
    assert [m.handle for m in cfg.hub_models] == list(handles)
    first = cfg.hub_models[0]
    assert first.cache_key == domain.hub_cache_key(handles[0]) and first.folder == root / first.cache_key
    assert [rel for rel, _ in first.files] == [
        "saved_model.pb", "variables/variables.data-00000-of-00001", "variables/variables.index"]
    assert all(path.is_file() and path.is_absolute() for _, path in first.files)


def test_relative_hub_cache_source_is_anchored_at_base_dir(tmp_path, hub_folder, handles):
    hub_folder([handles[0]], root=tmp_path / "cache" / "hub")
    cfg = load_config({"project": PROJECT, "hubModels": [handles[0]], "hubCacheSource": "cache/hub"},
                      base_dir=tmp_path)
    assert cfg.hub_cache_source == tmp_path / "cache" / "hub"


# Every rule: (values on top of {project}, key the message must name, fragment of the rule).
BAD = [
    ({"project": None}, "project", "is required"),
    ({"project": "Bad_Project"}, "project", "project id 'Bad_Project' must be 6-30 characters"),
    ({"project": "short"}, "project", "6-30 characters"),
    ({"region": "us-centra1"}, "region", "region 'us-centra1' is not a Google Cloud region"),
    ({"region": "uscentral"}, "region", "not a region name"),
    ({"zone": "europe-west4-a"}, "zone", "zone 'europe-west4-a' is not in region 'us-central1'"),
    ({"zone": "us-central1"}, "zone", "not a zone name"),
    ({"namePrefix": "Team_A"}, "namePrefix", "lowercase"),
    ({"namePrefix": "a-very-long-prefix-indeed"}, "namePrefix", "1-20"),
    ({"accessMode": "organization"}, "accessMode", "'organization' must be one of: bucket, project"),
    ({"principals": ["tpu-agent", "compute-default"]}, "principals", "unknown principal 'compute-default'"),
    ({"principals": ["training-sa", "training-sa"]}, "principals", "listed twice"),
    ({"principals": "tpu-agent"}, "principals", "must be a list"),
    ({"trainingServiceAccountId": "SA"}, "trainingServiceAccountId", "service account id 'SA'"),
    ({"dataBucket": "Bad_Bucket"}, "dataBucket", "may only contain lowercase letters"),
    ({"stagingBucket": "my-google-staging"}, "stagingBucket", "must not start with 'goog' or contain 'google'"),
    ({"artifactsBucket": "ab"}, "artifactsBucket", "3-63 characters"),
    ({"hubCacheBucket": "192.168.1.1"}, "hubCacheBucket", "IP address"),
    ({"namePrefix": "goog"}, "namePrefix", "bucket name 'goog-my-tpu-project-data' must not start with 'goog'"),
    ({"stagingBucket": "same-bucket", "artifactsBucket": "same-bucket"}, "stagingBucket", "more than one purpose"),
    ({"existingDataBucket": "-bad-"}, "existingDataBucket", "start and end"),
    ({"existingDataBucket": "shared-data", "dataBucket": "my-data"}, "existingDataBucket", "not both"),
    ({"existingDataBucketAccess": "acls", "existingDataBucket": "shared"}, "existingDataBucketAccess", "iam, acl"),
    ({"existingDataBucketAccess": "acl"}, "existingDataBucketAccess", "only to an existing data bucket"),
    ({"stagingRetentionDays": 0}, "stagingRetentionDays", "must be at least 1, not 0"),
    ({"stagingRetentionDays": "seven"}, "stagingRetentionDays", "whole number"),
    ({"stagingRetentionDays": True}, "stagingRetentionDays", "whole number"),
    ({"softDeleteRetentionDays": 3}, "softDeleteRetentionDays", "0 (off) or 7-90"),
    ({"softDeleteRetentionDays": 91}, "softDeleteRetentionDays", "must be at most 90, not 91"),
    ({"gpuQuotas": ["nvidia-rtx-4090:us-central1:2"], "quotaContactEmail": "a@example.com"}, "gpuQuotas",
     "unknown GPU type 'nvidia-rtx-4090'"),
    ({"gpuQuotas": ["nvidia-tesla-t4:us-central1:0"], "quotaContactEmail": "a@example.com"}, "gpuQuotas",
     "count must be 1 to 100,000"),
    ({"gpuQuotas": ["nvidia-tesla-t4:us-central1:-2"], "quotaContactEmail": "a@example.com"}, "gpuQuotas",
     "count must be 1 to 100,000"),
    ({"gpuQuotas": ["nvidia-tesla-t4:us-central1:two"], "quotaContactEmail": "a@example.com"}, "gpuQuotas",
     "not a whole number"),
    ({"gpuQuotas": ["nvidia-tesla-t4:us-central1:100001"], "quotaContactEmail": "a@example.com"}, "gpuQuotas",
     "count must be 1 to 100,000"),
    ({"tpuVmQuotas": ["v5e:us-west4-a:99999999999999999999:spot"], "quotaContactEmail": "a@example.com"},
     "tpuVmQuotas", "count must be 1 to 100,000"),       # would overflow preferredValue (int64) at Google
    ({"gpuQuotas": ["t4-us-central1-4"], "quotaContactEmail": "a@example.com"}, "gpuQuotas", "GPU_TYPE:REGION:COUNT"),
    # Google's locations table marks L4 "not available for training" in us-west4; P100 is past its end of support
    ({"gpuQuotas": ["nvidia-l4:us-west4:1"], "quotaContactEmail": "a@example.com"}, "gpuQuotas",
     "not available for training in us-west4"),
    ({"gpuQuotas": ["nvidia-tesla-p100:us-central1:1"], "quotaContactEmail": "a@example.com"}, "gpuQuotas",
     "end of support"),
    ({"gpuQuotas": ["nvidia-tesla-t4:us-centra1:1"], "quotaContactEmail": "a@example.com"}, "gpuQuotas",
     "not a Google Cloud region"),
    ({"gpuQuotas": [T4, "t4:us-central1:8"], "quotaContactEmail": "a@example.com"}, "gpuQuotas", "repeats"),
    ({"gpuQuotas": [T4]}, "quotaContactEmail", "required when gpuQuotas, tpuQuotas or tpuVmQuotas is set"),
    ({"gpuQuotas": [T4], "quotaContactEmail": "not-an-email"}, "quotaContactEmail", "not an e-mail"),
    ({"gpuQuotas": [T4], "quotaContactEmail": "bot@p.iam.gserviceaccount.com"}, "quotaContactEmail", "a person"),
    ({"maxGpuQuota": 0}, "maxGpuQuota", "at least 1"),
    ({"hubModels": ["a/b", "a/b"]}, "hubModels", "hub handle 'a/b' is listed twice"),
    ({"hubModels": [""]}, "hubModels", "must be non-empty"),
    ({"hubModels": ["a/b"], "hubCacheSource": "/nonexistent/tpuctl-hub"}, "hubCacheSource",
     "hub cache folder /nonexistent/tpuctl-hub does not exist"),
    ({"hubCachePrefix": "/model-cache"}, "hubCachePrefix", "relative path"),
    ({"labels": ["team"]}, "labels", "must be key=value"),
    ({"labels": ["Team=vision"]}, "labels", "label key 'Team'"),
    ({"labels": ["team=Vision"]}, "labels", "values may contain only lowercase"),
    ({"labels": ["team=a", "team=b"]}, "labels", "given twice"),
    ({"labels": ["tpuctl-purpose=data"]}, "labels", "set by tpuctl"),
    ({"quotaContactEmail": {"secure": "v1:AAAA"}}, "quotaContactEmail", "secret"),
    ({"regoin": "us-central1"}, "regoin", "unknown config key"),
    ({"accessLogRetentionDays": 30, "accessLogBucket": "shared-data", "existingDataBucket": "shared-data"},
     "accessLogBucket", "also a training bucket"),
]


@pytest.mark.parametrize("extra, key, fragment", BAD, ids=[f"{k}:{f[:24]}" for _, k, f in BAD])
def test_every_bad_value_is_one_config_error_naming_the_key(extra, key, fragment, tmp_path, registrations):
    values = {"tpuctl:project": PROJECT, **{f"tpuctl:{k}": v for k, v in extra.items()}}
    values = {k: v for k, v in values.items() if v is not None}
    with pytest.raises(ConfigError) as info:
        run_program(values, base_dir=tmp_path)
    message = str(info.value)
    assert message.startswith(f"tpuctl:{key}: "), message
    assert fragment in message, message
    assert "\n" not in message
    assert info.value.key == f"tpuctl:{key}"
    assert registrations == [], "resources were registered before the config was rejected"


def test_missing_saved_model_for_a_handle_names_the_expected_file(tmp_path, hub_folder, handles, registrations):
    root = hub_folder([handles[0]])
    with pytest.raises(ConfigError, match=r"^tpuctl:hubModels: .*\bmissing\b") as info:
        run_program({"project": PROJECT, "hubModels": list(handles), "hubCacheSource": str(root)})
    assert str(root / domain.hub_cache_key(handles[1]) / "saved_model.pb") in str(info.value)
    assert registrations == []


def test_folder_named_after_the_handle_is_not_the_cache_layout(tmp_path, registrations):
    # The classic tutorial layout (model-cache-dir/<model name>/) is ignored by tensorflow_hub.
    (tmp_path / "hub" / "mobilenet_v2").mkdir(parents=True)
    (tmp_path / "hub" / "mobilenet_v2" / "saved_model.pb").write_bytes(b"x")
    with pytest.raises(ConfigError, match="sha1"):
        run_program({"project": PROJECT, "hubModels": ["mobilenet_v2"], "hubCacheSource": str(tmp_path / "hub")})
    assert registrations == []


def test_schema_lists_every_key_the_loader_reads():
    assert set(StackSettings.keys()) == {
        "project", "region", "zone", "namePrefix", "accessMode", "principals", "trainingServiceAccountId",
        "imageBuilderServiceAccountId",
        "dataBucket", "stagingBucket", "artifactsBucket", "hubCacheBucket", "existingDataBucket",
        "existingDataBucketAccess", "stagingRetentionDays", "softDeleteRetentionDays", "gpuQuotas",
        "quotaContactEmail", "quotaJustification", "maxGpuQuota", "hubModels", "hubCacheSource",
        "hubCachePrefix", "labels", "quotaService", "tpuQuotas", "accessLogRetentionDays", "accessLogBucket",
        "versionedBuckets", "trainerImageRepository", "servingEndpoint", "tpuZone", "tpuVmQuotas", "trainingCluster",
    }


@pytest.mark.parametrize("gcp_project, fragment", [
    ("someone-elses-project", "tpuctl:project: 'my-tpu-project' differs from gcp:project 'someone-elses-project'"),
    ("Bad_Project!", "gcp:project: "),
])
def test_plan_exits_2_when_gcp_project_is_invalid_or_disagrees(tmp_path, gcp_project, fragment):
    from clifixtures import invoke

    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text(f"config:\n  gcp:project: {gcp_project}\n  tpuctl:project: {PROJECT}\n")
    res = invoke(["plan", "--config", str(stack), "--no-policy"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [res.stderr.strip()] and fragment in res.stderr


def test_a_symlink_out_of_a_hub_model_folder_is_refused_before_anything_registers(tmp_path, hub_folder, handles,
                                                                                 registrations):
    # The program uploads every file of <hubCacheSource>/<sha1>/: a link to /etc/passwd must not be one of them.
    root = hub_folder([handles[0]])
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the bucket")
    (root / domain.hub_cache_key(handles[0]) / "variables" / "leak").symlink_to(secret)
    with pytest.raises(ConfigError, match=r"^tpuctl:hubModels: .*\bsymlink 'variables/leak'.*\boutside\b"):
        run_program({"project": PROJECT, "hubModels": [handles[0]], "hubCacheSource": str(root)})
    assert registrations == []
