"""--backend (issue 55): what trains the model, chosen once by the planner for every target (``runs.spec.backend``):
``auto`` is TensorFlow wherever Google supports it, else JAX; a backend Google does not support there, or one the
run's model or cluster cannot use, is one line before anything exists; the choice picks the trainer image, the
trainer's ``--backend``, and the TPU runtime's variables."""

from __future__ import annotations

import json

import pytest

from ground import domain
from ground.outputs import parse_outputs

from clifixtures import error_line, invoke
from runfixtures import planned
from stackfixtures import write_outputs

OUTPUTS = {"project": "my-project-1", "region": "us-central1", "zone": "us-central1-a",
           "buckets": {"data": "tpuctl-my-project-1-data", "staging": "tpuctl-my-project-1-staging",
                       "artifacts": "tpuctl-my-project-1-artifacts", "hub-cache": "tpuctl-my-project-1-hub-cache"},
           "training_service_account": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
           "repository": "tpuctl", "labels": {"stack": "dev"}}
PJRT = set(domain.tpu.TF_PJRT_ENV)


def _image_variant(spec) -> str:
    return spec.image.rsplit("/", 1)[1].split(":", 1)[0].removeprefix("trainer-").removeprefix("code-")


@pytest.mark.parametrize("target, accelerator", [("vertex", "cpu"), ("vertex", "gpu-t4x2"), ("vertex", "tpu-v5e-8"),
                                                 ("vertex", "tpu-v3-8"), ("tpu-vm", "tpu-v5e-8"),
                                                 ("tpu-vm", "tpu-v6e-8")])
def test_auto_keeps_tensorflow_wherever_google_supports_it_and_the_command_line_as_it_was(target, accelerator):
    spec = planned(target, parse_outputs(OUTPUTS), accelerator=accelerator, name="exp-1")
    assert spec.backend == "tensorflow"
    assert "--backend" not in spec.argv                   # a TensorFlow run's trainer command line is unchanged
    assert _image_variant(spec) == domain.image_variant(spec.accelerator.kind, "tensorflow")
    generation = spec.accelerator.tpu.generation if spec.accelerator.tpu else None
    assert (PJRT <= set(spec.env)) == (generation in domain.tpu.TF_PJRT_TPU_VERSIONS)


def test_auto_is_jax_on_tpu_v6e_on_vertex_ai_with_its_image_and_no_tensorflow_switch():
    spec = planned("vertex", parse_outputs(OUTPUTS), accelerator="tpu-v6e-8", name="exp-1",
                   model="model.py:build", code="examples/keras3-sensors")
    assert spec.backend == "jax"
    assert spec.argv[spec.argv.index("--backend") + 1] == "jax"
    assert _image_variant(spec) == "jax-tpu"
    assert not PJRT & set(spec.env) and spec.env["TPU_NAME"] == "local"


@pytest.mark.parametrize("target, accelerator, variant", [("vertex", "gpu-t4x2", "jax-gpu"),
                                                          ("vertex", "cpu", "jax-cpu"),
                                                          ("vertex", "tpu-v5e-8", "jax-tpu"),
                                                          ("tpu-vm", "tpu-v5e-16", "jax-tpu")])
def test_backend_jax_picks_the_jax_image_and_leaves_tensorflow_settings_out(target, accelerator, variant):
    spec = planned(target, parse_outputs(OUTPUTS), accelerator=accelerator, name="exp-1", backend="jax")
    assert _image_variant(spec) == variant
    assert spec.argv[spec.argv.index("--backend") + 1] == "jax"
    assert "--num_gpus" not in spec.argv                  # the JAX trainer refuses TensorFlow's GPU settings
    assert not PJRT & set(spec.env)


def test_a_local_jax_run_passes_its_backend_to_every_process():
    spec = planned("local", None, backend="jax", workers=2)
    assert spec.backend == "jax" and spec.argv[spec.argv.index("--backend") + 1] == "jax"


def test_the_built_in_small_cnn_plans_on_jax_where_only_jax_trains(tmp_path):
    """TPU v6e on Vertex AI: the default model is built with Keras 3's layers on JAX (trainer.models.small_cnn)."""
    outputs = write_outputs(tmp_path / "outputs.json", OUTPUTS)
    r = invoke(["train", "--target", "vertex", "-a", "tpu-v6e-8", "--outputs", outputs, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "trainer-jax-tpu:" in r.stdout and '"--backend"' in r.stdout


@pytest.mark.parametrize("args, key", [
    (["--target", "vertex", "-a", "tpu-v6e-8", "--backend", "tensorflow"], "the jax backend trains there"),
    (["--target", "vertex", "-a", "tpu-v6e-8", "--backend", "tensorflow"], "training-with-tpu-vm"),
    (["--backend", "jax", "--model", "resnet50"], "--model resnet50 trains on TensorFlow only"),
    (["--backend", "jax", "--hub-handle", "https://tfhub.dev/x/1"], "--model hub trains on TensorFlow only"),
    (["--target", "vertex", "-a", "tpu-v6e-8", "--model", "resnet50"], "tpu-v6e-8 on vertex trains on JAX only"),
    (["--backend", "jax", "-w", "2", "--parameter-servers", "1"], "Keras 3 has no ParameterServerStrategy"),
    (["--backend", "pytorch"], "--backend"),
])
def test_a_backend_that_cannot_train_the_run_is_one_line_and_nothing_is_made(args, key, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outputs = write_outputs(tmp_path / "outputs.json", OUTPUTS)
    r = invoke(["train", *args, "--outputs", outputs, "--dry-run"])
    assert r.exit_code == 2, r.output
    assert key in error_line(r), r.output
    assert r.stdout == "" and not (tmp_path / "runs").exists()


def test_runs_show_says_which_backend_and_keras_trained_it(tmp_path):
    folder = tmp_path / "runs" / "exp-1"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"val_accuracy": 0.9, "epochs": 2, "model": "model.py:build",
                                                    "backend": "jax", "keras": "keras3", "strategy": "one_device"}))
    r = invoke(["runs", "show", "exp-1", "--dir", str(tmp_path / "runs")])
    assert r.exit_code == 0, r.output
    assert [line.split(None, 1)[1] for line in r.stdout.splitlines() if line.split()[:1] == ["backend"]] == [
        "jax (keras3)"]


def test_a_tf_keras_model_function_on_jax_is_refused_before_a_cloud_run_is_made(tmp_path):
    """The tabular example's model imports tf_keras: on TPU v6e on Vertex AI (JAX only) that is one line at plan
    time, not a job that fails once its TPU VMs are up; its Keras 3 sibling plans."""
    outputs = write_outputs(tmp_path / "outputs.json", OUTPUTS)
    base = ["train", "--target", "vertex", "-a", "tpu-v6e-8", "--outputs", outputs, "--dry-run",
            "--model", "model.py:build"]
    r = invoke([*base, "--code", "examples/tabular-plugin"])
    assert r.exit_code == 2 and "imports tf_keras" in error_line(r), r.output
    assert r.stdout == ""
    assert invoke([*base, "--code", "examples/keras3-sensors"]).exit_code == 0
