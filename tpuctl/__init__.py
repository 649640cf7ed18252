"""tpuctl: infrastructure as code and setup automation for TensorFlow training on Cloud TPUs and GPUs.

Kept import-light: ``tpuctl --help`` must not pull in TensorFlow, pulumi_gcp or aiplatform.
"""

__version__ = "0.1.0"
