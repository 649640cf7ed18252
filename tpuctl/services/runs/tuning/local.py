"""Local tuning: the same spec, a small random or grid search, real trainer runs one after another."""

from __future__ import annotations

import dataclasses
import fcntl
import itertools
import json
import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from ground.errors import UserError
from ground.files import read_file, write_atomically
from ground.storagepath import is_gs
from tpuctl.services.data import ensure_demo_data, local_folder
from tpuctl.services.runs.local import LocalPlanning, LocalRun, LocalTarget, release
from tpuctl.services.runs.request import VerboseOptions, flag
from tpuctl.services.runs.spec import Planning, refuse_finished
from tpuctl.services.runs.target import FAILED, SUCCEEDED, Outcome, Report, launch
from tpuctl.services.runs.tuning.spec import METRIC_ID, TuneSpec, check_search, flag_of, tuned_flags
from tpuctl.services.runs.tuning.trials import TrialRow, rank
from tpuctl.services.supervisor import TaskFailed
from trainer.flags import without_flags


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
        for name, h in (p.hparams or {}).items():
            if h.values is None and h.type == "float":
                raise UserError(f"grid search needs a finite grid: give hparams.{name}.values (or type: int)")
            axes.append((f"hparams.{name}", list(h.values) if h.values is not None
                         else list(range(int(h.min), int(h.max) + 1))))
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
        for name, h in (p.hparams or {}).items():
            trial[f"hparams.{name}"] = _sample(rng, h)
        out.append(trial)
    return out


def _sample(rng: random.Random, h) -> Any:
    """One value of a plug-in hyperparameter's range (log scale: uniform in its logarithm)."""
    if h.values is not None:
        return rng.choice(h.values)
    if h.type == "int":
        if h.scale == "log":
            return int(round(math.exp(rng.uniform(math.log(h.min), math.log(h.max)))))
        return rng.randint(int(h.min), int(h.max))
    if h.scale == "log":
        return float(f"{math.exp(rng.uniform(math.log(h.min), math.log(h.max))):.6g}")
    return float(f"{rng.uniform(h.min, h.max):.6g}")


def trial_args(params: dict[str, Any]) -> list[str]:
    """Trainer flags for one local trial, spelled as Vertex AI passes them (``--flag=value``)."""
    return [f"--{flag_of(k)}={v}" for k, v in params.items()]


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
            write_atomically(marker, json.dumps(record, sort_keys=True) + "\n")
            return folder, lock, False
        try:
            made_for = json.loads(read_file(marker, "trial record", 1 << 20, hint="not tpuctl's"))
        except (UserError, ValueError, RecursionError):
            made_for = None
        if made_for == json.loads(json.dumps(record, sort_keys=True)):
            return folder, lock, True
        lock.close()            # another run's folder (other hyperparameters): never resumed
    raise UserError(f"no free trial folder for trial {index} under {base} (tried {MAX_TRIAL_FOLDERS})")


def run_local_tuning(spec: LocalRun, search: TuneSpec, *, trials: int | None = None, seed: int | None = None,
                     report: Report | None = None, out=None, err=None) -> tuple[str, list[TrialRow]]:
    """Run ``trials`` real trainer runs one after another, each in ``<the search's folder>/trial-<n>``; returns (that
    folder, the ranked rows). ``spec`` is the search's run (``spec.plan(..., command="tune")``: its folder, data,
    accelerator, the trainer flags after ``--``); every trial runs its arguments but its folder and its
    hyperparameters. ``report``: the search's lines (``note``) and a fresh display per trial (``new_display``, as
    ``LocalTarget``'s) that filters the trainer's output; without one it goes to ``out``/``err`` as printed."""
    report = report or Report()
    echo = report.note
    count = check_search(search, spec.trainer.hub_handle, trials, spec.plugin)
    samples = sample_trials(search, count, seed)
    if spec.demo_data:
        ensure_demo_data(echo)
    base = spec.model_dir
    tuned = tuned_flags(search)
    template = spec.trainer.without(*tuned)
    # what every trial shares: the trainer flags but its folder and its hyperparameters
    fixed = without_flags(template.argv(), "model_dir")
    rows: list[TrialRow] = []
    for index, params in enumerate(samples, start=1):
        shown = {flag_of(k): v for k, v in params.items()}
        trial_dir, lock, resumed = claim_trial_dir(Path(base), index, {"hyperparameters": shown, "args": fixed})
        try:
            how = " (resuming its backup)" if resumed else ""
            echo(f"trial {index}/{count}: {json.dumps(shown, sort_keys=True)} -> {trial_dir}{how}")
            # a trial is a local run (its launch record included) in a folder the search claimed itself
            trainer = dataclasses.replace(template, model_dir=str(trial_dir)).with_extra(*trial_args(params))
            run = {key: value for key, value in spec if key in LocalRun.model_fields}
            trial = LocalTarget(LocalRun(**{**run, "trainer": trainer, "claimed": False, "demo_data": False}),
                                Report(note=report.note, say=report.say, display=report.new_display()), out=out,
                                err=err, say_started=False)
            try:
                outcome = launch(trial)
            except TaskFailed as exc:
                if exc.exit_code == 130:
                    raise
                why = exc.task.last_error_line() if exc.task is not None else None
                # the trainer's own `error: …` line is already on the screen: say only which trial it was
                echo(f"trial {index} failed" + ("" if why and why.startswith("error:") else f": {exc}"))
                rows.append(TrialRow(str(index), "FAILED", shown, None, None))
                continue
            except UserError as exc:      # the trainer ended without its completion record
                echo(f"trial {index} failed: {exc}")
                rows.append(TrialRow(str(index), "FAILED", shown, None, None))
                continue
        finally:
            lock.close()
        result = outcome.result or {}
        metric = result.get(METRIC_ID)
        value = float(metric) if isinstance(metric, (int, float)) and not isinstance(metric, bool) else None
        rows.append(TrialRow(str(index), "SUCCEEDED", shown, value if value is not None and math.isfinite(value)
                             else None, result.get("export_dir")))
    return base, rank(rows)


class LocalTuneOptions(VerboseOptions):
    """``tune --target local``: trials one after another on this machine."""
    target: Literal["local"] = "local"
    seed: int | None = flag(None, "Local: seed of the random search.", commands=("tune",), ge=0, le=2**32 - 1)


class LocalSearch(LocalRun):
    """A search on this machine: its folder holds a trial folder per trial."""
    #: --seed: the random search's seed (None: a fresh search)
    seed: int | None = None


@dataclass
class LocalTuningTarget(LocalPlanning):
    """Trials of a search run one after another on this machine, each a local run in ``<the search's
    folder>/trial-<n>`` (``run_local_tuning``); the report's ``new_display()`` makes a fresh display per trial."""

    options: ClassVar[type] = LocalTuneOptions
    Spec: ClassVar[type[LocalRun]] = LocalSearch

    spec: LocalSearch
    report: Report = field(default_factory=Report)
    search: TuneSpec | None = None
    #: --trials (None: the spec's max_trials, locally at most 3 of them)
    trials: int | None = None

    def __post_init__(self) -> None:
        assert self.search is not None
        self.trials = self.trials or min(self.search.max_trials, 3)

    # -- planning: a local run's, but the search's folder is always a local one and each trial is one process ------
    @classmethod
    def place(cls, p: Planning, accel: Any, name: str) -> dict[str, Any]:
        return {"seed": p.options.seed}

    @classmethod
    def check_plan(cls, p: Planning) -> None:
        if p.request.workers != 1:
            raise UserError("local tuning runs one process per trial: drop --workers / --parameter-servers")

    @classmethod
    def model_dir(cls, p: Planning, name: str) -> tuple[str, dict[str, Any]]:
        """A local folder (its trials lock their folders): --model-dir, else ``./runs/NAME``."""
        request = p.request
        if request.model_dir and is_gs(request.model_dir):
            raise UserError("local tuning writes its trials to a local folder; pass a local --model-dir (or tune in "
                            "Vertex AI with --target vertex)")
        if request.model_dir:
            folder = local_folder(request.model_dir, "model folder", must_exist=False)
            refuse_finished(str(folder))
            return str(folder), {}
        return cls.run_folder(p, Path("runs").resolve(), name, given=request.name is not None)

    # -- the search -------------------------------------------------------------------------------------------------
    def preflight(self) -> None:
        assert self.search is not None
        check_search(self.search, self.spec.trainer.hub_handle, self.trials, self.spec.plugin)
        if self.spec.demo_data:
            self.report.note(f"demo dataset: {self.spec.data_dir}")

    def describe(self) -> dict[str, Any]:
        """The trials the search would run (sampled with --seed, as the run samples them)."""
        assert self.search is not None and self.trials is not None
        samples = sample_trials(self.search, self.trials, self.spec.seed)
        return {"target": self.name, "name": self.spec.name, "folder": self.spec.model_dir,
                "data_dir": self.spec.data_dir,
                "trials": [{"trial": i, "model_dir": f"{self.spec.model_dir}/trial-{i}", "flags": trial_args(params)}
                           for i, params in enumerate(samples, start=1)]}

    @contextmanager
    def submit(self) -> Iterator[None]:
        try:
            yield None   # each trial claims (and on failure releases) its own folder
        except BaseException:
            release(self.spec)
            raise

    def follow(self, _handle: None) -> Outcome:
        assert self.search is not None
        base, rows = run_local_tuning(self.spec, self.search, trials=self.trials, seed=self.spec.seed,
                                      report=self.report)
        failed = bool(rows) and all(row.state == "FAILED" for row in rows)
        return Outcome(self.name, Path(base).name, FAILED if failed else SUCCEEDED, base, trials=rows,
                       error=f"every trial failed ({len(rows)} of {len(rows)}; the lines above say why)"
                       if failed else None)
