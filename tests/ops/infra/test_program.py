"""The program as a whole: stack outputs, the engine entry point, repeatable offline runs."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys

import pulumi
import pytest

from ground import domain
from ground import tokens as T
from ground.outputs import OUTPUT_KEYS, parse_outputs
from ground.stackfile import read_stack_config
from infra.config import REPO_ROOT, from_pulumi_config, load_config
from infra.mocks import GcpMocks, _RecordingMonitor, run_program

PROJECT = "my-tpu-project"


def test_outputs_have_exactly_the_domain_keys_and_shapes():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:zone": "us-central1-b",
                       "tpuctl:labels": ["managed-by=tpuctl", "cost-center=ml"]}, project_number="111122223333")
    out = run.outputs
    assert tuple(out) == OUTPUT_KEYS
    assert out["project"] == PROJECT and out["project_number"] == "111122223333"
    assert (out["region"], out["zone"], out["access_mode"]) == ("us-central1", "us-central1-b", "bucket")
    assert out["buckets"] == {p: f"tpuctl-{PROJECT}-{p}" for p in domain.BUCKET_PURPOSES}
    assert out["bucket_urls"] == {p: f"gs://tpuctl-{PROJECT}-{p}" for p in domain.BUCKET_PURPOSES}
    assert out["labels"] == {"managed-by": "tpuctl", "cost-center": "ml"}
    assert out["hub_cache_prefix"] == "model-cache"
    # Plain JSON, the shape `pulumi stack output --json` prints and every --outputs FILE accepts.
    parsed = parse_outputs(json.loads(json.dumps(out)), "test")
    assert parsed.bucket("artifacts") == f"tpuctl-{PROJECT}-artifacts"
    assert parsed.principals["training-sa"] == parsed.training_service_account
    assert parsed.access_map == out["access_map"]


def test_runs_are_independent_within_one_process():
    first = run_program({"tpuctl:project": PROJECT}, stack="dev")
    second = run_program({"tpuctl:project": "other-project-1", "tpuctl:principals": []}, stack="prod")
    third = run_program({"tpuctl:project": PROJECT}, stack="dev")
    assert all(r.urn.startswith("urn:pulumi:prod::tpuctl::") for r in second.resources)
    assert not [r for r in second.resources if PROJECT in json.dumps(r.inputs, default=str)]
    assert len(second.resources) < len(first.resources)
    assert sorted(r.urn for r in first.resources) == sorted(r.urn for r in third.resources)
    assert first.outputs == third.outputs


def test_resource_urns_are_unique_and_parented_to_components():
    run = run_program({"tpuctl:project": PROJECT, "tpuctl:accessMode": "project",
                       "tpuctl:gpuQuotas": ["t4:us-central1:1"], "tpuctl:quotaContactEmail": "ml@example.com"})
    urns = [r.urn for r in run.resources]
    assert len(urns) == len(set(urns))
    components = {T.TRAINING_BUCKETS, T.SERVICE_IDENTITIES, T.ACCESS_GRANTS, T.GPU_QUOTA, T.TRAINER_IMAGE_REPOSITORY,
                  T.IMAGE_BUILDER}
    assert {r.type for r in run.resources if not r.custom} == components
    for r in run.custom_resources:
        assert r.parent_type in components, r.urn
        assert r.parent and r.parent.split("::")[-1] in {"buckets", "identities", "access", "gpu-quota", "image-builder",
                                                         "trainer-images"}


def test_duplicate_resource_names_are_rejected_like_the_engine_does():
    import pulumi_gcp as gcp

    mocks = GcpMocks(PROJECT)
    pulumi.runtime.set_mocks(mocks, project="tpuctl", stack="dup", preview=False, monitor=_RecordingMonitor(mocks))

    def program():
        gcp.storage.Bucket("same", name="bucket-one", location="US")
        gcp.storage.Bucket("same", name="bucket-two", location="US")

    with pytest.raises(Exception, match="Duplicate resource URN"):
        pulumi.runtime.test(program)()


def test_engine_entry_point_exports_every_output(monkeypatch):
    values = {k: v for k, v in read_stack_config("example").items() if k != "tpuctl:hubModels"}
    engine_config = {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    mocks = GcpMocks(PROJECT)
    pulumi.runtime.set_mocks(mocks, project="tpuctl", stack="example", preview=False,
                             monitor=_RecordingMonitor(mocks))
    pulumi.runtime.set_all_config(engine_config)
    exported: dict[str, object] = {}
    monkeypatch.setattr(pulumi, "export", lambda k, v: exported.__setitem__(k, v))

    def program():
        runpy.run_path(str(REPO_ROOT / "infra" / "__main__.py"), run_name="__main__")
        return pulumi.Output.from_input(dict(exported)).apply(exported.update)

    pulumi.runtime.test(program)()
    assert tuple(exported) == OUTPUT_KEYS
    assert exported["buckets"]["staging"] == f"tpuctl-{PROJECT}-staging"
    assert exported["labels"] == {"managed-by": "tpuctl", "team": "vision"}


def test_engine_entry_point_turns_a_config_error_into_a_run_error(registrations):
    mocks = GcpMocks(PROJECT)
    pulumi.runtime.set_mocks(mocks, project="tpuctl", stack="bad", preview=False, monitor=_RecordingMonitor(mocks))
    pulumi.runtime.set_all_config({"tpuctl:project": PROJECT, "tpuctl:zone": "europe-west4-a"})

    def program():
        runpy.run_path(str(REPO_ROOT / "infra" / "__main__.py"), run_name="__main__")

    # RunError: the engine prints just the message, no Python traceback.
    with pytest.raises(pulumi.RunError) as info:
        pulumi.runtime.test(program)()
    message = str(info.value)     # the key, the zone and the region it is not in; nothing else
    assert message.startswith("tpuctl:zone: ") and "\n" not in message and "Traceback" not in message, message
    assert "zone 'europe-west4-a'" in message and "region 'us-central1'" in message, message
    assert registrations == []


def test_engine_config_reads_like_the_offline_loader():
    values = {k: v for k, v in read_stack_config("example").items() if k != "tpuctl:hubModels"}
    pulumi.runtime.set_all_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()})
    assert from_pulumi_config() == load_config(values)


def test_engine_config_takes_the_project_from_gcp_project_and_refuses_a_mismatch():
    pulumi.runtime.set_all_config({"gcp:project": PROJECT})
    assert from_pulumi_config().settings.project == PROJECT
    pulumi.runtime.set_all_config({"gcp:project": "someone-elses-project", "tpuctl:project": PROJECT})
    with pytest.raises(Exception, match=r"^tpuctl:project: .*\bgcp:project 'someone-elses-project'"):
        from_pulumi_config()


def test_engine_config_with_a_typo_names_the_unknown_key(monkeypatch):
    # pulumi.Config reads declared keys only; the typo is found among every key the engine handed the program
    # (PULUMI_CONFIG, as the language host sets it), whichever file it came from: the project's own or a team's
    # `pulumi up --config-file` (issue 57), so no stack file is read here.
    engine = {"tpuctl:project": PROJECT, "tpuctl:acessMode": "project", "gcp:region": "us-central1"}
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps(engine))
    pulumi.runtime.set_mocks(GcpMocks(PROJECT), project="tpuctl", stack="typo", preview=False)
    pulumi.runtime.set_all_config({})
    with pytest.raises(Exception, match=r"^tpuctl:acessMode: unknown config key"):
        from_pulumi_config()
    # Only declared keys: they validate.
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({"tpuctl:project": PROJECT}))
    assert from_pulumi_config().settings.project == PROJECT


def test_no_resources_at_import_time():
    # Importing every module without an engine or mocks must not try to register anything.
    code = ("import infra, infra.config, infra.buckets, infra.identities, infra.access, infra.quota, "
            "infra.hub_cache, infra.program, infra.mocks, ground.tokens; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr



ENGINE_DRIVER = r'''
import importlib.util, json, runpy, sys
# Like an engine running infra/ from a checkout where tpuctl is not installed: no editable finder,
# the repository root not on sys.path (the driver runs from another folder).
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
sys.path_hooks[:] = [h for h in sys.path_hooks if "editable" not in getattr(h, "__module__", "")]
sys.path_importer_cache.clear()
assert importlib.util.find_spec("tpuctl") is None and importlib.util.find_spec("infra") is None
import pulumi

class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args):
        name = args.inputs.get("name", args.name)
        email = "x@my-tpu-project.iam.gserviceaccount.com"
        return args.name + "-id", {**args.inputs, "name": name, "url": "gs://" + name,
                                   "email": email, "member": "serviceAccount:" + email}
    def call(self, args):
        return {"projectId": "my-tpu-project", "number": "123456789012"}

pulumi.runtime.set_mocks(Mocks(), project="tpuctl", stack="dev", preview=False)
pulumi.runtime.set_all_config({"tpuctl:project": "my-tpu-project"})
exported = {}
pulumi.export = lambda k, v: exported.__setitem__(k, v)

def program():
    runpy.run_path(sys.argv[1], run_name="__main__")
    return pulumi.Output.from_input(dict(exported)).apply(exported.update)

pulumi.runtime.test(program)()
print(json.dumps({"keys": list(exported), "buckets": exported["buckets"]}))
'''


def test_engine_runs_the_infra_folder_without_the_editable_install(tmp_path):
    driver = tmp_path / "engine.py"
    driver.write_text(ENGINE_DRIVER)
    proc = subprocess.run([sys.executable, str(driver), str(REPO_ROOT / "infra")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert tuple(result["keys"]) == OUTPUT_KEYS
    assert result["buckets"]["data"] == "tpuctl-my-tpu-project-data"
