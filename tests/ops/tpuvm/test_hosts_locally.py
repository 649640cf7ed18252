"""The per-host command, run here: every TPU VM host runs the same trainer arguments; locally, N processes
on 127.0.0.1 with CPU devices stand in for the N hosts of a multi-host slice (MultiWorkerMirrored instead of
TPUStrategy, local folders instead of gs://). What this proves: the arguments the startup script passes are
ones the trainer accepts, and N copies of them train one model, resume-safe, and export it. It does NOT
prove TPUStrategy across real TPU hosts (see docs/tpu-vm.md)."""

from __future__ import annotations

import json
import shlex

import pytest

from ground import domain
from ground.envs import trainer_python
from ground.outputs import read_outputs_file
from tpuctl.services.runs.local import run_local
from tpuctl.services.runs.spec import RunSpec
from tpuctl.services.runs.tpuvm.script import host_command_line

from runfixtures import planned


def _docker_parts(run: RunSpec) -> tuple[dict[str, str], list[str]]:
    """(-e environment, trainer arguments) of the per-host ``docker run`` line, parsed back like bash would."""
    argv = shlex.split(host_command_line(run).replace("$WORKER", "0"))
    image_at = argv.index(run.image)
    env, options = {}, argv[:image_at]
    for flag, value in zip(options, options[1:]):
        if flag == "-e":
            key, _, val = value.partition("=")
            env[key] = val
    return env, argv[image_at + 1:]


@pytest.mark.slow
def test_the_per_host_arguments_train_on_two_local_hosts(outputs_file, tmp_path, monkeypatch):
    if not trainer_python().exists():
        pytest.skip("trainer environment .venv-trainer is missing (scripts/setup.sh)")
    monkeypatch.setenv("TPUCTL_CACHE_DIR", str(tmp_path / "cache"))
    from tpuctl.services.data import ensure_demo_data

    run = planned("tpu-vm", read_outputs_file(outputs_file), accelerator="v5litepod-16", epochs=1, batch_size=64,
                  trainer_args=("--steps_per_epoch", "4"), name="tpuctl-local-hosts", image="img:1")
    env, args = _docker_parts(run)
    assert args == run.argv and env["TPU_NAME"] == "tpuctl-local-hosts"

    data, model = str(ensure_demo_data()), tmp_path / "model"
    swapped = {"tpu": "multi_worker", run.data_dir: data, run.model_dir: str(model)}
    local_args = [swapped.get(arg, arg) for arg in args]
    assert local_args.count("multi_worker") == 1 and not any(a.startswith("gs://") for a in local_args)
    # No TPU here: CPU devices stand in, so neither TPU_NAME nor v5e's PJRT switch (its /lib/libtpu.so is the image's).
    assert domain.TF_PJRT_ENV.items() <= env.items()
    local_env = {k: v for k, v in env.items() if k != "TPU_NAME" and k not in domain.TF_PJRT_ENV}

    outcome = run_local(local_args, workers=2, env=local_env)
    result = outcome.result
    assert result and result["strategy"] == "multi_worker", outcome
    saved = json.loads((model / "result.json").read_text())
    assert saved["export_dir"] == result["export_dir"]
    assert (model / "export").is_dir() and any((model / "export").rglob("saved_model.pb"))
    assert (model / "checkpoints").is_dir()
