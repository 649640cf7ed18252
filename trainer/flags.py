"""The trainer's command line as a contract: its choices, the bounds of its numbers, and ``TrainerArgs``, the one
builder of ``python -m trainer.task`` arguments and the one reader of them.

Standard library only: the ops side imports this module (and ``trainer.protocol``) and nothing else of the trainer
(pyproject.toml's import contracts), so the CLI's bounds are the trainer's own and every target (local processes,
Vertex AI, TPU VM hosts) and ``tpuctl runs`` build and read the same arguments. ``trainer.config`` builds its
parser from these names and bounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from collections.abc import Sequence
from typing import Any

from trainer.errors import UsageError

STRATEGIES = ("auto", "tpu", "gpu", "multi_worker", "one_device", "cpu", "central_storage", "parameter_server")
#: --mixed_precision: auto = bfloat16 on TPUs, off elsewhere.
MIXED_PRECISION = ("auto", "bfloat16", "float16", "off")
MODELS = ("small_cnn", "resnet50", "hub")
#: --model when it is not given (what a run record without it trained).
DEFAULT_MODEL = "small_cnn"
#: --backend: what runs the model's steps. ``tensorflow`` runs tf_keras models (contract v1) and Keras 3 models
#: (contract v2) on tf.distribute; ``jax`` runs Keras 3 models on JAX (trainer.keras3). tf.data feeds both.
BACKENDS = ("tensorflow", "jax")
DEFAULT_BACKEND = "tensorflow"
#: What trains on ``--backend tensorflow`` only (models and strategies), and why: the trainer refuses them with
#: ``--backend jax`` (trainer.backends.check_backend), the planner before a run is made (docs/your-code.md).
TF_KERAS_ONLY = {
    "hub": "TF-Hub's KerasLayer is a tf_keras layer and Keras 3 has none",
    "resnet50": "the built-in resnet50 is written in tf_keras (keras.applications.ResNet50 in your model function "
                "runs on JAX)",
    "parameter_server": "Keras 3 has no ParameterServerStrategy",
    "central_storage": "Keras 3 has no CentralStorageStrategy",
}
#: ``--model``/``--dataset`` naming the user's function (the plug-in contract, trainer.plugin):
#: ``path/to/file.py:NAME`` or ``package.module:NAME``.
PLUGIN_REF = re.compile(r"^(?P<where>[^:\x00\s]{1,1024}):(?P<name>[A-Za-z_][A-Za-z0-9_]{0,199})$")
#: ``--hp_NAME VALUE``: a plug-in's own hyperparameter.
HPARAM_PREFIX = "hp_"
HPARAM_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class HparamError(UsageError):
    """A hyperparameter's value the trainer refuses (the launcher catches this one: it reads trainer.flags only)."""


def hparam_value(text: str) -> bool | int | float | str:
    """A hyperparameter's value as the plug-in gets it: true/false, an integer, a number, else the text. A number
    that is not finite (nan, inf, 1e999) is a UsageError: the launcher asks this before a cloud job exists."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise HparamError(f"a hyperparameter must be finite, got {text[:80]!r}")
        return value
    return text


def is_plugin_ref(value: str | None) -> bool:
    """Whether ``--model``/``--dataset`` names a plug-in function rather than a built-in model."""
    return bool(value) and PLUGIN_REF.match(value) is not None
#: --lr_schedule: warm-up, then cosine decay to 0 / x0.1 steps at 50 % and 75 % of training / flat.
LR_SCHEDULES = ("cosine", "step", "constant")
#: --export: the epoch with the best validation accuracy, or the last epoch.
EXPORT_CHOICES = ("best", "last")


@dataclasses.dataclass(frozen=True)
class Bound:
    """The documented range of one numeric flag; the single place its limits are written down.

    ``parse`` is the argparse ``type`` (text -> value), ``check`` validates a value given in code: both refuse
    non-finite, out-of-range and non-integer values.
    """

    low: float
    high: float
    integer: bool = True
    low_open: bool = False  # low itself is not allowed (0 < x)
    high_open: bool = False  # high itself is not allowed (x < 1)
    note: str = ""  # what a special value means, e.g. "0 = all"

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        lo, hi = _num(self.low), _num(self.high)
        if self.low_open or self.high_open:
            rng = f"{lo} {'<' if self.low_open else '<='} x {'<' if self.high_open else '<='} {hi}"
        else:
            rng = f"from {lo} to {hi}"
        return f"{kind} {rng}" + (f"; {self.note}" if self.note else "")

    def contains(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def parse(self, text: str) -> int | float:
        text = str(text)
        shown = text if len(text) <= 40 else text[:37] + "..."
        if self.integer and _WHOLE_WITH_POINT.match(text):
            # a whole number written with a decimal point: how Vertex AI passes a tuning trial's DISCRETE
            # values ("128.0"), and possibly INTEGER ones (not verified) -- the same whole number
            text = text.split(".", 1)[0]
        # ASCII digits only: int() and float() also take other scripts' digits ('١') and underscores ('1_0'), which
        # reached a cloud job's command line (issue 56, a fresh trial: `-- --seed ١` passed the dry run and trained)
        if not (_INTEGER if self.integer else _NUMBER).fullmatch(text):
            raise argparse.ArgumentTypeError(f"expected {self.describe()} (ASCII digits only), got {shown!r}")
        try:
            value: int | float = int(text) if self.integer else float(text)
        except ValueError:  # also digits beyond Python's int-conversion limit
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {shown!r}") from None
        if not self.integer and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number ({self.describe()}), got {shown!r}")
        if not self.contains(value):
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {shown!r}")
        return value

    def check(self, flag: str, value: Any) -> None:
        ok = ((isinstance(value, int) if self.integer else isinstance(value, (int, float)))
              and not isinstance(value, bool) and (self.integer or math.isfinite(value)))
        if not ok or not self.contains(value):
            raise UsageError(f"{flag} must be {self.describe()}, got {value!r}")


_WHOLE_WITH_POINT = re.compile(r"^\s*[+-]?[0-9]{1,30}\.0*\s*$")
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")
_NUMBER = re.compile(r"\s*[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\s*|\s*[+-]?(inf|infinity|nan)\s*",
                     re.IGNORECASE)


def _num(x: float) -> str:
    if float(x).is_integer() and abs(x) >= 10_000:
        return f"{int(x):_}"
    return f"{x:g}" if isinstance(x, float) else str(x)


#: Largest seed: numpy / keras.utils.set_random_seed take 0 .. 2**32 - 1.
MAX_SEED = 2**32 - 1

#: Every numeric flag of ``python -m trainer.task`` (documented in docs/trainer.md, shown in --help).
TASK_BOUNDS: dict[str, Bound] = {
    "train_epochs": Bound(1, 100_000),
    "train_batch_size": Bound(1, 65_536),
    "validation_batch_size": Bound(1, 65_536),
    "num_gpus": Bound(0, 64, note="0 = every visible GPU"),
    "learning_rate": Bound(0, 10, integer=False, low_open=True, high_open=True),
    "steps_per_epoch": Bound(0, 1_000_000, note="0 = train examples // batch size"),
    # A buffer of 2**63-1 records made TensorFlow's shuffle segfault (exit 139); memory = buffer x record size.
    "shuffle_buffer": Bound(1, 1_000_000),
    "seed": Bound(0, MAX_SEED),
    "cluster_timeout_seconds": Bound(1, 3600),
    "virtual_gpus": Bound(0, 16, note="0 = do not split the GPU"),
    "warmup_epochs": Bound(0, 1000, integer=False),
    "early_stopping_patience": Bound(0, 100_000, note="0 = off"),
    "backup_every_steps": Bound(0, 1_000_000, note="0 = at each epoch's end only"),
    "backup_every_minutes": Bound(0, 10_080, integer=False, note="0 = off; runs of one worker"),
    "max_step_seconds": Bound(0, 604_800, integer=False, note="0 = off"),
}


#: ``--profile_steps FIRST-LAST``: the training steps a profile is captured for (each process counts the steps it
#: trains, from 1, as Keras' TensorBoard callback counts ``profile_batch``). A profile holds every op of every step:
#: a range is at most this many steps.
PROFILE_STEPS = Bound(1, 1_000_000)
MAX_PROFILE_SPAN = 100


def parse_profile_steps(text: str) -> tuple[int, int]:
    """``10-15`` -> (10, 15); ``12`` -> (12, 12). argparse.ArgumentTypeError saying what to write otherwise."""
    raw = str(text).strip()
    shown = raw if len(raw) <= 40 else raw[:37] + "..."
    m = re.fullmatch(r"([0-9]{1,7})(?:\s*-\s*([0-9]{1,7}))?", raw)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a step or a range of steps FIRST-LAST like 10-15, got {shown!r}")
    first, last = int(m.group(1)), int(m.group(2) or m.group(1))
    for value in (first, last):
        if not PROFILE_STEPS.contains(value):
            raise argparse.ArgumentTypeError(f"steps are {PROFILE_STEPS.describe()}, got {shown!r}")
    if last < first:
        raise argparse.ArgumentTypeError(f"the last step comes before the first in {shown!r}")
    if last - first + 1 > MAX_PROFILE_SPAN:
        raise argparse.ArgumentTypeError(f"at most {MAX_PROFILE_SPAN} steps are profiled at once, got {shown!r}")
    return first, last


#: ``python -m trainer.make_tfrecords`` (and ``tpuctl data make-tfrecords``, which passes its flags on).
MAKE_TFRECORDS_BOUNDS: dict[str, Bound] = {
    "shard_mb": Bound(0.001, 10_000, integer=False),
    "validation_fraction": Bound(0, 1, integer=False, high_open=True),
    "workers": Bound(1, 256),
    "seed": Bound(0, MAX_SEED),
    # 8: the smallest --image_size; 65500: the largest side a JPEG can have (libjpeg JPEG_MAX_DIMENSION).
    "max_side": Bound(8, 65_500),
}

#: The image formats ``make_tfrecords`` reads (by file name ending; Pillow decodes them) and the endings of each.
#: The one list: ``tpuctl predict`` accepts the same files (docs/serving.md).
IMAGE_FORMATS: dict[str, tuple[str, ...]] = {
    "JPEG": (".jpg", ".jpeg"),
    "PNG": (".png",),
    "GIF": (".gif",),
    "BMP": (".bmp",),
    "WebP": (".webp",),
    "TIFF": (".tif", ".tiff"),
}
IMAGE_EXTENSIONS: tuple[str, ...] = tuple(ext for exts in IMAGE_FORMATS.values() for ext in exts)


@dataclasses.dataclass(frozen=True)
class TrainerArgs:
    """``python -m trainer.task`` arguments, typed: the flags tpuctl sets (None: not given, the trainer's default)
    and ``extra``, the trainer flags the user added after ``--``, kept as typed. ``argv()`` builds the command line
    every target runs; ``parse(argv)`` reads one back (a run record's, a job's), both ``--flag value`` and
    ``--flag=value``, the flags it does not type left in ``extra``."""

    data_dir: str | None
    model_dir: str
    distribution_strategy: str | None = None
    num_gpus: int | None = None
    model: str | None = None
    dataset: str | None = None
    code_dir: str | None = None
    hub_handle: str | None = None
    train_epochs: int | None = None
    train_batch_size: int | None = None
    backend: str | None = None      # None or DEFAULT_BACKEND: not written (command lines from before it stay the same)
    extra: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        out: list[str] = []
        for name in _TYPED:
            value = getattr(self, name)
            if value is not None and not (name == "backend" and value == DEFAULT_BACKEND):
                out += [f"--{name}", str(value)]
        return [*out, *self.extra]

    @classmethod
    def parse(cls, argv: Sequence[str]) -> TrainerArgs:
        """The typed flags of ``argv`` (the last one given wins, as argparse has it), the rest as ``extra``;
        UsageError when --data_dir or --model_dir is missing or a typed number is not one."""
        texts, extra = _scan(argv, _FIELDS)
        for required in ("data_dir", "model_dir"):
            if required not in texts and not (required == "data_dir" and "dataset" in texts):
                raise UsageError(f"the trainer's arguments have no --{required}")
        texts.setdefault("data_dir", None)
        return cls(**{name: None if text is None else _FIELDS[name](text) for name, text in texts.items()},
                   extra=tuple(extra))

    @property
    def hparams(self) -> dict[str, str]:
        """The plug-in hyperparameters among ``extra`` (``--hp_NAME VALUE``), by NAME."""
        names = {a[2:].partition("=")[0] for a in self.extra if a.startswith("--" + HPARAM_PREFIX)}
        texts, _ = _scan(self.extra, names, strict=False)
        return {name[len(HPARAM_PREFIX):]: text for name, text in texts.items()}

    def with_extra(self, *args: str) -> TrainerArgs:
        return dataclasses.replace(self, extra=(*self.extra, *args))

    def without(self, *flags: str) -> TrainerArgs:
        """These flags unset (typed) or removed (from ``extra``, in either spelling): a tuning trial sets them."""
        _, extra = _scan(self.extra, set(flags))
        typed = {name: None for name in flags if name in _FIELDS and name not in ("data_dir", "model_dir")}
        return dataclasses.replace(self, **typed, extra=tuple(extra))

    def given(self, flag: str) -> bool:
        """Whether ``--flag`` is set, typed or among ``extra`` (``--flag v`` or ``--flag=v``)."""
        if flag in _FIELDS and getattr(self, flag) is not None:
            return True
        return flag_value(self.extra, flag) is not None


def without_flags(argv: Sequence[str], *flags: str) -> list[str]:
    """``argv`` minus ``--flag value`` / ``--flag=value`` for each of ``flags``."""
    return _scan(argv, set(flags), strict=False)[1]


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value ``--flag`` has in ``argv`` (the last one given), in either spelling; None when it is not there (or
    has no value: the trainer would refuse that line, a reader of records only does not find the value)."""
    texts, _ = _scan(argv, {flag}, strict=False)
    return texts.get(flag)


def _scan(argv: Sequence[str], names, strict: bool = True) -> tuple[dict[str, str], list[str]]:
    """(the value text of each flag of ``names`` in ``argv``, the other arguments in order). ``strict``: a flag
    without its value is a UsageError (else it is dropped)."""
    texts: dict[str, str] = {}
    rest: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name in names:
            if eq:
                texts[name] = inline
            elif i + 1 < len(args):
                texts[name] = args[i + 1]
                i += 1
            elif strict:
                raise UsageError(f"--{name} needs a value")
        else:
            rest.append(arg)
        i += 1
    return texts, rest


def _whole(name: str):
    bound = TASK_BOUNDS[name]

    def parse(text: str) -> int:
        try:
            return int(bound.parse(text))
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--{name}: {exc}") from None
    return parse


#: The flags ``TrainerArgs`` types, in the order ``argv()`` writes them, each with its reader.
def _backend(text: str) -> str:
    if text not in BACKENDS:
        raise UsageError(f"--backend must be one of {', '.join(BACKENDS)}, got {text[:40]!r}")
    return text


_FIELDS: dict[str, Any] = {
    "distribution_strategy": str, "num_gpus": _whole("num_gpus"), "data_dir": str, "model_dir": str, "model": str,
    "dataset": str, "code_dir": str, "hub_handle": str, "train_epochs": _whole("train_epochs"), "train_batch_size": _whole("train_batch_size"),
    "backend": _backend,
}
_TYPED = tuple(_FIELDS)
