"""tpuctl's distributed trainer (TensorFlow 2.21 + tf_keras, and Keras 3 on TensorFlow or JAX): image classification
built in, the user's own model and data as plug-ins (``trainer.plugin``, contract v2: a tf_keras or a Keras 3 model),
records of named features from a manifest.

Runs unchanged on a laptop CPU, several local processes, GPUs and TPUs. Entry points:
``python -m trainer.task`` (train + export), ``python -m trainer.sample_data`` (embedded demo data),
``python -m trainer.make_tfrecords`` (folder of class sub-folders -> TFRecord shards + manifest),
``python -m trainer.imaging`` (images as make_tfrecords stores them, for ``tpuctl predict``).

This package imports no pulumi, no google-cloud client and nothing of ``tpuctl``: it runs in its own
environment and is shipped alone as a source distribution to Vertex AI.
"""

import os as _os

# tf_keras, not Keras 3: hub.KerasLayer is a tf_keras layer and MultiWorkerMirrored fails under Keras 3.
# Must be set before TensorFlow is first imported, which is why it lives at package import.
_os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# JAX stays out of TensorFlow runs (TensorFlow imports it when installed); --backend jax lets it in (trainer.backends).
if _os.environ.get("KERAS_BACKEND") != "jax":
    from trainer.backends import keep_jax_out as _keep_jax_out

    _keep_jax_out()


def _no_tpu_here() -> bool:
    """libtpu is installed (the tpu image) but this machine has no TPU device to open.

    TPU VMs expose their chips as /dev/accel* (v2-v4) or VFIO devices under /dev/vfio (v5e and later); the container
    sees them under ``docker run --privileged``. Without either, nothing can use libtpu.
    """
    import glob
    import importlib.util

    if importlib.util.find_spec("libtpu") is None:
        return False
    devices = glob.glob("/dev/accel*") + [p for p in glob.glob("/dev/vfio/*") if not p.endswith("/vfio")]
    return not devices


# On a machine without a TPU (a laptop, CI, a CPU VM), `import tensorflow` in the tpu image blocks for minutes:
# libtpu asks the Compute Engine metadata server for the slice's shape (tpu-env, accelerator-type,
# worker-network-endpoints) and retries while it gets no answer (seen 2026-11-24 with libtpu 0.0.21 in
# `docker run --network none`: no end after 10 minutes; with these three variables `import tensorflow` takes 2 s).
# TPU_SKIP_MDS_QUERY is libtpu's own switch for that query; a single worker on localhost is what this machine is.
# On a TPU VM the devices exist and nothing is set; a value the user set is never replaced.
if _no_tpu_here():
    _os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    _os.environ.setdefault("TPU_WORKER_ID", "0")
    _os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
