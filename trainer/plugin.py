"""Your model and your data in the bundled trainer: the plug-in contract, version 2 (docs/your-code.md): version 1
(a tf_keras model) unchanged, and a Keras 3 model (``import keras``) on ``--backend tensorflow`` or ``jax``.

    python -m trainer.task --code_dir ~/my-project --model model.py:build [--dataset data.py:examples] \\
        [--hp_units 64 --hp_dropout 0.2] --data_dir … --model_dir …

``--model REF`` and ``--dataset REF`` name a function as ``path/to/file.py:NAME`` (relative to ``--code_dir``) or
``package.module:NAME`` (importable from ``--code_dir``). ``--hp_NAME VALUE`` flags are the plug-in's own
hyperparameters (numbers, true/false, or text), handed to both functions and tunable by ``tpuctl tune``.

**A model function** ``build(ctx: ModelContext) -> tf_keras.Model | keras.Model``: the inputs it must accept are
``ctx.inputs`` (one example's features: a name -> ``tf.TensorSpec`` without the batch dimension; name your
``keras.Input`` layers after them), and it returns ``ctx.num_classes`` logits per example. Return it
uncompiled and the trainer compiles it as its own models (Adam on its learning-rate schedule, sparse categorical
cross-entropy on logits, accuracy), so ``--learning_rate``, ``--lr_schedule``, mixed precision and tuning work
as for the built-in models; a model compiled by you keeps your optimizer and loss, and the trainer adds the
accuracy that ``--export best``, early stopping and tuning read. It is built inside the strategy's scope
(every strategy: one device, GPUs, multi-worker, parameter servers, TPU).

**A dataset function** ``examples(ctx: DatasetContext) -> tf.data.Dataset`` (optional: without it the trainer
reads the TFRecords of ``--data_dir``, images or the features its manifest declares): ONE PASS over the split
``ctx.split`` as single examples ``(features, label)``, features a tensor or a dict of tensors with static
shapes, the label an integer class id ``0 .. num_classes - 1``. The trainer does the rest, as for its own data:
it shards the stream among workers, shuffles (seeded by ``--seed``), repeats, batches (``drop_remainder`` for
training; validation counts every example once), and on a resume passes over the examples the backed-up steps
consumed. For that resume to continue exactly where training stopped, the function must give the same
examples in the same order every time it is called (with ``--seed``: seed any randomness of your own from
``ctx.seed``). The number of examples comes from the dataset's cardinality; when it is unknown (a generator,
``filter``) the trainer counts one pass first (at most 50 million examples and 5 minutes: give it its length with
``tf.data.experimental.assert_cardinality``). ``num_classes`` and the class names come from ``--data_dir``'s
manifest, or, with no data folder, from the module attribute ``CLASSES`` next to the dataset function.

Errors in user code — a module that does not import, a function that raises, a wrong return type, outputs that
do not fit the labels, a dataset of the wrong shapes — are one ``error:`` line naming the user's file (and
line, where Python knows it), exit 2.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from trainer import stdio
from trainer.errors import UsageError
from trainer.flags import HPARAM_NAME, PLUGIN_REF, hparam_value, is_plugin_ref

CONTRACT_VERSION = 2

_REF = PLUGIN_REF
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
#: Examples counted when a dataset does not know its size, at most (one pass is read to count them), and for how
#: long: a dataset that says its length (tf.data.experimental.assert_cardinality) is not counted at all.
MAX_COUNTED_EXAMPLES = 50_000_000
MAX_COUNTING_SECONDS = 300.0
#: How long the first examples of a split (those whose labels are checked before training) may take to come.
MAX_FIRST_EXAMPLES_SECONDS = 300.0


__all__ = ["CONTRACT_VERSION", "DatasetContext", "ModelContext", "Plugin", "is_plugin_ref", "load"]


@dataclasses.dataclass(frozen=True)
class ModelContext:
    """What a model function receives."""
    inputs: Mapping[str, Any]              # feature name -> tf.TensorSpec of one example (no batch dimension)
    num_classes: int
    class_names: tuple[str, ...]
    hparams: Mapping[str, Any]             # --hp_NAME values
    image_size: tuple[int, int] | None     # image data: the size images are resized to; else None
    contract: int = CONTRACT_VERSION


@dataclasses.dataclass(frozen=True)
class DatasetContext:
    """What a dataset function receives."""
    split: str                             # "train" or "validation"
    data_dir: str | None                   # --data_dir as given (local or gs://), or None
    seed: int | None                       # --seed
    hparams: Mapping[str, Any]
    num_input_pipelines: int = 1           # the workers reading input (each gets the whole stream; see above)
    input_pipeline_id: int = 0
    contract: int = CONTRACT_VERSION


@dataclasses.dataclass(frozen=True)
class Plugin:
    """A loaded plug-in function and where it is written (for error lines)."""
    ref: str
    function: Callable[..., Any]
    file: str

    @property
    def name(self) -> str:
        return self.ref.rsplit(":", 1)[1]

    def call(self, what: str, ctx: Any) -> Any:
        """``function(ctx)``; anything it raises, an exit included, is one UsageError naming the user's file and line.
        A KeyboardInterrupt goes on: a Ctrl-C, or the code's own (:func:`failure` tells them apart)."""
        try:
            value = self.function(ctx)
        except KeyboardInterrupt as err:
            err.add_note(f"{what} {self.ref}")    # what it interrupted, for failure()
            raise
        except BaseException as err:  # noqa: BLE001 - any failure of user code is reported, one line
            raise UsageError(f"{self.where(err)}: {what} {self.ref} {_what_happened(err)}") from None
        stdio.check(f"{self.file}: {what} {self.ref}")    # before anything is printed to a descriptor it closed
        return value

    def where(self, err: BaseException | None = None) -> str:
        """``file:line`` of the deepest frame of ``err`` in the plug-in's file, else of the traceback its message
        carries (:func:`blame`), else the file."""
        if err is not None:
            frames = [f for f in traceback.extract_tb(err.__traceback__) if _same_file(f.filename, self.file)]
            if frames:
                return f"{self.file}:{frames[-1].lineno}"
            named = [line for file, line in _frames_in_message(_message(err)) if _same_file(file, self.file)]
            if named:
                return f"{self.file}:{named[-1]}"
        return self.file


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a == b


def _what_happened(err: BaseException) -> str:
    """What user code did, as the end of an error line: an exit (which would have ended the run with its status,
    0 included, before training finished), or what it raised. An error whose message carries the traceback of the code
    that failed (Keras' ``in user code:`` for code traced into a compiled function, TensorFlow's op error for a
    ``tf.py_function``) says what that code raised, not the message's first line."""
    if isinstance(err, SystemExit):
        return (f"ended the process (SystemExit: {str(err.code)[:100]}) before training finished; a plug-in returns "
                "its model or dataset and never exits")
    if isinstance(err, KeyboardInterrupt):
        return "raised KeyboardInterrupt, and no Ctrl-C was pressed"
    kind = type(err).__name__ + ("" if isinstance(err, Exception) else " (a BaseException)")
    inner = _raised_in_message(_message(err))
    if inner is None:
        return f"raised {kind}: {_first_line(err)}"
    name = _EXCEPTION_LINE.match(inner)
    if name is None:                       # an op's own words (TensorFlow names the node's line above them)
        return f"raised {kind}: {inner[:300]}"
    if name.group(1).rsplit(".", 1)[-1] == type(err).__name__:
        return f"raised {kind}{inner[name.end(1):][:300]}"
    return f"raised {inner[:300]} (reported as {kind})"


#: A line of a traceback that names a frame: ``File "path", line N, in name``.
_FRAME = re.compile(r'^(?P<indent>\s*)File "(?P<file>[^"\n]+)", line (?P<line>\d+)')
#: The line a traceback ends with: ``ValueError: text``, ``tensorflow.errors.X: text``, ``SystemExit: 0``.
_EXCEPTION_LINE = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning|Iteration))(?::\s|$)")
#: The longest message read for frames (an error's message is a few KiB; a traceback of a deep recursion is more).
_MAX_MESSAGE = 200_000


def _message(err: BaseException) -> str:
    """``err``'s message (a TensorFlow op error's own text), at most _MAX_MESSAGE characters."""
    try:
        text = getattr(err, "message", None)
        text = text if isinstance(text, str) else str(err)
    except Exception:  # noqa: BLE001 - a user's exception whose __str__ raises says nothing
        return ""
    return text[:_MAX_MESSAGE]


def _frames_in_message(text: str) -> list[tuple[str, int]]:
    """The frames a message's embedded traceback names, outermost first."""
    return [(m["file"], int(m["line"])) for m in map(_FRAME.match, text.splitlines()) if m]


def _raised_in_message(text: str) -> str | None:
    """What the traceback embedded in a message ends with: the first line after its last frame (and that frame's
    source line) indented no deeper than the frame; None for a message without one."""
    lines = text.splitlines()
    last = None
    for i, line in enumerate(lines):
        if _FRAME.match(line):
            last = i
    if last is None:
        return None
    depth = len(lines[last]) - len(lines[last].lstrip())
    for line in lines[last + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= depth:
            return " ".join(line.split())
    return None


def _first_line(err: BaseException) -> str:
    text = [line for line in str(err).strip().splitlines() if line.strip()]
    if len(text) > 1 and text[0].startswith("Exception encountered when calling layer"):
        text = text[1:]          # Keras' preamble: the cause is the next line
    line = text[0] if text else ""
    return line[:300] if line else "(no message)"


def parse_hparams(pairs: Mapping[str, str]) -> dict[str, Any]:
    """``--hp_NAME VALUE`` texts -> values: an integer, a number, true/false, else the text."""
    out: dict[str, Any] = {}
    for name, text in pairs.items():
        if not HPARAM_NAME.match(name):
            raise UsageError(f"--hp_{name}: a hyperparameter name is 1-64 lowercase letters, digits and '_', "
                             "starting with a letter")
        if len(text) > 1000 or "\x00" in text:
            raise UsageError(f"--hp_{name}: a value of at most 1000 characters, without NUL")
        out[name] = hparam_value(text)
    return out


def load(ref: str, code_dir: str | None, flag: str) -> Plugin:
    """The function ``ref`` names (see the module docstring), imported from ``code_dir`` (prepended to sys.path)."""
    m = _REF.match(ref or "")
    if not m:
        raise UsageError(f"{flag} {ref!r}: name a function as path/to/file.py:NAME or package.module:NAME")
    where, name = m["where"], m["name"]
    root = os.path.abspath(code_dir) if code_dir else os.getcwd()
    if code_dir is not None and not os.path.isdir(root):
        raise UsageError(f"--code_dir {code_dir} is not a folder")
    if root not in sys.path:
        sys.path.insert(0, root)
    if where.endswith(".py"):
        path = where if os.path.isabs(where) else os.path.join(root, where)
        if not os.path.isfile(path):
            # a FIFO, a device or a folder is there but is no source file (issue 56, a fresh trial: "no file")
            what = "is not a regular file (a FIFO, device or folder)" if os.path.lexists(path) else "does not exist"
            raise UsageError(f"{flag} {ref}: {path} {what}")
        module_name = "tpuctl_plugin_" + re.sub(r"\W", "_", os.path.relpath(path, root))[:-3]
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"{flag} {ref}: {path} cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        _exec(lambda: spec.loader.exec_module(module), path, flag, ref)
        file = path
    else:
        if not _MODULE.match(where):
            raise UsageError(f"{flag} {ref}: {where!r} is neither a .py file nor a module name")
        try:
            found = importlib.util.find_spec(where)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise UsageError(f"{flag} {ref}: no module {where} in --code_dir {root}")
        file = found.origin or where
        module = _exec(lambda: importlib.import_module(where), file, flag, ref)
    function = getattr(module, name, None)
    if not callable(function):
        raise UsageError(f"{file}: {flag} {ref}: the module has no function {name}")
    return Plugin(ref, function, os.path.abspath(file) if os.path.exists(file) else file)


def _exec(run: Callable[[], Any], file: str, flag: str, ref: str) -> Any:
    _LOADED.add(os.path.abspath(file))
    try:
        module = run()
    except SyntaxError as err:
        raise UsageError(f"{err.filename or file}:{err.lineno}: {flag} {ref} does not compile: {err.msg}") from None
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # noqa: BLE001 - importing user code may raise anything, or exit
        frames = [f for f in traceback.extract_tb(err.__traceback__) if _same_file(f.filename, file)]
        at = f"{file}:{frames[-1].lineno}" if frames else file
        raise UsageError(f"{at}: importing {flag} {ref} {_what_happened(err)}") from None
    stdio.check(f"{file}: importing {flag} {ref}")
    return module


def failure(err: BaseException, *, signalled: bool) -> UsageError | None:
    """The one line for ``err``, which ended a run, when the user's code is to blame (None: it is not).

    Nothing of the trainer exits or raises a BaseException while it trains, so an exit (``sys.exit(0)`` would end
    the run with status 0, as if it had finished), a KeyboardInterrupt without a Ctrl-C (``signalled``: one was
    received) and any other BaseException are the plug-in's, wherever they were raised: in its module, its functions,
    or the model's own ``call``/``train_step`` while training. An Exception is the user's when it was raised in a
    plug-in's file (its deepest frame there is named)."""
    if isinstance(err, KeyboardInterrupt) and signalled:
        return None
    at = blame(err)
    if isinstance(err, Exception) and at is None:
        return None
    doing = (getattr(err, "__notes__", None) or [""])[-1]
    return UsageError(f"{at or 'your code (--model/--dataset)'}: {doing + ' ' if doing else ''}{_what_happened(err)}")


def blame(err: BaseException) -> str | None:
    """``file:line`` of the deepest frame in a plug-in file this process loaded of ``err``'s traceback, else of the
    traceback its message carries, or None. Code traced into a compiled function (a loss, a ``train_step``: Keras'
    ``in user code:`` errors) runs as AutoGraph's generated copy, and a ``tf.py_function`` inside a step fails as a
    TensorFlow op error: either names the user's frames in its message only."""
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(err.__traceback__)]
    loaded: dict[str, bool] = {}        # each file name looked up once (a deep recursion names one file many times)
    for found in (frames, _frames_in_message(_message(err))):
        for file, _ in found:
            if file not in loaded:
                loaded[file] = any(_same_file(file, one) for one in _LOADED)
        mine = [(file, line) for file, line in found if loaded[file]]
        if mine:
            return f"{mine[-1][0]}:{mine[-1][1]}"
    return None


#: The plug-in files this process imported (for :func:`blame`).
_LOADED: set[str] = set()


def module_attribute(plugin: Plugin, name: str) -> Any:
    """An attribute of the plug-in's module (e.g. ``CLASSES``), or None."""
    module = sys.modules.get(getattr(plugin.function, "__module__", "") or "")
    return getattr(module, name, None) if module is not None else None


# ---------------------------------------------------------------------------------------------- checks
def check_model(plugin: Plugin, model: Any, ctx: ModelContext, *, named: bool, backend: str = "tensorflow") -> Any:
    """A tf_keras Model (contract v1, ``--backend tensorflow``) or a Keras 3 Model (contract v2, either backend) whose
    inputs are among the data's features (``named``: the data's features are a dict, so its inputs must be named after
    them), with weights to train, and whose outputs fit the classes."""
    from trainer.backends import is_keras3_model

    v2 = is_keras3_model(model)
    if not v2:
        import tf_keras as keras

        if not isinstance(model, keras.Model):
            kind = type(model).__module__ + "." + type(model).__name__
            raise UsageError(f"{plugin.file}: --model {plugin.ref} returned {kind}, not a tf_keras Model or a Keras 3 "
                             "Model")
        if backend == "jax":
            raise UsageError(f"{plugin.file}: --model {plugin.ref} returned a tf_keras model; --backend jax trains Keras "
                             "3 models: build it with `import keras` (docs/your-code.md), or drop --backend jax")
    names = keras3_input_names(model) if v2 else list(getattr(model, "input_names", None) or [])
    features = list(ctx.inputs)
    missing = [n for n in names if n not in ctx.inputs] if named else []
    if missing or not named and len(names) > 1:
        raise UsageError(f"{plugin.file}: --model {plugin.ref} takes inputs {missing or names} the data does not "
                         f"have (its features: {', '.join(features)}); name the keras.Input layers after them")
    if not v2 and not model.built:
        # A subclassed tf_keras model has no weights until it is called: call it now on the data's inputs (symbolic,
        # nothing computed), so its weights exist before training (the preemption backup restores into them), its
        # outputs can be checked, and a model that cannot be called or has nothing to train is one line, not a
        # traceback. (A Keras 3 model is built on the data's features by the Keras 3 engine: trainer.keras3.)
        import tensorflow as tf

        inputs = {n: keras.Input(shape=s.shape, dtype=s.dtype, name=n) for n, s in ctx.inputs.items()}
        try:
            outputs = tf.nest.flatten(model(inputs if named else next(iter(inputs.values()))))
        except KeyboardInterrupt as err:
            err.add_note(f"--model {plugin.ref}: calling its model")
            raise
        except BaseException as err:  # noqa: BLE001 - the user's model: any failure is one line
            raise UsageError(f"{plugin.where(err)}: --model {plugin.ref}: calling its model on the data's inputs "
                             f"{_what_happened(err)}") from None
        stdio.check(f"{plugin.file}: --model {plugin.ref}: calling its model")
        # as output_shape has it: one output's shape, or a list of them
        shape = tuple(outputs[0].shape) if len(outputs) == 1 else [tuple(o.shape) for o in outputs]
    else:
        try:
            shape = model.output_shape
        except (AttributeError, RuntimeError, ValueError):   # not built yet (Keras 3: built on the data's features later)
            shape = None
    if getattr(model, "built", False) and not model.trainable_weights:
        raise UsageError(f"{plugin.file}: --model {plugin.ref} returned a model with no trainable weights: nothing to "
                         f"train; give it layers that learn (e.g. end it with Dense({ctx.num_classes}))")
    if isinstance(shape, list):
        raise UsageError(f"{plugin.file}: --model {plugin.ref} has {len(shape)} outputs; the trainer trains one: "
                         f"{ctx.num_classes} logits per example")
    if shape is not None and shape[-1] != ctx.num_classes:
        raise UsageError(f"{plugin.file}: --model {plugin.ref} outputs {shape[-1]} value(s) per example but the data "
                         f"has {ctx.num_classes} classes; end the model with Dense({ctx.num_classes}) (logits)")
    return model


def keras3_input_names(model: Any) -> list[str]:
    """A Keras 3 model's input names (its ``keras.Input`` layers'); [] for a model not built yet."""
    try:
        return [t.name for t in model.inputs or []]
    except (AttributeError, ValueError):
        return []


def check_examples(plugin: Plugin, ds: Any, split: str, inputs: Mapping[str, Any] | None) -> Any:
    """A dataset of single ``(features, label)`` examples with static shapes (and, for validation, the features the
    training split has)."""
    import tensorflow as tf

    if not isinstance(ds, tf.data.Dataset):
        raise UsageError(f"{plugin.file}: --dataset {plugin.ref} returned {type(ds).__name__} for split {split}, "
                         "not a tf.data.Dataset")
    spec = ds.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise UsageError(f"{plugin.file}: --dataset {plugin.ref} ({split}) must yield (features, label) pairs, "
                         f"got elements {_describe(spec)}")
    features, label = spec
    if not isinstance(label, tf.TensorSpec) or label.shape.rank != 0 or not label.dtype.is_integer:
        raise UsageError(f"{plugin.file}: --dataset {plugin.ref} ({split}): the label must be one integer class id "
                         f"per example (a scalar), got {_describe(label)} (unbatched examples: do not batch)")
    flat = features.items() if isinstance(features, dict) else [("features", features)]
    for name, s in flat:
        if not isinstance(s, tf.TensorSpec):
            raise UsageError(f"{plugin.file}: --dataset {plugin.ref} ({split}): feature {name} is {_describe(s)}, "
                             "not a dense tensor")
        if not s.shape.is_fully_defined():
            raise UsageError(f"{plugin.file}: --dataset {plugin.ref} ({split}): feature {name} has shape {s.shape}; "
                             "every feature needs a static shape (pad or resize in the function)")
    if inputs is not None and feature_specs(features) != dict(inputs):
        raise UsageError(f"{plugin.file}: --dataset {plugin.ref}: the {split} split's features "
                         f"{_describe(features)} differ from the train split's {dict(inputs)}")
    return ds


def feature_specs(features: Any) -> dict[str, Any]:
    """name -> TensorSpec of one example's features (a single tensor is named ``features``)."""
    return dict(features) if isinstance(features, dict) else {"features": features}


def _describe(spec: Any) -> str:
    text = repr(spec)
    return text if len(text) <= 200 else text[:197] + "..."
