"""--command on a TPU VM slice (issue 41): every host's startup script runs the user's program in the run's image
instead of the trainer (`docker run --entrypoint PROG IMAGE ARGS…`), with the TPU runtime and Vertex AI's output
folders set. The generated script runs here in real bash with `docker`, `gcloud` and the metadata server replaced
by stand-ins (as tests/ops/tpuvm/test_preemption_watch.py does); the stand-in docker records what it was asked."""

from __future__ import annotations

import os
import shlex
import subprocess

from ground.outputs import read_outputs_file
from tpuctl.services.runs.tpuvm.script import startup_script

from runfixtures import planned
from tpufakes import FakeMetadata

GCLOUD = """#!/bin/bash
case "$1 $2" in
  "auth configure-docker") exit 0 ;;
  "storage cp") cat >/dev/null; exit 0 ;;
esac
exit 2
"""
DOCKER = """#!/bin/bash
printf '%s\\n' "$@" > "$STUBS/docker-args"
"""


def test_every_host_runs_the_users_program_in_the_image(outputs_file, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hello')\n")
    run = planned("tpu-vm", read_outputs_file(outputs_file), accelerator="v5litepod-16", name="tpuctl-script",
                  image="us-central1-docker.pkg.dev/p/r/code-tpu:1", command="python train.py --epochs 'a b'",
                  code=str(project))
    stubs = tmp_path / "stubs"
    (stubs / "bin").mkdir(parents=True)
    for name, text in (("gcloud", GCLOUD), ("docker", DOCKER)):
        (stubs / "bin" / name).write_text(text)
        (stubs / "bin" / name).chmod(0o755)
    metadata = FakeMetadata(worker="1")
    try:
        script = startup_script(run).replace("http://metadata.google.internal", metadata.url)
        env = {**os.environ, "PATH": f"{stubs / 'bin'}:{os.environ['PATH']}", "STUBS": str(stubs)}
        done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    finally:
        metadata.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    args = (stubs / "docker-args").read_text().splitlines()
    assert args[0] == "run"
    entry = args.index("--entrypoint")
    assert args[entry + 1:] == ["python", "us-central1-docker.pkg.dev/p/r/code-tpu:1", "train.py", "--epochs", "a b"]
    env_values = {args[i + 1].split("=", 1)[0]: args[i + 1].split("=", 1)[1] for i, a in enumerate(args) if a == "-e"}
    model_dir = run.model_dir
    assert env_values["AIP_MODEL_DIR"] == f"{model_dir}/model/" and env_values["TPUCTL_TPU_WORKER"] == "1"
    assert env_values["TPU_NAME"] == "tpuctl-script"           # a multi-host slice: the node's name
    assert "--model_dir" not in args and shlex.join(args).count("train.py") == 1
    # the VM's shutdown gives the container most of a Spot VM's 30 s to back up (Docker's own default is 10 s)
    assert args[args.index("--stop-timeout") + 1] == "25"
