"""--profile_steps FIRST-LAST: a TensorFlow profile of those training steps in <logs>/profile/<worker>, where
TensorBoard's Profile tab reads it (<worker>/plugins/profile/<time>/<host>.xplane.pb); a bad range is one line."""

from __future__ import annotations

import pytest


def test_a_profile_of_the_steps_asked_for_is_written_into_the_runs_logs(tools, demo_data, tmp_path):
    run = tools.run_module(["trainer.task", *tools.fast_flags(demo_data, tmp_path / "m", "--profile_steps", "6-7")])
    assert run.result
    assert "profiling: steps 6-7 into " in run.stdout and "profiled: " in run.stdout
    traces = list((tmp_path / "m" / "logs" / "profile" / "chief" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(traces) == 1 and traces[0].stat().st_size > 1000, traces


@pytest.mark.parametrize("value, needle", [
    ("15-10", "before the first"), ("0-3", "steps are an integer"), ("1-500", "at most 100 steps"),
    ("ten", "like 10-15"),
])
def test_a_bad_profile_range_is_one_line(in_process, tmp_path, value, needle):
    run = in_process(["trainer.task", "--data_dir", str(tmp_path), "--model_dir", str(tmp_path / "m"),
                      "--profile_steps", value])
    assert run.returncode == 2 and needle in run.error_line() and "--profile_steps" in run.error_line()
