"""MultiWorkerMirroredStrategy: two trainer processes on 127.0.0.1 with TF_CONFIG."""

from __future__ import annotations

import contextlib
import json
import sys

import numpy as np
import pytest

from procfixtures import Watched


def _cluster(tools, data_dir, model_dir, dump_dir, *extra, with_chief=False, env_extra=None, expect_rc=0):
    """Two trainer processes; ``with_chief``: chief + worker (tpuctl's layout), else worker 0 + worker 1."""
    ports = [tools.free_port(), tools.free_port()]
    if with_chief:
        cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
        tasks = [("chief", 0), ("worker", 0)]
    else:
        cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
        tasks = [("worker", 0), ("worker", 1)]
    with contextlib.ExitStack() as stack:
        procs = []
        for task_type, index in tasks:
            tf_config = json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})
            env = tools.env({"TF_CONFIG": tf_config, "TPUCTL_TRAINER_TEST_DUMP_WEIGHTS": str(dump_dir),
                             "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", **(env_extra or {})})
            cmd = [sys.executable, "-m", "trainer.task", *tools.fast_flags(data_dir, model_dir, *extra)]
            procs.append(stack.enter_context(Watched(cmd, cwd=tools.REPO, env=env)))
        outputs = [(p.finish(), "\n".join(p.out), "\n".join(p.err)) for p in procs]
    for rc, out, err in outputs:
        assert rc == expect_rc, f"exit {rc}\n{out[-2000:]}\n{err[-3000:]}"
    return outputs


def _weights(path):
    with np.load(path) as npz:
        return [npz[f"arr_{i}"] for i in range(len(npz.files))]


@pytest.mark.slow
def test_two_workers_train_in_lockstep_with_identical_weights(tools, demo_data, tmp_path):
    model_dir, dump = tmp_path / "model", tmp_path / "weights"
    (chief_rc, chief_out, _), (_, worker_out, _) = _cluster(
        tools, demo_data, model_dir, dump, "--distribution_strategy", "multi_worker", "--train_batch_size", "16")
    result = json.loads(chief_out.strip().splitlines()[-1][len(tools.RESULT_PREFIX):])
    assert result["strategy"] == "multi_worker" and result["num_workers"] == 2
    assert "replicas=2" in chief_out and "input_sharding=FILE" in chief_out
    # Only the chief reports and keeps final artifacts.
    assert tools.RESULT_PREFIX not in worker_out
    assert [p.name for p in (model_dir / "export" / "small_cnn").iterdir()] == ["1"]
    assert json.loads((model_dir / "result.json").read_text()) == result
    assert not list((model_dir / "checkpoints").glob("workertemp_*"))
    chief_w, worker_w = _weights(dump / "weights-worker-0.npz"), _weights(dump / "weights-worker-1.npz")
    assert len(chief_w) == len(worker_w) > 0
    for a, b in zip(chief_w, worker_w):
        np.testing.assert_array_equal(a, b)
    # ... and training moved them (not a comparison of two untouched initialisations): loss went down.
    losses = [float(l.split(" loss=")[1].split()[0]) for l in chief_out.splitlines() if l.startswith("epoch-end:")]
    assert len(losses) == 2 and losses[1] < losses[0]


@pytest.mark.slow
def test_fewer_files_than_workers_still_trains(tools, one_shard_data, tmp_path):
    """One training shard, two workers: FILE sharding would starve a worker, DATA sharding is used."""
    model_dir, dump = tmp_path / "model", tmp_path / "weights"
    (_, chief_out, _), (_, worker_out, _) = _cluster(tools, one_shard_data, model_dir, dump, "--train_batch_size", "16")
    result = json.loads(chief_out.strip().splitlines()[-1][len(tools.RESULT_PREFIX):])
    assert result["strategy"] == "multi_worker"  # auto: TF_CONFIG with two tasks
    assert result["num_workers"] == 2
    assert "input_sharding=DATA" in chief_out and "input_sharding=DATA" in worker_out
    for a, b in zip(_weights(dump / "weights-worker-0.npz"), _weights(dump / "weights-worker-1.npz")):
        np.testing.assert_array_equal(a, b)


def _epoch_starts(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("epoch-start:")]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_a_worker_lost_mid_training_stops_the_chief_with_one_line(tools, demo_data, tmp_path, how):
    """The peer answered the start-up probe, then died (connection reset) or froze (no heartbeat): the chief
    stops within seconds with one line and the cluster exit code, never waits for it forever."""
    import os
    import signal

    ports = [tools.free_port(), tools.free_port()]
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    with contextlib.ExitStack() as stack:
        procs = {}
        for task_type in ("chief", "worker"):
            tf_config = json.dumps({"cluster": cluster, "task": {"type": task_type, "index": 0}})
            env = tools.env({"TF_CONFIG": tf_config, "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"})
            cmd = [sys.executable, "-m", "trainer.task",
                   *tools.fast_flags(demo_data, tmp_path / "model", "--train_epochs", "200", "--steps_per_epoch", "20")]
            procs[task_type] = stack.enter_context(Watched(cmd, cwd=tools.REPO, env=env))
        worker, chief = procs["worker"], procs["chief"]
        worker.wait_line("epoch-start: 2/", "the worker's second epoch")
        os.kill(worker.pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        # the chief's own bound (the collective's timeout, the heartbeat), well inside this wait
        assert chief.finish(timeout=120) == 3, chief.tail()
        assert not [line for line in chief.err if "Traceback" in line]
        last = [line for line in chief.err if line.strip()][-1]
        # what happened, TensorFlow's cause, the fix (restart every task) and that it resumes from the backup
        assert last.startswith("error: ") and "peer left the cluster" in last and "(TensorFlow: " in last, last
        assert "restart every task" in last and last.endswith("last backup"), last
        if how == "frozen":
            assert "heartbeat" in last
            assert "training: worker 0 stopped answering (TensorFlow: " in last, last     # named as TF_CONFIG does


@pytest.mark.slow
def test_a_preempted_cluster_resumes_at_the_interrupted_epoch_and_exports_the_best_on_every_worker(tools, demo_data,
                                                                                                    tmp_path):
    """chief + worker (tpuctl's layout) both stop after epoch 2's backup; restarted, both run epochs 3 and 4 only.
    --export best across workers: the best epoch (trained before the restart, carried by the backup) is loaded
    from the chief's ckpt-<epoch> by every worker, so all export the same, best weights."""
    import tensorflow as tf

    model_dir, dump = tmp_path / "model", tmp_path / "weights"
    flags = ("--train_epochs", "4", "--train_batch_size", "16", "--steps_per_epoch", "30", "--warmup_epochs", "0")
    killed = _cluster(tools, demo_data, model_dir, dump, *flags, with_chief=True,
                      env_extra={"TPUCTL_TRAINER_TEST_EXIT_AFTER_EPOCH": "2"}, expect_rc=75)
    for _, out, _ in killed:
        assert _epoch_starts(out) == ["epoch-start: 1/4", "epoch-start: 2/4"]
    assert not (model_dir / "result.json").exists()
    # Only the chief's state is kept; the worker's own write folder is removed after each save.
    assert sorted(p.name for p in (model_dir / "checkpoints" / "backup").iterdir()) == ["chief"]
    # The resumed epochs diverge (learning rate 9.9; the schedule is not in the backup, the step counter is).
    (_, chief_out, _), (_, worker_out, _) = _cluster(tools, demo_data, model_dir, dump, *flags, "--learning_rate",
                                                     "9.9", with_chief=True)
    assert _epoch_starts(chief_out) == _epoch_starts(worker_out) == ["epoch-start: 3/4", "epoch-start: 4/4"]
    assert tools.RESULT_PREFIX not in worker_out
    result = json.loads(chief_out.strip().splitlines()[-1][len(tools.RESULT_PREFIX):])
    assert result["num_workers"] == 2 and result["epochs"] == 4
    assert result["exported_epoch"] == result["best_epoch"] in (1, 2) and result["epochs"] == 4
    assert result["best_val_accuracy"] > result["last_val_accuracy"] + 0.2
    chief, worker = _weights(dump / "weights-chief-0.npz"), _weights(dump / "weights-worker-0.npz")
    for a, b in zip(chief, worker):
        np.testing.assert_array_equal(a, b)
    reader = tf.train.load_checkpoint(str(model_dir / "checkpoints" / f"ckpt-{result['best_epoch']:04d}"))
    saved = [reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
             if "layer_with_weights" in k and "OPTIMIZER_SLOT" not in k]
    layers = [a for a in chief if a.ndim]      # the two scalars are the selection itself (best epoch, value)
    assert len(layers) == len(saved) and len(chief) == len(layers) + 2
    assert all(any(a.shape == s.shape and np.array_equal(a, s) for s in saved) for a in layers)
