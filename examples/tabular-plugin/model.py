"""A model for the flowers table (make_data.py): the bundled trainer builds it with `--model model.py:build`.

The trainer hands `build` a context (docs/your-code.md): `ctx.inputs` are the data's features (here
"measurements", float32 [4], and "colour", a string), `ctx.num_classes` the classes of its manifest and
`ctx.hparams` the `--hparam NAME=VALUE` values (tunable with `tpuctl tune --spec tune.yaml`). It returns an
uncompiled tf_keras model with one logit per class; the trainer compiles and trains it on every strategy,
backs it up, exports the best epoch and serves it.
"""

import tf_keras as keras

COLOURS = ["white", "violet", "blue", "purple"]


def build(ctx):
    measurements = keras.Input(shape=ctx.inputs["measurements"].shape, name="measurements")
    colour = keras.Input(shape=(), dtype="string", name="colour")
    scaled = keras.layers.Rescaling(1 / 7.0)(measurements)
    # one token per example: [batch, 1] (a [batch] string tensor would be read as one example's tokens)
    colour_id = keras.layers.StringLookup(vocabulary=COLOURS, output_mode="one_hot")(keras.layers.Reshape((1,))(colour))
    x = keras.layers.Concatenate()([scaled, colour_id])
    units = int(ctx.hparams.get("units", 32))
    x = keras.layers.Dense(units, activation="relu")(x)
    x = keras.layers.Dropout(float(ctx.hparams.get("dropout", 0.1)))(x)
    logits = keras.layers.Dense(ctx.num_classes, dtype="float32", name="logits")(x)
    return keras.Model({"measurements": measurements, "colour": colour}, logits, name="flowers")
