"""The run request of ``tpuctl train`` and ``tpuctl tune``: every run flag declared once, with its type, default,
help, bounds, the commands that take it and (by the options model it is declared in) the targets that take it.

``RunRequest`` holds the fields every run has; its ``options`` are the options of the run's target: an options
model per target (``TargetOptions`` subclasses, declared in each target's module, composed from the mixins below
where targets share flags). A flag is one field in one place: the CLI makes its typer options from these models
(``tpuctl.commands.runflags``), and the model refuses a flag another target takes (``extra="forbid"``), in one line
naming the targets that take it. The bounds of the trainer's own numbers (epochs, batch size) are the trainer's
(``trainer.flags.TASK_BOUNDS``).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from ground.domain.capacity import check_reservation
from ground.domain.names import validate_image_ref
from ground.domain.prediction import check_model_name
from ground.durations import parse_duration
from ground.errors import UserError
from trainer.flags import (
    HPARAM_NAME,
    MAX_PROFILE_SPAN,
    MODELS,
    TASK_BOUNDS,
    HparamError,
    hparam_value,
    is_plugin_ref,
    parse_profile_steps,
)

#: The commands that take run flags; a flag names the ones that take it (``commands=``, default both).
COMMANDS = ("train", "tune")
#: 64 processes is far more than one machine runs usefully; a Vertex job of more replicas is a pool spec of its
#: own, not a flag.
MAX_WORKERS = 64
#: Most ps tasks tpuctl starts (a few hold a small model's variables; more is a typo).
MAX_PARAMETER_SERVERS = 16
#: --recover: at most this many re-queued slices per run.
MAX_RECOVERIES = 100
#: --budget (USD): positive, and not absurd (a typo of extra zeros is refused, not accepted).
MAX_BUDGET_USD = 1_000_000.0
#: --max-run-time: tpuctl's bounds. Google documents no maximum for a Vertex AI job's timeout: custom_job.proto,
#: Scheduling.timeout, says only "Optional. The maximum job running time. The default is 7 days." (googleapis
#: google/cloud/aiplatform/v1/custom_job.proto as installed in google-cloud-aiplatform 2.7, and the same text in
#: Vertex AI's REST and client references, checked 2026-11-24). tpuctl keeps that documented default as its
#: ceiling, so the cost maximum it prints is always for a run time Google has stated; a longer run is several runs
#: (the trainer resumes from its backup). Under 10 minutes a job rarely gets past provisioning and the image pull.
MIN_RUN_TIME, MAX_RUN_TIME = timedelta(minutes=10), timedelta(days=7)
#: --max-wait: how long a TPU VM slice may take to become ACTIVE in one zone.
MIN_WAIT, MAX_WAIT = timedelta(minutes=1), timedelta(days=7)
#: --poll-seconds (hidden; tests): seconds between status reads of a cloud run.
MIN_POLL, MAX_POLL = 0.01, 3600.0


def _duration(flag: str, low: timedelta, high: timedelta, why: str = ""):
    def parse(value: Any) -> Any:
        if value is None or isinstance(value, timedelta):
            return value
        return parse_duration(str(value), flag, low, high, why)
    return BeforeValidator(parse)


def _image(value: Any) -> Any:
    return value if value is None else validate_image_ref(str(value), "--image")


def _reservation(value: Any) -> Any:
    return value if value is None else check_reservation(str(value))


def _model(value: Any) -> Any:
    if value is None or value in MODELS or is_plugin_ref(str(value)):
        return value
    raise ValueError(f"--model {str(value)[:80]!r}: use {', '.join(MODELS)} or your function, path/to/file.py:NAME "
                     "or package.module:NAME")


def _export_name(value: Any) -> Any:
    return value if value is None else check_model_name(str(value))


def _plugin_ref(value: Any) -> Any:
    if value is None or is_plugin_ref(str(value)):
        return value
    raise ValueError(f"--dataset {str(value)[:80]!r}: name your function, path/to/file.py:NAME or "
                     "package.module:NAME")


def _hparams(value: Any) -> Any:
    pairs = tuple(value or ())
    for pair in pairs:
        name, eq, text = str(pair).partition("=")
        if not eq or not HPARAM_NAME.match(name) or not text or len(text) > 1000:
            raise ValueError(f"--hparam {str(pair)[:80]!r}: give NAME=VALUE, NAME 1-64 lowercase letters, digits "
                             "and '_' starting with a letter, VALUE 1-1000 characters")
        try:        # the trainer's own reading of the value (a cloud job would fail on a nan only once it started)
            hparam_value(text)
        except HparamError as err:
            raise ValueError(f"--hparam {name}: {err}") from None
    return pairs


def _profile_steps(value: Any) -> Any:
    """``--profile-steps 10-15``: checked by the trainer's own reader (trainer.flags.parse_profile_steps), kept as
    the text the trainer is given."""
    if value is None:
        return None
    try:
        first, last = parse_profile_steps(str(value))
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"--profile-steps: {exc}") from None
    return f"{first}-{last}"


#: The bounded values a request and a planned run share (a run plan read back from a bucket is held to the bounds
#: of the flags that set it): each bound written once, here.
Workers = Annotated[int, Field(ge=1, le=MAX_WORKERS)]
ParameterServers = Annotated[int, Field(ge=0, le=MAX_PARAMETER_SERVERS)]
Recoveries = Annotated[int, Field(ge=0, le=MAX_RECOVERIES)]
Budget = Annotated[float | None, Field(gt=0, le=MAX_BUDGET_USD, allow_inf_nan=False)]
RunTime = Annotated[timedelta | None, Field(ge=MIN_RUN_TIME, le=MAX_RUN_TIME)]
WaitTime = Annotated[timedelta | None, Field(ge=MIN_WAIT, le=MAX_WAIT)]


def flag(default: Any, help: str, *, commands: Iterable[str] = COMMANDS, tune_help: str | None = None,
         short: Iterable[str] = (), hidden: bool = False, **bounds: Any) -> Any:
    """One run flag: its default, help and bounds (pydantic's ``ge``/``le``…), the commands that take it, a
    narrower help for ``tune`` where the flag means less there, its one-letter aliases, and whether ``--help``
    hides it (test-only flags)."""
    extra = {"commands": tuple(commands), "tune_help": tune_help, "short": tuple(short), "hidden": hidden}
    return Field(default, description=help, json_schema_extra=extra, **bounds)


class _Flags(BaseModel):
    """Run flags: frozen, unknown fields refused (a flag another target takes)."""
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)

    @model_validator(mode="after")
    def _no_nul(self) -> _Flags:
        """A NUL byte cannot be passed to any process (a local trainer, a container, a host's command line)."""
        for name in type(self).model_fields:
            value = getattr(self, name)
            for text in value if isinstance(value, tuple) else (value,):
                if isinstance(text, str) and "\x00" in text:
                    raise ValueError(f"{flag_name(name) if name != 'trainer_args' else 'a trainer flag after `--`'} "
                                     f"{text[:80]!r} has a NUL byte, which no command line can carry")
        return self


class TargetOptions(_Flags):
    """The flags one target takes besides the common ones: each target's module declares its options model (with a
    ``target`` literal), composed of the mixins below where targets share a flag."""
    target: str


# --------------------------------------------------------------------------------- flags some targets share

class VerboseOptions(TargetOptions):
    verbose: bool = flag(False, "Local: show everything the trainer prints (protocol lines, Keras, TensorFlow "
                                "notices).", short=("-v",))


class ClusterOptions(TargetOptions):
    """A cluster of trainer processes the target starts itself (this machine's processes, Vertex AI's pools)."""
    parameter_servers: ParameterServers = flag(0, "Parameter-server training: this many ps tasks, --workers workers "
                                                  "and a coordinator.", commands=("train",))


class CloudOptions(TargetOptions):
    """What a cloud target runs (an image) and on which capacity, for how long and at most how much."""
    image: Annotated[str | None, BeforeValidator(_image)] = flag(
        None, "Vertex/TPU VM: run this image instead of the trainer's own (`tpuctl image build`).")
    spot: bool = flag(False, "Vertex/TPU VM: Spot capacity; a preempted run resumes from its gs:// backup "
                             "(the same as --provisioning spot).")
    provisioning: Literal["on-demand", "spot", "flex-start"] | None = flag(
        None, "Vertex/TPU VM: how the accelerators are obtained: on-demand (the default), spot (cheaper, may be "
              "preempted) or flex-start (Dynamic Workload Scheduler: queued until capacity is free, for at most 7 "
              "days; --max-wait bounds the wait). docs/capacity.md")
    reservation: Annotated[str | None, BeforeValidator(_reservation)] = flag(
        None, "Vertex/TPU VM: run on reserved capacity: `any` reservation of the project, or a reservation's name "
              "(Vertex AI: its full name projects/P/zones/ZONE/reservations/NAME).", max_length=200)
    max_run_time: Annotated[RunTime, _duration(     # the flag's text read as tpuctl's durations (2h, 1h30m)
        "--max-run-time", MIN_RUN_TIME, MAX_RUN_TIME,
        "tpuctl's bounds: Vertex AI documents a default timeout of 7 days and no maximum")] = flag(
        None, "Vertex: stop the job after this long (Vertex AI's default: 7d); TPU VM: stop when the slices trained "
              "this long in all (default 24h). A duration, 10m..7d (e.g. 2h, 1h30m); it also bounds the cost "
              "estimate.")
    max_wait: Annotated[WaitTime, _duration("--max-wait", MIN_WAIT, MAX_WAIT)] = flag(
        None, "TPU VM: how long the slice may take to become ACTIVE in a zone (default 2h); Vertex AI with "
              "--provisioning flex-start: how long the job waits for its resources (Vertex AI's default 24h); "
              "1m..7d.",
        tune_help="Vertex AI with --provisioning flex-start: how long each trial's job waits for its resources "
                  "(Vertex AI's default 24h), 1m..7d.")
    budget: Budget = flag(None, "Vertex: refuse the run when its maximum cost (USD) is above this. TPU VM: stop the "
                                "run when its spend reaches this.")


class PollOptions(TargetOptions):
    """How this process follows a cloud run (not part of the run)."""
    poll_seconds: float = flag(30.0, "Seconds between status reads of a cloud run.", commands=("train",),
                               hidden=True, ge=MIN_POLL, le=MAX_POLL, allow_inf_nan=False)


# --------------------------------------------------------------------------------- the fields every run has

class RunRequest(_Flags):
    """What the user asked for: one field per run flag every target takes (``--max-run-time`` is ``max_run_time``),
    and ``options``, the flags of the run's target."""

    target: str = flag("local", "Where to train: this machine (local), a Vertex AI CustomJob (vertex) or a slice of "
                                "TPU VMs (tpu-vm).",
                       tune_help="Where the trials run: this machine, one after another (local), or a Vertex AI "
                                 "hyperparameter tuning job (vertex).")
    accelerator: str | None = flag(
        None, "cpu, gpu (one T4), gpu-t4x2, gpu-l4x4, gpu-a100x8, tpu-v5e-8, tpu-v5e-16 (a multi-host slice, "
              "tpu-vm), … Default: locally what the machine has, on Vertex AI cpu; tpu-vm needs one.",
        tune_help="cpu, gpu (one T4), gpu-t4x2, gpu-l4x4, gpu-a100x8, tpu-v5e-8, … for every trial. Default: "
                  "locally what the machine has, on Vertex AI cpu.", short=("-a",))
    workers: Workers = flag(1, "Processes/replicas of a MultiWorkerMirrored cluster (chief + N-1 workers).",
                            short=("-w",))
    data_dir: str | None = flag(None, "TFRecord folder (local, or gs:// for every target). Default: the stack's "
                                      "data bucket, else (locally) the demo dataset.")
    model_dir: str | None = flag(None, "The run's folder: checkpoints, logs, export. Default: runs/NAME in the "
                                       "stack's artifacts bucket, else ./runs/NAME.")
    name: str | None = flag(None, "The run's name on every target: its folder runs/NAME, the Vertex AI job's display "
                                  "name, the TPU VM queued resource. Default: a timestamp.",
                            tune_help="The search's name: its folder runs/NAME (each trial in NAME/trial-<n>), or the "
                                      "Vertex AI tuning job's display name. Default: tune-<timestamp> (Vertex AI: "
                                      "tpuctl-tune-<timestamp>).")
    backend: Literal["auto", "tensorflow", "jax"] = flag(
        "auto", "What trains the model: tensorflow (tf_keras and Keras 3 models), jax (Keras 3 models; "
                "docs/your-code.md), or auto: TensorFlow wherever Google supports it, else JAX (TPU v6e on Vertex "
                "AI). It picks the trainer image (docs/frameworks-on-tpus.md).")
    model: Annotated[str | None, BeforeValidator(_model)] = flag(
        None, f"{', '.join(MODELS)} (default small_cnn), or your model function: path/to/file.py:NAME or "
              "package.module:NAME in --code (docs/your-code.md).")
    dataset: Annotated[str | None, BeforeValidator(_plugin_ref)] = flag(
        None, "Your dataset function (path/to/file.py:NAME or package.module:NAME in --code); default: the "
              "TFRecords of --data-dir.")
    export_name: Annotated[str | None, BeforeValidator(_export_name)] = flag(
        None, "The export's name: its folder export/NAME/<version> and the model's name in TF Serving "
              "(/v1/models/NAME). Default: your model's own name (a Keras model's name, else its module's), or the "
              "built-in model's.", commands=("train",))
    hparam: Annotated[tuple[str, ...], BeforeValidator(_hparams)] = flag(
        (), "NAME=VALUE: a hyperparameter of your model or dataset function (ctx.hparams), repeatable.")
    code: str | None = flag(None, "Your project folder: --model/--dataset are imported from it, --command runs in "
                                  "it, and it ships with a cloud run (default: the current folder).")
    command: str | None = flag(
        None, "Run your own program instead of the bundled trainer, e.g. \"python train.py --epochs 3\", in --code "
              "on every worker, with TF_CONFIG and the AIP_MODEL_DIR/AIP_CHECKPOINT_DIR/AIP_TENSORBOARD_LOG_DIR "
              "folders set.", commands=("train",), max_length=4096)
    hub_handle: str | None = flag(None, "TF-Hub handle of a feature vector (implies --model hub).",
                                  commands=("train",))
    hub_cache_dir: str | None = flag(None, "TFHUB_CACHE_DIR for the trainer. Default: the stack's hub cache.",
                                     commands=("train",))
    epochs: int | None = flag(None, "Training epochs (trainer default if omitted).",
                              ge=TASK_BOUNDS["train_epochs"].low, le=TASK_BOUNDS["train_epochs"].high)
    batch_size: int | None = flag(None, "Global training batch size (trainer default if omitted).",
                                  commands=("train",), ge=TASK_BOUNDS["train_batch_size"].low,
                                  le=TASK_BOUNDS["train_batch_size"].high)
    profile_steps: Annotated[str | None, BeforeValidator(_profile_steps)] = flag(
        None, f"Capture a TensorFlow profile of these training steps (FIRST-LAST, e.g. 10-15, at most "
              f"{MAX_PROFILE_SPAN}) into the run's logs/profile/ (the chief's, every TPU VM host's), for "
              "`tpuctl board`'s Profile tab.", commands=("train",))
    dry_run: bool = flag(False, "Print the run's request (local: the processes; Vertex: the CustomJob; TPU VM: the "
                                "queued resource and the startup script) as JSON and the cost estimate; create "
                                "nothing.")
    trainer_args: tuple[str, ...] = Field((), description="Trainer flags after `--`, passed to python -m "
                                                              "trainer.task unchanged.")
    #: the flags of the run's target (its options model, chosen by ``target``)
    options: TargetOptions

    #: the fields that are no command-line option of their own (``trainer_args`` are the words after ``--``)
    NOT_OPTIONS: ClassVar[frozenset[str]] = frozenset({"trainer_args", "options"})

    @model_validator(mode="after")
    def _options_of_target(self) -> RunRequest:
        if self.options.target != self.target:
            raise ValueError(f"options of --target {self.options.target} given for --target {self.target}")
        return self

    def given(self, name: str) -> bool:
        """Whether the flag was set (not left at its default), common or of the target."""
        return name in self.model_fields_set or name in self.options.model_fields_set

    def option(self, name: str, default: Any = None) -> Any:
        """A flag of the target's options (``default`` where the target takes no such flag)."""
        return getattr(self.options, name, default)

    @property
    def trainer_help(self) -> bool:
        """``tpuctl train -- --help``: the trainer's own help, no run."""
        return bool({"-h", "--help"}.intersection(self.trainer_args))


def flag_name(field: str) -> str:
    """``max_run_time`` -> ``--max-run-time``."""
    return "--" + field.replace("_", "-")


def build_request(values: Mapping[str, Any], options: Mapping[str, type[TargetOptions]],
                  notes: Mapping[str, Mapping[str, str]] | None = None) -> RunRequest:
    """The request of a command whose targets take ``options`` (target name -> its options model), from the flags
    the user gave (``values``: field name -> value; a flag left at its default is not in it): checked once, one
    UserError line naming the flag. A flag the run's target does not take is refused in one line naming the targets
    that take it (``notes``: per target, why it does not take a flag)."""
    target = str(values.get("target") or RunRequest.model_fields["target"].default)
    model = options.get(target)
    if model is None:
        raise UserError(f"invalid value for --target: {target!r} (use {', '.join(options)})")
    common = {k: v for k, v in values.items() if k in RunRequest.model_fields}
    own = {k: v for k, v in values.items() if k not in RunRequest.model_fields}
    for name, value in own.items():
        if name not in model.model_fields:
            owners = [t for t, m in options.items() if name in m.model_fields]
            note = (notes or {}).get(target, {}).get(name)
            default = next((m.model_fields[name].default for m in options.values() if name in m.model_fields), None)
            typed = f"--no-{name.replace('_', '-')}" if value is False and default is True else flag_name(name)
            raise UserError(f"{typed} only applies to --target {' or '.join(owners)}" + (f" ({note})" if note else ""))
    try:
        return RunRequest(**common, options=model(target=target, **own))
    except ValidationError as exc:
        raise UserError(_one_line(exc, model)) from None


def _one_line(exc: ValidationError, model: type[TargetOptions]) -> str:
    err = exc.errors()[0]
    loc = [str(part) for part in err.get("loc") or () if part != "options"]
    field = loc[0] if loc else ""
    value = err.get("input")
    shown = repr(value) if not isinstance(value, str) else repr(value[:80])
    message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    info = RunRequest.model_fields.get(field) or model.model_fields.get(field)
    if info is not None and err["type"] in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        message = f"out of range: {bounds(info)}"
    if not field or message.startswith(flag_name(field)):     # a check that says it all (--image 'x' is not …)
        return message
    return f"invalid value for {flag_name(field)}: {shown} ({message})"


def bounds(info) -> str | None:
    """``1..64`` for a bounded numeric flag (what its help shows), else None. ``info``: the field."""
    low = high = None
    for item in info.metadata:
        bound = {name: getattr(item, name, None) for name in ("ge", "gt", "le")}
        if not all(value is None or isinstance(value, (int, float)) for value in bound.values()):
            return None    # a duration's bounds are said in its help (10m..7d)
        low = bound["ge"] if bound["ge"] is not None else low
        low = bound["gt"] if bound["gt"] is not None else low
        high = bound["le"] if bound["le"] is not None else high
    if low is None and high is None:
        return None

    def num(x: float) -> str:
        return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"

    return f"{'' if low is None else num(low)}..{'' if high is None else num(high)}"
