"""MultiWorkerMirroredStrategy: two trainer processes on 127.0.0.1 with TF_CONFIG."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest


def _cluster(tools, data_dir, model_dir, dump_dir, *extra):
    ports = [tools.free_port(), tools.free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        env = tools.env({"TF_CONFIG": tf_config, "TPUCTL_TRAINER_TEST_DUMP_WEIGHTS": str(dump_dir),
                         "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"})
        cmd = [sys.executable, "-m", "trainer.task", *tools.fast_flags(data_dir, model_dir, *extra)]
        procs.append(subprocess.Popen(cmd, cwd=tools.REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            outputs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for rc, out, err in outputs:
        assert rc == 0, f"exit {rc}\n{out[-2000:]}\n{err[-3000:]}"
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
