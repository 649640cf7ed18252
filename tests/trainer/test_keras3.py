"""Keras 3 models in the bundled trainer (issue 55; plug-in contract v2, trainer.keras3, docs/your-code.md): a model
written here with ``import keras``, in a temporary folder outside the checkout, trains on TensorFlow and on JAX, on one
process and on two local processes, at the level of the same model written in tf_keras, and exports today's serving
signature; killed with SIGTERM in the middle of an epoch on JAX, it goes on with the batches where it stopped. What
Keras 3 cannot train is one line each, exit 2, nothing written."""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import sys

import pytest

from trainer import protocol

from procfixtures import Watched

#: What the model function says about the model it built: its backend, and how its hidden kernel lies on the devices.
REPORT = '''    print(f"user model: {keras.backend.backend()} {type(hidden.kernel.value).__module__} "
          f"{getattr(getattr(hidden.kernel.value, 'sharding', None), 'spec', None)}", flush=True)
'''

MODEL = '''
import keras


def build(ctx):
    """Two named numeric inputs (JAX arrays hold numbers), a hidden layer, one logit per class."""
    amount = keras.Input(shape=ctx.inputs["amount"].shape, name="amount")
    extra = keras.Input(shape=ctx.inputs["extra"].shape, name="extra")
    hidden = keras.layers.Dense(int(ctx.hparams.get("units", 16)), activation="relu", name="hidden")
    x = keras.layers.Dropout(0.1)(hidden(keras.layers.Concatenate()([amount, extra])))
    model = keras.Model({"amount": amount, "extra": extra}, keras.layers.Dense(ctx.num_classes, name="logits")(x))
''' + REPORT + '''    return model
'''

#: The same module with model parallelism: the hidden layer's units split over the devices.
SHARDED = MODEL + '''

def layout(ctx):
    mesh = keras.distribution.DeviceMesh((1, len(ctx.devices)), ("batch", "model"), ctx.devices)
    layouts = keras.distribution.LayoutMap(mesh)
    layouts["hidden/kernel"] = (None, "model")
    layouts["hidden/bias"] = ("model",)
    return layouts
'''

#: The same model in tf_keras (contract v1): the level the Keras 3 runs are held to.
TWIN = MODEL.replace("import keras\n", "import tf_keras as keras\n").replace(REPORT, "")

DATASET = '''
import numpy as np
import tensorflow as tf

CLASSES = ["low", "mid", "high"]


def examples(ctx):
    """One pass, the same examples in the same order at every call (generated from a fixed seed)."""
    n = 1920 if ctx.split == "train" else 170
    rng = np.random.default_rng(21 if ctx.split == "train" else 22)
    amount = rng.normal(size=(n, 3)).astype("float32")
    extra = rng.normal(size=(n, 2)).astype("float32")
    label = np.digitize(amount[:, 0] + 0.5 * amount[:, 1] - extra[:, 0], [-0.6, 0.6]).astype("int64")
    return tf.data.Dataset.from_tensor_slices(({"amount": amount, "extra": extra}, label))
'''

EPOCHS = 3


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A user's project folder outside the checkout."""
    folder = tmp_path_factory.mktemp("keras3-project")
    for name, text in (("model.py", MODEL), ("sharded.py", SHARDED), ("twin.py", TWIN), ("data.py", DATASET)):
        (folder / name).write_text(text)
    return folder


def _flags(project, model_dir, *extra, model="model.py:build"):
    return ["--code_dir", str(project), "--model", model, "--dataset", "data.py:examples", "--model_dir",
            str(model_dir), "--train_epochs", str(EPOCHS), "--learning_rate", "0.01", *extra]


def _signature(export_dir):
    """The export's serving_default: its inputs and outputs (name -> dtype, shape), and its answer to two rows."""
    import tensorflow as tf

    serve = tf.saved_model.load(str(export_dir)).signatures["serving_default"]
    inputs = {k: (v.dtype.name, v.shape.as_list()) for k, v in serve.structured_input_signature[1].items()}
    outputs = {k: (v.dtype.name, v.shape.as_list()) for k, v in serve.structured_outputs.items()}
    answer = serve(amount=tf.constant([[2.0, 1.0, 0.0], [-2.0, 0.0, 0.0]]), extra=tf.constant([[-1.0, 0.0], [1.0, 0.0]]))
    return inputs, outputs, answer


def _exact(result) -> bool:
    """Every validation example counted once: the accuracy is a count of the 170."""
    value = result["val_accuracy"] * result["validation_examples"]
    return result["validation_examples"] == 170 and abs(value - round(value)) < 1e-3


def test_a_keras3_model_trains_on_tensorflow_as_its_tf_keras_twin_and_exports_todays_signature(
        project, tmp_path, in_process):
    """One process on TensorFlow (in this test's process: unseeded): the Keras 3 model reaches its tf_keras twin's
    validation accuracy, and both exports have the same serving signature (the one `tpuctl serve|predict|deploy`
    read). Its run keeps the records a tf_keras run keeps."""
    run = in_process(["trainer.task", *_flags(project, tmp_path / "k3")])
    result = run.result
    twin = in_process(["trainer.task", *_flags(project, tmp_path / "twin", model="twin.py:build")]).result
    assert result["backend"] == "tensorflow" and result["keras"] == "keras3" and result["strategy"] == "default"
    assert twin["backend"] == "tensorflow" and twin["keras"] == "tf_keras"
    # every record holds exactly the fields a launcher requires of one (trainer.protocol.RESULT_FIELDS)
    assert sorted(result) == sorted(twin) == sorted(protocol.RESULT_FIELDS), sorted(result)
    assert "backend=tensorflow keras=keras3" in run.stdout and "user model: tensorflow" in run.stdout
    assert _exact(result) and _exact(twin)
    print(f"val_accuracy keras3 {result['val_accuracy']:.4f}, tf_keras {twin['val_accuracy']:.4f}")
    assert result["val_accuracy"] >= twin["val_accuracy"] - 0.05 > 0.8
    mine, theirs = _signature(result["export_dir"]), _signature(twin["export_dir"])
    assert mine[:2] == theirs[:2]
    assert mine[1] == {"probabilities": ("float32", [None, 3]), "class_id": ("int64", [None]),
                       "class_name": ("string", [None])}
    assert [n.decode() for n in mine[2]["class_name"].numpy()] == ["high", "low"]
    # the run's records: epoch weights, TensorBoard scalars and hyperparameters, timing; the backup is gone
    model_dir = tmp_path / "k3"
    assert sorted(p.name for p in (model_dir / "checkpoints").glob("ckpt-*")) == [
        f"ckpt-{e:04d}.weights.h5" for e in range(1, EPOCHS + 1)]
    assert {"train", "validation", "final"} <= {p.name for p in (model_dir / "logs").iterdir()}
    assert result["timing"]["total_steps"] == EPOCHS * 60 and result["timing"]["step_seconds"] > 0
    assert not list((model_dir / "checkpoints").rglob("state.json"))


def test_a_keras3_loss_that_is_no_longer_a_number_stops_the_run_and_nothing_is_exported(project, tmp_path, in_process):
    """The loss turns NaN at a step (here: from the first): one line naming where, exit 4 (as on tf_keras), no export, no result, and
    no epoch weights or backup written from the NaN weights."""
    (project / "nan.py").write_text(MODEL.replace('name="logits")(x)', 'name="logits")(x * float("nan"))'))
    model_dir = tmp_path / "m"
    run = in_process(["trainer.task", *_flags(project, model_dir, model="nan.py:build")])
    assert run.returncode == 4, run.stderr[-2000:]
    assert run.error_line().startswith("error: training diverged at epoch 1 step 1/60: the loss is nan")
    assert not (model_dir / "export").exists() and not (model_dir / "result.json").exists()
    assert not list(model_dir.rglob("*.weights.h5"))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_keras3_model_trains_on_two_local_processes(tools, project, tmp_path, backend):
    """A chief and a worker on 127.0.0.1 (TF_CONFIG, as `tpuctl train -w 2` starts them): MultiWorkerMirrored on
    TensorFlow, jax.distributed with keras.distribution's DataParallel on JAX (in bfloat16 there: what TPUs train
    in). Both end with the same weights, count validation exactly and export the signature."""
    import numpy as np

    ports = [tools.free_port(), tools.free_port()]
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    extra = ["--backend", backend, "--seed", "3", "--train_epochs", "2"] + (
        ["--mixed_precision", "bfloat16"] if backend == "jax" else [])
    with contextlib.ExitStack() as stack:
        procs = []
        for task_type in ("chief", "worker"):
            env = tools.env({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": 0}}),
                             "TPUCTL_TRAINER_TEST_DUMP_WEIGHTS": str(tmp_path / "weights"),
                             "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"})
            procs.append(stack.enter_context(Watched([sys.executable, "-m", "trainer.task",
                                                      *_flags(project, tmp_path / "m", *extra)],
                                                     cwd=tools.REPO, env=env)))
        for proc in procs:
            assert proc.finish(timeout=300) == 0, proc.tail()
    result = json.loads(procs[0].out[-1][len(tools.RESULT_PREFIX):])
    assert result["backend"] == backend and result["num_workers"] == 2 and _exact(result)
    assert result["strategy"] == ("multi_worker" if backend == "tensorflow" else "data_parallel")
    assert result["mixed_precision"] == ("bfloat16" if backend == "jax" else "off")
    assert not any(line.startswith(tools.RESULT_PREFIX) for line in procs[1].out)
    print(f"{backend}, two processes: val_accuracy {result['val_accuracy']:.4f}")
    assert result["val_accuracy"] > 0.8
    weights = [np.load(tmp_path / "weights" / f"weights-{task}-0.npz") for task in ("chief", "worker")]
    assert len(weights[0].files) == 4      # the two Dense layers' kernels and biases
    for key in weights[0].files:
        np.testing.assert_array_equal(weights[0][key], weights[1][key])
    inputs, outputs, answer = _signature(result["export_dir"])
    assert set(inputs) == {"amount", "extra"} and outputs["probabilities"] == ("float32", [None, 3])


def _fingerprint(features: dict, label) -> int:
    """A batch's fingerprint as trainer.keras3.callbacks.log_batches writes it (features by name, then labels)."""
    import numpy as np

    digest = hashlib.blake2b(digest_size=7)
    for array in [*(features[k] for k in sorted(features)), label]:
        digest.update(np.ascontiguousarray(np.asarray(array)).tobytes())
    return int.from_bytes(digest.digest(), "big")


def test_killed_on_jax_mid_epoch_it_goes_on_with_the_batches_where_it_stopped(tools, project, tmp_path):
    """SIGTERM at step 11 of epoch 2 on JAX, the model split over two CPU devices by the plug-in's layout: the step
    is backed up, the process ends with 143; the next run says where it resumes, trains from the next step on and
    reads exactly the batches the trainer's input stream holds there (the killed run's batches before, none twice),
    and exports the signature. A profile is captured with jax.profiler, into the logs' profile folder."""
    import tensorflow as tf

    from trainer import inputs
    from trainer.config import parse_args

    steps = 60
    flags = _flags(project, tmp_path / "m", "--backend", "jax", "--seed", "3", "--train_epochs", "2",
                   model="sharded.py:build")
    # two CPU devices; the resumed run finds the killed run's compiled programs in JAX's cache (as a user's would)
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax-cache"), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    killed = tools.killed_at_step(["trainer.task", *flags], step=11, epoch="2/2", sig=signal.SIGTERM, stderr=True,
                                  env={**env, "TPUCTL_TRAINER_TEST_LOG_BATCHES": str(tmp_path / "killed")})
    assert killed.returncode == 143, killed.tail()
    [preempted] = [line for line in killed.err if line.startswith("preempted: ")]
    stopped = int(preempted.split(" step ")[1].split("/")[0])
    assert "epoch 2 step" in preempted and 11 <= stopped < steps
    assert "strategy=model_parallel replicas=2" in "\n".join(killed.out)
    assert "user model: jax jaxlib._jax P(None, 'model')" in killed.out   # the layout split the hidden layer
    resumed = tools.run_module(["trainer.task", *flags, "--profile_steps", "2-3"],
                               env={**env, "TPUCTL_TRAINER_TEST_LOG_BATCHES": str(tmp_path / "resumed")})
    result = resumed.result
    [resuming] = [line for line in resumed.stdout_lines if line.startswith("resuming: ")]
    backed_up = steps + stopped
    assert (f"{backed_up} step(s) backed up, training goes on at epoch 2 step {stopped + 1}/{steps}; the input "
            f"skips {backed_up * 32} record(s)") in resuming, resuming
    assert next(line for line in resumed.stdout_lines if line.startswith("progress:")) == f"progress: {stopped + 1}/{steps}"
    assert result["timing"]["total_steps"] == 2 * steps and result["timing"]["steps"] == steps - stopped
    assert result["backend"] == "jax" and result["epochs"] == 2 and _exact(result)
    assert sorted(result) == sorted(protocol.RESULT_FIELDS), sorted(result)
    # the batches: the killed run's up to its backup and the resumed run's after it are the input stream's, in order
    log = "batches-chief-0.txt"
    before, after = tools.logged_batches(tmp_path / "killed" / log), tools.logged_batches(tmp_path / "resumed" / log)
    assert sorted(before) == list(range(backed_up)) and sorted(after) == list(range(backed_up, 2 * steps))
    cfg = parse_args(flags)
    tf.random.set_seed(cfg.seed)        # the trainer seeds TensorFlow so (keras.utils.set_random_seed): the same shuffles
    stream = inputs.prepare(cfg, num_workers=1, hparams={}).train(32).take(2 * steps)
    expected = [_fingerprint(features, label) for features, label in stream.as_numpy_iterator()]
    assert [{**before, **after}[s] for s in range(2 * steps)] == expected
    profiles = list((tmp_path / "m" / "logs" / "profile" / "chief").rglob("*.xplane.pb"))
    assert profiles and "profiled: " in resumed.stdout
    inputs_, outputs, _ = _signature(result["export_dir"])
    assert set(inputs_) == {"amount", "extra"} and outputs["class_name"] == ("string", [None])


@pytest.mark.parametrize("args, names", [
    (["--backend", "jax", "--model", "hub", "--hub_handle", "h"], ["--model hub", "tf_keras", "KerasLayer"]),
    (["--backend", "jax", "--model", "resnet50"], ["--model resnet50", "--backend tensorflow"]),
    (["--backend", "jax", "--distribution_strategy", "parameter_server"], ["parameter_server", "ParameterServerStrategy"]),
    (["--backend", "mxnet"], ["--backend", "invalid choice", "tensorflow", "jax"]),
    (["--backend", "jax", "--gpu_memory", "growth"], ["--gpu_memory", "TensorFlow's GPUs", "CUDA_VISIBLE_DEVICES"]),
], ids=["hub-on-jax", "resnet50-on-jax", "parameter-servers-on-jax", "no-such-backend", "tensorflow-gpu-flag-on-jax"])
def test_what_keras3_cannot_train_is_refused_before_anything_loads(in_process, demo_data, tmp_path, args, names):
    model_dir = tmp_path / "m"
    run = in_process(["trainer.task", "--data_dir", str(demo_data), "--model_dir", str(model_dir), *args])
    assert run.returncode == 2, run.stderr[-2000:]
    line = run.error_line()
    assert all(n in line for n in names), line
    assert not model_dir.exists()


def test_a_plugin_for_the_other_backend_is_one_line_naming_its_file(project, tmp_path, in_process):
    """A plug-in that imports jax while TensorFlow trains (the trainer keeps JAX out of TensorFlow runs): one line
    naming its file and line, exit 2, nothing written; a tf_keras model handed to --backend jax: one line naming
    the file (trainer.plugin.check_model, where the JAX run checks the model its function returned)."""
    import tf_keras

    from trainer import plugin
    from trainer.errors import UsageError

    (project / "uses_jax.py").write_text("import keras\nimport jax.numpy as jnp\n\n\ndef build(ctx):\n    pass\n")
    model_dir = tmp_path / "m"
    run = in_process(["trainer.task", *_flags(project, model_dir, model="uses_jax.py:build")])
    assert run.returncode == 2, run.stderr[-2000:]
    line = run.error_line()
    assert f"{project / 'uses_jax.py'}:2: importing --model" in line and "jax is not loaded when --backend tensorflow" \
        in line, line
    assert not model_dir.exists()

    twin = plugin.load("twin.py:build", str(project), "--model")
    ctx = plugin.ModelContext(inputs={}, num_classes=3, class_names=("a", "b", "c"), hparams={}, image_size=None)
    model = tf_keras.Model(inputs := tf_keras.Input((2,), name="features"), tf_keras.layers.Dense(3)(inputs))
    with pytest.raises(UsageError, match=r"twin\.py: --model twin\.py:build returned a tf_keras model; --backend jax "
                                         "trains Keras 3 models"):
        plugin.check_model(twin, model, ctx, named=False, backend="jax")


def test_a_keras3_model_is_refused_with_parameter_servers(tmp_path):
    """Keras 3 has no ParameterServerStrategy: a Keras 3 model handed over with one is refused (on the coordinator,
    once its function returned the model: a v1 function's strategies are not known earlier) before anything is
    written."""
    import types

    from trainer.config import OutputDirs, parse_args
    from trainer.errors import UsageError
    from trainer.keras3 import engine

    cfg = parse_args(["--data_dir", "d", "--model_dir", str(tmp_path / "m"), "--model", "model.py:build"])
    run = engine.Run(cfg, {}, None, OutputDirs.resolve(cfg.model_dir, {}), types.SimpleNamespace(kind="parameter_server"),
                     None, {}, 1, 1, "off")
    with pytest.raises(UsageError, match="Keras 3 model and --distribution_strategy parameter_server .*"
                                         "ParameterServerStrategy"):
        engine.train(run, None, contextlib.ExitStack())
    assert not (tmp_path / "m").exists()


def test_the_trainer_command_line_carries_the_backend_only_when_it_is_not_the_default():
    """trainer.flags.TrainerArgs, what every target builds the trainer's command line with: a command line from
    before --backend stays byte for byte the same; a JAX run's carries it, and reads back."""
    from trainer.errors import UsageError
    from trainer.flags import TrainerArgs

    base = TrainerArgs(data_dir="d", model_dir="m", model="model.py:build")
    assert TrainerArgs(data_dir="d", model_dir="m", model="model.py:build", backend="tensorflow").argv() \
        == base.argv() == ["--data_dir", "d", "--model_dir", "m", "--model", "model.py:build"]
    jax = TrainerArgs(data_dir="d", model_dir="m", model="model.py:build", backend="jax")
    assert jax.argv()[-2:] == ["--backend", "jax"] and TrainerArgs.parse(jax.argv()) == jax
    assert TrainerArgs.parse([*base.argv(), "--backend=jax"]).backend == "jax"
    with pytest.raises(UsageError, match="--backend must be one of tensorflow, jax, got 'mxnet'"):
        TrainerArgs.parse([*base.argv(), "--backend", "mxnet"])
