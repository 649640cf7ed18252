"""Keras 3 models in the bundled trainer (plug-in contract v2), on TensorFlow (tf.distribute) or JAX
(keras.distribution): ``trainer.keras3.engine`` trains them with the guarantees the tf_keras path gives (step backups
and resume with the input in place, best/last export with today's serving signature, the line protocol, TensorBoard,
timing, profiles, tuning). tf.data is the input pipeline on both backends.
"""
