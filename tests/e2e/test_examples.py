"""The examples are tests (issue 41): each example project in examples/ runs as its README says, from a copy of its
folder, with the real CLI as a process — on one process and on two, its Vertex AI and TPU VM dry-run requests
parsed by Google's own types, and the plug-in's export served (a TF Serving stand-in over the real SavedModel)
and asked with JSON instances. No test special-cases an example: each is a user project tpuctl has never seen."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ground.envs import REPO_ROOT, ops_python, trainer_env, trainer_python

from procfixtures import Watched

TPUCTL = [str(ops_python()), "-m", "tpuctl.cli"]
EXAMPLES = REPO_ROOT / "examples"
MODEL_SERVER = REPO_ROOT / "tests" / "ops" / "serve" / "model_server.py"

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _readme_commands(example: str) -> list[str]:
    """The command lines of an example's README (its ```bash blocks, comments dropped)."""
    text = (EXAMPLES / example / "README.md").read_text()
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        lines += [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]
    return lines


def _readme(example: str, start: str) -> list[str]:
    """The README's command that starts with ``start`` (tpuctl's words only), as arguments."""
    found = [c for c in _readme_commands(example) if c.startswith(start)]
    assert found, f"examples/{example}/README.md has no command starting {start!r}"
    words = found[0].split()
    return words[1:] if words[0] == "tpuctl" else words


def tpuctl(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([*TPUCTL, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"tpuctl {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture
def project(tmp_path, request):
    """A copy of the example's folder (what a user has), and an environment without a Pulumi CLI or credentials."""
    folder = tmp_path / request.param
    shutil.copytree(EXAMPLES / request.param, folder, ignore=shutil.ignore_patterns("data", "runs", "__pycache__"))
    env = trainer_env({"PATH": "/usr/bin:/bin", "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "none.json"),
                       "TPUCTL_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path)})
    return folder, env


def _result(folder: Path, name: str) -> dict:
    return json.loads((folder / "runs" / name / "result.json").read_text())


def _cloud_requests(folder: Path, env: dict[str, str], args: list[str], workers: int = 1) -> tuple[dict, str]:
    """The Vertex AI CustomJob (parsed by aiplatform_v1 in the dry run itself; ``workers`` replicas) and the TPU VM
    startup script (one host: the slice's hosts are its workers)."""
    vertex = tpuctl([*args, "-w", str(workers), "--target", "vertex", "--stack", "example", "--dry-run"], folder, env)
    job = json.loads(vertex.stdout)
    tpu = tpuctl([*args, "--target", "tpu-vm", "--stack", "example", "-a", "tpu-v5e-8", "--dry-run"], folder, env)
    return job, tpu.stdout


@pytest.mark.parametrize("project", ["tabular-plugin"], indirect=True)
def test_the_plugin_example_trains_serves_and_ships(project):
    folder, env = project
    make = _readme("tabular-plugin", "../../.venv-trainer/bin/python make_data.py")
    subprocess.run([str(trainer_python()), *make[1:]], cwd=folder, env=env, check=True, capture_output=True,
                   timeout=300)
    train = _readme("tabular-plugin", "tpuctl train --model model.py:build --data-dir data --hparam")
    tpuctl([*train, "--epochs", "2"], folder, env)
    one = _result(folder, "flowers")
    assert one["model"] == "model.py:build" and one["source"] == "features" and one["validation_exact"]
    two = _readme("tabular-plugin", "tpuctl train --model model.py:build --data-dir data -w 2")
    tpuctl([*two[:two.index("--epochs")], "--epochs", "1", "--name", "flowers2"], folder, env)
    assert _result(folder, "flowers2")["num_workers"] == 2

    # served: TF Serving's REST API over the real export, asked with the README's rows (JSON instances)
    export = Path(one["export_dir"])
    with Watched([str(trainer_python()), str(MODEL_SERVER), str(export), export.parent.name], cwd=REPO_ROOT,
                 env=trainer_env()) as server:
        port = int(server.wait_line("listening ", "the model server's port").split()[1])
        url = f"http://127.0.0.1:{port}/v1/models/{export.parent.name}:predict"
        answer = tpuctl(["predict", url, "--instances", "rows.json", "--json"], folder, env)
    rows = json.loads(answer.stdout)
    assert len(rows) == 3
    assert all(row["top"][0]["class_name"] in ("setosa", "versicolor", "virginica") for row in rows), rows
    # deployed as it is (a dry run: the upload and the Endpoint requests, parsed by aiplatform_v1 in the command)
    deploy = json.loads(tpuctl(["deploy", "flowers", "--stack", "example", "--dry-run"], folder, env).stdout)
    # the export is named after the model (its Keras name, "flowers"), not the function
    assert deploy["uploadModel"]["model"]["artifactUri"].endswith("/models/flowers/flowers/1"), deploy["uploadModel"]

    # in the cloud: the project ships in the code image, the trainer imports it from there
    job, script = _cloud_requests(folder, env, ["train", "--model", "model.py:build", "--data-dir",
                                                "gs://tpuctl-my-tpu-project-data/flowers", "--hparam", "units=16"])
    container = job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert re.fullmatch(r".*/code-cpu:sha256-[0-9a-f]{20}", container["imageUri"])
    args = container["args"]
    assert args[args.index("--model") + 1] == "model.py:build"
    assert args[args.index("--code_dir") + 1] == "/opt/tpuctl/code" and "--hp_units" in args
    assert "/code-tpu:sha256-" in script and "--code_dir /opt/tpuctl/code" in script


@pytest.mark.parametrize("project", ["script-command"], indirect=True)
def test_the_script_example_runs_on_one_and_two_workers_and_ships(project):
    folder, env = project
    run = _readme("script-command", 'tpuctl train --command "python train.py --epochs 3" --name')
    assert run[:2] == ["train", "--command"]
    tpuctl(["train", "--command", "python train.py --epochs 1", "--name", "script"], folder, env)
    assert (folder / "runs" / "script" / "model" / "saved_model.pb").is_file()
    two = tpuctl(["train", "--command", "python train.py --epochs 1", "-w", "2", "--name", "pair"], folder, env)
    assert (folder / "runs" / "pair" / "model" / "saved_model.pb").is_file()
    assert "started worker 0" in two.stderr
    assert (folder / "runs" / "pair" / "checkpoints").is_dir() and (folder / "runs" / "pair" / "logs").is_dir()

    job, script = _cloud_requests(folder, env, ["train", "--command", "python train.py --epochs 3"], workers=2)
    pools = job["jobSpec"]["workerPoolSpecs"]
    assert len(pools) == 2 and pools[1]["replicaCount"] == "1"
    container = pools[0]["containerSpec"]
    assert container["command"] == ["python", "train.py", "--epochs", "3"] and "args" not in container
    assert "/code-cpu:sha256-" in container["imageUri"]
    assert "--entrypoint python" in script and "/code-tpu:sha256-" in script and "train.py" in script


@pytest.mark.parametrize("project", ["keras3-sensors"], indirect=True)
def test_the_keras3_example_trains_on_jax_and_tensorflow_serves_and_ships(project):
    """examples/keras3-sensors as its README says: its traces, its Keras 3 model on JAX and on TensorFlow through
    `tpuctl train` (one run each), compared, the JAX export served and asked with rows.json, and its cloud requests
    on TPU v6e: Vertex AI's `auto` and the TPU VM's `--backend jax` both run the project on the jax-tpu image. (Two
    processes on each backend: tests/trainer/test_keras3.py, with the TF_CONFIG the local target gives them.)"""
    folder, env = project
    make = _readme("keras3-sensors", "../../.venv-trainer/bin/python make_data.py")
    subprocess.run([str(trainer_python()), *make[1:]], cwd=folder, env=env, check=True, capture_output=True,
                   timeout=300)
    on_jax = _readme("keras3-sensors", "tpuctl train --model model.py:build --data-dir data --backend jax --epochs")
    on_tf = _readme("keras3-sensors", "tpuctl train --model model.py:build --data-dir data --epochs")
    for args in (on_jax, on_tf):
        epochs = args.index("--epochs")
        tpuctl([*args[:epochs], "--epochs", "1", *args[epochs + 2:]], folder, env)
    jax, tf = _result(folder, "sensors"), _result(folder, "sensors-tf")
    assert (jax["backend"], jax["keras"], tf["backend"], tf["keras"]) == ("jax", "keras3", "tensorflow", "keras3")
    compare = tpuctl(_readme("keras3-sensors", "tpuctl runs compare"), folder, {**env, "COLUMNS": "200"})
    assert re.search(r"backend\s.*jax \(keras3\).*tensorflow \(keras3\)", compare.stdout), compare.stdout

    predict = _readme("keras3-sensors", "tpuctl predict")
    export = Path(jax["export_dir"])
    assert predict[1].endswith(f"/v1/models/{export.parent.name}:predict")     # the README names the export
    with Watched([str(trainer_python()), str(MODEL_SERVER), str(export), export.parent.name], cwd=REPO_ROOT,
                 env=trainer_env()) as server:
        port = int(server.wait_line("listening ", "the model server's port").split()[1])
        url = predict[1].replace("127.0.0.1:8501", f"127.0.0.1:{port}")
        rows = json.loads(tpuctl(["predict", url, *predict[2:], "--json"], folder, env).stdout)
    assert len(rows) == 3 and all(row["top"][0]["class_name"] in ("steady", "drift", "burst") for row in rows)

    def cloud(start: str) -> subprocess.CompletedProcess:
        words = [w.replace("gs://BUCKET", "gs://tpuctl-my-tpu-project-data") for w in _readme("keras3-sensors", start)]
        return tpuctl([*words[:words.index("--stack") + 1], "example", *words[words.index("--stack") + 2:]], folder,
                      env)

    job = json.loads(cloud("tpuctl train --target vertex").stdout)
    container = job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert re.fullmatch(r".*/code-jax-tpu:sha256-[0-9a-f]{20}", container["imageUri"])
    assert container["args"][container["args"].index("--backend") + 1] == "jax"
    assert not any(e["name"].startswith(("NEXT_PLUGGABLE", "TF_PLUGGABLE")) for e in container.get("env", []))
    script = cloud("tpuctl train --target tpu-vm").stdout
    assert "/code-jax-tpu:sha256-" in script and "--backend jax" in script
