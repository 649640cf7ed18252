"""One training run, one shape (issue 40): the same flags planned for every target give the same run: its folders,
strategy, environment, labels and identity are derived once (``runs.spec.plan``), whatever target then turns the
spec into its request; and a flag's check is the same on every target."""

from __future__ import annotations

import pytest

from ground.outputs import parse_outputs

from clifixtures import error_line, invoke
from runfixtures import planned
from stackfixtures import write_outputs

OUTPUTS = {"project": "my-project-1", "region": "us-central1", "zone": "us-central1-a",
           "buckets": {"data": "tpuctl-my-project-1-data", "staging": "tpuctl-my-project-1-staging",
                       "artifacts": "tpuctl-my-project-1-artifacts", "hub-cache": "tpuctl-my-project-1-hub-cache"},
           "training_service_account": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
           "tfhub_cache_dir": "gs://tpuctl-my-project-1-hub-cache/model-cache", "labels": {"stack": "dev"}}
SHARED = dict(name="exp-1", epochs=3, batch_size=64, trainer_args=("--learning_rate", "0.01"),
              image="us-central1-docker.pkg.dev/my-project-1/r/trainer:1")


def _shared(spec) -> dict:
    """What every target must agree on."""
    return {"data_dir": spec.data_dir, "model_dir": spec.model_dir, "trainer": spec.trainer.argv(),
            "env": spec.env, "labels": spec.labels}


@pytest.mark.parametrize("accelerator", ["cpu", "gpu-t4x2"])
def test_local_and_vertex_plan_the_same_run(accelerator):
    outputs = parse_outputs(OUTPUTS)
    local = planned("local", outputs, accelerator=accelerator, **{**SHARED, "image": None})
    vertex = planned("vertex", outputs, accelerator=accelerator, **SHARED)
    assert _shared(local) == _shared(vertex)
    assert local.model_dir == "gs://tpuctl-my-project-1-artifacts/runs/exp-1"       # <artifacts>/runs/NAME
    assert local.trainer.distribution_strategy == ("cpu" if accelerator == "cpu" else "gpu")
    assert local.env["TFHUB_CACHE_DIR"] == "gs://tpuctl-my-project-1-hub-cache/model-cache"
    assert vertex.service_account == "tpuctl-trainer@my-project-1.iam.gserviceaccount.com"


def test_vertex_and_tpu_vm_plan_the_same_tpu_run():
    """One host of TPU v5e, asked for by either name: the same strategy, PJRT switch, labels, identity, folders."""
    outputs = parse_outputs(OUTPUTS)
    vertex = planned("vertex", outputs, accelerator="tpu-v5e-8", **SHARED)
    tpu_vm = planned("tpu-vm", outputs, accelerator="v5litepod-8", **SHARED)
    assert _shared(vertex) == _shared(tpu_vm)
    assert vertex.service_account == tpu_vm.service_account is not None
    assert vertex.trainer.distribution_strategy == "tpu" and vertex.env["TPU_NAME"] == "local"
    assert vertex.labels["accelerator"] == tpu_vm.labels["accelerator"] == "tpu-v5e-8"


@pytest.mark.parametrize("target", ["local", "vertex", "tpu-vm"])
@pytest.mark.parametrize("flag, value", [("--batch-size", "65537"), ("--workers", "0"), ("--name", "bad name"),
                                         ("--epochs", "0")])
def test_the_same_bad_value_is_refused_the_same_way_on_every_target(target, flag, value, tmp_path):
    outputs = write_outputs(tmp_path / "outputs.json", OUTPUTS)
    r = invoke(["train", "--target", target, "-a", "tpu-v5e-8" if target == "tpu-vm" else "cpu", "--outputs", outputs,
                "--dry-run", flag, value])
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.output
    assert r.stderr.startswith("error: ") and flag in r.stderr


@pytest.mark.parametrize("target", ["local", "vertex", "tpu-vm"])
def test_profile_steps_reach_the_trainer_on_every_target(target):
    outputs = parse_outputs(OUTPUTS)
    spec = planned(target, outputs, accelerator="tpu-v5e-8" if target != "local" else "cpu", profile_steps=" 10 - 15",
                   **{**SHARED, "image": None if target == "local" else SHARED["image"]})
    argv = spec.trainer.argv()
    assert argv[argv.index("--profile_steps") + 1] == "10-15"


@pytest.mark.parametrize("args, needle", [
    (["--profile-steps", "15-10"], "before the first"), (["--profile-steps", "1-101"], "at most 100"),
    (["--profile-steps", "x"], "like 10-15"), (["--profile-steps", "3-4", "--", "--profile_steps", "5-6"], "not both"),
])
def test_a_bad_profile_range_is_one_line_before_anything_runs(args, needle, tmp_path):
    r = invoke(["train", "--dry-run", "--data-dir", str(tmp_path), *args])
    line = error_line(r, 2)
    assert "--profile" in line and needle in line, line


@pytest.mark.parametrize("command", [["train", "--target", "vertex"], ["train", "--target", "tpu-vm", "-a", "v5e-8"],
                                     ["tune", "--target", "vertex"]])
def test_a_bad_image_reference_is_refused_the_same_way_on_every_cloud_target(command, tmp_path):
    outputs = write_outputs(tmp_path / "outputs.json", OUTPUTS)
    r = invoke([*command, "--outputs", outputs, "--image", "Bad Image;rm -rf", "--dry-run"])
    assert r.stdout == ""
    line = error_line(r, 2, alone=True)    # the flag and its value, then the form it must have
    assert "--image 'Bad Image;rm -rf'" in line and "REGISTRY/PATH/IMAGE:TAG" in line and "@sha256:DIGEST" in line


def test_one_name_and_one_unit_per_bound():
    """--max-run-time and --max-wait are durations on every target; the old seconds flags are gone."""
    for gone in ("--run-timeout", "--provision-timeout", "--job-name"):
        r = invoke(["train", gone, "1"])
        assert r.exit_code == 2 and "No such option" in r.stderr, (gone, r.stderr)
    assert invoke(["tpu", "run"]).exit_code == 2       # `tpu run` is `train --target tpu-vm`


def test_both_searches_plan_the_run_train_plans_and_their_requests_carry_it(tmp_path, monkeypatch):
    """The tuning targets plan through the same planner: a search differs from a training run of the same flags only
    in its command label (and a local search's folder, which is always local); the Vertex AI tuning job's trials run
    the CustomJob request of that run, and each local trial the run's trainer command in its own folder."""
    from tpuctl.services.runs import vertex
    from tpuctl.services.runs.tuning.local import LocalTuningTarget
    from tpuctl.services.runs.tuning.spec import load_spec
    from tpuctl.services.runs.tuning.vertex import build_tuning_job
    from trainer.flags import without_flags

    monkeypatch.chdir(tmp_path)
    outputs = parse_outputs(OUTPUTS)
    train = planned("vertex", outputs, accelerator="cpu", **SHARED)
    search = planned("vertex", outputs, accelerator="cpu", plan_as="tune", **SHARED)
    local_search = planned("local", outputs, accelerator="cpu", plan_as="tune", **{**SHARED, "image": None})
    for spec in (search, local_search):
        assert spec.labels == {**train.labels, "tpuctl-command": "tune"}
        assert spec.env == train.env and spec.data_dir == train.data_dir
        assert without_flags(spec.trainer.argv(), "model_dir") == without_flags(train.trainer.argv(), "model_dir")
    assert search.model_dir == train.model_dir and search.service_account == train.service_account
    assert local_search.model_dir == str(tmp_path / "runs" / "exp-1")

    space = load_spec(None)                          # the default: learning rate × batch size
    job = build_tuning_job(search, space)
    trial = job.trial_job_spec.worker_pool_specs[0].container_spec
    custom = vertex.build_custom_job(search).job_spec.worker_pool_specs[0].container_spec
    assert list(trial.args) == without_flags(list(custom.args), "learning_rate", "train_batch_size")
    assert dict(job.labels) == search.labels and job.trial_job_spec.service_account == search.service_account
    trials = LocalTuningTarget(local_search.model_copy(update={"seed": 1}), search=space, trials=2).describe()["trials"]
    assert [t["model_dir"] for t in trials] == [f"{local_search.model_dir}/trial-{i}" for i in (1, 2)]


@pytest.mark.parametrize("target, accelerator", [("tpu-vm", "tpu7x-8"), ("vertex", "tpu7x-8"), ("tpu-vm", "tpu-v7x-16"),
                                                 ("vertex", "v7x-8")])
def test_tpu7x_is_refused_in_one_line_naming_why(target, accelerator, tmp_path):
    # The Cloud TPU API is not supported on TPU7x and later (its runtimes page banner), and tpuctl has no Compute
    # Engine or GKE target yet.
    outputs = write_outputs(tmp_path / "outputs.json", OUTPUTS)
    r = invoke(["train", "--target", target, "-a", accelerator, "--outputs", outputs, "--dry-run"])
    line = error_line(r, 2, alone=True)
    assert r.stdout == "" and accelerator in line and "TPU7x" in line, line
    assert "Cloud TPU API" in line and "no Compute Engine or GKE target" in line, line   # why, not "unknown accelerator"


def test_tpu_v2_trains_on_vertex_in_asia_east1(tmp_path):
    # Google's locations table lists TPU v2 for training in asia-east1 (the regenerated catalogue; issue 42: the
    # hand-typed table missed it): a dry run there is neither refused nor warned about.
    outputs = write_outputs(tmp_path / "outputs.json", {**OUTPUTS, "region": "asia-east1"})
    r = invoke(["train", "--target", "vertex", "-a", "tpu-v2-8", "--region", "asia-east1", "--outputs", outputs,
                "--dry-run"])
    assert r.exit_code == 0, r.stderr
    assert "asia-east1" in r.stdout and not [line for line in r.stderr.splitlines() if "TPU v2" in line], r.stderr


def test_the_export_name_is_the_users_on_every_target(tmp_path):
    """Issue 57: the export (and the TF Serving model) is named as the user says (--export-name), on every target;
    a name TF Serving cannot serve, or the trainer's flag given twice, is one line."""
    outputs = parse_outputs(OUTPUTS)
    for target in ("local", "vertex", "tpu-vm"):
        spec = planned(target, outputs, accelerator="tpu-v5e-8" if target == "tpu-vm" else "cpu",
                       export_name="flowers.v2", **{**SHARED, "image": None if target == "local" else SHARED["image"]})
        argv = spec.trainer.argv()
        assert argv[argv.index("--export_name") + 1] == "flowers.v2", argv
    for args, needle in ((["--export-name", "a/b"], "model name 'a/b'"),
                         (["--export-name", "x", "--", "--export_name", "y"], "not both")):
        line = error_line(invoke(["train", "--dry-run", "--data-dir", str(tmp_path), *args]), 2)
        assert needle in line, line
