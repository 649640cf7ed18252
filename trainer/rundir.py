"""The run's folder (``--model_dir``) as a run owns it and what the run reports: its lock (one run per folder), its
``training:`` and ``resuming:`` lines, its result file, final scalars and the tuning metric a hyperparameter-tuning
service reads. Shared by both engines (trainer.task: tf_keras; trainer.keras3.engine: Keras 3 on TensorFlow or JAX).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator, Mapping

from trainer.config import EXPORT_NAME
from trainer.errors import UsageError, unreachable_storage

RESULT_FILE = "result.json"
#: Held (flock) by the chief of a run for as long as it trains in a local model folder.
LOCK_FILE = ".tpuctl-train.lock"
#: Tag of the final validation accuracy written for hyperparameter-tuning services (the legacy
#: AI Platform default ``hyperparameterMetricTag``), next to a plain ``val_accuracy`` tag.
TUNING_METRIC_TAG = "training/hptuning/metric"


def report_tuning_metric(value: float, step: int, environ: Mapping[str, str]) -> str | None:
    """Vertex AI hyperparameter tuning: append the metric where its agent reads it (cloudml-hypertune's
    file format: one JSON object per line), only when running as a tuning trial."""
    path = environ.get("CLOUD_ML_HP_METRIC_FILE")
    trial = environ.get("CLOUD_ML_TRIAL_ID")
    if not path and trial is None:
        return None
    path = path or "/tmp/hypertune/output.metrics"
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    entry = {"timestamp": time.time(), "trial": str(trial or 0), "val_accuracy": str(float(value)),
             "global_step": str(int(step))}
    with open(path, "a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
    return path


@contextlib.contextmanager
def claim_model_dir(model_dir: str) -> Iterator[None]:
    """Hold ``<model_dir>/.tpuctl-train.lock`` (an exclusive ``flock``) while a run trains there.

    A second run into the same local folder fails at once with one line instead of training on the same
    backup and exporting over the first (both used to report success). The kernel drops the lock when the
    process ends, however it ends, so a killed run never blocks its resume. gs:// folders cannot be locked
    through tf.io.gfile: Vertex AI and tpuctl give every cloud run its own folder.
    """
    if "://" in model_dir:
        yield
        return
    import fcntl

    path = os.path.join(model_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise UsageError(f"cannot write --model_dir {model_dir}: {err.strerror or err}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"--model_dir {model_dir} is in use by another training run (it holds {path}); wait "
                             "for it to finish or pass another --model_dir") from None
        except OSError:  # a file system without locks (e.g. a gcsfuse mount): like gs://, unclaimed
            pass
        yield
    finally:
        os.close(fd)


def claim_output(model_dir: str, held: contextlib.ExitStack) -> None:
    """The chief's first write: ``--model_dir`` made and claimed (:func:`claim_model_dir`) for as long as ``held``
    lasts. Called once every input was checked (flags, data, model)."""
    import tensorflow as tf

    try:
        tf.io.gfile.makedirs(model_dir)
    except tf.errors.OpError as err:
        unreachable = unreachable_storage(err.message, f"write --model_dir {model_dir}")
        if unreachable is not None:
            raise unreachable from None
        raise UsageError(f"cannot write --model_dir {model_dir}: {err.message}") from None
    # One run per folder. A finished run's result.json stays until this run's replaces it (an interrupted
    # re-run must not make the finished run vanish from `tpuctl runs ls`).
    held.enter_context(claim_model_dir(model_dir))


#: At most this many entries of a run folder's checkpoints/ are looked at before training (a run keeps a few dozen).
MAX_CHECKPOINT_ENTRIES = 10_000


def check_read_back(checkpoints: str) -> None:
    """What a run reads back from its own folder (backups, checkpoints, the first step's time) before it reads any of
    it: every entry under ``checkpoints`` (the run's checkpoints folder) a regular file or a folder (issue 56: a FIFO there hung the resume for good), a file
    wherever the run keeps one (a folder named ``checkpoint`` was a traceback at the first checkpoint), every
    checkpoint state file (``checkpoint``) one TensorFlow can parse (a damaged one was a warning, and the backup was
    silently dropped: the run trained again from epoch 1) and every checkpoint index shaped as TensorFlow writes one
    (random bytes were a traceback when ``--export best`` read its epoch back, after training). One line naming the
    file, exit 2. Local folders only: a bucket holds neither FIFOs nor devices, and a damaged file there is
    TensorFlow's to report."""
    import stat

    from trainer.errors import DataError

    if "://" in checkpoints:
        return
    root = checkpoints
    fix = "remove it (or the whole checkpoints folder, to train from the start), or train into another --model_dir"
    seen = 0
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            seen += 1
            if seen > MAX_CHECKPOINT_ENTRIES:
                raise DataError(f"{root} holds more than {MAX_CHECKPOINT_ENTRIES} entries, which no run of tpuctl's "
                                f"writes: {fix}")
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise DataError(f"{path} is not a regular file or folder (a FIFO, socket, device or link), and the run "
                                f"reads its checkpoints back: {fix}")
            if stat.S_ISDIR(mode) and _READ_AS_FILE.fullmatch(name):
                # TensorFlow wrote its state file next to it, then failed renaming it into place (issue 56, a trial)
                raise DataError(f"{path} is a folder where the run keeps a file of that name (TensorFlow reads and "
                                f"replaces it): {fix}")
            if stat.S_ISREG(mode) and folder == root and name.endswith(".index"):
                # an epoch's checkpoint (--export best reads the best one back); the backup's are read, and a damaged
                # one said, before training (trainer.callbacks.backed_up_steps); TensorFlow's own temporary folders
                # (a save cut short) are never read
                _check_index_file(path, fix)
        if "checkpoint" in files:
            _check_state_file(os.path.join(folder, "checkpoint"), fix)


#: The names under checkpoints/ the run reads or writes as files: TensorFlow's state file, a checkpoint's index and
#: data shards (``ckpt-0001.index``, ``ckpt-0001.data-00000-of-00001``), the trainer's timing records.
_READ_AS_FILE = re.compile(r"checkpoint|.+\.index|.+\.data-\d{5}-of-\d{5}|first-step|resumes\.json")
#: A checkpoint's index is a table (TensorFlow's, LevelDB's format): it ends with a 48-byte footer whose last 8 bytes
#: are this number, little-endian (tensorflow/tsl/lib/io/format.h, kTableMagicNumber).
_TABLE_MAGIC = (0xDB4775248B80FB57).to_bytes(8, "little")
_TABLE_FOOTER = 48


def _check_index_file(path: str, fix: str) -> None:
    """A checkpoint's index (``ckpt-0001.index``) ends as every table TensorFlow writes does; random bytes or a cut
    file was an OpError traceback (``not an sstable (bad magic number)``) when the run read the checkpoint back, after
    training (issue 56, a trial). Its last bytes only: a look by shape, before TensorFlow reads it."""
    from trainer.errors import DataError

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise DataError(f"cannot read {path} ({err.strerror or err}), and the run reads its checkpoints back: "
                        f"{fix}") from None
    try:
        size = os.fstat(fd).st_size
        tail = os.pread(fd, len(_TABLE_MAGIC), size - len(_TABLE_MAGIC)) if size >= _TABLE_FOOTER else b""
    except OSError as err:
        raise DataError(f"cannot read {path} ({err.strerror or err}), and the run reads its checkpoints back: "
                        f"{fix}") from None
    finally:
        os.close(fd)
    if tail != _TABLE_MAGIC:
        why = (f"{size} bytes, shorter than any checkpoint index TensorFlow writes" if size < _TABLE_FOOTER
               else "it does not end as a checkpoint index TensorFlow writes does")
        # not "remove it": the epoch it holds may be the best one, which --export best reads back
        raise DataError(f"{path} is damaged ({why}): the run reads that checkpoint back; remove the whole checkpoints "
                        "folder to train from the start, or train into another --model_dir")


def _check_state_file(path: str, fix: str) -> None:
    """A checkpoint state file (``checkpoint``: text of TensorFlow's CheckpointState) that TensorFlow reads back.
    TensorFlow's own reader (no protobuf import of ours: the trainer imports nothing named google) logs a warning and
    answers None for a file that does not parse, which would drop the backup and train again from epoch 1."""
    from tensorflow.python.checkpoint import checkpoint_management
    from tensorflow.python.platform import tf_logging

    from trainer.errors import DataError

    why = None
    verbosity = tf_logging.get_verbosity()
    tf_logging.set_verbosity(tf_logging.ERROR)      # its warning says less than our line
    try:
        folder = os.path.dirname(path)
        state = None if os.path.getsize(path) > 1 << 20 else checkpoint_management.get_checkpoint_state(folder)
        if os.path.getsize(path) > 1 << 20:
            why = "over 1 MiB, which no state file is"
        elif state is None:
            why = "it does not parse as TensorFlow's checkpoint state"
        else:
            # it names checkpoints of its own folder (TensorFlow writes their names relative to it): one elsewhere
            # was read back as this run's (a sixth trial resumed from files outside the run's folder)
            inside = os.path.realpath(folder) + os.sep
            outside = next((p for p in (state.model_checkpoint_path, *state.all_model_checkpoint_paths)
                            if not os.path.realpath(os.path.join(folder, p)).startswith(inside)), None)
            if outside is not None:
                why = f"it names {' '.join(outside.split())[:160]!r}, outside its folder"
    except (OSError, ValueError) as err:
        why = " ".join(str(err).split())[:160]
    finally:
        tf_logging.set_verbosity(verbosity)
    if why is not None:
        raise DataError(f"{path} is damaged ({why}): it says which backup or checkpoint to read back; {fix}") from None


def training_line(cfg, info, source, *, steps_per_epoch: int, validation_steps: int, precision: str, exact: bool,
                  keras: str, sharding: str | None = None) -> str:
    """``training: model=… strategy=… … backend=… keras=…``: what the run trains, how, on what (docs/trainer.md).
    ``sharding``: how the workers share the input when tf.distribute does not decide it (JAX)."""
    from trainer import data

    shape = (f"image_size={source.image_size[0]}x{source.image_size[1]}" if source.image_size
             else f"features={','.join(source.features)}")
    if sharding is None:
        sharding = (data.shard_policy(source.train_files, info.num_workers).name if source.train_files
                    else ("DATA" if info.num_workers > 1 else "AUTO"))
    return (f"training: model={cfg.model} strategy={info.kind} replicas={info.num_replicas} "
            f"workers={info.num_workers} {shape} "
            f"steps_per_epoch={steps_per_epoch} validation_steps={validation_steps} "
            f"input_sharding={sharding} "
            f"mixed_precision={precision} validation={'exact' if exact else 'shared among workers'} "
            f"backend={cfg.backend} keras={keras}")


def resuming_line(cfg, input_steps: int, steps_per_epoch: int, skip: int) -> str:
    """``resuming: N step(s) backed up, training goes on at epoch E step S/N; the input skips R record(s) …``."""
    epoch, step = divmod(input_steps, steps_per_epoch)
    where = "" if cfg.seed is not None else " (no --seed: its place in a freshly shuffled pass)"
    return (f"resuming: {input_steps} step(s) backed up, training goes on at epoch {epoch + 1} step "
            f"{step + 1}/{steps_per_epoch}; the input skips {skip} record(s) of this worker's stream{where}")


def result_of(cfg, *, export_dir: str, export_name: str, chosen: dict, info, source, precision: str, exact: bool,
              keras: str, timing: dict | None) -> dict:
    """The run's result (``result.json``, the ``tpuctl-result:`` line; docs/trainer.md): ``protocol.RESULT_FIELDS``,
    each one (a launcher refuses a record without one; tests/trainer check both backends' records hold exactly
    them)."""
    return {
        "export_dir": export_dir,
        **chosen,
        "export": cfg.export,
        "export_name": export_name,
        "model": cfg.model,
        "source": source.source,
        "strategy": info.kind,
        "mixed_precision": precision,
        "num_workers": info.num_workers,
        "train_examples": source.train_examples,
        "validation_examples": source.val_examples,
        "validation_exact": exact,
        "skipped_records": source.skipped,
        "timing": timing,
        "backend": cfg.backend,
        "keras": keras,
    }


def report(cfg, environ: Mapping[str, str], dirs, result: dict) -> dict:
    """The chief's last writes: the final validation accuracy as TensorBoard scalars (``<logs>/final``: also the
    tuning services' tag), the tuning trial's metric, then ``result.json`` (replaced whole)."""
    from trainer.export import write_atomically
    from trainer.paths import join_path
    from trainer.summaries import write_scalars

    value, epochs = result["val_accuracy"], result["epochs"]
    write_scalars(join_path(dirs.logs, "final"), {"val_accuracy": value, TUNING_METRIC_TAG: value}, step=epochs)
    report_tuning_metric(value, epochs, environ)
    write_atomically(join_path(cfg.model_dir, RESULT_FILE), json.dumps(result, indent=2) + "\n")
    return result


#: The names Keras gives a model nobody named (``model``, ``sequential_2``): not the user's choice of an export name.
_KERAS_DEFAULT_NAME = re.compile(r"(model|sequential|functional)(_\d+)?")


def export_name(cfg, model) -> str:
    """The export's folder (TF Serving's model name): ``--export_name``; else a built-in model's name (``small_cnn``);
    else the plug-in model's own name (``keras.Model(..., name="ledger")``, a subclass ``Ledger``'s ``ledger``), else
    its module's (``model.py:build`` -> ``model``): never the function's, which is ``build`` in most projects. The
    same for a tf_keras and a Keras 3 model."""
    if cfg.export_name:
        return cfg.export_name
    if not cfg.plugin_model:
        return cfg.model
    own = getattr(model, "name", "") or ""
    if EXPORT_NAME.fullmatch(own) and not _KERAS_DEFAULT_NAME.fullmatch(own):
        return own
    where = cfg.model.rsplit(":", 1)[0]
    module = os.path.basename(where)[:-3] if where.endswith(".py") else where.rsplit(".", 1)[-1]
    module = re.sub(r"[^A-Za-z0-9_.-]", "_", module).lstrip("_.-")[:64]
    return module if EXPORT_NAME.fullmatch(module) else "model"
