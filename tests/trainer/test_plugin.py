"""Your model and your data in the bundled trainer (issue 41; trainer.plugin, docs/your-code.md): a model and a
dataset written here, in a temporary folder outside the checkout, train on one process, two workers and parameter
servers, export a signature of their own inputs, resume a killed run with the batches where it stopped, and each
kind of broken plug-in is one line naming the user's file, exit 2, nothing written."""

from __future__ import annotations

import contextlib
import json
import os
import sys

import pytest

from procfixtures import Watched

MODEL = '''
import tf_keras as keras


def build(ctx):
    """Two named inputs, like a table with a text column; hparams from --hp_units."""
    amount = keras.Input(shape=ctx.inputs["amount"].shape, name="amount")
    kind = keras.Input(shape=(), dtype="string", name="kind")
    kind_id = keras.layers.StringLookup(vocabulary=["a", "b", "c"], output_mode="one_hot")(
        keras.layers.Reshape((1,))(kind))
    x = keras.layers.Concatenate()([amount, kind_id])
    x = keras.layers.Dense(int(ctx.hparams.get("units", 8)), activation="relu")(x)
    return keras.Model({"amount": amount, "kind": kind}, keras.layers.Dense(ctx.num_classes)(x), name="ledger")
'''

DATASET = '''
import numpy as np
import tensorflow as tf

CLASSES = ["small", "large"]


def examples(ctx):
    """One pass, the same examples in the same order at every call (generated from a fixed seed)."""
    n = 480 if ctx.split == "train" else 70
    rng = np.random.default_rng(11 if ctx.split == "train" else 12)
    amount = rng.normal(size=(n, 2)).astype("float32")
    kind = rng.choice(np.array(["a", "b", "c"]), size=n)
    label = ((amount[:, 0] + (kind == "c")) > 0.5).astype("int64")
    return tf.data.Dataset.from_tensor_slices(({"amount": amount, "kind": kind}, label))


def generated(ctx):
    """The same examples from a Python generator."""
    def gen():
        for features, label in examples(ctx).as_numpy_iterator():
            yield features, label
    return tf.data.Dataset.from_generator(gen, output_signature=examples(ctx).element_spec)
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A user's project folder outside the checkout: model.py and data.py."""
    folder = tmp_path_factory.mktemp("user-project")
    (folder / "model.py").write_text(MODEL)
    (folder / "data.py").write_text(DATASET)
    return folder


def _flags(project, model_dir, *extra):
    return ["--code_dir", str(project), "--model", "model.py:build", "--dataset", "data.py:examples",
            "--model_dir", str(model_dir), "--train_epochs", "2", "--train_batch_size", "16", "--seed", "5",
            "--hp_units", "12", *extra]


def _serve(export_dir):
    import tensorflow as tf

    serve = tf.saved_model.load(str(export_dir)).signatures["serving_default"]
    return serve, serve(amount=tf.constant([[2.0, 0.0], [-2.0, 0.0]]), kind=tf.constant(["c", "a"]))


def test_a_plugin_trains_exports_its_own_inputs_and_counts_validation_exactly(tools, project, tmp_path):
    run = tools.run_module(["trainer.task", *_flags(project, tmp_path / "m")])
    result = run.result
    assert result["model"] == "model.py:build" and result["source"] == "dataset data.py:examples"
    assert result["train_examples"] == 480 and result["validation_examples"] == 70
    assert abs(result["val_accuracy"] * 70 - round(result["val_accuracy"] * 70)) < 1e-4
    assert "features=amount,kind" in run.stdout
    serve, out = _serve(result["export_dir"])
    assert set(serve.structured_input_signature[1]) == {"amount", "kind"}
    assert {n.decode() for n in out["class_name"].numpy()} <= {"small", "large"}    # the module's CLASSES
    assert out["probabilities"].shape == (2, 2)
    # named after the model (keras.Model(..., name="ledger")), not the function (every project's is `build`)
    assert result["export_dir"].endswith("/export/ledger/1") and result["export_name"] == "ledger"



def test_a_plugin_trains_in_mixed_precision_and_serves_float32(tools, project, tmp_path):
    """--mixed_precision bfloat16 (what TPUs default to) applies to the plug-in's model as to the built-in ones: its
    layers are built under the policy, and the export still answers float32 probabilities a client can read."""
    import tensorflow as tf

    run = tools.run_module(["trainer.task", *_flags(project, tmp_path / "m", "--train_epochs", "1",
                                                     "--steps_per_epoch", "5", "--mixed_precision", "bfloat16",
                                                     "--export_name", "ledger-run.2")])
    result = run.result
    assert result["export_dir"].endswith("/export/ledger-run.2/1")      # the name asked for (tpuctl: the run's)
    assert result["mixed_precision"] == "bfloat16" and "mixed_precision=bfloat16" in run.stdout
    serve, out = _serve(result["export_dir"])
    # the user's layers computed in bfloat16 (casts to it in the served graph; none without the flag: a plain
    # run's export has no bfloat16 at all), the answer is float32
    assert "DT_BFLOAT16" in str(serve.graph.as_graph_def())
    assert serve.structured_outputs["probabilities"].dtype == tf.float32
    assert out["probabilities"].shape == (2, 2)
    assert abs(float(tf.reduce_sum(out["probabilities"][0])) - 1.0) < 1e-3

@pytest.mark.slow
@pytest.mark.parametrize("layout", ["multi_worker", "parameter_server"])
def test_a_plugin_trains_on_a_cluster(tools, project, tmp_path, layout):
    """Two workers (MultiWorkerMirrored), or a coordinator, two workers and a parameter server."""
    ports = [tools.free_port() for _ in range(4)]
    if layout == "multi_worker":
        cluster = {"worker": [f"127.0.0.1:{p}" for p in ports[:2]]}
        tasks = [("worker", 0), ("worker", 1)]
    else:
        cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:3]],
                   "ps": [f"127.0.0.1:{ports[3]}"]}
        tasks = [("ps", 0), ("worker", 0), ("worker", 1), ("chief", 0)]
    args = _flags(project, tmp_path / "m", "--distribution_strategy", layout, "--steps_per_epoch", "10")
    with contextlib.ExitStack() as stack:
        procs = {}
        for task_type, index in tasks:
            env = tools.env({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}}),
                             "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"})
            procs[(task_type, index)] = stack.enter_context(
                Watched([sys.executable, "-m", "trainer.task", *args], cwd=tools.REPO, env=env))
        lead = procs[("worker", 0) if layout == "multi_worker" else ("chief", 0)]
        assert lead.finish(timeout=300) == 0, lead.tail()
        if layout == "multi_worker":
            assert procs[("worker", 1)].finish(timeout=120) == 0, procs[("worker", 1)].tail()
        if layout == "parameter_server":
            # Issue 57: a dataset of Python code (from_generator) hung such a cluster at an epoch's end (the workers'
            # steps called back into the coordinator, whose checkpoint then waited for good); the coordinator refuses
            # it in one line before training (a second coordinator, on the same workers and ps)
            env = tools.env({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}}),
                             "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"})
            generated = stack.enter_context(Watched(
                [sys.executable, "-m", "trainer.task", *_flags(project, tmp_path / "g", "--distribution_strategy",
                                                                 layout), "--dataset", "data.py:generated"],
                cwd=tools.REPO, env=env, stderr=True))
            assert generated.finish(timeout=300) == 2, generated.tail()
            [line] = [line for line in generated.err if line.startswith("error: ")]
            assert "data.py" in line and "from_generator" in line and "parameter servers" in line, line
            assert not (tmp_path / "g").exists()
    result = json.loads(lead.out[-1][len(tools.RESULT_PREFIX):])
    assert result["strategy"] == layout and result["num_workers"] == 2
    assert result["validation_exact"] is (layout == "multi_worker")
    _, out = _serve(result["export_dir"])
    assert out["probabilities"].shape == (2, 2)


def test_a_killed_plugin_run_resumes_with_the_batches_where_it_stopped(tools, project, tmp_path):
    """Killed mid-epoch (SIGKILL) with step backups, the resumed run trains the batches an uninterrupted run trains
    after its backup: the plug-in's examples are passed over by the trainer as its own records are."""
    def flags(folder):
        return _flags(project, tmp_path / folder, "--steps_per_epoch", "20", "--backup_every_steps", "4")

    def log(folder):
        return {"TPUCTL_TRAINER_TEST_LOG_BATCHES": str(tmp_path / "batches" / folder)}

    tools.killed_at_step(["trainer.task", *flags("resumed")], step=11, epoch="2/2", env=log("killed"))
    resumed = tools.run_module(["trainer.task", *flags("resumed")], env=log("resumed"))
    assert resumed.result["epochs"] == 2
    assert any(line.startswith("resuming: ") for line in resumed.stdout_lines)
    tools.run_module(["trainer.task", *flags("whole")], env=log("whole"))

    def batches(folder):
        return tools.logged_batches(tmp_path / "batches" / folder / "batches-chief-0.txt")

    killed, continued, whole = batches("killed"), batches("resumed"), batches("whole")
    first = min(continued)
    assert 20 < first < 40 and first % 4 == 0, first          # a backup in epoch 2, not its start
    assert {**{s: killed[s] for s in range(first)}, **continued} == whole


@pytest.mark.parametrize("source, flags, names", [
    ("", ["--model", "missing.py:build"], ["missing.py", "does not exist"]),
    ("def build(ctx):\n    return 1 / 0\n", ["--model", "bad.py:build"], ["bad.py:2", "ZeroDivisionError"]),
    ("def build(ctx):\n    return 'a model'\n", ["--model", "bad.py:build"], ["bad.py", "not a tf_keras Model"]),
    ("import tf_keras as keras\n\ndef build(ctx):\n    x = keras.Input(shape=(2,), name='amount')\n"
     "    k = keras.Input(shape=(), dtype='string', name='kind')\n"
     "    return keras.Model({'amount': x, 'kind': k}, keras.layers.Dense(7)(x))\n",
     ["--model", "bad.py:build"], ["bad.py", "7 value(s)", "2 classes"]),
    ("def build(ctx:\n    pass\n", ["--model", "bad.py:build"], ["bad.py:1", "does not compile"]),
    ("import tensorflow as tf\nCLASSES = ['a', 'b']\n\ndef examples(ctx):\n"
     "    return tf.data.Dataset.from_tensor_slices(([[1.0], [2.0]], [0, 1])).batch(2)\n",
     ["--dataset", "bad.py:examples", "--model", "model.py:build"], ["bad.py", "the label must be one integer"]),
    ("import tensorflow as tf\nCLASSES = ['a', 'b']\n\ndef examples(ctx):\n"
     "    return tf.data.Dataset.from_tensor_slices(({'amount': [[1.0, 0.0]], 'kind': ['a']}, [5]))\n",
     ["--dataset", "bad.py:examples", "--model", "model.py:build"], ["bad.py", "label 5", "0..1"]),
    ("import tensorflow as tf\nCLASSES = ['a', 'b']\n\ndef examples(ctx):\n"      # every label -1 (a fresh trial)
     "    return tf.data.Dataset.from_tensor_slices(({'amount': [[1.0, 0.0]] * 3, 'kind': ['a'] * 3}, [-1] * 3))\n",
     ["--dataset", "bad.py:examples", "--model", "model.py:build"], ["bad.py", "label -1", "0..1"]),
    # issue 56: code that ends the process (status 0 too: the run said it had finished) or raises a BaseException
    ("import sys\nsys.exit(0)\n\ndef build(ctx):\n    pass\n", ["--model", "bad.py:build"],
     ["bad.py:2", "importing --model", "SystemExit: 0"]),
    ("import sys\n\ndef build(ctx):\n    sys.exit(0)\n", ["--model", "bad.py:build"], ["bad.py:4", "SystemExit: 0"]),
    ("import sys\nCLASSES = ['a', 'b']\n\ndef examples(ctx):\n    exit()\n",
     ["--dataset", "bad.py:examples", "--model", "model.py:build"], ["bad.py:5", "--dataset", "SystemExit"]),
    ("import sys\nimport tensorflow as tf\nCLASSES = ['a', 'b']\n\ndef examples(ctx):\n    def gen():\n"
     "        yield [1.0], 0\n        sys.exit(0)\n    return tf.data.Dataset.from_generator(gen, output_signature=("
     "tf.TensorSpec([1], tf.float32), tf.TensorSpec([], tf.int64)))\n",
     ["--dataset", "bad.py:examples", "--model", "model.py:build"], ["bad.py", "failed: SystemExit: 0"]),
    ("def build(ctx):\n    raise KeyboardInterrupt\n", ["--model", "bad.py:build"],
     ["bad.py:2", "--model bad.py:build", "KeyboardInterrupt, and no Ctrl-C"]),
    ("class Stop(BaseException):\n    pass\n\ndef build(ctx):\n    raise Stop('enough')\n", ["--model", "bad.py:build"],
     ["bad.py:5", "Stop (a BaseException): enough"]),
    ("import sys\nimport tf_keras as keras\n\nclass Quits(keras.Model):\n    def call(self, x):\n        sys.exit(0)\n\n"
     "def build(ctx):\n    return Quits()\n", ["--model", "bad.py:build"], ["bad.py", "calling its model", "SystemExit"]),
    ("import tf_keras as keras\n\nclass Empty(keras.Model):\n    pass\n\ndef build(ctx):\n    return Empty()\n",
     ["--model", "bad.py:build"], ["bad.py", "calling its model", "Unimplemented"]),
    ("import tf_keras as keras\n\nclass Same(keras.Model):\n    def call(self, x):\n        return x['amount']\n\n"
     "def build(ctx):\n    return Same()\n", ["--model", "bad.py:build"], ["bad.py", "no trainable weights"]),
], ids=["missing-file", "raises", "not-a-model", "outputs-do-not-fit", "syntax-error", "batched-dataset",
        "label-out-of-range", "every-label-negative", "exits-at-import", "exits-in-the-model-function", "exits-in-the-dataset-function",
        "exits-in-a-generator", "keyboard-interrupt", "base-exception", "exits-when-called", "empty-subclass",
        "nothing-to-train"])
def test_a_broken_plugin_is_one_line_naming_the_users_file(in_process, project, tmp_path, source, flags, names):
    code = tmp_path / "code"
    code.mkdir()
    (code / "model.py").write_text((project / "model.py").read_text())
    (code / "data.py").write_text((project / "data.py").read_text())
    if source:
        (code / "bad.py").write_text(source)
    dataset = [] if "--dataset" in flags else ["--dataset", "data.py:examples"]
    model_dir = tmp_path / "m"
    run = in_process(["trainer.task", "--code_dir", str(code), *dataset, *flags, "--model_dir", str(model_dir),
                      "--train_epochs", "1"])
    assert run.returncode == 2, run.stderr[-2000:]
    line = run.error_line()
    assert line.startswith("error: ") and all(n in line for n in names), line
    assert str(code) in line or "missing.py" in line
    assert not model_dir.exists()                              # nothing written


def test_a_plugin_file_that_is_no_regular_file_is_said_so(in_process, project, tmp_path):
    """Issue 56 (a fresh trial): a FIFO named by --model was "no file"; it is there, and is no source file."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "data.py").write_text((project / "data.py").read_text())
    os.mkfifo(code / "fifo.py")
    run = in_process(["trainer.task", "--code_dir", str(code), "--model", "fifo.py:build", "--dataset",
                      "data.py:examples", "--model_dir", str(tmp_path / "m"), "--train_epochs", "1"])
    assert run.returncode == 2 and "fifo.py is not a regular file" in run.error_line(), run.stderr[-2000:]
    assert not (tmp_path / "m").exists()


def test_plugin_contract_text_is_where_users_read_it(tools):
    """docs/your-code.md states the contract version the trainer implements."""
    from trainer import plugin

    text = (tools.REPO / "docs" / "your-code.md").read_text()
    assert f"contract version {plugin.CONTRACT_VERSION}" in text.lower()


def _run_model(in_process, project, tmp_path, extra_source: str, ref: str, *flags: str):
    """One short in-process run of the project's dataset with ``MODEL`` plus ``extra_source``'s function ``ref``:
    (the run, its model folder)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "data.py").write_text((project / "data.py").read_text())
    (code / "model.py").write_text(MODEL + "\n\n" + extra_source)
    model_dir = tmp_path / "m"
    return in_process(["trainer.task", "--code_dir", str(code), "--model", ref, "--dataset", "data.py:examples",
                       "--model_dir", str(model_dir), "--train_epochs", "1", "--steps_per_epoch", "2",
                       *flags]), model_dir


def test_code_that_exits_while_training_ends_the_run_in_one_line_without_a_result(in_process, project, tmp_path):
    """Issue 56: a model whose own training step ends the process (sys.exit(0): the run used to end with status 0, as
    if it had trained) is one line naming the line that exited, exit 2, and no completion record: no result.json, no
    tpuctl-result line."""
    run, model_dir = _run_model(in_process, project, tmp_path,
                                "class Quits(keras.Model):\n    def train_step(self, data):\n"
                                "        import sys\n        sys.exit(0)\n\n\ndef quits(ctx):\n"
                                "    inner = build(ctx)\n    return Quits(inner.inputs, inner.outputs)\n", "model.py:quits")
    assert run.returncode == 2, run.stderr[-2000:]
    line = run.error_line()
    assert "model.py:" in line and "SystemExit: 0" in line and "Traceback" not in run.stderr, line
    assert not (model_dir / "result.json").exists() and "tpuctl-result" not in run.stdout


TRACED_FAILURES = {
    # a compiled loss that raises: AutoGraph runs a generated copy, the user's file is in the error's message only
    "loss-raises": ("def bad_loss(ctx):\n    model = build(ctx)\n\n    def loss(y, p):\n"
                    "        raise RuntimeError('bad loss')  # <- here\n\n"
                    "    model.compile(optimizer='adam', loss=loss)\n    return model\n", "model.py:bad_loss", [],
                    "RuntimeError: bad loss"),
    # a tf.py_function in the training step that exits: a TensorFlow op error whose message holds its traceback
    "py-function-exits": ("class PyExit(keras.Model):\n    def train_step(self, data):\n        import tensorflow as tf\n\n"
                          "        def leave():\n            raise SystemExit(0)  # <- here\n\n"
                          "        tf.py_function(leave, [], [])\n        return super().train_step(data)\n\n\n"
                          "def py_exit(ctx):\n    inner = build(ctx)\n    return PyExit(inner.inputs, inner.outputs)\n",
                          "model.py:py_exit", [], "SystemExit: 0"),
    # a Keras loss object called by the user's loss under a strategy: Keras refuses its reduction (a ValueError)
    "keras-refuses-the-loss": ("def wrapped(ctx):\n    model = build(ctx)\n"
                               "    base = keras.losses.SparseCategoricalCrossentropy(from_logits=True)\n\n"
                               "    def loss(y, p):\n        return base(y, p)  # <- here\n\n"
                               "    model.compile(optimizer='adam', loss=loss)\n    return model\n", "model.py:wrapped",
                               ["--distribution_strategy", "one_device"], "ValueError: Please use"),
}


@pytest.mark.parametrize("case", list(TRACED_FAILURES))
def test_an_error_of_user_code_traced_into_training_is_one_line_naming_its_line(in_process, project, tmp_path, case):
    """Issue 56 (a trial): an error raised by the user's code inside fit, in the compiled train function, was a
    traceback: its frames are AutoGraph's generated copy of the code, or a TensorFlow op error's message. Now one line
    naming the user's file and line and what was raised, exit 2, no result."""
    source, ref, flags, raised = TRACED_FAILURES[case]
    run, model_dir = _run_model(in_process, project, tmp_path, source, ref, *flags)
    assert run.returncode == 2, run.stderr[-3000:]
    line = run.error_line()
    at = (MODEL + "\n\n" + source).splitlines().index(next(t for t in source.splitlines() if "# <- here" in t)) + 1
    assert f"{tmp_path / 'code' / 'model.py'}:{at}: " in line and raised in line, line
    assert "Traceback" not in run.stderr and not (model_dir / "result.json").exists()


def test_a_plugin_that_closes_standard_output_is_one_line(tools, project, tmp_path):
    """Issue 56 (a trial): a model function that closed descriptor 1 (where the trainer prints its lines and its
    completion record) ended the run in an OSError traceback (Bad file descriptor) when the result was printed, and
    the trainer's lines went to whatever file took descriptor 1 meanwhile. Now one line naming the plug-in and what it
    did, exit 2, before anything is written."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "data.py").write_text(DATASET)
    (code / "model.py").write_text(MODEL + "\n\ndef closes(ctx):\n    import os\n    os.close(1)\n"
                                   "    return build(ctx)\n")
    run = tools.run_module(["trainer.task", "--code_dir", str(code), "--model", "model.py:closes", "--dataset",
                            "data.py:examples", "--model_dir", str(tmp_path / "m"), "--train_epochs", "1"])
    assert run.returncode == 2, run.stderr[-3000:]
    line = run.error_line()
    assert str(code / "model.py") in line and "closed the trainer's standard output" in line, line
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr[-3000:]
    assert not (tmp_path / "m").exists()


def test_a_reader_of_standard_output_that_went_away_is_one_line(project, tmp_path, monkeypatch):
    """A broken pipe (the process reading the trainer's lines went away) was a BrokenPipeError traceback: now one line
    saying so, exit 141 (a process SIGPIPE ends has that status), no result. In this process: the trainer's standard
    output is a stream whose every write fails as a pipe without a reader does."""
    import errno
    import io

    from trainer import task
    from trainer.errors import EXIT_OUTPUT_LOST

    class Gone(io.TextIOBase):
        def writable(self):
            return True

        def write(self, text):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    for key in ("TF_CONFIG", "TPU_NAME", "AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"):
        monkeypatch.delenv(key, raising=False)
    err = io.StringIO()
    with contextlib.redirect_stdout(Gone()), contextlib.redirect_stderr(err):
        code = task.main(["--code_dir", str(project), "--model", "model.py:build", "--dataset", "data.py:examples",
                          "--model_dir", str(tmp_path / "m"), "--train_epochs", "1"])
    assert code == EXIT_OUTPUT_LOST == 141, err.getvalue()[-3000:]
    lines = [line for line in err.getvalue().splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "broken pipe" in lines[0] and "Traceback" not in err.getvalue(), err.getvalue()[-3000:]
    assert not (tmp_path / "m" / "result.json").exists()


def test_a_model_whose_fit_trains_no_step_is_one_line_and_nothing_is_exported(in_process, project, tmp_path):
    """Issue 56 (a fresh trial): a plug-in that replaced Model.fit with a function returning a made-up history had
    its model exported as the best at 0.99, exit 0, with 0 steps in its record. The run must have trained."""
    run, model_dir = _run_model(in_process, project, tmp_path,
                                "def lazy(ctx):\n    model = build(ctx)\n\n"
                                "    def fit(*args, **kwargs):\n        history = keras.callbacks.History()\n"
                                "        history.set_model(model)\n        history.epoch = [0]\n"
                                "        history.history = {'loss': [0.01], 'accuracy': [0.99], 'val_loss': [0.01],"
                                " 'val_accuracy': [0.99]}\n        return history\n\n"
                                "    model.fit = fit\n    return model\n", "model.py:lazy")
    assert run.returncode == 2, run.stderr[-2000:]
    assert "trained no step" in run.error_line() and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert not (model_dir / "result.json").exists() and not (model_dir / "export").exists()


@pytest.mark.parametrize("bound, value, says", [
    ("MAX_COUNTING_SECONDS", 0.5, "passed 0.5 s"),
    ("MAX_COUNTED_EXAMPLES", 20_000, "passed 20,000 examples"),
])
def test_a_dataset_of_unknown_length_is_counted_within_bounds_that_say_how_to_lift_them(in_process, project, tmp_path,
                                                                                         monkeypatch, bound, value, says):
    """Issue 56: a dataset whose length tf.data does not know was counted up to 50 million examples (hours) before any
    message; the count is bounded in examples and in time (5 minutes; lowered here), a note says what is going on, and
    each bound is one line saying how to give the dataset its length."""
    from trainer import data, plugin

    code = tmp_path / "code"
    code.mkdir()
    (code / "model.py").write_text(MODEL)
    (code / "data.py").write_text(DATASET + "\n\ndef endless(ctx):\n    base = examples(ctx).repeat()\n"
                                  "    return base.take(10**12).filter(lambda x, y: y >= 0)\n")
    monkeypatch.setattr(plugin, bound, value)
    monkeypatch.setattr(data, "COUNT_NOTE_SECONDS", 0.0)
    run = in_process(["trainer.task", "--code_dir", str(code), "--model", "model.py:build", "--dataset",
                      "data.py:endless", "--model_dir", str(tmp_path / "m"), "--train_epochs", "1"])
    assert run.returncode == 2, run.stderr[-2000:]
    line = run.error_line()
    assert "data.py" in line and "train split" in line and says in line, line
    assert "tf.data.experimental.assert_cardinality(N)" in line, line
    assert "note: counting the examples of " in run.stderr and not (tmp_path / "m").exists()


@pytest.mark.parametrize("split", ["validation", "train"])
def test_a_split_too_long_for_the_trainer_is_one_line(in_process, tmp_path, split):
    """Issue 56 (a fresh trial): a validation split whose length tf.data knows and which is far too long to read at
    every epoch's end (10**15 examples) was trusted, and the run printed nothing, for good; a train split that said so
    (tf.data.experimental.assert_cardinality) made one epoch take years. Each is refused by what it says, before a
    read: one line naming the file and what to do, exit 2, nothing written."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "model.py").write_text(MODEL)
    (code / "data.py").write_text(DATASET + f"\n\ndef huge(ctx):\n    if ctx.split != {split!r}:\n"
                                  "        return examples(ctx)\n    one = next(iter(examples(ctx)))\n"
                                  "    return tf.data.Dataset.range(10**15).map(lambda i: one)\n")
    run = in_process(["trainer.task", "--code_dir", str(code), "--model", "model.py:build", "--dataset",
                      "data.py:huge", "--model_dir", str(tmp_path / "m"), "--train_epochs", "1"])
    assert run.returncode == 2, run.stderr[-2000:]
    line = run.error_line()
    assert "data.py" in line and f"{split} split" in line and "1,000,000,000,000,000 examples" in line, line
    assert ".take(N)" in line and not (tmp_path / "m").exists(), line


def test_a_dataset_whose_first_example_never_comes_is_one_line_within_a_deadline(in_process, tmp_path, monkeypatch):
    """Issue 56 (a trial): a dataset whose generator never gave its first example kept the trainer waiting without
    bound. Its first examples are waited for at most MAX_FIRST_EXAMPLES_SECONDS (5 minutes; 1 s here): one line
    naming the file and the split, exit 2, nothing written. (The generator waits for the test to let it go.)"""
    import time

    from trainer import plugin

    code = tmp_path / "code"
    code.mkdir()
    (code / "model.py").write_text(MODEL)
    (code / "stalls.py").write_text(DATASET + "\n\nimport threading\n\nGO = threading.Event()\n\n\n"
                                    "def stalls(ctx):\n    def gen():\n        GO.wait(120)\n"
                                    "        yield from examples(ctx).as_numpy_iterator()\n"
                                    "    return tf.data.Dataset.from_generator(gen, output_signature="
                                    "examples(ctx).element_spec)\n")
    monkeypatch.setattr(plugin, "MAX_FIRST_EXAMPLES_SECONDS", 1.0)
    started = time.monotonic()
    try:
        run = in_process(["trainer.task", "--code_dir", str(code), "--model", "model.py:build", "--dataset",
                          "stalls.py:stalls", "--model_dir", str(tmp_path / "m"), "--train_epochs", "1"])
    finally:
        stalled = sys.modules.get("tpuctl_plugin_stalls")
        if stalled is not None:
            stalled.GO.set()                  # the stalled read ends (the run did not wait for it)
    assert run.returncode == 2, run.stderr[-2000:]
    line = run.error_line()
    assert str(code / "stalls.py") in line and "train split" in line and "within 1 s" in line, line
    assert time.monotonic() - started < 60 and not (tmp_path / "m").exists()


def test_a_dataset_that_blocks_mid_training_ends_the_run_with_one_line(tools, tmp_path):
    """Issue 56 (a sixth trial): a dataset whose generator blocked after its first examples (past the first-examples
    deadline) kept the trainer waiting for good, nothing said. A training step that has not ended --max_step_seconds
    after it started (900 by default; 10 here) ends the run: one line naming the bound, exit 2, no result. A real
    process: the watch ends it from a thread (a step blocked inside TensorFlow cannot be interrupted)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "model.py").write_text(MODEL)
    # the train split's first pass (the labels' check before training) gives every example; the second (training)
    # blocks at its 200th, a few steps in
    (code / "later.py").write_text(DATASET + "\n\nimport time\n\nPASSES = {'train': 0, 'validation': 0}\n\n\n"
                                   "def later(ctx):\n    def gen():\n        PASSES[ctx.split] += 1\n"
                                   "        for i, example in enumerate(examples(ctx).as_numpy_iterator()):\n"
                                   "            if ctx.split == 'train' and PASSES['train'] > 1 and i == 200:\n"
                                   "                time.sleep(600)\n"
                                   "            yield example\n"
                                   "    n = 480 if ctx.split == 'train' else 70\n"
                                   "    return tf.data.Dataset.from_generator(gen, output_signature="
                                   "examples(ctx).element_spec).apply(tf.data.experimental.assert_cardinality(n))\n")
    # (no shuffle buffer to fill: the block lands a few steps in; the first step may take 4 x 10 s on a busy machine)
    run = tools.run_module(["trainer.task", "--code_dir", str(code), "--model", "model.py:build", "--dataset",
                            "later.py:later", "--model_dir", str(tmp_path / "m"), "--train_epochs", "1",
                            "--shuffle_buffer", "1", "--max_step_seconds", "10"], timeout=300)
    assert run.returncode == 2, run.stderr[-2000:]
    line = run.error_line()
    assert "has not ended 10 s after it started" in line and "--max_step_seconds" in line, line
    assert "progress: " in run.stdout and not (tmp_path / "m" / "result.json").exists()


def test_the_step_watch_gives_the_first_step_more_time_and_spares_the_time_between_steps():
    """trainer.stall.StepWatch on a clock of its own: a process's first step (it compiles) has four times the bound,
    the time between steps (validation, backups) is not watched; a later step over the bound is, once."""
    import time

    from trainer.stall import StepWatch

    now = [0.0]
    stalls = []
    watch = StepWatch(10.0, clock=lambda: now[0], on_stall=stalls.append, poll=0.01)
    watch.started()
    now[0] = 39.0                       # the first step compiles for 39 s
    time.sleep(0.1)
    watch.ended()
    now[0] = 500.0                      # validation and a backup between the steps
    watch.started()
    assert watch.thread is not None
    now[0] = 505.0
    watch.ended()
    watch.started()
    time.sleep(0.1)
    assert stalls == []
    now[0] = 516.0                      # the third step, 11 s in
    watch.thread.join(5)
    assert not watch.thread.is_alive() and len(stalls) == 1 and "training step 3 " in str(stalls[0])
    watch.stop()
    # a loop that ended by raising inside a step (Keras calls no on_train_end then) leaves no watch running
    from trainer.stall import step_watch, stop_watches

    left = step_watch(10.0)
    left.started()
    stop_watches()
    left.thread.join(10)
    assert left.done.is_set() and not left.thread.is_alive()
    assert step_watch(0) is None                                     # 0: off


def test_a_dataset_that_says_its_length_is_not_counted():
    import tensorflow as tf

    from trainer import data

    told = tf.data.Dataset.range(100).filter(lambda i: i >= 0).apply(tf.data.experimental.assert_cardinality(100))
    assert data.count_examples(told, 1, "told", seconds=0.0) == 100          # not counted: no bound is hit
    assert data.count_examples(tf.data.Dataset.range(100).filter(lambda i: i >= 0), 1000, "untold") == 100


DIVERGES = '''

class Diverges(keras.Model):
    """The ledger model, whose loss turns NaN from optimizer step --hp_diverge_at on (the weights follow)."""

    def train_step(self, data):
        import tensorflow as tf

        x, y, weights = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            logits = self(x, training=True)
            loss = self.compute_loss(x, y, logits, weights)
            loss *= tf.where(self.optimizer.iterations >= self.diverge_at, float("nan"), 1.0)
        self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
        return self.compute_metrics(x, y, logits, weights)


def diverges(ctx):
    inner = build(ctx)
    model = Diverges(inner.inputs, inner.outputs, name="diverges")
    model.diverge_at = int(ctx.hparams.get("diverge_at", 8))
    return model
'''


def test_a_run_whose_loss_turns_nan_stops_in_one_line_and_its_backup_goes_on(in_process, project, tmp_path):
    """Issue 56: a model whose loss became NaN trained to the end, exit 0, exported a "best" epoch. Now the step it
    shows in stops the run, one line naming the epoch and step, exit 4, nothing exported and no result; epoch 1's
    backup, from before, is untouched: a run in the same folder goes on from it (here with the cause removed)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "data.py").write_text(DATASET)
    (code / "model.py").write_text(MODEL + DIVERGES)
    model_dir = tmp_path / "m"
    flags = ["trainer.task", "--code_dir", str(code), "--model", "model.py:diverges", "--dataset", "data.py:examples",
             "--model_dir", str(model_dir), "--train_epochs", "3", "--steps_per_epoch", "5"]
    run = in_process(flags)                     # steps 0-7 trained, the 9th (epoch 2 step 4) goes NaN
    assert run.returncode == 4, run.stderr[-2000:]
    line = run.error_line()
    assert "diverged at epoch 2 step " in line and "nan" in line and "nothing was exported" in line, line
    assert not (model_dir / "export").exists() and not (model_dir / "result.json").exists()
    assert "tpuctl-result" not in run.stdout and "epoch-end: 2/3" not in run.stdout
    resumed = in_process([*flags, "--hp_diverge_at", "1000"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming: 5 step(s) backed up, training goes on at epoch 2 step 1/5" in resumed.stdout, resumed.stdout
    result = json.loads(resumed.stdout_lines[-1][len("tpuctl-result: "):])
    assert result["epochs"] == 3 and 0 <= result["val_accuracy"] <= 1
    assert result["export_dir"].endswith("/export/diverges/1")            # the model's own name


POISONED = '''

class Poisoned(keras.layers.Layer):
    """A statistic no optimizer trains, used only when serving, that turns NaN in training."""

    def build(self, shape):
        self.v = self.add_weight("v", shape=(), initializer="zeros", trainable=False)

    def call(self, x, training=None):
        if training:
            self.v.assign(float("nan"))
            return x
        return x + self.v


def masked(y, logits):
    """A loss that hides NaN (the validation loss stays a number)."""
    import tensorflow as tf

    ce = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
    return tf.reduce_mean(tf.where(tf.math.is_finite(ce), ce, tf.zeros_like(ce)))


def poisoned(ctx):
    inner = build(ctx)
    model = keras.Model(inner.inputs, Poisoned()(inner.outputs[0]), name="poisoned")
    model.compile(optimizer="adam", loss=masked)
    return model
'''


def test_a_weight_no_optimizer_trains_that_turns_nan_stops_the_run(in_process, project, tmp_path):
    """A sixth trial: a non-trainable weight that turned NaN in training (used only when serving) was exported as
    the best epoch, every answer NaN; the loss and the metrics never showed it. Every weight is checked at each
    epoch's end: exit 4, one line naming the weight, nothing exported."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "data.py").write_text(DATASET)
    (code / "model.py").write_text(MODEL + POISONED)
    model_dir = tmp_path / "m"
    run = in_process(["trainer.task", "--code_dir", str(code), "--model", "model.py:poisoned", "--dataset",
                      "data.py:examples", "--model_dir", str(model_dir), "--train_epochs", "1", "--steps_per_epoch", "2"])
    assert run.returncode == 4, run.stderr[-2000:]
    line = run.error_line()
    assert "diverged at epoch 1" in line and "weight" in line and "no longer finite" in line, line
    assert not (model_dir / "export").exists() and not (model_dir / "result.json").exists()


@pytest.mark.parametrize("ref, name, expected", [
    ("model.py:build", "ledger", "ledger"),              # the model's own name
    ("model.py:build", "model_3", "model"),              # Keras' default: the module's
    ("nets/tabular.py:make", "sequential", "tabular"),
    ("mypkg.nets:build", "functional_1", "nets"),
    ("model.py:build", "not a name!", "model"),
])
def test_a_plugin_export_is_named_after_the_model_or_its_module_never_the_function(ref, name, expected):
    """Issue 57: every plug-in export (and so its TF Serving model) was called after the function, `build`."""
    import tf_keras as keras

    from trainer.config import TrainConfig
    from trainer.rundir import export_name

    x = keras.Input((2,))
    model = keras.Model(x, keras.layers.Dense(2)(x), name=name)
    assert export_name(TrainConfig(model_dir="m", data_dir="d", model=ref), model) == expected
    assert export_name(TrainConfig(model_dir="m", data_dir="d", model=ref, export_name="run-7"), model) == "run-7"
    assert export_name(TrainConfig(model_dir="m", data_dir="d"), model) == "small_cnn"      # built-in: unchanged


def test_an_export_name_that_is_no_model_name_is_refused_in_one_line(in_process, tmp_path):
    run = in_process(["trainer.task", "--data_dir", str(tmp_path), "--model_dir", str(tmp_path / "m"),
                      "--export_name", "../elsewhere"])
    assert run.returncode == 2 and "--export_name" in run.error_line(), run.stderr


def test_a_dataset_of_one_tensor_is_the_feature_named_features_for_the_model_and_the_export():
    """docs/your-code.md (issue 57: the name was documented nowhere): the model function finds a single tensor as
    ctx.inputs["features"], and the export's signature takes it under that name."""
    import tensorflow as tf
    import tf_keras as keras

    from trainer import export, plugin

    ds = tf.data.Dataset.from_tensor_slices(([[1.0, 2.0]], [0]))
    inputs = plugin.feature_specs(ds.element_spec[0])
    assert list(inputs) == ["features"]
    x = keras.Input(inputs["features"].shape, name="features")
    model = keras.Model(x, keras.layers.Dense(2)(x))
    serve = export.serving_function(model, export.Serving(("a", "b"), features=inputs, named=False))
    assert [spec.name for spec in serve.input_signature] == ["features"]      # the signature's input (TF Serving)
    assert serve(tf.constant([[1.0, 2.0]]))["class_name"].shape == (1,)
