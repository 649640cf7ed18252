"""`tpuctl deploy` from a container tpuctl controls (issue 42): Google's newest TensorFlow prediction image
(tf2-cpu.2-15) reaches its end of availability on 2027-01-14 and none is newer, so deploy serves with TF Serving
from the stack's Artifact Registry repository - by flag now, by default from that date. Checked against Google's
own types (aiplatform_v1, unknown fields refused) and the Vertex AI fake."""

from __future__ import annotations

import datetime
import json

import pytest
from google.cloud import aiplatform_v1

from ground import domain
from ground.outputs import read_outputs_file
from tpuctl.services import serving

from clifixtures import error_line, invoke
from stackfixtures import write_outputs

REPOSITORY = "us-central1-docker.pkg.dev/my-serve-project/tpuctl-trainer"


@pytest.fixture
def stack_outputs(tmp_path, helpers):
    return write_outputs(tmp_path / "stack.json", {**helpers.OUTPUTS, "trainer_image_url": REPOSITORY})


def strict_message(message_type, body):
    """The body as the aiplatform_v1 type, refusing any field the type does not have."""
    return message_type.from_json(json.dumps(body), ignore_unknown_fields=False)


def _spec(model: aiplatform_v1.Model) -> aiplatform_v1.ModelContainerSpec:
    return model.container_spec


def test_tf_serving_by_flag_runs_the_stacks_copy_on_the_export_folder(fake_export, stack_outputs):
    result = invoke(["deploy", "20261122-1000", "--dir", fake_export.runs, "--outputs", stack_outputs, "--dry-run",
                     "--tf-serving"])
    assert result.exit_code == 0, result.stderr
    model = strict_message(aiplatform_v1.Model, json.loads(result.stdout)["uploadModel"]["model"])
    spec = _spec(model)
    image = f"{REPOSITORY}/tf-serving:{domain.TF_SERVING_VERSION}"
    assert spec.image_uri == image
    assert list(spec.command) == ["tensorflow_model_server"]
    assert "--model_base_path=$(AIP_STORAGE_URI)" in spec.args and "--model_name=small_cnn" in spec.args
    assert [p.container_port for p in spec.ports] == [domain.TF_SERVING_REST_PORT]
    assert (spec.predict_route, spec.health_route) == ("/v1/models/small_cnn:predict", "/v1/models/small_cnn")
    # TF Serving reads a folder of version folders: the Model points at the one above the export's version
    upload = json.loads(result.stdout)["upload"]
    assert upload["to"].endswith("/small_cnn/3") and model.artifact_uri == upload["to"].rsplit("/", 1)[0]
    # where the image comes from, and how to put it there
    note = [line for line in result.stderr.splitlines() if line.startswith("note: TF Serving")]
    assert note and image in note[0] and f"docker push {image}" in note[0], result.stderr


def test_past_the_prebuilt_images_end_of_availability_deploy_serves_with_tf_serving(fake_export, stack_outputs):
    export = serving.resolve_export(str(fake_export.export))
    outputs = read_outputs_file(stack_outputs)
    before = serving.plan_deploy(export, outputs, today=datetime.date(2026, 12, 1))
    assert not before.tf_serving and "tf2-cpu.2-15" in before.image_uri
    assert "2027-01-14" in before.warning and "--tf-serving" in before.warning     # the replacement is named
    after = serving.plan_deploy(export, outputs, today=datetime.date(2027, 1, 14))
    assert after.tf_serving and after.image_uri == f"{REPOSITORY}/tf-serving:{domain.TF_SERVING_VERSION}"
    assert "end of availability" in after.warning and "docker push" in after.warning


def test_without_a_repository_past_the_date_is_one_line_naming_the_way_out(fake_export, outputs_file):
    export = serving.resolve_export(str(fake_export.export))
    from ground.errors import UserError
    with pytest.raises(UserError, match=r"trainer_image_url.*--image"):
        serving.plan_deploy(export, read_outputs_file(outputs_file), today=datetime.date(2027, 2, 1))
    result = invoke(["deploy", fake_export.run, "--outputs", outputs_file, "--tf-serving", "--dry-run"])
    line = error_line(result, 2)
    assert "trainer_image_url" in line and "--image" in line, line


def test_a_tf_serving_deployment_reaches_vertex_ai_as_its_types_accept(fake_export, stack_outputs, vertex, gcs,
                                                                     helpers):
    fake = vertex()
    result = invoke(["deploy", "20261122", "--dir", fake_export.runs, "--outputs", stack_outputs, "--tf-serving"])
    assert result.exit_code == 0, result.stderr
    (path, body), = fake.posts(":upload")
    upload = strict_message(aiplatform_v1.UploadModelRequest, body)
    assert upload.model.artifact_uri == f"gs://{helpers.ARTIFACTS}/models/20261122-1000/small_cnn"
    assert upload.model.container_spec.predict_route == "/v1/models/small_cnn:predict"
    assert len(fake.posts(":deployModel")) == 1
