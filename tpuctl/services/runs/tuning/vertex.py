"""Vertex AI: the HyperparameterTuningJob request for a search (``TuneSpec``) over a planned run, its cost, its target
(submitted, not followed: ``tpuctl tune status JOB`` reads its trials) and reading it back."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from cloud.google import aiplatform_v1, api_exceptions
from ground import domain
from ground.errors import DomainError, UserError
from ground.numbers import is_digits
from tpuctl.services.runs import cost, vertex
from tpuctl.services.runs.request import CloudOptions
from tpuctl.services.runs.target import SUBMITTED, Outcome, Report
from tpuctl.services.runs.tuning.spec import ALGORITHMS, METRIC_ID, TRAINER_FLAGS, TuneSpec, check_search, tuned_flags
from tpuctl.services.runs.tuning.trials import TrialRow, cell_value, rank
from tpuctl.services.runs.vertex import VertexPlanning, VertexRun, VertexSite
from trainer.flags import HPARAM_PREFIX, flag_value, without_flags


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
    for name, h in (p.hparams or {}).items():   # the trial's container gets --hp_NAME=VALUE
        parameter_id = f"{HPARAM_PREFIX}{name}"
        scale = "UNIT_LOG_SCALE" if h.scale == "log" else "UNIT_LINEAR_SCALE"
        if h.values is not None and all(not isinstance(v, str) for v in h.values):
            out.append({"parameter_id": parameter_id, "discrete_value_spec": {"values": sorted(h.values)}})
        elif h.values is not None:
            out.append({"parameter_id": parameter_id, "categorical_value_spec": {"values": [str(v) for v in h.values]}})
        elif h.type == "int":
            out.append({"parameter_id": parameter_id, "scale_type": scale,
                        "integer_value_spec": {"min_value": int(h.min), "max_value": int(h.max)}})
        else:
            out.append({"parameter_id": parameter_id, "scale_type": scale,
                        "double_value_spec": {"min_value": h.min, "max_value": h.max}})
    return out


def build_tuning_job(spec: VertexRun, search: TuneSpec, *, max_trials: int | None = None):
    """The ``aiplatform_v1.HyperparameterTuningJob`` for a planned run: ``trial_job_spec`` is its CustomJob's
    ``job_spec`` (with Spot and the run time on every trial) minus the trainer flags the study sets per trial.
    ``max_trials`` overrides the search's (``--trials``)."""
    trials = check_search(search, spec.trainer.hub_handle, max_trials, spec.plugin)
    base = vertex.build_custom_job(spec)
    trial_spec = base.job_spec
    tuned = tuned_flags(search)
    for pool in trial_spec.worker_pool_specs:
        code = code_spec(pool)
        code.args = without_flags(list(code.args), *tuned)
    hp_job = aiplatform_v1.HyperparameterTuningJob(
        display_name=base.display_name,
        labels={**dict(base.labels), "tpuctl-command": "tune"},
        study_spec=aiplatform_v1.StudySpec(
            metrics=[aiplatform_v1.StudySpec.MetricSpec(
                metric_id=METRIC_ID, goal=aiplatform_v1.StudySpec.MetricSpec.GoalType.MAXIMIZE)],
            parameters=[aiplatform_v1.StudySpec.ParameterSpec(p) for p in parameter_specs(search)],
            algorithm=aiplatform_v1.StudySpec.Algorithm[ALGORITHMS[search.algorithm]],
        ),
        max_trial_count=trials,
        parallel_trial_count=min(search.parallel_trials, trials),
        max_failed_trial_count=search.max_failed_trials,
        trial_job_spec=trial_spec,
    )
    return vertex.strict(hp_job)


def code_spec(pool):
    """A worker pool's code: its ``container_spec`` (a job tpuctl made), else its ``python_package_spec`` (a job
    another tool made, or an older tpuctl's ``--python-package``: its trials are read back all the same)."""
    return pool.container_spec if type(pool).pb(pool).HasField("container_spec") else pool.python_package_spec


def estimate_tuning(hp_job, region: str, prices=None):
    """Cost of the study: one trial's pools × max trials, each bounded by the trial's timeout."""
    return cost.estimate_custom_job(hp_job.trial_job_spec, region, trials=hp_job.max_trial_count, prices=prices)


def tuning_console_url(name: str) -> str:
    parts = name.split("/")
    fields = dict(zip(parts[0::2], parts[1::2]))
    return ("https://console.cloud.google.com/vertex-ai/training/hyperparameter-tuning-jobs?"
            f"project={fields.get('projects', '?')}")


def resolve_job_name(job: str, *, project: str | None, region: str | None) -> str:
    """A full ``projects/P/locations/R/hyperparameterTuningJobs/ID``, or an ID with the stack's project/region.
    The project, region and ID are checked here, before any request (or credentials) is needed."""
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
    if not is_digits(job_id) or len(job_id) > 30:
        raise UserError(f"{job!r}: a tuning job's ID is a number (with --stack/--outputs), or give its full name")
    try:
        if not (is_digits(project) and len(project) <= 20):    # Vertex AI names the project by number too
            domain.validate_project_id(project)
        domain.validate_region(region)
    except DomainError as exc:
        raise UserError(f"tuning job {job!r}: {exc}") from None
    return aiplatform_v1.JobServiceClient.hyperparameter_tuning_job_path(project, region, job_id)


def vertex_rows(hp_job) -> list[TrialRow]:
    """Trials of a ``HyperparameterTuningJob`` (as read back from Vertex AI), ranked."""
    spec = hp_job.trial_job_spec
    base = spec.base_output_directory.output_uri_prefix.rstrip("/")
    args = list(code_spec(spec.worker_pool_specs[0]).args) if spec.worker_pool_specs else []
    default_model = flag_value(args, "model") or "small_cnn"
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
    region = name.split("/")[3]
    client = client or vertex.job_client(region)
    try:
        return client.get_hyperparameter_tuning_job(name=name)
    except api_exceptions.GoogleAPICallError as exc:
        raise UserError(f"cannot read tuning job {name}: {exc.message or exc}", 1) from None


class VertexTuneOptions(CloudOptions, VertexSite):
    """``tune --target vertex``: a Vertex AI hyperparameter tuning job."""
    target: Literal["vertex"] = "vertex"


@dataclass
class VertexTuningTarget(VertexPlanning):
    """A planned HyperparameterTuningJob over the run's CustomJob and a search. It is submitted, not followed:
    ``tpuctl tune status JOB`` reads its trials."""

    options: ClassVar[type] = VertexTuneOptions
    notes: ClassVar[dict[str, str]] = {"seed": "Vertex AI picks the trials",
                                       "verbose": "a Vertex AI job's logs are in the console"}

    spec: VertexRun
    report: Report = field(default_factory=Report)
    search: TuneSpec | None = None
    #: --trials (None: the spec's max_trials)
    trials: int | None = None
    client: Any = None
    prices: Any = None
    hp_job: Any = None
    #: the PersistentResourceService client --cluster is checked with (tests; default: the regional one)
    cluster_api: Any = None

    def preflight(self) -> None:
        """The request (Spot / timeout on every trial) and the cost of the study, refused over --budget; --cluster
        checked (every trial runs on it)."""
        assert self.search is not None
        vertex.check_cluster(self.spec, api=self.cluster_api, echo=self.report.note)
        self.hp_job = build_tuning_job(self.spec, self.search, max_trials=self.trials)
        estimate = estimate_tuning(self.hp_job, self.spec.region, prices=self.prices)
        for line in estimate.lines():
            self.report.note(line)
        cost.check_budget(estimate, self.spec.budget)

    def describe(self) -> dict[str, Any]:
        return vertex.job_to_dict(self.hp_job)

    @contextmanager
    def submit(self) -> Iterator[vertex.SubmittedJob]:
        vertex.require_image(self.spec)
        client = self.client or vertex.job_client(self.spec.region)
        job = vertex.create("tuning job", lambda: client.create_hyperparameter_tuning_job(
            parent=self.spec.parent, hyperparameter_tuning_job=self.hp_job))
        created = vertex.SubmittedJob(client, job.name, tuning_console_url(job.name))
        self.report.say(f"submitted {created.name}")
        self.report.say(f"console: {created.console_url}")
        self.report.say(f"follow it with: tpuctl tune status {created.name}")
        with vertex.watching(created):
            yield created

    def follow(self, created: vertex.SubmittedJob) -> Outcome:
        return Outcome(self.name, created.name, SUBMITTED, self.spec.model_dir, console_url=created.console_url)

