"""A Keras 3 model for the sensor traces (make_data.py): the bundled trainer builds it with `--model model.py:build`,
on JAX (`--backend jax`) or on TensorFlow (the default).

The trainer hands `build` a context (docs/your-code.md): `ctx.inputs` are the data's features (here "trace", float32
[64]), `ctx.num_classes` the classes of its manifest and `ctx.hparams` the `--hparam NAME=VALUE` values. It returns an
uncompiled Keras 3 model (`import keras`: plug-in contract version 2) with one logit per class; the trainer compiles
and trains it, backs it up, exports the best epoch and serves it, on either backend.
"""

import keras


def build(ctx):
    trace = keras.Input(shape=ctx.inputs["trace"].shape, name="trace")
    x = keras.layers.Reshape((-1, 1))(trace)                  # 64 readings, one channel
    x = keras.layers.Conv1D(int(ctx.hparams.get("filters", 16)), 5, activation="relu")(x)
    x = keras.layers.Conv1D(int(ctx.hparams.get("filters", 16)), 5, activation="relu")(x)
    # a drift shows in the mean, a burst in the peak: both poolings
    x = keras.layers.Concatenate()([keras.layers.GlobalAveragePooling1D()(x), keras.layers.GlobalMaxPooling1D()(x)])
    x = keras.layers.Dropout(float(ctx.hparams.get("dropout", 0.1)))(x)
    logits = keras.layers.Dense(ctx.num_classes, dtype="float32", name="logits")(x)
    return keras.Model(trace, logits, name="sensors")
