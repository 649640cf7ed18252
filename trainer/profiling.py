"""A TensorFlow profile of a range of training steps (``--profile_steps FIRST-LAST``), captured by every worker into
its own folder of the run's logs, ``<logs>/profile/<worker>``, where TensorBoard's Profile tab (the
``tensorboard-plugin-profile`` package) finds it: ``<worker>/plugins/profile/<time>/<host>.xplane.pb``.

``tf.profiler.experimental.start``/``stop`` (the API Keras' TensorBoard callback uses for ``profile_batch``) trace the
host's CPU and the devices this process drives: a TPU host's TPU chips (the TPU trace), a GPU host's GPUs through
CUPTI (NVIDIA's profiling library; the trainer's GPU image has it: ``nvidia-cuda-cupti-cu12``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from trainer.paths import join_path

#: Set on every TPU VM host by tpuctl's startup script (tpuctl/services/runs/tpuvm/script.py): the host's index.
TPU_WORKER_ENV = "TPUCTL_TPU_WORKER"


def worker_label(info, environ: Mapping[str, str]) -> str:
    """The worker's folder under ``<logs>/profile``: ``host-N`` on a TPU VM slice, else ``chief`` / ``worker-N``
    (TF_CONFIG's task), ``chief`` for a process alone."""
    host = environ.get(TPU_WORKER_ENV, "")
    if host.isdigit():
        return f"host-{host}"
    if info.is_chief or not info.task_type:
        return "chief"
    return f"{info.task_type}-{info.task_id}"


def not_profiled(info) -> str | None:
    """Why this process captures no profile, or None when it does. The workers of a MultiWorkerMirrored cluster other
    than the chief do not: TensorFlow 2.21's profiler crashed such a worker (glibc "double free or corruption" /
    "free(): invalid size", SIGABRT, mid-capture) in 11 of 75 local two-worker runs where worker 0 captured, beside 2
    to 10 CPU-bound processes on the machine this is tested on (2026-11-27; every crash in worker 0, the same with
    validation read from its files), and in none of 28 where only the chief captured; turning the device tracer off
    or the host tracer down (ProfilerOptions) did not help (2 and 4 of 30 runs, against 4 of 30), nor a profiler
    server in the worker traced from the chief (2 of 10). The workers run the chief's steps in lockstep, so the
    chief's trace holds each step, its input and its collectives. TPU VM hosts (each driving its own chips) and
    parameter-server coordinators capture as before."""
    if info.kind == "multi_worker" and info.num_workers > 1 and not info.is_chief:
        return ("the chief's profile holds every step (TensorFlow 2.21's profiler crashed the other workers of a "
                "multi-worker cluster: docs/trainer.md)")
    return None


def profile_callback(keras, logs: str, label: str, steps: tuple[int, int], profiler=None):
    """A Keras callback that profiles training steps ``steps`` (first, last; counted from 1 across this process's
    epochs) into ``<logs>/profile/<label>``; a range past the end of training is stopped at its end. ``profiler``:
    its (start(folder), stop()) pair, TensorFlow's by default (``jax.profiler``'s on JAX: the same layout)."""
    import tensorflow as tf

    start, stop = profiler or (tf.profiler.experimental.start, tf.profiler.experimental.stop)
    first, last = steps
    folder = join_path(logs, "profile", label)

    class StepProfile(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True   # reads no logs
            self.step = 0
            self.running = False

        def on_train_batch_begin(self, batch, logs=None):
            self.step += 1
            if self.step == first and not self.running:
                try:
                    start(folder)
                except (tf.errors.AlreadyExistsError, tf.errors.UnavailableError, RuntimeError) as err:
                    text = getattr(err, "message", None) or str(err) or type(err).__name__
                    print(f"warning: no profile: {text.strip().splitlines()[0]}", file=sys.stderr, flush=True)
                    return
                self.running = True
                print(f"profiling: steps {first}-{last} into {folder}", flush=True)

        def on_train_batch_end(self, batch, logs=None):
            if self.running and self.step >= last:
                self._stop()

        def on_train_end(self, logs=None):
            if self.running:
                self._stop()

        def _stop(self):
            stop()
            self.running = False
            print(f"profiled: {folder}", flush=True)

    return StepProfile()
