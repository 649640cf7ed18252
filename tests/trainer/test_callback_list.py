"""The run's CallbackList (trainer.callbacks.callback_list): every hook a callback implements is called as tf_keras
calls it, and nothing per step for a callback that has no per-step work, in-process through ``fit``."""

from __future__ import annotations

import numpy as np
import tf_keras as keras

from trainer.callbacks import callback_list

EPOCHS, STEPS = 2, 3


class Ends(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(("end", batch, sorted(logs)))


class LegacyBegins(keras.callbacks.Callback):
    """Only the legacy alias: tf_keras' on_train_batch_begin forwards to it."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_batch_begin(self, batch, logs=None):
        self.seen.append(("begin", batch))


class NoStepWork(keras.callbacks.Callback):
    """Says it has no train-batch hooks (as ModelCheckpoint does when it saves per epoch): never called per step,
    though it defines one; its epoch hook still runs."""

    def __init__(self):
        super().__init__()
        self.steps, self.epochs = 0, []

    def _implements_train_batch_hooks(self):
        return False

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append((epoch, "loss" in logs))


def _fit(callbacks):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((STEPS * 4, 2), "float32"), np.zeros((STEPS * 4, 1), "float32")
    listed = callback_list(keras, callbacks, model=model, epochs=EPOCHS, steps=STEPS)
    return model.fit(x, y, batch_size=4, epochs=EPOCHS, steps_per_epoch=STEPS, callbacks=listed, verbose=0)


def test_each_implemented_step_hook_is_called_at_every_step_in_order():
    ends, begins, quiet = Ends(), LegacyBegins(), NoStepWork()
    history = _fit([quiet, ends, begins])
    assert ends.seen == [("end", b, ["loss"]) for _ in range(EPOCHS) for b in range(STEPS)]
    assert begins.seen == [("begin", b) for _ in range(EPOCHS) for b in range(STEPS)]
    assert quiet.steps == 0 and quiet.epochs == [(0, True), (1, True)]
    # fit's History is there (fit returns it) and the callbacks know the run's parameters
    assert len(history.history["loss"]) == EPOCHS
    assert ends.params == {"verbose": 0, "epochs": EPOCHS, "steps": STEPS}
