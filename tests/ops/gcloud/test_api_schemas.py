"""A second contract for the requests tpuctl writes: Google's REST schemas as the Cloud SDK ships them
(``generated_clients/apis/<api>/<version>/*_messages.py``: tpu v2, aiplatform v1, cloudbuild v1,
artifactregistry v1, cloudquotas v1). The installed Python clients already parse what tpuctl sends; these
schemas also cover the requests Pulumi sends for tpuctl (the Artifact Registry repository and the Cloud
Quotas preferences of the stack), which no Python client here sees. Every field name, nested message and
enum value must be in Google's schema; apischema.py reads the SDK's files as text, in this process."""

from __future__ import annotations

import json

import apischema
import gcloudcontract as gc
import pytest

from ground import domain
from ground import tokens as T
from ground.outputs import parse_outputs
from tpuctl.services.runs import vertex
from tpuctl.services.runs.tpuvm.script import build_queued_resource, v2alpha1_body
from tpuctl.services.runs.tuning.spec import DEFAULT_SPEC, parse_spec
from tpuctl.services.runs.tuning.vertex import build_tuning_job

from runfixtures import planned

PROJECT, REGION, ZONE = "my-project-1", "us-central1", "us-central1-a"
SA = f"tpuctl-trainer@{PROJECT}.iam.gserviceaccount.com"
OUTPUTS = {
    "project": PROJECT, "region": REGION, "zone": ZONE,
    "buckets": {"data": "tpuctl-my-project-1-data", "staging": "tpuctl-my-project-1-staging",
                "artifacts": "tpuctl-my-project-1-artifacts", "hub-cache": "tpuctl-my-project-1-hub-cache"},
    "training_service_account": SA, "principals": {"training-sa": SA},
    "tfhub_cache_dir": "gs://tpuctl-my-project-1-hub-cache/model-cache",
    "trainer_image_repository": "team-images", "labels": {"stack": "dev"},
}


def schema(api: str, version: str) -> dict[str, apischema.MessageClass]:
    return apischema.load(apischema.messages_file(gc.sdk_root(), api, version))


def _json(message) -> dict:
    """The fields tpuctl set (not every default the newer client knows), enums by name."""
    return json.loads(type(message).to_json(message, use_integers_for_enums=False,
                                            always_print_fields_with_no_presence=False))


@pytest.mark.parametrize("accelerator, spot", [("v5litepod-16", True), ("v6e-8", False), ("v5p-8", False)])
def test_queued_resource_fields_are_in_the_tpu_v2_schema(accelerator, spot):
    run = planned("tpu-vm", parse_outputs(OUTPUTS), accelerator=accelerator, zone=ZONE, spot=spot, name="r1",
                  image=f"{REGION}-docker.pkg.dev/{PROJECT}/team-images/trainer-tpu:sha256-x")
    body = _json(build_queued_resource(run))
    assert body["tpu"]["nodeSpec"][0]["node"]["acceleratorType"] == accelerator
    assert apischema.problems(schema("tpu", "v2"), "QueuedResource", body) == []


@pytest.mark.parametrize("accelerator, workers, ps, command", [
    ("gpu-t4x2", 3, 0, None), ("tpu-v5e-4", 1, 0, None), ("tpu-v6e-8", 1, 0, None), ("tpu-v6e-16", 1, 0, None),
    ("cpu", 2, 1, None), ("cpu", 2, 0, "python train.py")])
def test_custom_job_fields_are_in_the_aiplatform_v1_schema(accelerator, workers, ps, command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")       # the --command's project folder
    job = planned("vertex", parse_outputs(OUTPUTS), accelerator=accelerator, workers=workers, parameter_servers=ps,
                  name="j1", command=command, image="us-docker.pkg.dev/my-project-1/team-images/trainer:7")
    body = _json(vertex.build_custom_job(job))
    assert apischema.problems(schema("aiplatform", "v1"), "GoogleCloudAiplatformV1CustomJob", body) == []


@pytest.mark.parametrize("flags", [
    {"provisioning": "on-demand"}, {"provisioning": "spot"}, {"provisioning": "flex-start", "max_wait": "4h"},
    {"reservation": "any"}, {"reservation": "projects/my-project-1/zones/us-central1-a/reservations/r1"},
    {"cluster": "team-a100"}],
    ids=lambda f: "-".join(f.values()).split("/")[-1])
def test_custom_jobs_of_each_provisioning_model_are_in_the_aiplatform_v1_schema(flags):
    job = planned("vertex", parse_outputs(OUTPUTS), accelerator="gpu-a100x8", name="j1", **flags)
    body = _json(vertex.build_custom_job(job))
    assert apischema.problems(schema("aiplatform", "v1"), "GoogleCloudAiplatformV1CustomJob", body) == []


@pytest.mark.parametrize("flags", [{"provisioning": "on-demand"}, {"provisioning": "spot"}, {"reservation": "any"},
                                   {"reservation": "team-v5e"}], ids=lambda f: "-".join(f.values()))
def test_queued_resources_of_each_provisioning_model_are_in_the_tpu_v2_schema(flags):
    run = planned("tpu-vm", parse_outputs(OUTPUTS), accelerator="v5litepod-16", zone=ZONE, name="r1",
                  image=f"{REGION}-docker.pkg.dev/{PROJECT}/team-images/trainer-tpu:sha256-x", **flags)
    body = _json(build_queued_resource(run))
    assert apischema.problems(schema("tpu", "v2"), "QueuedResource", body) == []


def test_a_flex_start_queued_resource_is_in_the_tpu_v2alpha1_schema():
    """The fields google-cloud-tpu 1.27 lacks (provisioningModel, runDuration) are checked here only: against the
    Cloud SDK's v2alpha1 messages, which its `--provisioning-model flex-start` sends."""
    run = planned("tpu-vm", parse_outputs(OUTPUTS), accelerator="v5litepod-16", zone=ZONE, name="r1",
                  image=f"{REGION}-docker.pkg.dev/{PROJECT}/team-images/trainer-tpu:sha256-x",
                  provisioning="flex-start", max_wait="3h", max_run_time="2d")
    body = v2alpha1_body(run)
    assert body["provisioningModel"] == "FLEX_START" and body["runDuration"] == {"maxRunDuration": "172800s"}
    assert body["queueingPolicy"] == {"validUntilDuration": "10800s"}
    assert apischema.problems(schema("tpu", "v2alpha1"), "QueuedResource", body) == []
    assert apischema.problems(schema("tpu", "v2alpha1"), "QueuedResource", {**body, "provisioningModel": "FLEX"})


def test_a_clusters_persistent_resource_is_in_the_aiplatform_v1_schema():
    from tpuctl.services.runs.cluster import plan_cluster

    plan = plan_cluster("team-t4", parse_outputs(OUTPUTS), accelerator="gpu-t4x2", replicas=2)
    body = _json(plan.resource)
    assert body["resourcePools"][0]["replicaCount"] == "2"
    assert apischema.problems(schema("aiplatform", "v1"), "GoogleCloudAiplatformV1PersistentResource", body) == []


def test_tuning_job_fields_are_in_the_aiplatform_v1_schema():
    job = planned("vertex", parse_outputs(OUTPUTS), accelerator="gpu-t4", name="t1", plan_as="tune")
    for spec in (DEFAULT_SPEC, parse_spec(
            {"parameters": {"learning_rate": {"values": [0.01, 0.001]}, "model": {"values": ["small_cnn"]},
                            "epochs": {"min": 1, "max": 3}}, "algorithm": "grid", "max_trials": 2,
             "parallel_trials": 1}, "spec")):
        body = _json(build_tuning_job(job, spec))
        assert apischema.problems(schema("aiplatform", "v1"), "GoogleCloudAiplatformV1HyperparameterTuningJob",
                                  body) == []


def test_build_fields_are_in_the_cloudbuild_v1_schema():
    from tpuctl.services import image

    ref = image.image_ref(None, "tpu", project=PROJECT, region=REGION, repository="team-images")
    body = _json(image.build_request(ref, "tpuctl-my-project-1-staging", "tpuctl/context/x.tar.gz", SA))
    assert body["options"]["logging"] == "CLOUD_LOGGING_ONLY" and body["source"]["storageSource"]["object"]
    assert apischema.problems(schema("cloudbuild", "v1"), "Build", body) == []


@pytest.fixture(scope="module")
def pulumi_run():
    """The stack's program once under mocks, with a repository and every kind of quota preference."""
    from infra.mocks import run_program

    return run_program({"tpuctl:project": PROJECT, "tpuctl:region": REGION, "tpuctl:zone": ZONE,
                        "tpuctl:trainerImageRepository": "team-images",
                        "tpuctl:quotaContactEmail": "ml@example.com", "tpuctl:quotaJustification": "training",
                        "tpuctl:gpuQuotas": ["t4:us-central1:4", "t4:us-central1:8:spot"],
                        "tpuctl:tpuQuotas": ["v5e:us-central1:8"], "tpuctl:tpuVmQuotas": ["v5e:us-west4-a:16:spot"]})


def test_the_stacks_repository_fields_are_in_the_artifactregistry_v1_schema(pulumi_run):
    [repo] = pulumi_run.of_type(T.ARTIFACT_REPOSITORY)
    # pulumi-gcp's inputs as the REST body: project/location/repositoryId go into the URL, and the list of
    # cleanup policies is the API's map keyed by policy id
    body = {k: v for k, v in repo.inputs.items() if k not in {"project", "location", "repositoryId"}}
    body["cleanupPolicies"] = {p["id"]: p for p in body["cleanupPolicies"]}
    assert body["format"] == "DOCKER" and body["cleanupPolicies"]
    assert apischema.problems(schema("artifactregistry", "v1"), "Repository", body) == []


def test_the_stacks_quota_preferences_are_in_the_cloudquotas_v1_schema(pulumi_run):
    prefs = pulumi_run.of_type(T.QUOTA_PREFERENCE)
    assert len(prefs) == 4
    for pref in prefs:
        body = {k: v for k, v in pref.inputs.items() if k != "parent"}     # parent: the request's URL
        assert apischema.problems(schema("cloudquotas", "v1"), "QuotaPreference", body) == [], pref.name


@pytest.mark.parametrize("api, version, cls, body, fragment", [
    ("tpu", "v2", "QueuedResource", {"tpu": {"nodeSpec": [{"node": {"acceleratorTyp": "v5litepod-16"}}]}},
     "Node has no field 'acceleratorTyp'"),
    ("tpu", "v2", "QueuedResource", {"spot": {}, "tpu": {"nodeSpec": {"nodeId": "n"}}}, "is a list"),
    ("cloudbuild", "v1", "Build", {"options": {"logging": "CLOUD_LOGGING"}}, "'CLOUD_LOGGING' is not one of"),
    ("artifactregistry", "v1", "Repository", {"cleanupPolicies": {"p": {"condition": {"tagState": "UNTAG"}}}},
     "'UNTAG' is not one of"),
    ("cloudquotas", "v1", "QuotaPreference", {"quotaConfig": {"preferredValue": "four"}}, "is not a Integer"),
    ("aiplatform", "v1", "GoogleCloudAiplatformV1CustomJob",
     {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"acceleratorType": "NVIDIA_T4"}}]}}, "'NVIDIA_T4' is not one of"),
])
def test_a_field_or_value_google_does_not_define_is_caught(api, version, cls, body, fragment):
    found = apischema.problems(schema(api, version), cls, body)
    assert any(fragment in p for p in found), found


#: The catalogue's accelerator types newer than the Cloud SDK here (528.0.0, June 2025): its bundled aiplatform v1
#: schema has H100 Mega, H200 and B200 but not the RTX PRO 6000, so requests for that one are checked against the
#: installed client library's protos instead (google-cloud-aiplatform's aiplatform_v1.AcceleratorType:
#: tests/ops/train/test_vertex_contract.py parses every catalogue request with it).
NEWER_THAN_THE_SDK = frozenset({"NVIDIA_RTX_PRO_6000"})


def test_the_catalogues_accelerator_enums_are_the_sdks_or_newer_and_the_client_librarys():
    from google.cloud import aiplatform_v1

    version = (gc.sdk_root() / "VERSION").read_text().strip()
    enums = schema("aiplatform", "v1")["GoogleCloudAiplatformV1MachineSpec.AcceleratorTypeValueValuesEnum"].enum
    used = {g.vertex_accelerator for g in domain.GPU_TYPES.values()}
    used |= {t.vertex.accelerator_type for t in domain.TPU_SLICES.values() if t.vertex and t.vertex.accelerator_type}
    # every other accelerator type is checked against this SDK's schema; the newer ones against the client library
    assert used - enums <= NEWER_THAN_THE_SDK, f"Cloud SDK {version} lacks {sorted(used - enums - NEWER_THAN_THE_SDK)}"
    if version == "528.0.0":
        assert used - enums == NEWER_THAN_THE_SDK     # the list names exactly what 528 lacks
    assert NEWER_THAN_THE_SDK <= set(aiplatform_v1.AcceleratorType.__members__)
