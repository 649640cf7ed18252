"""`tpuctl train -a <TPU>` on a machine without a TPU: one line on every generation (issue 57, a regression: since the
PJRT switch a v5e run was TensorFlow's FileNotFoundError traceback about /lib/libtpu.so, raised by `import
tensorflow` itself). What a TPU run's trainer gets is the catalogue's (ground.domain.tpu_runtime_env); the trainer
checks it before TensorFlow loads (trainer.cluster.check_tpu_runtime)."""

from __future__ import annotations

import pytest

from ground import domain

from clifixtures import error_line

GENERATIONS = sorted({s.generation for s in domain.TPU_SLICES.values()})


@pytest.mark.parametrize("generation", GENERATIONS)
def test_a_tpu_runtime_that_is_not_here_is_one_line_before_tensorflow_loads(generation, tmp_path):
    """In process (no TensorFlow: the check runs before it loads). Generations without a runtime of their own to load
    (v2, v3, v4: TensorFlow's own TPU runtime) get TPU_NAME only, the environment whose missing TPU is TensorFlow's
    one line (`cannot initialise the TPU system`, exit 3: tests/trainer/test_task.py)."""
    from trainer.cluster import PLUGGABLE_DEVICE_LIBRARY, validate_environment
    from trainer.errors import EXIT_HARDWARE, HardwareError

    runtime = domain.tpu_runtime_env(generation)
    env = {"TPU_NAME": "local", **runtime}
    library = runtime.get(PLUGGABLE_DEVICE_LIBRARY)
    if library is None:
        assert validate_environment(env) is None
        return
    with pytest.raises(HardwareError) as raised:
        validate_environment(env)
    assert raised.value.exit_code == EXIT_HARDWARE
    assert f"{PLUGGABLE_DEVICE_LIBRARY}={library}" in str(raised.value) and "no TPU here" in str(raised.value)
    present = tmp_path / "libtpu.so"          # where the runtime is (a TPU VM's container), nothing is said
    present.write_bytes(b"")
    assert validate_environment({**env, PLUGGABLE_DEVICE_LIBRARY: str(present)}) is None


@pytest.mark.parametrize("accelerator, says", [
    ("tpu-v5e-4", "libtpu.so"),             # PJRT: the trainer ends before TensorFlow loads (about a second)
    ("tpu-v3-8", "TensorFlow has no TPU runtime on this machine"),     # TPU v2-v4: TensorFlow's TPU system
])
def test_train_on_a_tpu_where_there_is_none_is_one_line(tools, tmp_path, accelerator, says):
    """Through the CLI and the real trainer environment, on each TPU runtime (issue 57: one line on every
    generation; v3 gave TensorFlow's six-row kernel message naming the trainer's --distribution_strategy)."""
    if not tools.trainer_python.exists():
        pytest.skip("trainer environment .venv-trainer is missing (scripts/setup.sh)")
    data = tmp_path / "data"
    data.mkdir()
    proc = tools.run_cli(["train", "-a", accelerator, "--data-dir", data, "--epochs", "1"], cwd=tmp_path,
                         env={"TPUCTL_TRAINER_PYTHON": str(tools.trainer_python),
                              "TPUCTL_CACHE_DIR": str(tmp_path / "cache")})
    line = error_line(proc, 3)
    assert "no TPU here" in line and says in line and "--target tpu-vm" in line, proc.stderr
    assert "--distribution_strategy" not in line and "OpKernel" not in line, line
