"""Read the scalars a training run wrote (TensorBoard event files) for `tpuctl runs show|compare`.

    python -m trainer.runlog MODEL_DIR [MODEL_DIR ...]

Runs in the trainer environment because reading event files needs TensorFlow (local paths and gs://
through tf.io.gfile). Prints one ``summary: {json}`` line (trainer/protocol.py): for each model folder,
``{"scalars": {"train/epoch_loss": [[step, value], ...], ...}}`` read from ``<model_dir>/logs/<run>/``.
"""

from __future__ import annotations

import sys

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer import protocol
from trainer.errors import ArgumentParser, UsageError, run_cli, unreachable_storage
from trainer.paths import join_path

#: Folder of a run's event files under its model folder (trainer/config.py OutputDirs.logs).
LOGS = "logs"


def read_scalars(model_dir: str) -> dict[str, list[list[float]]]:
    """``{"<run>/<tag>": [[step, value], ...]}`` for every scalar event under ``model_dir/logs``."""
    import tensorflow as tf

    logs = f"{model_dir.rstrip('/')}/{LOGS}"
    try:
        tf.io.gfile.exists(logs)        # raises when storage cannot be reached, where isdir says False
    except tf.errors.OpError as err:
        unreachable = unreachable_storage(err.message, f"read {logs}")
        if unreachable is not None:
            raise unreachable from None
    if not tf.io.gfile.isdir(logs):
        raise UsageError(f"{model_dir} has no {LOGS}/ folder: is it the model folder of a tpuctl training run?")
    out: dict[str, list[list[float]]] = {}
    for folder, _, files in tf.io.gfile.walk(logs):
        run = folder[len(logs):].strip("/") or "."
        for name in sorted(f for f in files if ".tfevents." in f):
            try:
                # join_path: a folder gs:// lists ends in '/' (logs/final/): "{folder}/{name}" named logs/final//…
                for event in tf.compat.v1.train.summary_iterator(join_path(folder, name)):
                    for value in event.summary.value:
                        number = _number(value, tf)
                        if number is not None:
                            out.setdefault(f"{run}/{value.tag}", []).append([int(event.step), number])
            except tf.errors.DataLossError:
                continue   # a run still writing (or killed mid-record): keep what was complete
    for series in out.values():
        series.sort()
    return out


def _number(value, tf) -> float | None:
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if value.HasField("tensor"):
        array = tf.make_ndarray(value.tensor)
        if array.shape == () and array.dtype.kind in "fiu":
            return float(array)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m trainer.runlog", description=__doc__.splitlines()[0])
    parser.add_argument("model_dirs", nargs="+", help="model folders of training runs (local or gs://)")

    def run():
        args = parser.parse_args(argv)
        protocol.emit(protocol.SUMMARY, {d: {"scalars": read_scalars(d)} for d in args.model_dirs})

    return run_cli(run)


if __name__ == "__main__":
    sys.exit(main())
