"""`tpuctl tune`: the spec is validated at the edge; requests parse strictly as Google's HyperparameterTuningJob
and go to a local stand-in of Vertex AI through the real JobServiceClient; `tune status` ranks the trials it
reads back; local tuning runs real trainer trials on the demo dataset and ranks them by what the trainer wrote."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from google.cloud import aiplatform_v1

from tpuctl.services.runs import vertex
from tpuctl.services.runs.tuning import local as tuning_local
from tpuctl.services.runs.tuning import spec as tuning_spec

from clifixtures import error_line, invoke
from runfixtures import planned

HP = aiplatform_v1.HyperparameterTuningJob
#: An image tpuctl did not build (--image): Vertex AI's to find, so no registry is asked.
IMAGE = "us-docker.pkg.dev/my-project-1/team-images/trainer:7"


def _strict(text: str):
    return HP.from_json(text, ignore_unknown_fields=False)


@pytest.mark.parametrize("yaml_text, field, message", [
    ("parameters: {learning_rate: {min: 0, max: 0.1}}", "parameters.learning_rate.min", "greater than 0"),
    ("parameters: {learning_rate: {min: 0.1, max: 0.01}}", "parameters.learning_rate", "must be below max"),
    ("parameters: {batch_size: {values: [32, 0]}}", "parameters.batch_size", "every value must be 1..65536"),
    ("parameters: {model: {values: [hub]}}", "parameters.model.values.0", "small_cnn"),
    ("parameters: {epochs: {min: 3, max: 2}}", "parameters.epochs", "must not be above max"),
    ("parameters: {learning_rate: {min: 0.001, max: 0.1}}\nmax_trials: 1000", "max_trials", "less than or equal to 100"),
    ("parameters: {batch_size: {values: [8]}}\nmax_trials: 2\nparallel_trials: 3", "(top level)", "parallel_trials (3)"),
    ("parameters: {learning_rate: {min: 0.001, max: 0.1}}\nalgorithm: grid", "(top level)", "grid search needs"),
    ("parameters: {}", "parameters", "at least one of"),
    ("parameters: {dropout: {min: 0.1, max: 0.5}}", "parameters.dropout", "goes under parameters.hparams.dropout"),
])
def test_spec_errors_are_one_line_naming_file_and_field(tmp_path, yaml_text, field, message):
    path = tmp_path / "tune.yaml"
    path.write_text(yaml_text)
    with pytest.raises(Exception) as info:
        tuning_spec.load_spec(path)
    text = str(info.value)
    assert text.startswith(f"{path}: {field}: ") and message in text and "\n" not in text


def test_bad_spec_through_the_cli(tmp_path, outputs_file):
    path = tmp_path / "tune.yaml"
    path.write_text("parameters: {epochs: {min: 0, max: 3}}")
    result = invoke(["tune", "--target", "vertex", "--outputs", outputs_file, "--dry-run", "--spec", path])
    line = error_line(result, 2)          # the file, the field, the bound it broke (pydantic's words after it)
    assert line.startswith(f"error: {path}: parameters.epochs.min: ") and line.endswith(" 1"), line


def test_default_dry_run_is_a_strict_tuning_job_around_the_train_worker_pools(outputs_file):
    result = invoke(["tune", "--target", "vertex", "--outputs", outputs_file, "--dry-run", "--name", "t1", "--workers", "2",
                     "--epochs", "3"])
    assert result.exit_code == 0, result.stderr
    job = _strict(result.stdout)
    assert job.max_trial_count == 6 and job.parallel_trial_count == 2
    study = job.study_spec
    assert [(m.metric_id, m.goal.name) for m in study.metrics] == [("val_accuracy", "MAXIMIZE")]
    assert study.algorithm.name == "RANDOM_SEARCH"
    lr, batch = study.parameters
    assert (lr.parameter_id, lr.scale_type.name, lr.double_value_spec.min_value, lr.double_value_spec.max_value) == (
        "learning_rate", "UNIT_LOG_SCALE", 1e-4, 0.1)
    assert batch.parameter_id == "train_batch_size" and list(batch.categorical_value_spec.values) == ["16", "32", "64"]
    # The trial job spec is train's CustomJob job_spec for the same flags.
    from ground.outputs import read_outputs_file

    train = vertex.build_custom_job(planned("vertex", read_outputs_file(outputs_file), workers=2, epochs=3, name="t1",
                                            plan_as="tune"))
    assert job.trial_job_spec == train.job_spec
    assert job.labels["tpuctl-command"] == "tune"


def test_tuned_flags_are_left_to_the_study(tmp_path, outputs_file):
    spec = tmp_path / "tune.yaml"
    spec.write_text("parameters:\n  epochs: {min: 1, max: 4}\n  model: {values: [small_cnn, resnet50]}\n"
                    "  learning_rate: {values: [0.01, 0.001]}\nalgorithm: grid\nmax_trials: 4\nparallel_trials: 1\n")
    result = invoke(["tune", "--target", "vertex", "--outputs", outputs_file, "--dry-run", "--spec", spec, "--epochs", "9"])
    assert result.exit_code == 0, result.stderr
    job = _strict(result.stdout)
    args = list(job.trial_job_spec.worker_pool_specs[0].container_spec.args)
    assert "--data_dir" in args                                      # the trial's arguments, read back
    assert "--train_epochs" not in args and "--model" not in args   # the study passes them per trial
    ids = {p.parameter_id: p for p in job.study_spec.parameters}
    assert ids["train_epochs"].integer_value_spec.max_value == 4
    assert list(ids["model"].categorical_value_spec.values) == ["small_cnn", "resnet50"]
    assert list(ids["learning_rate"].discrete_value_spec.values) == [0.001, 0.01]
    assert job.study_spec.algorithm.name == "GRID_SEARCH"


def test_submit_sends_the_strict_request_with_the_real_client(outputs_file, fake_tuning, gcs):
    fake = fake_tuning()
    result = invoke(["tune", "--target", "vertex", "--outputs", outputs_file, "--image", IMAGE, "--name", "t2", "--spot", "--max-run-time", "90m",
                     "--trials", "3"])
    assert result.exit_code == 0, result.stderr
    [(_, path, body)] = fake.posts()
    assert path == "/v1/projects/my-project-1/locations/us-central1/hyperparameterTuningJobs"
    sent = _strict(json.dumps(body))
    assert sent.max_trial_count == 3 and sent.display_name == "t2"
    scheduling = sent.trial_job_spec.scheduling
    assert scheduling.strategy.name == "SPOT" and scheduling.restart_job_on_worker_restart
    assert scheduling.timeout.total_seconds() == 5400
    assert "projects/my-project-1/locations/us-central1/hyperparameterTuningJobs/7000" in result.stdout
    assert sent.trial_job_spec.worker_pool_specs[0].container_spec.image_uri == IMAGE
    assert [b.name for b in gcs.list_blobs("tpuctl-my-project-1-staging")] == []     # nothing staged


def _trial(tid, lr, batch, acc=None, state="SUCCEEDED"):
    t = {"id": tid, "state": state, "parameters": [{"parameterId": "learning_rate", "value": lr},
                                                    {"parameterId": "train_batch_size", "value": batch}]}
    if acc is not None:
        t["finalMeasurement"] = {"stepCount": "5", "metrics": [{"metricId": "val_accuracy", "value": acc}]}
    return t


def test_status_ranks_trials_from_the_endpoint_and_names_the_best_export(outputs_file, fake_tuning, gcs):
    fake = fake_tuning(trials=[_trial("1", 0.01, "32", 0.71), _trial("2", 0.003, "16", 0.93),
                               _trial("3", 0.05, "64", None, state="ACTIVE"), _trial("4", 0.0002, "64", 0.42)])
    submitted = invoke(["tune", "--target", "vertex", "--outputs", outputs_file, "--image", IMAGE, "--name", "t3"])
    assert submitted.exit_code == 0, submitted.stderr
    name = next(iter(fake.jobs))
    result = invoke(["tune", "status", name])
    assert result.exit_code == 0, result.stderr
    order = [m.group(1) for m in re.finditer(r"^│ (\d) ", result.stdout, re.M)]
    assert order == ["2", "1", "4", "3"]
    assert "best trial: 2 val_accuracy 0.9300" in result.stdout
    assert "best export: gs://tpuctl-my-project-1-artifacts/runs/t3/2/model/small_cnn/1" in result.stdout
    # The ID alone, with the stack's project and region.
    by_id = invoke(["tune", "status", name.rsplit("/", 1)[1], "--outputs", outputs_file])
    assert by_id.exit_code == 0 and "best trial: 2" in by_id.stdout
    missing = invoke(["tune", "status", "projects/my-project-1/locations/us-central1/hyperparameterTuningJobs/1"])
    assert missing.exit_code == 1 and "error: cannot read tuning job" in missing.stderr


def test_local_grid_sampling_and_random_sampling_stay_in_the_spec():
    spec = tuning_spec.parse_spec({"parameters": {"batch_size": {"values": [8, 16]}, "epochs": {"min": 1, "max": 2}},
                              "algorithm": "grid"}, "t.yaml")
    assert tuning_local.sample_trials(spec, 10) == [{"batch_size": 8, "epochs": 1}, {"batch_size": 8, "epochs": 2},
                                              {"batch_size": 16, "epochs": 1}, {"batch_size": 16, "epochs": 2}]
    for t in tuning_local.sample_trials(tuning_spec.DEFAULT_SPEC, 50, seed=3):
        assert 1e-4 <= t["learning_rate"] <= 0.1 and t["batch_size"] in (16, 32, 64)
    assert tuning_local.trial_args({"learning_rate": 0.01, "batch_size": 32}) == ["--learning_rate=0.01",
                                                                           "--train_batch_size=32"]


@pytest.mark.slow
def test_local_tuning_runs_real_trials_and_ranks_them_by_the_trainer_metric(trainer_env, tmp_path):
    spec = tuning_spec.parse_spec({"parameters": {"learning_rate": {"values": [0.3, 0.00001]}},
                              "algorithm": "grid", "max_trials": 2, "parallel_trials": 1}, "t.yaml")
    opts = planned(epochs=1, model_dir=str(tmp_path / "tune"), plan_as="tune",
                   trainer_args=("--steps_per_epoch", "10", "--seed", "1", "--validation_batch_size", "64"))
    log = io.StringIO()
    base, rows = tuning_local.run_local_tuning(opts, spec, trials=2, out=log, err=io.StringIO())
    assert base == str(tmp_path / "tune") and len(rows) == 2
    assert all(r.state == "SUCCEEDED" for r in rows), log.getvalue()[-3000:]
    for row in rows:
        result = json.loads((Path(base) / f"trial-{row.trial}" / "result.json").read_text())
        assert row.metric == result["val_accuracy"]                        # what the trainer wrote
        assert row.export == result["export_dir"] and Path(row.export).is_relative_to(Path(base) / f"trial-{row.trial}")
        assert (Path(row.export) / "saved_model.pb").is_file()
    assert [r.metric for r in rows] == sorted((r.metric for r in rows), reverse=True)
    assert {r.params["learning_rate"] for r in rows} == {0.3, 0.00001}


def test_a_local_search_of_a_stack_plans_what_it_can_run(outputs_file, tmp_path, monkeypatch):
    """issue 40 (found by a new user): with --stack/--outputs a local search's dry run showed trials in the artifacts
    bucket, which the run then refused; --workers 2 passed the dry run and was refused by the run after its folder
    was made. Now the plan is the run's: a local folder, and --workers refused before anything exists."""
    monkeypatch.chdir(tmp_path)
    r = invoke(["tune", "--outputs", str(outputs_file), "--dry-run"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["target"] == "local" and plan["folder"].startswith(str(tmp_path / "runs"))
    for args, key in [(["--workers", "2"], "one process per trial"),
                      (["--model-dir", "gs://some-bucket/search"], "local tuning writes its trials to a local")]:
        for dry in ([], ["--dry-run"]):
            r = invoke(["tune", "--outputs", str(outputs_file), *args, *dry])
            assert r.exit_code == 2 and key in r.stderr, (args, dry, r.output)
    assert not (tmp_path / "runs").exists()


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tabular-plugin"


def test_a_plugins_own_hyperparameters_are_sampled_locally_and_searched_by_vertex(outputs_file, monkeypatch):
    """hparams in a tuning spec (examples/tabular-plugin/tune.yaml): each trial passes them as --hp_NAME, which the
    trainer hands to the model function as ctx.hparams; on Vertex AI they are study parameters named hp_NAME."""
    spec = tuning_spec.load_spec(EXAMPLE / "tune.yaml")
    trials = tuning_local.sample_trials(spec, 20, seed=1)
    assert trials and all(t["hparams.units"] in (16, 32, 64) and 0.0 <= t["hparams.dropout"] <= 0.3 for t in trials)
    args = tuning_local.trial_args(trials[0])
    assert f"--hp_units={trials[0]['hparams.units']}" in args and any(a.startswith("--hp_dropout=") for a in args)

    monkeypatch.chdir(EXAMPLE)
    result = invoke(["tune", "--target", "vertex", "--outputs", outputs_file, "--dry-run", "--spec", "tune.yaml",
                     "--model", "model.py:build", "--data-dir", "gs://tpuctl-my-project-1-data/flowers"])
    assert result.exit_code == 0, result.stderr
    job = _strict(result.stdout)
    ids = {p.parameter_id: p for p in job.study_spec.parameters}
    assert list(ids["hp_units"].discrete_value_spec.values) == [16, 32, 64]
    assert ids["hp_dropout"].double_value_spec.max_value == 0.3
    container = job.trial_job_spec.worker_pool_specs[0].container_spec
    assert "/code-" in container.image_uri and "--hp_units" not in container.args   # the study passes them


def test_a_spec_that_tunes_hparams_needs_a_plugin(outputs_file):
    r = invoke(["tune", "--target", "vertex", "--outputs", outputs_file, "--dry-run", "--spec", str(EXAMPLE / "tune.yaml")])
    line = error_line(r, 2)
    assert "hparams" in line and "--model" in line, line
