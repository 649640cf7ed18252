"""The search space of `tpuctl tune` (``--spec`` YAML), validated at the edge into ``TuneSpec``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ground.errors import UserError
from ground.files import read_file
from ground.yamlfile import parse_yaml
from trainer.flags import HPARAM_NAME, HPARAM_PREFIX, TASK_BOUNDS

METRIC_ID = "val_accuracy"
#: spec key -> trainer flag (= Vertex AI parameterId, passed as --<id>=<value>)
TRAINER_FLAGS = {"learning_rate": "learning_rate", "batch_size": "train_batch_size", "model": "model",
                 "epochs": "train_epochs"}
ALGORITHMS = {"random": "RANDOM_SEARCH", "grid": "GRID_SEARCH", "bayesian": "ALGORITHM_UNSPECIFIED"}
#: tpuctl's bound of a search's trials; a tuned value's bounds are the trainer's own (trainer.flags.TASK_BOUNDS).
MAX_TRIALS = 100
MAX_BATCH = int(TASK_BOUNDS["train_batch_size"].high)
MAX_EPOCHS = int(TASK_BOUNDS["train_epochs"].high)
#: tpuctl's bound on a plug-in hyperparameter's number: integers up to it are exact as doubles (2**53 is about
#: 9e15), which is how Vertex AI's parameter specs carry them (google/cloud/aiplatform/v1/study.proto:
#: DiscreteValueSpec.values and DoubleValueSpec are doubles; read in the installed aiplatform_v1, 2026-12-07).
MAX_HPARAM_NUMBER = 1e15
#: A spec is a few lines; a larger file is refused by its size before it is parsed.
MAX_SPEC_BYTES = 64 * 1024


class _Strict(BaseModel):
    #: every number finite (a NaN or an infinity in a spec is refused, wherever it is)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


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


class HParam(_Strict):
    """A hyperparameter of the user's model or dataset function (``--hp_NAME``, ``ctx.hparams``): a set of
    ``values`` (numbers or words), or a range ``min``..``max`` of integers (``type: int``) or numbers searched on a
    ``linear`` or ``log`` scale."""
    values: list[int | float | str] | None = Field(None, min_length=1, max_length=50)
    min: float | None = Field(None, allow_inf_nan=False)
    max: float | None = Field(None, allow_inf_nan=False)
    type: Literal["int", "float"] = "float"
    scale: Literal["linear", "log"] = "linear"

    @model_validator(mode="after")
    def _shape(self):
        if self.values is not None:
            if self.min is not None or self.max is not None:
                raise ValueError("give either min/max or values, not both")
            if len({str(v) for v in self.values}) != len(self.values):
                raise ValueError("values must be distinct")
            if any(isinstance(v, str) and (not v or len(v) > 200 or "\x00" in v) for v in self.values):
                raise ValueError("a word value must be 1-200 characters")
            if any(isinstance(v, str) and not _finite_word(v) for v in self.values):
                raise ValueError("a word value that reads as a number must be a finite one (the trial's function gets "
                                 "it as a number: 'nan' and 'inf' are refused)")
            if any(not isinstance(v, str) and abs(v) > MAX_HPARAM_NUMBER for v in self.values):
                raise ValueError(f"a number value must be within ±{MAX_HPARAM_NUMBER:.0e} (Vertex AI passes doubles)")
        elif self.min is None or self.max is None:
            raise ValueError("needs min and max, or values")
        elif not self.min < self.max:
            raise ValueError(f"min ({self.min:g}) must be below max ({self.max:g})")
        elif max(abs(self.min), abs(self.max)) > MAX_HPARAM_NUMBER:
            raise ValueError(f"min and max must be within ±{MAX_HPARAM_NUMBER:.0e} (Vertex AI passes doubles)")
        elif self.scale == "log" and self.min <= 0:
            raise ValueError("a log scale needs min above 0")
        elif self.type == "int" and not (float(self.min).is_integer() and float(self.max).is_integer()):
            raise ValueError("an int range needs whole min and max")
        return self


def _finite_word(word: str) -> bool:
    """A word value is passed as ``--hp_NAME WORD`` and the trial reads a word that is a number as one
    (trainer/plugin.py): one that reads as NaN or an infinity would stop the trial, so it is refused here."""
    try:
        return math.isfinite(float(word))
    except (ValueError, OverflowError):
        return True


class Parameters(_Strict):
    learning_rate: LearningRate | None = None
    batch_size: BatchSize | None = None
    model: ModelChoice | None = None
    epochs: Epochs | None = None
    #: your model's or dataset's own hyperparameters (name -> its range), passed as --hp_NAME
    hparams: dict[str, HParam] | None = Field(None, max_length=20)

    @model_validator(mode="after")
    def _some(self):
        if not any((self.learning_rate, self.batch_size, self.model, self.epochs, self.hparams)):
            raise ValueError("name at least one of learning_rate, batch_size, model, epochs, hparams")
        for name in self.hparams or {}:
            if not HPARAM_NAME.match(name):
                raise ValueError(f"hparams: {name[:40]!r} is not a hyperparameter name (1-64 lowercase letters, "
                                 "digits and '_', starting with a letter)")
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
        errors = exc.errors()
        # a NaN, or a key in the wrong place, says more than what follows from it ("parameters: Field required")
        err = next((e for kind in ("finite_number", "extra_forbidden") for e in errors if e.get("type") == kind),
                   errors[0])
        loc = tuple(str(p) for p in err.get("loc", ()))
        if err.get("type") == "finite_number":
            loc = tuple(p for p in loc if p not in ("int", "float", "str"))    # the union's member names
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden" and loc:
            message = _misplaced(loc[:-1], loc[-1])
        location = ".".join(loc) or "(top level)"
        raise UserError(f"{source}: {location}: {message}") from None


#: Where each key of a spec belongs: the top level's and ``parameters``' own keys.
_PLACES = {**{key: "the top level" for key in ("parameters", "max_trials", "parallel_trials", "max_failed_trials",
                                               "algorithm")},
           **{key: "parameters" for key in ("learning_rate", "batch_size", "model", "epochs", "hparams")}}


def _model_at(loc: tuple[str, ...]) -> type[BaseModel] | None:
    """The spec's model at ``loc`` (a mapping in the document), if any."""
    if loc == ():
        return TuneSpec
    if loc == ("parameters",):
        return Parameters
    if len(loc) == 2 and loc[0] == "parameters" and loc[1] in Parameters.model_fields:
        found = getattr(Parameters.model_fields[loc[1]].annotation, "__args__", (None,))[0]
        return found if isinstance(found, type) and issubclass(found, BaseModel) else None
    if len(loc) == 3 and loc[:2] == ("parameters", "hparams"):
        return HParam
    return None


def _misplaced(loc: tuple[str, ...], key: str) -> str:
    """What a key pydantic calls an "extra input" is, and where it belongs (issue 57: "Extra inputs are not
    permitted" said neither)."""
    here = ".".join(loc) or "the top level"
    shown = key[:40]
    place = _PLACES.get(key)
    if place is not None and place != here:
        return f"{shown!r} belongs under {place}, not {here}" if place != "the top level" else \
            f"{shown!r} belongs at the top level of the spec, not under {here}"
    if loc == ("parameters",) and HPARAM_NAME.match(key):
        return (f"{shown!r} is not one of the trainer's parameters (learning_rate, batch_size, model, epochs): a "
                f"hyperparameter of your model or dataset function goes under parameters.hparams.{key} (it is "
                f"passed as --hp_{key})")
    model = _model_at(loc)
    keys = ", ".join(model.model_fields) if model is not None else ""
    return f"{shown!r} is not a key of {here}" + (f" (its keys: {keys})" if keys else "")


def tuned_flags(spec: TuneSpec) -> set[str]:
    """The trainer flags a trial sets (each tuned parameter's; a plug-in hyperparameter NAME is --hp_NAME)."""
    flags = {TRAINER_FLAGS[k] for k, v in spec.parameters.model_dump().items() if v is not None and k != "hparams"}
    return flags | {f"{HPARAM_PREFIX}{name}" for name in spec.parameters.hparams or {}}


def flag_of(key: str) -> str:
    """The trainer flag a sampled parameter sets: a spec key's, or ``hp_NAME`` for ``hparams.NAME``."""
    return f"{HPARAM_PREFIX}{key.split('.', 1)[1]}" if key.startswith("hparams.") else TRAINER_FLAGS[key]


def load_spec(path: Path | None) -> TuneSpec:
    """``--spec FILE`` (YAML, at most MAX_SPEC_BYTES, read by the one bounded reader), or DEFAULT_SPEC when None."""
    if path is None:
        return DEFAULT_SPEC
    path = Path(path)
    data = read_file(path, "tuning spec", MAX_SPEC_BYTES,
                     hint="give a small YAML file with 'parameters' (docs/cheaper-runs.md)")
    return parse_spec(parse_yaml(data, "tuning spec", path), str(path))


def check_search(search: TuneSpec, hub_handle: str | None, trials: int | None = None,
                 plugin: bool = False) -> int:
    """What a search and the run it tunes rule out together, for every tuning target (and its dry run): a spec that
    tunes ``model`` beside a fixed hub model, a trial count out of bounds. Returns the trial count."""
    if search.parameters.hparams and not plugin:
        raise UserError("the spec tunes hparams of your model or dataset function: name it with --model "
                        "file.py:NAME (or --dataset)")
    if search.parameters.model is not None and hub_handle:
        raise UserError("the spec tunes 'model' but the run uses a hub model (--hub-handle); drop one of them")
    count = trials or search.max_trials
    if not 1 <= count <= MAX_TRIALS:
        raise UserError(f"--trials must be 1..{MAX_TRIALS} (got {count})")
    return count
