"""`tpuctl train --workers N --parameter-servers M`: a coordinator (chief) + N workers + M ps on 127.0.0.1 with
TF_CONFIG, servers stopped when the chief is done, a lost worker tolerated; on Vertex a third (ps) worker pool."""

from __future__ import annotations

import json

import pytest
from google.cloud import aiplatform_v1

from tpuctl.services.runs.local import tf_config

from clifixtures import invoke

OUTPUTS = {
    "project": "my-project-1", "region": "us-central1",
    "buckets": {"data": "p-data", "staging": "p-staging", "artifacts": "p-artifacts", "hub-cache": "p-hub"},
    "training_service_account": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
}


def test_tf_config_of_a_parameter_server_cluster():
    ports = [1001, 1002, 1003, 1004]
    configs = [tf_config(ports, i, parameter_servers=1) for i in range(4)]
    cluster = {"chief": ["127.0.0.1:1001"], "worker": ["127.0.0.1:1002", "127.0.0.1:1003"], "ps": ["127.0.0.1:1004"]}
    assert all(c["cluster"] == cluster for c in configs)
    assert [c["task"] for c in configs] == [{"type": "chief", "index": 0}, {"type": "worker", "index": 0},
                                            {"type": "worker", "index": 1}, {"type": "ps", "index": 0}]
    assert tf_config([1, 2], 1) == {"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
                                    "task": {"type": "worker", "index": 0}}   # without ps: as before


def test_local_cluster_starts_every_role_and_passes_the_strategy(fake_trainer, tools, tmp_path):
    proc = tools.run_cli(["train", "--verbose", "--workers", "2", "--parameter-servers", "1", "--model-dir",
                          str(tmp_path / "m")], env=fake_trainer, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    log = tmp_path / "fake-log"
    roles = sorted(p.stem for p in log.glob("*.json"))
    assert roles == ["chief-0", "ps-0", "worker-0", "worker-1"]
    chief = json.loads((log / "chief-0.json").read_text())
    assert chief["args"][:2] == ["--distribution_strategy", "parameter_server"]
    assert set(chief["tf_config"]["cluster"]) == {"chief", "worker", "ps"}
    for label in ("started chief", "started worker 0", "started worker 1", "started ps 0"):
        assert label in proc.stderr


@pytest.mark.parametrize("args, fragment", [
    (["--parameter-servers", "17"], "--parameter-servers"),
    (["--parameter-servers", "1", "--accelerator", "tpu-v3-8"], "--parameter-servers cannot be combined with tpu-v3-8"),
])
def test_bad_parameter_server_requests_are_one_line(fake_trainer, tools, tmp_path, args, fragment):
    proc = tools.run_cli(["train", *args], env=fake_trainer, cwd=tmp_path)
    assert proc.returncode == 2 and fragment in proc.stderr and proc.stderr.count("error:") == 1


def test_vertex_job_gets_a_ps_pool(tmp_path):
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))
    r = invoke(["train", "--target", "vertex", "--outputs", outputs, "--workers", "3", "--parameter-servers", "2",
                "--name", "ps-job", "--dry-run"])
    assert r.exit_code == 0, r.stderr
    job = aiplatform_v1.CustomJob.from_json(r.stdout, ignore_unknown_fields=False)
    pools = job.job_spec.worker_pool_specs
    assert [p.replica_count for p in pools] == [1, 3, 2]          # chief, workers, ps (Vertex's pool order)
    assert all(list(p.container_spec.args[:2]) == ["--distribution_strategy", "parameter_server"] for p in pools)


@pytest.mark.slow
def test_real_parameter_server_run_trains_and_exports(tools, tmp_path):
    if not tools.trainer_python.exists():
        pytest.skip("trainer environment .venv-trainer is missing (scripts/setup.sh)")
    env = {"TPUCTL_CACHE_DIR": str(tmp_path / "cache"), "TPUCTL_TRAINER_PYTHON": str(tools.trainer_python)}
    proc = tools.run_cli(["train", "--workers", "1", "--parameter-servers", "1", "--epochs", "2", "--",
                          "--steps_per_epoch", "4"], env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    export = next(line.split(": ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("SavedModel: "))
    result = json.loads((tmp_path / "runs").glob("*/result.json").__next__().read_text())
    assert result["strategy"] == "parameter_server" and result["export_dir"] == export
    assert "epoch 2/2: " in proc.stderr and "run summary" in proc.stderr
