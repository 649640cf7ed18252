"""Pulumi.yaml against the rules of Pulumi's project schema (sdk/go/common/workspace/project.json),
the example stack file, reading stack files offline, and docs that list every key."""

from __future__ import annotations

import re

import pytest
import yaml

from ground import domain
from ground.errors import DomainError
from ground.outputs import OUTPUT_KEYS
from ground.settings import ARRAY_KEYS, INTEGER_KEYS, StackSettings
from ground.stackfile import read_stack_config
from infra.config import REPO_ROOT, ConfigError, load_config

SIMPLE_TYPES = {"string", "integer", "boolean", "array"}          # $defs/simpleConfigType
DECLARATION_KEYS = {"type", "items", "description", "secret", "default"}   # configTypeDeclaration
PY_TYPES = {"string": str, "integer": int, "boolean": bool}


@pytest.fixture(scope="module")
def project() -> dict:
    return yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())


def _check_items(items, where):
    assert isinstance(items, dict) and "type" in items, f"{where}: items needs a type"
    assert set(items) <= {"type", "items"}, where
    assert items["type"] in SIMPLE_TYPES, where
    if items["type"] == "array":
        _check_items(items.get("items"), where)


def test_pulumi_yaml_follows_the_project_schema(project):
    assert project["name"] == "tpuctl"
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    assert project["main"] == "infra/"
    assert (REPO_ROOT / project["main"] / "__main__.py").is_file()
    for key, decl in project["config"].items():
        assert re.fullmatch(r"[a-z][A-Za-z0-9]*", key), f"{key}: config keys are camelCase, no namespace"
        assert isinstance(decl, dict), key
        assert set(decl) <= DECLARATION_KEYS, f"{key}: unknown properties {set(decl) - DECLARATION_KEYS}"
        assert decl.get("type") in SIMPLE_TYPES, f"{key}: type must be one of {SIMPLE_TYPES}"
        assert isinstance(decl.get("description", ""), str) and decl.get("description"), f"{key}: describe it"
        if decl["type"] == "array":
            _check_items(decl.get("items"), key)
            # Pulumi config arrays hold simple values only: no objects.
            assert decl["items"]["type"] in {"string", "integer", "boolean"}, key
        if "default" in decl:
            default = decl["default"]
            if decl["type"] == "array":
                want = PY_TYPES[decl["items"]["type"]]
                assert isinstance(default, list) and all(isinstance(v, want) for v in default), key
            else:
                assert isinstance(default, PY_TYPES[decl["type"]]) and not (
                    decl["type"] == "integer" and isinstance(default, bool)), key


def test_pulumi_yaml_and_the_settings_model_declare_the_same_keys(project):
    """Pulumi.yaml is the documented schema the engine enforces; the settings model is what every reader
    validates with. Same keys, same types, same defaults, same descriptions."""
    config = project["config"]
    model = StackSettings.model_json_schema(by_alias=True)["properties"]
    assert set(config) == set(model) == set(StackSettings.keys())
    for key, decl in config.items():
        kind = "array" if key in ARRAY_KEYS else "integer" if key in INTEGER_KEYS else "string"
        assert decl["type"] == kind == model[key]["type"], key
        assert decl["description"] == model[key]["description"], key
        default = model[key].get("default")
        if "default" in decl:
            assert decl["default"] == default, key
        else:
            assert default in ("", None), key


def test_defaults_in_pulumi_yaml_are_the_domain_facts(project):
    config = project["config"]
    assert "default" not in config["project"]                     # required: the engine asks for it
    assert config["accessMode"]["default"] == domain.DEFAULT_ACCESS_MODE
    assert tuple(config["principals"]["default"]) == domain.PRINCIPAL_KEYWORDS
    assert config["trainingServiceAccountId"]["default"] == domain.DEFAULT_TRAINING_SA_ID
    assert config["maxGpuQuota"]["default"] == domain.DEFAULT_MAX_GPU_QUOTA
    assert config["hubCachePrefix"]["default"] == domain.DEFAULT_HUB_CACHE_PREFIX
    for key in ("dataBucket", "stagingBucket", "artifactsBucket", "hubCacheBucket", "existingDataBucket",
                "quotaContactEmail"):
        assert "default" not in config[key], key
    # The defaults themselves pass validation.
    load_config({"project": "my-tpu-project"})


def test_example_stack_file_is_valid_config_on_a_fresh_checkout(tmp_path):
    values = read_stack_config("example")
    assert {k.partition(":")[2] for k in values if k.startswith("tpuctl:")} <= set(StackSettings.keys())
    cfg = load_config(values, base_dir=tmp_path)   # no .tpuctl-cache/hub there: nothing fetched yet
    assert cfg.settings.project == values["gcp:project"]
    assert cfg.settings.gpu_quota_requests() and cfg.settings.quota_contact_email and not cfg.hub_models


def test_read_stack_config_from_an_explicit_file(tmp_path, monkeypatch):
    f = tmp_path / "Pulumi.ci.yaml"
    f.write_text("config:\n  tpuctl:project: ci-project-1\n  tpuctl:gpuQuotas:\n    - t4:us-central1:1\n")
    assert read_stack_config(config_file=f) == {"tpuctl:project": "ci-project-1",
                                                "tpuctl:gpuQuotas": ["t4:us-central1:1"]}
    monkeypatch.chdir(tmp_path)        # by name: found in the current folder (ground.stackfile.find_stack_file)
    assert read_stack_config("ci") == read_stack_config(config_file=f)


def test_read_stack_config_refuses_secure_values_naming_the_key(tmp_path):
    f = tmp_path / "Pulumi.sec.yaml"
    f.write_text("config:\n  tpuctl:project: p-project-1\n  tpuctl:quotaContactEmail:\n    secure: v1:AAAABBBB\n")
    with pytest.raises(ConfigError, match=r"^tpuctl:quotaContactEmail: .*\bsecret\b.*\bPulumi\.sec\.yaml\b.*\boffline"):
        read_stack_config(config_file=f)


@pytest.mark.parametrize("text, fragment", [
    (None, "does not exist"),
    ("config: [unclosed", "not valid YAML"),
    ("- a\n- b\n", "must be a YAML mapping"),
    ("config: just-text\n", "'config:' must be a mapping"),
])
def test_read_stack_config_errors_are_one_line(tmp_path, text, fragment):
    f = tmp_path / "Pulumi.bad.yaml"
    if text is not None:
        f.write_text(text)
    with pytest.raises(DomainError) as info:
        read_stack_config(config_file=f)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_stack_config_doc_lists_every_key_with_its_default(project):
    doc = (REPO_ROOT / "docs" / "stack-config.md").read_text()
    for key, decl in project["config"].items():
        assert f"`{key}`" in doc, f"docs/stack-config.md does not document {key}"
        if "default" in decl and decl["default"] not in ([], ""):
            shown = decl["default"] if not isinstance(decl["default"], list) else decl["default"][0]
            assert str(shown) in doc, f"docs/stack-config.md does not show the default of {key}"


def test_stack_outputs_doc_lists_every_output_key():
    doc = (REPO_ROOT / "docs" / "stack-outputs.md").read_text()
    for key in OUTPUT_KEYS:
        assert f"`{key}`" in doc, f"docs/stack-outputs.md does not document {key}"


def test_access_modes_doc_names_every_role_tpuctl_grants():
    doc = (REPO_ROOT / "docs" / "access-modes.md").read_text()
    roles = {*domain.BUCKET_READ_ROLES, *domain.BUCKET_WRITE_ROLES, *domain.PROJECT_MODE_ROLES,
             *domain.LEGACY_BUCKET_ROLES, "roles/ml.serviceAgent"}
    roles |= {a.project_role for a in domain.SERVICE_AGENTS.values() if a.project_role}
    for role in roles:
        assert role in doc, f"docs/access-modes.md does not mention {role}"
    assert "storage.objects.get" in doc
