"""Vertex AI: the HyperparameterTuningJob request for a ``TuneSpec``, its cost, submitting and reading it back."""

from __future__ import annotations

import math
from typing import Any

from tpuctl.ground.errors import UserError
from tpuctl.services.tuning.spec import ALGORITHMS, MAX_TRIALS, METRIC_ID, TRAINER_FLAGS, TuneSpec
from tpuctl.services.tuning.trials import TrialRow, cell_value, rank


def parameter_specs(spec: TuneSpec) -> list[dict[str, Any]]:
    """StudySpec.ParameterSpec fields (proto names) for the spec's parameters."""
    p = spec.parameters
    out: list[dict[str, Any]] = []
    if p.learning_rate is not None:
        if p.learning_rate.values is not None:
            out.append({"parameter_id": TRAINER_FLAGS["learning_rate"],
                        "discrete_value_spec": {"values": sorted(p.learning_rate.values)}})
        else:
            out.append({"parameter_id": TRAINER_FLAGS["learning_rate"],
                        "double_value_spec": {"min_value": p.learning_rate.min, "max_value": p.learning_rate.max},
                        "scale_type": "UNIT_LOG_SCALE"})
    if p.batch_size is not None:
        out.append({"parameter_id": TRAINER_FLAGS["batch_size"],
                    "categorical_value_spec": {"values": [str(v) for v in sorted(p.batch_size.values)]}})
    if p.model is not None:
        out.append({"parameter_id": TRAINER_FLAGS["model"], "categorical_value_spec": {"values": list(p.model.values)}})
    if p.epochs is not None:
        out.append({"parameter_id": TRAINER_FLAGS["epochs"],
                    "integer_value_spec": {"min_value": p.epochs.min, "max_value": p.epochs.max},
                    "scale_type": "UNIT_LINEAR_SCALE"})
    return out


def without_flags(args: list[str], flags: set[str]) -> list[str]:
    """``args`` minus ``--flag value`` / ``--flag=value`` for the flags a trial sets itself."""
    out, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else None
        if name in flags:
            skip = "=" not in arg and i + 1 < len(args)
            continue
        out.append(arg)
    return out


def tuned_flags(spec: TuneSpec) -> set[str]:
    return {TRAINER_FLAGS[k] for k, v in spec.parameters.model_dump().items() if v is not None}


def build_tuning_job(job, spec: TuneSpec, custom_job=None, *, max_trials: int | None = None):
    """The ``aiplatform_v1.HyperparameterTuningJob`` for ``job`` (``vertex.plan_job``'s VertexJob).

    ``trial_job_spec`` is the CustomJob's ``job_spec`` (``custom_job``, e.g. with Spot scheduling from
    ``cloudrun.with_scheduling``; default ``vertex.build_custom_job(job)``), minus the trainer flags the study
    sets per trial. ``max_trials`` overrides the spec's (``--trials``).
    """
    from google.cloud import aiplatform_v1

    from tpuctl.services import cloudrun, vertex

    if spec.parameters.model is not None and "--hub_handle" in job.trainer_args:
        raise UserError("the spec tunes 'model' but the run uses a hub model (--hub-handle); drop one of them")
    trials = max_trials or spec.max_trials
    if not 1 <= trials <= MAX_TRIALS:
        raise UserError(f"--trials must be 1..{MAX_TRIALS} (got {trials})")
    base = cloudrun.strict(custom_job if custom_job is not None else vertex.build_custom_job(job))
    trial_spec = base.job_spec
    flags = tuned_flags(spec)
    for pool in trial_spec.worker_pool_specs:
        code = code_spec(pool)
        code.args = without_flags(list(code.args), flags)
    hp_job = aiplatform_v1.HyperparameterTuningJob(
        display_name=base.display_name,
        labels={**dict(base.labels), "tpuctl-command": "tune"},
        study_spec=aiplatform_v1.StudySpec(
            metrics=[aiplatform_v1.StudySpec.MetricSpec(
                metric_id=METRIC_ID, goal=aiplatform_v1.StudySpec.MetricSpec.GoalType.MAXIMIZE)],
            parameters=[aiplatform_v1.StudySpec.ParameterSpec(p) for p in parameter_specs(spec)],
            algorithm=aiplatform_v1.StudySpec.Algorithm[ALGORITHMS[spec.algorithm]],
        ),
        max_trial_count=trials,
        parallel_trial_count=min(spec.parallel_trials, trials),
        max_failed_trial_count=spec.max_failed_trials,
        trial_job_spec=trial_spec,
    )
    return cloudrun.strict(hp_job)


def code_spec(pool):
    """A worker pool's code: its ``container_spec`` (the trainer's own image) or ``python_package_spec``
    (the trainer package on a prebuilt image, ``--python-package``)."""
    return pool.container_spec if type(pool).pb(pool).HasField("container_spec") else pool.python_package_spec


def estimate_tuning(hp_job, region: str):
    """Cost of the study: one trial's pools × max trials, each bounded by the trial's timeout."""
    from tpuctl.services import cloudrun

    return cloudrun.estimate_custom_job(hp_job.trial_job_spec, region, trials=hp_job.max_trial_count)


def tuning_console_url(name: str) -> str:
    parts = name.split("/")
    fields = dict(zip(parts[0::2], parts[1::2]))
    return ("https://console.cloud.google.com/vertex-ai/training/hyperparameter-tuning-jobs?"
            f"project={fields.get('projects', '?')}")


def resolve_job_name(job: str, *, project: str | None, region: str | None) -> str:
    """A full ``projects/P/locations/R/hyperparameterTuningJobs/ID``, or an ID with the stack's project/region.
    The project, region and ID are checked here, before any request (or credentials) is needed."""
    from tpuctl.ground import domain
    from tpuctl.ground.errors import DomainError

    if job.startswith("projects/"):
        parts = job.split("/")
        if len(parts) != 6 or parts[2] != "locations" or parts[4] != "hyperparameterTuningJobs" or not parts[5]:
            raise UserError(f"{job!r} is not a tuning job name (projects/P/locations/R/hyperparameterTuningJobs/ID)")
        project, region, job_id = parts[1], parts[3], parts[5]
    else:
        if not project or not region:
            raise UserError(f"tuning job ID {job!r} needs the project and region: pass --stack/--outputs (and "
                            "--region), or the full name projects/P/locations/R/hyperparameterTuningJobs/ID")
        job_id = job
    if not job_id.isdigit() or len(job_id) > 30:
        raise UserError(f"{job!r}: a tuning job's ID is a number (with --stack/--outputs), or give its full name")
    try:
        if not (project.isdigit() and len(project) <= 20):    # Vertex AI names the project by number too
            domain.validate_project_id(project)
        domain.validate_region(region)
    except DomainError as exc:
        raise UserError(f"tuning job {job!r}: {exc}") from None
    return f"projects/{project}/locations/{region}/hyperparameterTuningJobs/{job_id}"


def vertex_rows(hp_job) -> list[TrialRow]:
    """Trials of a ``HyperparameterTuningJob`` (as read back from Vertex AI), ranked."""
    from google.cloud import aiplatform_v1

    spec = hp_job.trial_job_spec
    base = spec.base_output_directory.output_uri_prefix.rstrip("/")
    args = list(code_spec(spec.worker_pool_specs[0]).args) if spec.worker_pool_specs else []
    default_model = args[args.index("--model") + 1] if "--model" in args[:-1] else "small_cnn"
    rows = []
    for t in hp_job.trials:
        params = {p.parameter_id: cell_value(p.value) for p in t.parameters}
        metric = None
        for m in t.final_measurement.metrics:
            if m.metric_id == METRIC_ID and math.isfinite(m.value):   # NaN/Infinity: no metric
                metric = float(m.value)
        state = aiplatform_v1.Trial.State(t.state).name
        model = str(params.get(TRAINER_FLAGS["model"], default_model))
        # AIP_MODEL_DIR=<base>/<trial id>/model/; the trainer exports <AIP_MODEL_DIR>/<model>/<version>,
        # version 1 in a fresh trial folder (trainer/export.py next_version).
        export = f"{base}/{t.id}/model/{model}/1" if base and state == "SUCCEEDED" else None
        rows.append(TrialRow(t.id, state, params, metric, export))
    return rank(rows)


def get_tuning_job(name: str, *, client=None):
    from google.api_core import exceptions

    from tpuctl.services import vertex

    region = name.split("/")[3]
    client = client or vertex.job_client(region)
    try:
        return client.get_hyperparameter_tuning_job(name=name)
    except exceptions.GoogleAPICallError as exc:
        raise UserError(f"cannot read tuning job {name}: {exc.message or exc}", 1) from None
