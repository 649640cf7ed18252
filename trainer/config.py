"""Command-line flags of ``python -m trainer.task``, mapped 1:1 onto :class:`TrainConfig`.

The flag names are the seed's (``--distribution_strategy``, ``--model_dir``, ``--data_dir``,
``--train_epochs``, ``--train_batch_size``, ``--validation_batch_size``, ``--num_gpus``,
``--fine_tuning_choice``) so existing job specs keep working; both ``--flag value`` and
``--flag=value`` are accepted, booleans also as ``--noflag`` (absl style).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from collections.abc import Mapping, Sequence

from trainer.backends import check_backend
from trainer.errors import ArgumentParser, UsageError
from trainer.flags import (
    BACKENDS,
    DEFAULT_BACKEND,
    DEFAULT_MODEL,
    EXPORT_CHOICES,
    HPARAM_PREFIX,
    LR_SCHEDULES,
    MAX_PROFILE_SPAN,
    MIXED_PRECISION,
    MODELS,
    STRATEGIES,
    TASK_BOUNDS,
    Bound,
    is_plugin_ref,
    parse_profile_steps,
)
from trainer.paths import join_path

#: --learning_rate is the peak rate at this global batch size; other batches scale it by
#: sqrt(batch / REFERENCE_BATCH) (the square-root rule for Adam), see trainer.models.peak_learning_rate.
REFERENCE_BATCH = 32

#: Image side used when neither --image_size nor the data manifest gives one.
DEFAULT_IMAGE_SIZE = 224


#: --export_name, the export's folder under <export base>: TF Serving's model name (the URL /v1/models/<name>), as
#: tpuctl serve checks it (ground.domain.prediction.check_model_name).
EXPORT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

#: --gpu_memory in MB (the other accepted value is ``growth``).
GPU_MEMORY_MB = Bound(64, 1_048_576)
#: Memory of each virtual GPU (--virtual_gpus) when --gpu_memory gives no size.
DEFAULT_VIRTUAL_GPU_MB = 1024
#: --image_size: each side, in pixels.
IMAGE_SIDE = Bound(8, 2048)

#: ``python -m trainer.sample_data``.
SAMPLE_DATA_BOUNDS: dict[str, Bound] = {
    # Every one of the 10 classes needs a validation and a training example (of 1797 digits).
    "validation_fraction": Bound(0.01, 0.99, integer=False),
    "shards": Bound(1, 100),
    "image_size": Bound(8, 512),
}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    model_dir: str
    data_dir: str | None          # None only with a plug-in --dataset that reads no folder
    distribution_strategy: str = "auto"
    train_epochs: int = 5
    train_batch_size: int = 32
    validation_batch_size: int = 32
    num_gpus: int = 0  # 0 = every visible GPU
    fine_tuning_choice: bool = False
    model: str = DEFAULT_MODEL
    hub_handle: str | None = None
    image_size: tuple[int, int] | None = None  # None = from the manifest, else DEFAULT_IMAGE_SIZE
    learning_rate: float = 3e-3  # peak rate at a global batch of REFERENCE_BATCH (scaled for other batches)
    lr_schedule: str = "cosine"  # cosine | step | constant (after the warm-up)
    warmup_epochs: float = 1.0  # linear warm-up from 0 to the peak rate (capped at half of training)
    export: str = "best"  # best | last: which epoch's weights are exported
    early_stopping_patience: int = 0  # stop after this many epochs without a better val_accuracy (0 = off)
    steps_per_epoch: int = 0  # 0 = train examples // global batch
    backup_every_steps: int = 0  # 0 = back up at each epoch's end only; N: also every N training steps
    backup_every_minutes: float = 10.0  # one worker: also back up when this much training time passed (0 = off)
    max_step_seconds: float = 900.0  # a training step that takes longer ends the run (the first: 4x; 0 = off)
    skip_corrupt: bool = False
    resnet_weights: str | None = None
    cache: bool = False
    shuffle_buffer: int = 2048
    seed: int | None = None
    cluster_timeout_seconds: int = 300  # wait for TF_CONFIG peers / the TPU before failing
    mixed_precision: str = "auto"  # auto | bfloat16 | float16 | off (auto: bfloat16 on TPUs only)
    gpu_memory: str | int | None = None  # None | "growth" | MB (memory limit of GPU 0 / each virtual GPU)
    virtual_gpus: int = 0  # 0 = off; N: split GPU 0 into N logical GPUs
    dataset: str | None = None  # a plug-in dataset function (trainer.plugin), else the TFRecords of --data_dir
    code_dir: str | None = None  # the user's project folder the plug-ins are imported from (default: cwd)
    hparams: tuple[tuple[str, str], ...] = ()  # --hp_NAME VALUE: the plug-in's own hyperparameters
    profile_steps: tuple[int, int] | None = None  # (first, last) training step a TensorFlow profile is captured for
    export_name: str | None = None  # the export's folder (TF Serving's model name); None: the model's own name
    backend: str = DEFAULT_BACKEND  # tensorflow | jax: what runs the steps (trainer.backends, trainer.keras3)

    @property
    def plugin_model(self) -> bool:
        return is_plugin_ref(self.model)


@dataclasses.dataclass(frozen=True)
class OutputDirs:
    """Where artifacts go; Vertex AI's AIP_* variables win over the <model_dir> defaults."""

    model_dir: str
    export_base: str  # <export_base>/<model name>/<version>/saved_model.pb
    checkpoints: str
    logs: str

    @classmethod
    def resolve(cls, model_dir: str, environ: Mapping[str, str] | None = None) -> OutputDirs:
        env = os.environ if environ is None else environ
        return cls(
            model_dir=model_dir,
            export_base=(env.get("AIP_MODEL_DIR") or join_path(model_dir, "export")).rstrip("/"),
            checkpoints=(env.get("AIP_CHECKPOINT_DIR") or join_path(model_dir, "checkpoints")).rstrip("/"),
            logs=(env.get("AIP_TENSORBOARD_LOG_DIR") or join_path(model_dir, "logs")).rstrip("/"),
        )


class _Parser(ArgumentParser):
    def error(self, message: str):  # one line, exit 2, via UsageError
        super().error(f"{message} (see python -m trainer.task --help)")


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "y", "on"):
        return True
    if value in ("0", "false", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _image_size(text: str) -> tuple[int, int]:
    shown = text if len(text) <= 40 else text[:37] + "..."
    parts = text.lower().replace("x", ",").split(",")
    try:
        dims = [int(p) for p in parts]  # "224x" or ",224" is not a size
    except ValueError:
        dims = []
    if len(dims) == 1:
        dims = dims * 2
    if len(dims) != 2 or not all(IMAGE_SIDE.contains(d) for d in dims):
        raise argparse.ArgumentTypeError(
            f"expected a side like 224 or HxW like 224x160, each side {IMAGE_SIDE.describe()}, got {shown!r}")
    return dims[0], dims[1]


def _gpu_memory(text: str) -> str | int:
    if text.strip().lower() == "growth":
        return "growth"
    try:
        return GPU_MEMORY_MB.parse(text)
    except argparse.ArgumentTypeError:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise argparse.ArgumentTypeError(f"expected growth or megabytes ({GPU_MEMORY_MB.describe()}), "
                                         f"got {shown!r}") from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m trainer.task",
        description="Train an image classifier on TFRecord shards and export a TF Serving SavedModel.",
        allow_abbrev=False,
    )

    def number(name: str, text: str) -> None:
        """A flag of TASK_BOUNDS: parsed and described by its Bound, with TrainConfig's default."""
        bound = TASK_BOUNDS[name]
        p.add_argument(f"--{name}", type=bound.parse, default=getattr(TrainConfig, name),
                       help=f"{text} ({bound.describe()})" if text else bound.describe())

    p.add_argument("--model_dir", required=True, help="output folder (local or gs://): checkpoints, logs, export, result.json")
    p.add_argument("--data_dir", default=None,
                   help="folder (local or gs://) with the TFRecord shards and manifest.json (required unless a "
                        "plug-in --dataset reads its own data)")
    p.add_argument("--distribution_strategy", default="auto", choices=STRATEGIES)
    number("train_epochs", "epochs")
    number("train_batch_size", "global batch size")
    number("validation_batch_size", "global validation batch size")
    number("num_gpus", "GPUs to use with --distribution_strategy gpu")
    _add_bool(p, "fine_tuning_choice", "train the pretrained base too (hub, resnet50)")
    p.add_argument("--model", default=DEFAULT_MODEL, type=_model,
                   help=f"{', '.join(MODELS)}, or your model function: path/to/file.py:NAME or "
                        "package.module:NAME (docs/your-code.md)")
    p.add_argument("--dataset", default=None, type=_plugin_ref,
                   help="your dataset function (path/to/file.py:NAME or package.module:NAME); default: the "
                        "TFRecords of --data_dir")
    p.add_argument("--code_dir", default=None,
                   help="your project folder, where --model/--dataset are imported from (default: the current "
                        "folder)")
    p.add_argument("--hub_handle", default=None, help="TF-Hub image feature-vector handle (with --model hub)")
    p.add_argument("--image_size", type=_image_size, default=None,
                   help=f"side or HxW, each side {IMAGE_SIDE.describe()}; default from the manifest, else 224")
    number("learning_rate", f"peak Adam learning rate at a global batch of {REFERENCE_BATCH}; other batch sizes "
                            f"scale it by sqrt(batch / {REFERENCE_BATCH})")
    p.add_argument("--lr_schedule", default=TrainConfig.lr_schedule, choices=LR_SCHEDULES,
                   help="after the warm-up: cosine decay to 0, step (x0.1 at 50%% and 75%% of training) or "
                        "constant")
    number("warmup_epochs", "epochs of linear learning-rate warm-up (at most half of training)")
    p.add_argument("--export", default=TrainConfig.export, choices=EXPORT_CHOICES,
                   help="export the epoch with the best validation accuracy (default) or the last epoch")
    number("early_stopping_patience", "stop when validation accuracy has not improved for this many epochs")
    number("steps_per_epoch", "")
    number("backup_every_steps", "also write the preemption backup every N training steps, so a restart "
                                 "resumes within N steps instead of at the last epoch's end")
    number("backup_every_minutes", "with one worker, also write the preemption backup once this many minutes of "
                                   "training passed since the last one (clusters: use --backup_every_steps)")
    number("max_step_seconds", "a training step that has not ended after this many seconds (a process's first, "
                               "which compiles: four times that) ends the run with one line: a dataset generator "
                               "that blocks or a stalled read")
    _add_bool(p, "skip_corrupt", "skip corrupt records (after a verification pass) instead of failing")
    p.add_argument("--resnet_weights", default=None, help="ResNet50 no-top weights file (.h5) to start from")
    _add_bool(p, "cache", "cache the serialized records in memory after the first epoch")
    number("shuffle_buffer", "records in the shuffle buffer")
    number("seed", "seed for weights and shuffling")
    number("cluster_timeout_seconds", "how long to wait for every TF_CONFIG peer / the TPU_NAME address to answer")
    p.add_argument("--mixed_precision", default="auto", choices=MIXED_PRECISION,
                   help="compute dtype (variables and the model output stay float32); auto = bfloat16 on TPUs, "
                        "off elsewhere")
    p.add_argument("--gpu_memory", type=_gpu_memory, default=None,
                   help=f"growth, or a memory limit in MB ({GPU_MEMORY_MB.describe()}) for GPU 0 (each virtual GPU "
                        "with --virtual_gpus); needs a GPU")
    number("virtual_gpus", f"split GPU 0 into N logical GPUs of --gpu_memory MB each (default "
                           f"{DEFAULT_VIRTUAL_GPU_MB}); needs a GPU")
    p.add_argument("--export_name", type=_export_name, default=None, metavar="NAME",
                   help="the export's folder under <model_dir>/export, TF Serving's model name (1-64 letters, digits, "
                        "'_', '.' or '-'); default: the built-in model's name, or your model's own (its Keras name, else "
                        "its module's)")
    p.add_argument("--backend", default=DEFAULT_BACKEND, choices=BACKENDS,
                   help="what runs the model: tensorflow (tf_keras and Keras 3 models, tf.distribute) or jax (Keras 3 "
                        "models, keras.distribution over every device of every host); docs/your-code.md")
    p.add_argument("--profile_steps", type=parse_profile_steps, default=None, metavar="FIRST-LAST",
                   help="capture a TensorFlow profile of these training steps (e.g. 10-15, at most "
                        f"{MAX_PROFILE_SPAN}; each process counts its steps from 1) on every worker into "
                        "<logs>/profile/<worker>, for TensorBoard's Profile tab")
    return p


def _add_bool(p: argparse.ArgumentParser, name: str, help_text: str) -> None:
    p.add_argument(f"--{name}", dest=name, type=_bool, nargs="?", const=True, default=False, help=help_text)
    p.add_argument(f"--no{name}", dest=name, action="store_false", help=argparse.SUPPRESS)


def _model(text: str) -> str:
    if text in MODELS or is_plugin_ref(text):
        return text
    shown = text if len(text) <= 80 else text[:77] + "..."
    raise argparse.ArgumentTypeError(f"expected one of {', '.join(MODELS)} or a function path/to/file.py:NAME or "
                                     f"package.module:NAME, got {shown!r}")


def _export_name(text: str) -> str:
    if EXPORT_NAME.fullmatch(text):
        return text
    shown = text if len(text) <= 80 else text[:77] + "..."
    raise argparse.ArgumentTypeError(f"expected 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit "
                                     f"(TF Serving's model name), got {shown!r}")


def _plugin_ref(text: str) -> str:
    if is_plugin_ref(text):
        return text
    shown = text if len(text) <= 80 else text[:77] + "..."
    raise argparse.ArgumentTypeError(f"expected a function path/to/file.py:NAME or package.module:NAME, got {shown!r}")


def _hparams(rest: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--hp_NAME VALUE`` / ``--hp_NAME=VALUE`` among the arguments argparse did not know; anything else is an
    unknown flag."""
    out: dict[str, str] = {}
    args = list(rest)
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--" + HPARAM_PREFIX):
            raise UsageError(f"unrecognized arguments: {' '.join(args[i:])[:200]} (see python -m trainer.task --help)")
        name, eq, value = arg[2 + len(HPARAM_PREFIX):].partition("=")
        if not eq:
            if i + 1 >= len(args):
                raise UsageError(f"--{HPARAM_PREFIX}{name} needs a value")
            value = args[i + 1]
            i += 1
        out[name] = value
        i += 1
    return tuple(out.items())


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    ns, rest = build_parser().parse_known_args(argv)
    cfg = TrainConfig(**vars(ns), hparams=_hparams(rest))
    validate(cfg)
    return cfg


#: One global batch of decoded images (float32, 3 channels) may take at most this many bytes. The largest
#: batch flag at the largest image side would be ~3 TiB; 64 GiB still allows e.g. 65,536 images of
#: 224x224 (a TPU pod's global batch) or 4,096 of 512x512, while a typo (batch 65536 at 512x512) is refused
#: before any memory is allocated instead of being killed by the kernel or failing deep inside TensorFlow.
MAX_BATCH_BYTES = 64 * 2**30


def check_batch_memory(cfg: TrainConfig, image_size: tuple[int, int]) -> None:
    """Batch size x image size: one decoded global batch (float32 RGB) must fit in ``MAX_BATCH_BYTES``."""
    for flag in ("train_batch_size", "validation_batch_size"):
        batch = getattr(cfg, flag)
        size = batch * image_size[0] * image_size[1] * 3 * 4
        if size > MAX_BATCH_BYTES:
            raise UsageError(f"--{flag} {batch} at {image_size[0]}x{image_size[1]} images needs "
                             f"{size / 2**30:.0f} GiB per global batch (float32), over the "
                             f"{MAX_BATCH_BYTES // 2**30} GiB limit; lower --{flag} or --image_size")


def validate(cfg: TrainConfig) -> None:
    """Checks that need no TensorFlow and no I/O (also for a TrainConfig built in code)."""
    for name, bound in TASK_BOUNDS.items():
        value = getattr(cfg, name)
        if not (name == "seed" and value is None):
            bound.check(f"--{name}", value)
    if cfg.image_size is not None:
        if not (isinstance(cfg.image_size, tuple) and len(cfg.image_size) == 2):
            raise UsageError(f"--image_size must be (height, width), got {cfg.image_size!r}")
        for side in cfg.image_size:
            IMAGE_SIDE.check("--image_size", side)
        check_batch_memory(cfg, cfg.image_size)
    for flag in ("model_dir", "data_dir", "hub_handle", "resnet_weights", "code_dir"):
        value = getattr(cfg, flag)
        if value is not None and ("\x00" in value or len(value) > 4096):
            raise UsageError(f"--{flag} must be a path or URL without NUL characters, at most 4096 characters")
    if cfg.data_dir is None and cfg.dataset is None:
        raise UsageError("--data_dir is required (unless a plug-in --dataset reads its own data)")
    for flag in ("model_dir", "data_dir"):
        if getattr(cfg, flag) is not None and not getattr(cfg, flag).strip():
            raise UsageError(f"--{flag} must not be empty")
    if cfg.hparams and not (cfg.plugin_model or cfg.dataset):
        raise UsageError(f"--{HPARAM_PREFIX}{cfg.hparams[0][0]} is a plug-in hyperparameter: it needs --model or "
                         "--dataset naming your function")
    if cfg.plugin_model and (cfg.hub_handle or cfg.resnet_weights):
        raise UsageError("--hub_handle and --resnet_weights are for the built-in models; load them in your model "
                         "function")
    if cfg.model == "hub" and not cfg.hub_handle:
        raise UsageError("--model hub needs --hub_handle (e.g. https://tfhub.dev/google/imagenet/resnet_v2_50/feature_vector/5)")
    if cfg.hub_handle and cfg.model != "hub":
        raise UsageError("--hub_handle is only used with --model hub")
    if cfg.hub_handle and cfg.hub_handle != cfg.hub_handle.strip():
        raise UsageError("--hub_handle must not have surrounding spaces (the cache folder is the sha1 of the exact string)")
    if cfg.resnet_weights and cfg.model != "resnet50":
        raise UsageError("--resnet_weights is only used with --model resnet50")
    if cfg.model == "resnet50" and cfg.image_size is not None and min(cfg.image_size) < 32:
        raise UsageError("--model resnet50 needs --image_size of at least 32")
    if cfg.num_gpus and cfg.distribution_strategy not in ("gpu", "auto"):
        raise UsageError("--num_gpus is only used with --distribution_strategy gpu or auto")
    for flag, value, choices in (("lr_schedule", cfg.lr_schedule, LR_SCHEDULES),
                                 ("export", cfg.export, EXPORT_CHOICES)):
        if value not in choices:
            raise UsageError(f"--{flag} must be one of {', '.join(choices)}, got {value!r}")
    if cfg.mixed_precision not in MIXED_PRECISION:
        raise UsageError(f"--mixed_precision must be one of {', '.join(MIXED_PRECISION)}, got {cfg.mixed_precision!r}")
    if cfg.model == "hub" and cfg.mixed_precision in ("bfloat16", "float16"):
        raise UsageError("--mixed_precision is not supported with --model hub (the hub model's own dtype is fixed); "
                         "use --mixed_precision off")
    if cfg.gpu_memory is not None and cfg.gpu_memory != "growth":
        GPU_MEMORY_MB.check("--gpu_memory", cfg.gpu_memory)
    if cfg.export_name is not None and not EXPORT_NAME.fullmatch(cfg.export_name):
        raise UsageError(f"--export_name {cfg.export_name[:80]!r} must be 1-64 letters, digits, '_', '.' or '-', "
                         "starting with a letter or digit")
    check_backend(cfg)
    if cfg.gpu_memory == "growth" and cfg.virtual_gpus:
        raise UsageError("--gpu_memory growth cannot be combined with --virtual_gpus (virtual GPUs need a fixed "
                         "size: pass --gpu_memory MB)")
