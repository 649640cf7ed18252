"""`tpuctl train --target vertex` runs the trainer's own image (containerSpec) by default: the image URI follows
the sources, the job carries the same args/env as a job on an image the user names (--image), and a missing image is
one line naming the command that builds it."""

from __future__ import annotations

import json

import pytest
from google.cloud import aiplatform_v1

from ground import domain
from ground.errors import UserError
from tpuctl.services import image
from tpuctl.services.runs import vertex

from buildfakes import FakeBuildCloud
from clifixtures import invoke
from httpfakes import fake_factory
from runfixtures import planned
from stackfixtures import write_outputs

PROJECT, REGION = "my-project-1", "us-central1"
OUTPUTS = {
    "project": PROJECT, "region": REGION,
    "buckets": {"data": "tpuctl-my-project-1-data", "staging": "tpuctl-my-project-1-staging",
                "artifacts": "tpuctl-my-project-1-artifacts", "hub-cache": "tpuctl-my-project-1-hub-cache"},
    "training_service_account": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
    "tfhub_cache_dir": "gs://tpuctl-my-project-1-hub-cache/model-cache",
    "trainer_image_repository": "team-images",
}


#: An image the user names (--image): the same program, built their way.
THEIRS = "us-central1-docker.pkg.dev/my-project-1/team-images/their-trainer:1"


@pytest.fixture
def outputs_file(tmp_path):
    return write_outputs(tmp_path / "outputs.json", OUTPUTS)


@pytest.fixture
def clouds(fake_vertex, monkeypatch, tmp_path, gcs):
    """(the Vertex AI stand-in, the Artifact Registry fake), both pointed at by their endpoint variables (and the storage
    emulator, where a run folder is looked at before a job is created)."""
    fake = fake_vertex()
    monkeypatch.setenv("TPUCTL_VERTEX_ENDPOINT", fake.url)
    gcs[1].create_bucket(OUTPUTS["buckets"]["artifacts"])   # the runs' folders: the trainer writes its result there
    with fake_factory(FakeBuildCloud, monkeypatch, ["TPUCTL_ARTIFACTREGISTRY_ENDPOINT"],
                      credentials=tmp_path / "none.json") as make:
        yield fake, make()


def _dry_run(outputs_file, *args):
    r = invoke(["train", "--target", "vertex", "--outputs", outputs_file, "--name", "j1", "--dry-run", *args])
    assert r.exit_code == 0, r.stderr
    return r.stdout, aiplatform_v1.CustomJob.from_json(r.stdout, ignore_unknown_fields=False)


@pytest.mark.parametrize("accelerator, variant", [("cpu", "cpu"), ("gpu-t4x2", "gpu"), ("tpu-v5e-4", "tpu")])
def test_default_job_runs_the_trainer_image_with_the_same_args_and_env(outputs_file, accelerator, variant):
    _, job = _dry_run(outputs_file, "--accelerator", accelerator, "--epochs", "3")
    _, named = _dry_run(outputs_file, "--accelerator", accelerator, "--epochs", "3", "--image", THEIRS)
    pool, other = job.job_spec.worker_pool_specs[0], named.job_spec.worker_pool_specs[0]
    tag = image.image_tag(variant)
    assert pool.container_spec.image_uri == f"{REGION}-docker.pkg.dev/{PROJECT}/team-images/trainer-{variant}:{tag}"
    assert other.container_spec.image_uri == THEIRS
    assert list(pool.container_spec.args) == list(other.container_spec.args) and "--train_epochs" in pool.container_spec.args
    assert list(pool.container_spec.env) == list(other.container_spec.env)
    assert pool.machine_spec == other.machine_spec


def test_a_missing_image_is_one_line_naming_the_build_command_and_nothing_is_submitted(outputs_file, clouds):
    fake, registry = clouds
    r = invoke(["train", "--target", "vertex", "--outputs", outputs_file, "--name", "j2", "--poll-seconds", "0.01"])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines()[-1].startswith("error: the trainer image ")
    assert (f"`tpuctl image build --variant cpu --project {PROJECT} --region {REGION} "
            "--repository team-images`") in r.stderr.splitlines()[-1]
    assert fake.posts() == []
    # once the image exists, the same command submits the container job
    ref = image.image_ref(None, "cpu", project=PROJECT, region=REGION, repository="team-images")
    registry.tags.add(ref.uri)
    r = invoke(["train", "--target", "vertex", "--outputs", outputs_file, "--name", "j2", "--poll-seconds", "0.01"])
    assert r.exit_code == 0, r.output
    [(_, _, body)] = fake.posts()
    sent = aiplatform_v1.CustomJob.from_json(json.dumps(body), ignore_unknown_fields=False)
    assert sent.job_spec.worker_pool_specs[0].container_spec.image_uri == ref.uri
    assert "uploaded trainer package" not in r.stdout


def test_a_parameter_server_job_is_sent_with_a_ps_pool(outputs_file, clouds):
    fake, registry = clouds
    registry.tags.add(image.image_ref(None, "cpu", project=PROJECT, region=REGION, repository="team-images").uri)
    r = invoke(["train", "--target", "vertex", "--outputs", outputs_file, "--name", "ps1", "--workers", "3",
                "--parameter-servers", "2", "--poll-seconds", "0.01"])
    assert r.exit_code == 0, r.output
    [(_, _, body)] = fake.posts()
    sent = aiplatform_v1.CustomJob.from_json(json.dumps(body), ignore_unknown_fields=False)
    pools = sent.job_spec.worker_pool_specs
    assert [p.replica_count for p in pools] == [1, 3, 2]      # chief (coordinator), workers, ps
    assert all(list(p.container_spec.args[:2]) == ["--distribution_strategy", "parameter_server"] for p in pools)


def test_an_unverified_quota_metric_google_does_not_list_is_a_note_not_a_refusal(monkeypatch, tmp_path):
    # the Spot, P100, TPU v2 and the newer GPUs' metrics are tpuctl's reading (domain.UNVERIFIED_QUOTA_FACTS): when the
    # project's quota infos lack one, the pre-flight says so and lets Vertex AI decide; a verified one still stops
    import sys
    from pathlib import Path

    from ground.outputs import parse_outputs

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bootstrap"))
    from fakegoogle import quotas_endpoint

    assert domain.unverified_metric_fact(domain.job_quota_need(domain.parse_accelerator("gpu-p100"))[0]) == \
        "p100-quota-metric"
    assert domain.unverified_metric_fact(domain.job_quota_need(domain.parse_accelerator("gpu-t4"), spot=True)[0]) == \
        "spot-quota-metrics"
    assert domain.unverified_metric_fact(domain.job_quota_need(domain.parse_accelerator("gpu-t4"))[0]) is None
    outputs = parse_outputs(OUTPUTS)
    with quotas_endpoint(monkeypatch, tmp_path, {"aiplatform.googleapis.com": []}):
        notes: list[str] = []
        h200 = planned("vertex", outputs, accelerator="gpu-h200", name="q")
        assert vertex.check_quota(h200, echo=notes.append) is None
        assert len(notes) == 1 and "custom_model_training_nvidia_h200_gpus" in notes[0]
        assert "unverified: new-gpu-quota-metrics" in notes[0]
        t4 = planned("vertex", outputs, accelerator="gpu-t4", name="q")
        t4_spot = t4.model_copy(update={"spot": True})
        assert vertex.check_quota(t4_spot, echo=notes.append) is None and "spot-quota-metrics" in notes[1]
        with pytest.raises(UserError, match="custom_model_training_nvidia_t4_gpus"):
            vertex.check_quota(t4, echo=notes.append)


@pytest.mark.parametrize("accelerator, pjrt", [("tpu-v5e-4", True), ("tpu-v3-8", False), ("gpu-t4x2", False)])
def test_tensorflow_on_tpu_v5e_gets_googles_pjrt_switch_and_nothing_else_does(outputs_file, accelerator, pjrt):
    # Google: "TensorFlow training on TPU v5e requires the PJRT runtime" (Vertex AI TPU VM custom-container page).
    _, job = _dry_run(outputs_file, "--accelerator", accelerator)
    env = {e.name: e.value for e in job.job_spec.worker_pool_specs[0].container_spec.env}
    wanted = {"NEXT_PLUGGABLE_DEVICE_USE_C_API": "true", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/lib/libtpu.so"}
    assert (wanted.items() <= env.items()) is pjrt and (pjrt or not wanted.keys() & env.keys())
