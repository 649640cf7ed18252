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
from typing import Mapping, Sequence

from trainer.errors import UsageError

STRATEGIES = ("auto", "tpu", "gpu", "multi_worker", "one_device", "cpu")
MODELS = ("small_cnn", "resnet50", "hub")

#: Image side used when neither --image_size nor the data manifest gives one.
DEFAULT_IMAGE_SIZE = 224


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    model_dir: str
    data_dir: str
    distribution_strategy: str = "auto"
    train_epochs: int = 5
    train_batch_size: int = 32
    validation_batch_size: int = 32
    num_gpus: int = 0  # 0 = every visible GPU
    fine_tuning_choice: bool = False
    model: str = "small_cnn"
    hub_handle: str | None = None
    image_size: tuple[int, int] | None = None  # None = from the manifest, else DEFAULT_IMAGE_SIZE
    learning_rate: float = 3e-3
    steps_per_epoch: int = 0  # 0 = train examples // global batch
    skip_corrupt: bool = False
    resnet_weights: str | None = None
    cache: bool = False
    shuffle_buffer: int = 2048
    seed: int | None = None


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
        join = lambda *p: "/".join(s.rstrip("/") for s in p)  # noqa: E731 - gs:// safe
        return cls(
            model_dir=model_dir,
            export_base=(env.get("AIP_MODEL_DIR") or join(model_dir, "export")).rstrip("/"),
            checkpoints=(env.get("AIP_CHECKPOINT_DIR") or join(model_dir, "checkpoints")).rstrip("/"),
            logs=(env.get("AIP_TENSORBOARD_LOG_DIR") or join(model_dir, "logs")).rstrip("/"),
        )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, via UsageError
        raise UsageError(f"{message} (see python -m trainer.task --help)")


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "y", "on"):
        return True
    if value in ("0", "false", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _image_size(text: str) -> tuple[int, int]:
    parts = text.lower().replace("x", ",").split(",")
    try:
        dims = [int(p) for p in parts if p.strip()]
    except ValueError:
        dims = []
    if len(dims) == 1:
        dims = dims * 2
    if len(dims) != 2 or min(dims) < 8 or max(dims) > 2048:
        raise argparse.ArgumentTypeError(f"expected a side like 224 or HxW like 224x160 (8..2048), got {text!r}")
    return dims[0], dims[1]


def _int_at_least(minimum: int, expected: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


_positive = _int_at_least(1, "a positive integer")
_non_negative = _int_at_least(0, "an integer >= 0")


def _learning_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < 10:
        raise argparse.ArgumentTypeError(f"expected 0 < learning rate < 10, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m trainer.task",
        description="Train an image classifier on TFRecord shards and export a TF Serving SavedModel.",
        allow_abbrev=False,
    )
    p.add_argument("--model_dir", required=True, help="output folder (local or gs://): checkpoints, logs, export, result.json")
    p.add_argument("--data_dir", required=True, help="folder (local or gs://) with the TFRecord shards and manifest.json")
    p.add_argument("--distribution_strategy", default="auto", choices=STRATEGIES)
    p.add_argument("--train_epochs", type=_positive, default=TrainConfig.train_epochs)
    p.add_argument("--train_batch_size", type=_positive, default=TrainConfig.train_batch_size, help="global batch size")
    p.add_argument("--validation_batch_size", type=_positive, default=TrainConfig.validation_batch_size)
    p.add_argument("--num_gpus", type=_non_negative, default=0, help="GPUs to use with --distribution_strategy gpu (0 = all)")
    _add_bool(p, "fine_tuning_choice", "train the pretrained base too (hub, resnet50)")
    p.add_argument("--model", default="small_cnn", choices=MODELS)
    p.add_argument("--hub_handle", default=None, help="TF-Hub image feature-vector handle (with --model hub)")
    p.add_argument("--image_size", type=_image_size, default=None, help="side or HxW; default from the manifest, else 224")
    p.add_argument("--learning_rate", type=_learning_rate, default=TrainConfig.learning_rate)
    p.add_argument("--steps_per_epoch", type=_non_negative, default=0, help="0 = train examples // batch size")
    _add_bool(p, "skip_corrupt", "skip corrupt records (after a verification pass) instead of failing")
    p.add_argument("--resnet_weights", default=None, help="ResNet50 no-top weights file (.h5) to start from")
    _add_bool(p, "cache", "cache the serialized records in memory after the first epoch")
    p.add_argument("--shuffle_buffer", type=_positive, default=TrainConfig.shuffle_buffer)
    p.add_argument("--seed", type=int, default=None, help="seed for weights and shuffling")
    return p


def _add_bool(p: argparse.ArgumentParser, name: str, help_text: str) -> None:
    p.add_argument(f"--{name}", dest=name, type=_bool, nargs="?", const=True, default=False, help=help_text)
    p.add_argument(f"--no{name}", dest=name, action="store_false", help=argparse.SUPPRESS)


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    ns = build_parser().parse_args(argv)
    cfg = TrainConfig(**vars(ns))
    validate(cfg)
    return cfg


def validate(cfg: TrainConfig) -> None:
    """Checks that need no TensorFlow and no I/O."""
    if not cfg.model_dir.strip():
        raise UsageError("--model_dir must not be empty")
    if not cfg.data_dir.strip():
        raise UsageError("--data_dir must not be empty")
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
