"""central_storage, parameter_server, --mixed_precision, --gpu_memory / --virtual_gpus, step progress."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from procfixtures import Watched


def _flags(tools, data_dir, model_dir, *extra):
    return tools.fast_flags(data_dir, model_dir, "--image_size", "16", "--train_batch_size", "16", *extra)


def _epoch_ends(lines):
    return [l for l in lines if l.startswith("epoch-end:")]


def _metrics(line):
    return dict(item.split("=") for item in line.split()[2:])


def _serve(data, model_dir, image_bytes):
    import tensorflow as tf

    loaded = tf.saved_model.load(str(model_dir))
    fn = loaded.signatures["serving_default"]
    out = fn(image_bytes=tf.constant(image_bytes))
    return fn, {k: v.numpy() for k, v in out.items()}


# ---------------------------------------------------------------------------------------------- progress
def test_progress_lines_and_examples_per_second(tools, demo_data, tmp_path):
    run = tools.run_module(["trainer.task", *_flags(tools, demo_data, tmp_path / "m", "--train_epochs", "1")])
    result = run.result
    lines = run.stdout_lines
    start = lines.index("epoch-start: 1/1")
    [end_line] = _epoch_ends(lines)
    progress = [l for l in lines[start:lines.index(end_line)] if l.startswith("progress:")]
    # 5 steps: every step is >= 1 % of the epoch, and the last step is always reported.
    assert progress == [f"progress: {i}/5" for i in range(1, 6)]
    metrics = _metrics(end_line)
    assert float(metrics["examples_per_second"]) > 0
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(metrics)
    assert result["mixed_precision"] == "off"


def test_progress_every_about_one_percent():
    from trainer.callbacks import progress_every

    for steps in (1, 5, 99, 100, 101, 250, 1_000_000):
        every = progress_every(steps)
        lines = len(range(every, steps + 1, every)) + (steps % every != 0)
        assert lines <= 101 and every <= max(1, steps // 100 + 1)


# ---------------------------------------------------------------------------------------------- GPU flags
@pytest.mark.parametrize("flags", [["--gpu_memory", "growth"], ["--gpu_memory", "512"], ["--virtual_gpus", "2"]])
def test_gpu_flags_without_a_gpu_fail_with_one_line(tools, in_process, demo_data, tmp_path, flags):
    run = in_process(["trainer.task", *_flags(tools, demo_data, tmp_path / "m", *flags)])
    assert run.returncode == 3, run.stderr[-2000:]
    line = run.error_line()
    assert flags[0] in line and "no GPU" in line
    assert not (tmp_path / "m").exists()


# ---------------------------------------------------------------------------------------------- mixed precision
def test_bfloat16_on_cpu_trains_and_exports_float32_probabilities(tools, demo_data, tmp_path):
    runs = {}
    for policy in ("off", "bfloat16"):
        model_dir = tmp_path / policy
        run = tools.run_module(["trainer.task", *_flags(tools, demo_data, model_dir, "--train_epochs", "1",
                                                        "--mixed_precision", policy)])
        runs[policy] = run.result
        assert f"mixed_precision={policy}" in run.stdout
    assert runs["bfloat16"]["mixed_precision"] == "bfloat16"
    images = tools.validation_jpegs(demo_data, 3)
    outputs = {}
    for policy, result in runs.items():
        fn, out = _serve(demo_data, result["export_dir"], images)
        assert list(fn.structured_input_signature[1]) == ["image_bytes"]
        assert fn.structured_outputs["probabilities"].dtype.name == "float32"
        outputs[policy] = out
    assert outputs["bfloat16"]["probabilities"].dtype == np.float32
    assert outputs["bfloat16"]["probabilities"].shape == outputs["off"]["probabilities"].shape == (3, 10)
    np.testing.assert_allclose(outputs["bfloat16"]["probabilities"].sum(axis=1), 1.0, rtol=1e-5)


# ---------------------------------------------------------------------------------------------- central storage
def test_central_storage_refuses_a_cluster(tools, in_process, demo_data, tmp_path):
    tf_config = json.dumps({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}})
    run = in_process(["trainer.task", *_flags(tools, demo_data, tmp_path / "m", "--distribution_strategy",
                                                    "central_storage")], env={"TF_CONFIG": tf_config})
    assert run.returncode == 2
    assert "central_storage runs on one machine" in run.error_line()


# ---------------------------------------------------------------------------------------------- parameter servers
@pytest.mark.parametrize("cluster, missing", [
    (None, "TF_CONFIG is not set"),
    ({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "no ps job"),
    ({"worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}, "no chief job"),
])
def test_parameter_server_without_its_jobs_fails_with_one_line(tools, in_process, demo_data, tmp_path, cluster,
                                                               missing):
    env = {} if cluster is None else {"TF_CONFIG": json.dumps({"cluster": cluster,
                                                               "task": {"type": "worker", "index": 0}})}
    run = in_process(["trainer.task", *_flags(tools, demo_data, tmp_path / "m", "--distribution_strategy",
                                                    "parameter_server")], env=env)
    assert run.returncode == 2
    line = run.error_line()
    assert "parameter_server needs TF_CONFIG" in line and missing in line


def _ps_cluster(tools, data_dir, model_dir, *extra, kill_worker_after=None, chief_env=None):
    """chief (coordinator) + 2 workers + 1 ps on 127.0.0.1; returns (chief, servers) once the chief exits."""
    ports = [tools.free_port() for _ in range(4)]
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:3]],
               "ps": [f"127.0.0.1:{ports[3]}"]}
    args = _flags(tools, data_dir, model_dir, "--distribution_strategy", "parameter_server", *extra)
    with contextlib.ExitStack() as stack:
        procs = {}
        for task_type, index in (("ps", 0), ("worker", 0), ("worker", 1), ("chief", 0)):
            env = tools.env({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}}),
                             "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
                             **((chief_env or {}) if task_type == "chief" else {})})
            procs[(task_type, index)] = stack.enter_context(
                Watched([sys.executable, "-m", "trainer.task", *args], cwd=tools.REPO, env=env))
        chief = procs[("chief", 0)]
        if kill_worker_after:
            chief.wait_line(kill_worker_after, f"the chief's {kill_worker_after!r} line")
            procs[("worker", 1)].kill()
        chief.finish(timeout=300)
        servers = {k: v for k, v in procs.items() if k != ("chief", 0)}
        # Servers never end by themselves: every one still alive when the chief is done (but the killed one).
        alive = {k for k, v in servers.items() if v.proc.poll() is None}
        return chief, servers, alive


def _result(tools, chief):
    assert chief.returncode == 0, chief.tail()
    last = chief.out[-1]
    assert last.startswith(tools.RESULT_PREFIX), last
    return json.loads(last[len(tools.RESULT_PREFIX):])


@pytest.mark.slow
def test_parameter_server_cluster_trains_exports_and_survives_a_killed_worker(tools, demo_data, tmp_path):
    """A chief, two workers and a parameter server train and export; ClusterCoordinator re-schedules a killed
    worker's closures on the other one and the chief finishes."""
    model_dir = tmp_path / "m"
    chief, servers, alive = _ps_cluster(tools, demo_data, model_dir, "--train_epochs", "3", "--steps_per_epoch", "20",
                                        kill_worker_after="epoch-end: 1/3")
    result = _result(tools, chief)
    assert result["strategy"] == "parameter_server" and result["num_workers"] == 2 and result["epochs"] == 3
    assert alive == {("ps", 0), ("worker", 0)}
    for (task_type, index), proc in servers.items():
        assert any(l.startswith(f"serving: {task_type} {index} at 127.0.0.1:") for l in proc.out)
        assert not any(l.startswith(tools.RESULT_PREFIX) for l in proc.out)
    ends = _epoch_ends(chief.out)
    assert [l.split()[1] for l in ends] == ["1/3", "2/3", "3/3"]
    assert all(float(_metrics(l)["examples_per_second"]) > 0 for l in ends)
    assert [l for l in chief.out if l.startswith("progress:")][-1] == "progress: 20/20"
    fn, out = _serve(demo_data, result["export_dir"], tools.validation_jpegs(demo_data, 3))
    assert list(fn.structured_input_signature[1]) == ["image_bytes"]
    assert out["probabilities"].dtype == np.float32 and out["probabilities"].shape == (3, 10)


# ---------------------------------------------------------------------------------------------- flags
def test_new_flags_parse_and_are_bounded():
    from trainer.config import parse_args
    from trainer.errors import UsageError

    base = ["--model_dir", "m", "--data_dir", "d"]
    cfg = parse_args(base)
    assert (cfg.mixed_precision, cfg.gpu_memory, cfg.virtual_gpus) == ("auto", None, 0)
    cfg = parse_args([*base, "--gpu_memory", "GROWTH", "--mixed_precision", "bfloat16"])
    assert (cfg.gpu_memory, cfg.mixed_precision) == ("growth", "bfloat16")
    assert parse_args([*base, "--gpu_memory", "2048", "--virtual_gpus", "2"]).gpu_memory == 2048
    for bad in (["--gpu_memory", "10"], ["--gpu_memory", "lots"], ["--virtual_gpus", "17"],
                ["--virtual_gpus", "-1"], ["--mixed_precision", "int8"],
                ["--gpu_memory", "growth", "--virtual_gpus", "2"],
                ["--model", "hub", "--hub_handle", "h", "--mixed_precision", "bfloat16"]):
        with pytest.raises(UsageError):
            parse_args([*base, *bad])
    for choice in ("central_storage", "parameter_server"):
        assert parse_args([*base, "--distribution_strategy", choice]).distribution_strategy == choice


def test_tf_config_with_ps_is_accepted_and_probed():
    from trainer.cluster import parse_tf_config

    cluster = {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]}
    cfg = parse_tf_config({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})})
    assert cfg.size == 3  # ps tasks don't train
    assert cfg.server_peers() == [("worker", 0, "h:2"), ("worker", 1, "h:3"), ("ps", 0, "h:4")]
    ps = parse_tf_config({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}})})
    assert ps.address == "h:4" and ("ps", 0, "h:4") not in ps.server_peers()


def _layer_variables(path) -> dict:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(path))
    return {k[k.index("layer_with_weights"):]: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if "layer_with_weights" in k and "OPTIMIZER_SLOT" not in k}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["central_storage", "parameter_server"])
def test_the_best_epoch_is_exported_after_a_resume(tools, demo_data, tmp_path, strategy):
    """--export best under CentralStorage and parameter servers: killed after epoch 2, resumed with diverging
    epochs (learning rate 9.9), the export holds the best epoch's weights (loaded from its ckpt-<epoch>)."""
    model_dir = tmp_path / "m"
    flags = ("--distribution_strategy", strategy, "--train_epochs", "4", "--steps_per_epoch", "30",
             "--warmup_epochs", "0")

    def train(*extra, env=None):
        if strategy == "central_storage":
            run = tools.run_module([str(tools.HERE / "cpu_devices_runner.py"), "2", "--",
                                    *_flags(tools, demo_data, model_dir, *flags, *extra)], python_args=[], env=env)
            return run.returncode, run.stdout_lines, run.stderr
        chief, _, _ = _ps_cluster(tools, demo_data, model_dir, *flags, *extra, chief_env=env)
        return chief.returncode, chief.out, "\n".join(chief.err)

    rc, _, err = train(env={"TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH": "2"})
    assert rc == 75, err[-3000:]
    rc, lines, err = train("--learning_rate", "9.9")
    assert rc == 0, err[-3000:]
    result = json.loads(lines[-1][len(tools.RESULT_PREFIX):])
    assert result["strategy"] == strategy and result["epochs"] == 4
    if strategy == "central_storage":      # variables on the CPU, the two logical CPUs its replicas
        assert any(line.startswith("training:") and "replicas=2" in line for line in lines)
    losses = [float(_metrics(line)["loss"]) for line in _epoch_ends(lines)]
    assert len(losses) == 2 and all(np.isfinite(losses))          # epochs 3 and 4 of the resumed run
    assert result["exported_epoch"] == result["best_epoch"] in (1, 2)
    assert result["best_val_accuracy"] > result["last_val_accuracy"] + 0.2, result
    exported = _layer_variables(Path(result["export_dir"]) / "variables" / "variables")
    best = _layer_variables(model_dir / "checkpoints" / f"ckpt-{result['best_epoch']:04d}")
    assert exported and exported.keys() == best.keys()
    assert all(np.array_equal(exported[k], best[k]) for k in best)
