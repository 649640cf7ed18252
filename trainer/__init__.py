"""tpuctl's distributed image-classification trainer (TensorFlow 2.21 + tf_keras).

Runs unchanged on a laptop CPU, several local processes, GPUs and TPUs. Entry points:
``python -m trainer.task`` (train + export), ``python -m trainer.sample_data`` (embedded demo data),
``python -m trainer.make_tfrecords`` (folder of class sub-folders -> TFRecord shards + manifest).

This package imports no pulumi, no google-cloud client and nothing of ``tpuctl``: it runs in its own
environment and is shipped alone as a source distribution to Vertex AI.
"""

import os as _os

# tf_keras, not Keras 3: hub.KerasLayer is a tf_keras layer and MultiWorkerMirrored fails under Keras 3.
# Must be set before TensorFlow is first imported, which is why it lives at package import.
_os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
