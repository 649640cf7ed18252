"""The run flags of ``tpuctl train`` and ``tpuctl tune``, declared once: each flag's name, default, help and bounds.

``RunFlags`` is what the user asked for (None: not given, the target's default); building it is the one place a run
flag's value is checked (``RunFlags.of(**values)``: one ``UserError`` line naming the flag). The CLI makes its typer
options from these fields (``tpuctl.commands.runflags``) and leaves the checking here; the bounds of the trainer's
own numbers (epochs, batch size) are the trainer's (``trainer.flags.TASK_BOUNDS``). Which target takes which flag
is declared on each target (``flags`` on its class, ``tpuctl.services.runs.target``).
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from ground.domain.capacity import check_reservation
from ground.domain.names import validate_image_ref
from ground.durations import parse_duration
from ground.errors import UserError
from trainer.flags import HPARAM_NAME, MAX_PROFILE_SPAN, MODELS, TASK_BOUNDS, is_plugin_ref, parse_profile_steps

#: Where a run goes (``--target``): this machine, a Vertex AI CustomJob, a slice of TPU VMs.
TARGETS = ("local", "vertex", "tpu-vm")
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


def _zones(value: Any) -> Any:
    """``--zones a,b``: a comma-separated list (an empty entry is refused: a typo like ``a,,b``)."""
    if value is None or isinstance(value, (list, tuple)):
        return tuple(value or ())
    zones = [z.strip() for z in str(value).split(",")]
    if "" in zones:
        raise ValueError("has an empty entry; give zones like us-central1-b,us-central1-f")
    return tuple(zones)


def _flag(default: Any, help: str, **bounds: Any) -> Any:
    return Field(default, description=help, **bounds)


class RunFlags(BaseModel):
    """What the user asked for: one field per run flag (``--max-run-time`` is ``max_run_time``)."""
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)

    target: Literal["local", "vertex", "tpu-vm"] = _flag(
        "local", "Where to train: this machine (local), a Vertex AI CustomJob (vertex) or a slice of TPU VMs (tpu-vm).")
    accelerator: str | None = _flag(
        None, "cpu, gpu (one T4), gpu-t4x2, gpu-l4x4, gpu-a100x8, tpu-v5e-8, tpu-v5e-16 (a multi-host slice, "
              "tpu-vm), … "
              "Default: locally what the machine has, on Vertex AI cpu; tpu-vm needs one.")
    workers: int = _flag(1, "Processes/replicas of a MultiWorkerMirrored cluster (chief + N-1 workers).",
                         ge=1, le=MAX_WORKERS)
    parameter_servers: int = _flag(0, "Parameter-server training: this many ps tasks, --workers workers and a "
                                      "coordinator.", ge=0, le=MAX_PARAMETER_SERVERS)
    data_dir: str | None = _flag(None, "TFRecord folder (local, or gs:// for every target). Default: the stack's "
                                       "data bucket, else (locally) the demo dataset.")
    model_dir: str | None = _flag(None, "The run's folder: checkpoints, logs, export. Default: runs/NAME in the "
                                        "stack's artifacts bucket, else ./runs/NAME.")
    name: str | None = _flag(None, "The run's name on every target: its folder runs/NAME, the Vertex AI job's "
                                   "display name, the TPU VM queued resource. Default: a timestamp.")
    model: Annotated[str | None, BeforeValidator(_model)] = _flag(
        None, f"{', '.join(MODELS)} (default small_cnn), or your model function: path/to/file.py:NAME or "
              "package.module:NAME in --code (docs/your-code.md).")
    dataset: Annotated[str | None, BeforeValidator(_plugin_ref)] = _flag(
        None, "Your dataset function (path/to/file.py:NAME or package.module:NAME in --code); default: the "
              "TFRecords of --data-dir.")
    hparam: Annotated[tuple[str, ...], BeforeValidator(_hparams)] = _flag(
        (), "NAME=VALUE: a hyperparameter of your model or dataset function (ctx.hparams), repeatable.")
    code: str | None = _flag(None, "Your project folder: --model/--dataset are imported from it, --command runs in "
                                   "it, and it ships with a cloud run (default: the current folder).")
    command: str | None = _flag(
        None, "Run your own program instead of the bundled trainer, e.g. \"python train.py --epochs 3\", in --code "
              "on every worker, with TF_CONFIG and the AIP_MODEL_DIR/AIP_CHECKPOINT_DIR/AIP_TENSORBOARD_LOG_DIR "
              "folders set.", max_length=4096)
    hub_handle: str | None = _flag(None, "TF-Hub handle of a feature vector (implies --model hub).")
    hub_cache_dir: str | None = _flag(None, "TFHUB_CACHE_DIR for the trainer. Default: the stack's hub cache.")
    epochs: int | None = _flag(None, "Training epochs (trainer default if omitted).",
                               ge=TASK_BOUNDS["train_epochs"].low, le=TASK_BOUNDS["train_epochs"].high)
    batch_size: int | None = _flag(None, "Global training batch size (trainer default if omitted).",
                                   ge=TASK_BOUNDS["train_batch_size"].low, le=TASK_BOUNDS["train_batch_size"].high)
    trainer_args: tuple[str, ...] = _flag((), "Trainer flags after `--`, passed to python -m trainer.task unchanged.")
    profile_steps: Annotated[str | None, BeforeValidator(_profile_steps)] = _flag(
        None, f"Capture a TensorFlow profile of these training steps (FIRST-LAST, e.g. 10-15, at most "
              f"{MAX_PROFILE_SPAN}) into the run's logs/profile/ (the chief's, every TPU VM host's), for "
              "`tpuctl board`'s Profile tab.")
    image: Annotated[str | None, BeforeValidator(_image)] = _flag(
        None, "Vertex/TPU VM: run this image instead of the trainer's own (`tpuctl image build`).")
    python_package: bool = _flag(False, "Vertex: ship trainer/ as a package onto Google's prebuilt TensorFlow image "
                                        "(refused past its end of availability).")
    region: str | None = _flag(None, "Vertex: region of the job (default: the stack's region).")
    zone: str | None = _flag(None, "TPU VM: zone of the slice (default: the stack's tpu_zone, else zone).")
    zones: Annotated[tuple[str, ...], BeforeValidator(_zones)] = _flag(
        (), "TPU VM with --recover: other zones of the region to re-queue in, in this order after --zone "
            "(comma-separated); a zone whose quota pre-flight shows no room is skipped.")
    spot: bool = _flag(False, "Vertex/TPU VM: Spot capacity; a preempted run resumes from its gs:// backup "
                              "(the same as --provisioning spot).")
    provisioning: Literal["on-demand", "spot", "flex-start"] | None = _flag(
        None, "Vertex/TPU VM: how the accelerators are obtained: on-demand (the default), spot (cheaper, may be "
              "preempted) or flex-start (Dynamic Workload Scheduler: queued until capacity is free, for at most 7 "
              "days; --max-wait bounds the wait). docs/capacity.md")
    reservation: Annotated[str | None, BeforeValidator(_reservation)] = _flag(
        None, "Vertex/TPU VM: run on reserved capacity: `any` reservation of the project, or a reservation's name "
              "(Vertex AI: its full name projects/P/zones/ZONE/reservations/NAME).", max_length=200)
    cluster: str | None = _flag(
        None, "Vertex: run on this persistent resource (`tpuctl cluster create NAME`): machines kept between jobs, so "
              "a retry or a tuning trial starts without provisioning (docs/capacity.md).", max_length=63)
    autocheckpoint: bool = _flag(
        True, "TPU VM: ask Cloud TPU for Autocheckpoint where it offers it (v2-v4, v5e): before maintenance the "
              "trainer gets SIGTERM and up to 5 minutes to back up its step (docs/capacity.md).")
    recover: int = _flag(0, "TPU VM with --spot or flex-start: re-queue a preempted slice, or one still waiting "
                            "after --max-wait, (resuming from its backup) at most this many times.",
                         ge=0, le=MAX_RECOVERIES)
    budget: float | None = _flag(None, "Vertex: refuse the run when its maximum cost (USD) is above this. TPU VM: "
                                       "stop the run when its spend reaches this.", gt=0, le=MAX_BUDGET_USD,
                                 allow_inf_nan=False)
    max_run_time: Annotated[timedelta | None, _duration(
        "--max-run-time", MIN_RUN_TIME, MAX_RUN_TIME,
        "tpuctl's bounds: Vertex AI documents a default timeout of 7 days and no maximum")] = _flag(
        None, "Vertex: stop the job after this long (Vertex AI's default: 7d); TPU VM: stop when the slices trained "
              "this long in all (default 24h). A duration, 10m..7d (e.g. 2h, 1h30m); it also bounds the cost "
              "estimate.")
    max_wait: Annotated[timedelta | None, _duration("--max-wait", MIN_WAIT, MAX_WAIT)] = _flag(
        None, "TPU VM: how long the slice may take to become ACTIVE in a zone (default 2h); Vertex AI with "
              "--provisioning flex-start: how long the job waits for its resources (Vertex AI's default 24h); "
              "1m..7d.")
    keep: bool = _flag(False, "TPU VM: keep the slice when the run ends (it keeps costing money).")
    wait: bool = _flag(True, "Vertex: follow the job until it ends.")
    dry_run: bool = _flag(False, "Print the run's request (local: the processes; Vertex: the CustomJob; TPU VM: the "
                                 "queued resource and the startup script) as JSON and the cost estimate; create "
                                 "nothing.")
    verbose: bool = _flag(False, "Local: show everything the trainer prints (protocol lines, Keras, TensorFlow "
                                 "notices).")
    poll_seconds: float = _flag(30.0, "Seconds between status reads of a cloud run.", ge=MIN_POLL, le=MAX_POLL,
                                allow_inf_nan=False)

    @model_validator(mode="after")
    def _no_nul(self) -> RunFlags:
        """A NUL byte cannot be passed to any process (a local trainer, a container, a host's command line)."""
        for name in type(self).model_fields:
            value = getattr(self, name)
            for text in value if isinstance(value, tuple) else (value,):
                if isinstance(text, str) and "\x00" in text:
                    raise ValueError(f"{flag_name(name) if name != 'trainer_args' else 'a trainer flag after `--`'} "
                                     f"{text[:80]!r} has a NUL byte, which no command line can carry")
        return self

    @classmethod
    def of(cls, **values: Any) -> RunFlags:
        """The flags, checked: a value out of its bounds or of the wrong kind is one UserError naming the flag."""
        try:
            return cls(**values)
        except ValidationError as exc:
            raise UserError(_one_line(exc)) from None

    def given(self, name: str) -> bool:
        """Whether the flag was set (not left at its default)."""
        return name in self.model_fields_set

    @property
    def trainer_help(self) -> bool:
        """``tpuctl train -- --help``: the trainer's own help, no run."""
        return bool({"-h", "--help"}.intersection(self.trainer_args))


def flag_name(field: str) -> str:
    """``max_run_time`` -> ``--max-run-time``."""
    return "--" + field.replace("_", "-")


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    field = str(err["loc"][0]) if err.get("loc") else ""
    value = err.get("input")
    shown = repr(value) if not isinstance(value, str) else repr(value[:80])
    info = RunFlags.model_fields.get(field)
    message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if info is not None and err["type"] in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        message = f"out of range: {bounds(field)}"
    if not field or message.startswith(flag_name(field)):     # a check that says it all (--image 'x' is not …)
        return message
    return f"invalid value for {flag_name(field)}: {shown} ({message})"


def bounds(field: str) -> str | None:
    """``1..64`` for a bounded numeric flag (what its help shows), else None."""
    info = RunFlags.model_fields[field]
    low = high = None
    for item in info.metadata:
        low = getattr(item, "ge", None) if getattr(item, "ge", None) is not None else low
        low = getattr(item, "gt", None) if getattr(item, "gt", None) is not None else low
        high = getattr(item, "le", None) if getattr(item, "le", None) is not None else high
    if low is None and high is None:
        return None

    def num(x: float) -> str:
        return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"

    return f"{'' if low is None else num(low)}..{'' if high is None else num(high)}"
