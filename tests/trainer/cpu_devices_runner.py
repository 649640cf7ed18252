"""Run ``trainer.task`` with N logical CPU devices: ``python cpu_devices_runner.py N -- <trainer flags>``.

Logical devices must be configured before TensorFlow initialises its runtime, i.e. in a fresh process.
"""

import sys

import tensorflow as tf

import trainer  # noqa: F401  (tf_keras selected before TensorFlow loads)

count = int(sys.argv[1])
assert sys.argv[2] == "--"
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)

from trainer.task import main  # noqa: E402

sys.exit(main(sys.argv[3:]))
