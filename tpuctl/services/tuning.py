"""`tpuctl tune`: hyperparameter search over the bundled trainer, on Vertex AI or on this machine.

The search space is a small YAML file (``--spec``), validated at the edge into ``TuneSpec``; with none,
``DEFAULT_SPEC`` searches learning rate and batch size. Each parameter is a flag of ``python -m trainer.task``:

    spec key        trainer flag          Vertex AI parameter spec
    learning_rate   --learning_rate       double, UNIT_LOG_SCALE ({min, max}); or discrete ({values})
    batch_size      --train_batch_size    categorical of the values as text (see below)
    model           --model               categorical (small_cnn, resnet50)
    epochs          --train_epochs        integer ({min, max}), UNIT_LINEAR_SCALE

Vertex AI passes a trial's values as ``--<parameterId>=<value>`` and sends DISCRETE values as float text
("128.0"; github.com/kuds/mesozoic-labs pull 127, 2026-03-01), so the batch-size list is sent as CATEGORICAL
text values: the same search, passed verbatim. Whether INTEGER values come as "5" or "5.0" is not verified:
the trainer's integer flags take both (trainer/config.py ``Bound.parse``).

The metric is ``val_accuracy``, maximised: the trainer appends it to CLOUD_ML_HP_METRIC_FILE for a trial
(trainer/task.py ``report_tuning_metric``). Every trial writes to its own folder: Vertex AI sets
``AIP_MODEL_DIR=<baseOutputDirectory>/<trial id>/model/`` (and checkpoints/logs likewise) for the CustomJob
behind a trial (custom_job.proto, CustomJobSpec.base_output_directory), and the trainer exports there.
Locally each trial gets ``<run folder>/trial-<n>`` as ``--model_dir``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tpuctl.ground.errors import UserError
from tpuctl.ground.files import read_file

METRIC_ID = "val_accuracy"
#: spec key -> trainer flag (= Vertex AI parameterId, passed as --<id>=<value>)
TRAINER_FLAGS = {"learning_rate": "learning_rate", "batch_size": "train_batch_size", "model": "model",
                 "epochs": "train_epochs"}
ALGORITHMS = {"random": "RANDOM_SEARCH", "grid": "GRID_SEARCH", "bayesian": "ALGORITHM_UNSPECIFIED"}
#: tpuctl's bounds (the trainer's own limits where it has them: 0 < learning rate < 10, trainer/config.py).
MAX_TRIALS = 100
MAX_BATCH = 1 << 20
MAX_EPOCHS = 100_000
#: A spec is a few lines; a larger file is refused by its size before it is parsed.
MAX_SPEC_BYTES = 64 * 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LearningRate(_Strict):
    min: float | None = Field(None, gt=0, lt=10)
    max: float | None = Field(None, gt=0, lt=10)
    values: list[float] | None = Field(None, min_length=1, max_length=50)

    @model_validator(mode="after")
    def _shape(self):
        if self.values is not None:
            if self.min is not None or self.max is not None:
                raise ValueError("give either min/max (log scale) or values, not both")
            if any(not (0 < v < 10) for v in self.values):
                raise ValueError("every value must be above 0 and below 10")
            if len(set(self.values)) != len(self.values):
                raise ValueError("values must be distinct")
        elif self.min is None or self.max is None:
            raise ValueError("needs min and max (searched on a log scale), or values")
        elif not self.min < self.max:
            raise ValueError(f"min ({self.min}) must be below max ({self.max})")
        return self


class BatchSize(_Strict):
    values: list[int] = Field(min_length=1, max_length=50)

    @model_validator(mode="after")
    def _range(self):
        if any(not (1 <= v <= MAX_BATCH) for v in self.values):
            raise ValueError(f"every value must be 1..{MAX_BATCH}")
        if len(set(self.values)) != len(self.values):
            raise ValueError("values must be distinct")
        return self


class ModelChoice(_Strict):
    # hub needs a handle per trial: not tunable here
    values: list[Literal["small_cnn", "resnet50"]] = Field(min_length=1, max_length=2)


class Epochs(_Strict):
    min: int = Field(ge=1, le=MAX_EPOCHS)
    max: int = Field(ge=1, le=MAX_EPOCHS)

    @model_validator(mode="after")
    def _order(self):
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not be above max ({self.max})")
        return self


class Parameters(_Strict):
    learning_rate: LearningRate | None = None
    batch_size: BatchSize | None = None
    model: ModelChoice | None = None
    epochs: Epochs | None = None

    @model_validator(mode="after")
    def _some(self):
        if not any((self.learning_rate, self.batch_size, self.model, self.epochs)):
            raise ValueError("name at least one of learning_rate, batch_size, model, epochs")
        return self


class TuneSpec(_Strict):
    parameters: Parameters
    max_trials: int = Field(6, ge=1, le=MAX_TRIALS)
    parallel_trials: int = Field(2, ge=1, le=MAX_TRIALS)
    max_failed_trials: int = Field(0, ge=0, le=MAX_TRIALS)   # 0: Vertex AI decides
    algorithm: Literal["random", "grid", "bayesian"] = "random"

    @model_validator(mode="after")
    def _consistent(self):
        if self.parallel_trials > self.max_trials:
            raise ValueError(f"parallel_trials ({self.parallel_trials}) must not exceed max_trials ({self.max_trials})")
        if self.max_failed_trials > self.max_trials:
            raise ValueError(f"max_failed_trials ({self.max_failed_trials}) must not exceed max_trials "
                             f"({self.max_trials})")
        lr = self.parameters.learning_rate
        if self.algorithm == "grid" and lr is not None and lr.values is None:
            raise ValueError("grid search needs a finite grid: give learning_rate.values instead of min/max")
        return self


DEFAULT_SPEC = TuneSpec(parameters=Parameters(learning_rate=LearningRate(min=1e-4, max=1e-1),
                                              batch_size=BatchSize(values=[16, 32, 64])))


def parse_spec(data: Any, source: str) -> TuneSpec:
    """Validate ``data`` (the YAML document) into a TuneSpec; UserError names ``source`` and the field."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a mapping with 'parameters' (and max_trials, parallel_trials, algorithm)")
    try:
        return TuneSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        location = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
        raise UserError(f"{source}: {location}: {message}") from None


def load_spec(path: Path | None) -> TuneSpec:
    """``--spec FILE`` (YAML, at most MAX_SPEC_BYTES, read by the one bounded reader), or DEFAULT_SPEC when None."""
    if path is None:
        return DEFAULT_SPEC
    path = Path(path)
    data = read_file(path, "tuning spec", MAX_SPEC_BYTES,
                     hint="give a small YAML file with 'parameters' (docs/cheaper-runs.md)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: the tuning spec is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                        f"{exc.start})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise UserError(f"{path}: not valid YAML{where}") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply for a tuning spec") from None
    except ValueError as exc:   # an integer past Python's digit limit, a date like 2020-13-45
        raise UserError(f"{path}: a value YAML cannot convert ({str(exc).split(':')[0][:80]})") from None
    return parse_spec(doc, str(path))


# --------------------------------------------------------------------------------------------
# Vertex AI: the HyperparameterTuningJob request
# --------------------------------------------------------------------------------------------

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


def _without_flags(args: list[str], flags: set[str]) -> list[str]:
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
        code.args = _without_flags(list(code.args), flags)
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


def submit_tuning(job, hp_job, *, client=None, echo: Callable[[str], None] = print, upload: bool = True):
    """As `tpuctl train` does: the trainer image must exist (container route), or the trainer sdist is built
    and uploaded (``--python-package``); then create the tuning job. Returns it."""
    from google.api_core import exceptions

    from tpuctl.services import vertex

    if upload:
        vertex.stage_trainer(job, echo)
    client = client or vertex.job_client(job.region)
    try:
        return client.create_hyperparameter_tuning_job(parent=job.parent, hyperparameter_tuning_job=hp_job)
    except exceptions.GoogleAPICallError as exc:
        raise UserError(f"Vertex AI rejected the tuning job: {exc.message or exc}", 1) from None


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


# --------------------------------------------------------------------------------------------
# Trials: one table for Vertex AI and local runs
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrialRow:
    trial: str
    state: str
    params: dict[str, Any]
    metric: float | None
    export: str | None


def rank(rows: list[TrialRow]) -> list[TrialRow]:
    """Best first: highest val_accuracy; trials without a metric last, in id order."""
    def key(row: TrialRow):
        known = row.metric is not None and math.isfinite(row.metric)
        order = (0, int(row.trial)) if row.trial.isdigit() else (1, row.trial)
        return (0 if known else 1, -(row.metric or 0.0) if known else 0.0, order)
    return sorted(rows, key=key)


def _value(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def vertex_rows(hp_job) -> list[TrialRow]:
    """Trials of a ``HyperparameterTuningJob`` (as read back from Vertex AI), ranked."""
    from google.cloud import aiplatform_v1

    spec = hp_job.trial_job_spec
    base = spec.base_output_directory.output_uri_prefix.rstrip("/")
    args = list(code_spec(spec.worker_pool_specs[0]).args) if spec.worker_pool_specs else []
    default_model = args[args.index("--model") + 1] if "--model" in args[:-1] else "small_cnn"
    rows = []
    for t in hp_job.trials:
        params = {p.parameter_id: _value(p.value) for p in t.parameters}
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


# --------------------------------------------------------------------------------------------
# Local: the same spec, a small random or grid search, real trainer runs one after another
# --------------------------------------------------------------------------------------------

def sample_trials(spec: TuneSpec, count: int, seed: int | None = None) -> list[dict[str, Any]]:
    """``count`` parameter sets (spec keys -> values). random: log-uniform learning rate, uniform choices;
    grid: the grid's points in order (learning_rate must be values), at most ``count``."""
    if count < 1:
        raise UserError(f"--trials must be at least 1 (got {count})")
    p = spec.parameters
    if spec.algorithm == "grid":
        axes: list[tuple[str, list[Any]]] = []
        if p.learning_rate is not None:
            axes.append(("learning_rate", sorted(p.learning_rate.values or [])))
        if p.batch_size is not None:
            axes.append(("batch_size", sorted(p.batch_size.values)))
        if p.model is not None:
            axes.append(("model", list(p.model.values)))
        if p.epochs is not None:
            axes.append(("epochs", list(range(p.epochs.min, p.epochs.max + 1))))
        points = itertools.product(*(values for _, values in axes))
        return [dict(zip((k for k, _ in axes), point)) for point in itertools.islice(points, count)]
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        trial: dict[str, Any] = {}
        if p.learning_rate is not None:
            if p.learning_rate.values is not None:
                trial["learning_rate"] = rng.choice(p.learning_rate.values)
            else:
                lo, hi = math.log(p.learning_rate.min), math.log(p.learning_rate.max)
                trial["learning_rate"] = float(f"{math.exp(rng.uniform(lo, hi)):.6g}")
        if p.batch_size is not None:
            trial["batch_size"] = rng.choice(p.batch_size.values)
        if p.model is not None:
            trial["model"] = rng.choice(p.model.values)
        if p.epochs is not None:
            trial["epochs"] = rng.randint(p.epochs.min, p.epochs.max)
        out.append(trial)
    return out


def trial_args(params: dict[str, Any]) -> list[str]:
    """Trainer flags for one local trial, spelled as Vertex AI passes them (``--flag=value``)."""
    return [f"--{TRAINER_FLAGS[k]}={v}" for k, v in params.items()]


def _fresh_tune_dir(parent: Path, stamp: str) -> str:
    """``runs/tune-<timestamp>``, suffixed if taken, claimed by creating it (as ``train`` claims its run folder)."""
    from tpuctl.services.training import claim_fresh_dir

    return claim_fresh_dir(parent, f"tune-{stamp}", "tuning folder")


#: What a trial folder was made for (its hyperparameters and the other trainer flags): a trial resumes the
#: backup in a folder only when this matches, else it gets a fresh folder.
TRIAL_FILE = "tpuctl-trial.json"
_TRIAL_LOCK = ".tpuctl-trial.lock"
MAX_TRIAL_FOLDERS = 1000


def claim_trial_dir(base: Path, index: int, record: dict[str, Any]):
    """``(folder, lock, resumed)`` for trial ``index``: ``<base>/trial-<index>`` (then ``-2``, ``-3``…). A folder is
    the trial's when this process holds its lock (``flock``: a concurrent tune never shares it) and it is new,
    empty, or was made for exactly ``record`` (``resumed``: the trainer continues its backup). A folder made for
    other hyperparameters is never reused. ``lock`` is an open file: close it when the trial ends."""
    import fcntl

    for n in range(1, MAX_TRIAL_FOLDERS + 1):
        folder = base / (f"trial-{index}" if n == 1 else f"trial-{index}-{n}")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if folder.is_symlink() or not folder.is_dir():
                continue
            lock = open(folder / _TRIAL_LOCK, "a")
        except OSError as err:
            raise UserError(f"cannot create the trial folder {folder} ({err.strerror or err})") from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()        # another tune runs this trial folder now
            continue
        marker = folder / TRIAL_FILE
        used = [p for p in folder.iterdir() if p.name != _TRIAL_LOCK]
        if not used:
            tmp = folder / (TRIAL_FILE + ".tmp")
            tmp.write_text(json.dumps(record, sort_keys=True) + "\n")
            os.replace(tmp, marker)
            return folder, lock, False
        try:
            made_for = json.loads(read_file(marker, "trial record", 1 << 20, hint="not tpuctl's"))
        except (UserError, ValueError, RecursionError):
            made_for = None
        if made_for == json.loads(json.dumps(record, sort_keys=True)):
            return folder, lock, True
        lock.close()            # another run's folder (other hyperparameters): never resumed
    raise UserError(f"no free trial folder for trial {index} under {base} (tried {MAX_TRIAL_FOLDERS})")


def run_local_tuning(opts, spec: TuneSpec, *, trials: int | None = None, seed: int | None = None,
                     base_dir: str | None = None, echo: Callable[[str], None] = print,
                     out=None, err=None, display: Callable[[], Any] | None = None) -> tuple[str, list[TrialRow]]:
    """Run ``trials`` real trainer runs one after another, each in ``<base>/trial-<n>``; returns (base, ranked rows).

    ``opts`` is a ``training.TrainOptions`` (data, accelerator, epochs, extra trainer flags after ``--``);
    ``opts.model_dir`` (or ``base_dir``) is the tuning folder, default ``runs/tune-<timestamp>``.
    ``display()``: a fresh display per trial (``stdout_sink()``, ``stderr_sink()``, ``on_message``, ``close()``,
    as ``TrainDisplay``) that filters the trainer's output; without one it goes to ``out``/``err`` as printed.
    """
    from dataclasses import replace

    from tpuctl.services import training
    from tpuctl.services.supervisor import TaskFailed

    count = trials or spec.max_trials
    if not 1 <= count <= MAX_TRIALS:
        raise UserError(f"--trials must be 1..{MAX_TRIALS} (got {count})")
    if opts.workers != 1:
        raise UserError("local tuning runs one process per trial: drop --workers")
    if spec.parameters.model is not None and opts.hub_handle:
        raise UserError("the spec tunes 'model' but --hub-handle is set; drop one of them")
    samples = sample_trials(spec, count, seed)
    base = base_dir or opts.model_dir or _fresh_tune_dir(Path("runs"), training.timestamp())
    if base.startswith("gs://"):
        raise UserError("local tuning writes its trials to a local folder; pass a local --model-dir")
    flags = tuned_flags(spec)
    # every trial runs the same trainer flags but its folder and its hyperparameters
    template = training.plan_local(replace(opts, model_dir=str(Path(base) / "trial-1"), extra=list(opts.extra)),
                                   None, echo=echo)
    fixed = _without_flags(template.args, flags | {"model_dir"})
    rows: list[TrialRow] = []
    for index, params in enumerate(samples, start=1):
        shown = {TRAINER_FLAGS[k]: v for k, v in params.items()}
        trial_dir, lock, resumed = claim_trial_dir(Path(base), index, {"hyperparameters": shown, "args": fixed})
        shown_by = None
        try:
            args = [*fixed, "--model_dir", str(trial_dir), *trial_args(params)]
            how = " (resuming its backup)" if resumed else ""
            echo(f"trial {index}/{count}: {json.dumps(shown, sort_keys=True)} -> {trial_dir}{how}")
            shown_by = display() if display is not None else None
            sinks = (dict(out=shown_by.stdout_sink(), err=shown_by.stderr_sink(), on_message=shown_by.on_message)
                     if shown_by is not None else dict(out=out, err=err))
            started = time.time()
            try:
                outcome = training.run_local(args, workers=1, env=template.env, **sinks)
            except TaskFailed as exc:
                if exc.exit_code == 130:
                    raise
                why = exc.task.last_error_line() if exc.task is not None else None
                # the trainer's own `error: …` line is already on the screen: say only which trial it was
                echo(f"trial {index} failed" + ("" if why and why.startswith("error:") else f": {exc}"))
                rows.append(TrialRow(str(index), "FAILED", shown, None, None))
                continue
        finally:
            lock.close()
            if shown_by is not None:
                shown_by.close()
        from tpuctl.services import runs

        # like `tpuctl train`'s: `runs ls` shows the trial's accelerator, data folder and time
        runs.write_launch_record(str(trial_dir), {"target": "local", "accelerator": opts.accelerator or "auto",
                                                  "workers": 1, "args": args, "started": started,
                                                  "finished": time.time()})
        result = outcome.result or {}
        metric = result.get(METRIC_ID)
        value = float(metric) if isinstance(metric, (int, float)) and not isinstance(metric, bool) else None
        rows.append(TrialRow(str(index), "SUCCEEDED", shown, value if value is not None and math.isfinite(value)
                             else None, result.get("export_dir")))
    return base, rank(rows)
