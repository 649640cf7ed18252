"""`tpuctl train` driving the real trainer environment (.venv-trainer): the embedded default, a 2-process
cluster, and a cluster losing a worker mid-training. CPU only; tiny model, the demo dataset."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from clifixtures import shown_rows, sigint_as_ctrl_c
from procfixtures import Watched


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One demo-data cache for the module: the first run generates it, later runs reuse it."""
    return tmp_path_factory.mktemp("tpuctl-cache")


@pytest.fixture
def env(cache, tools):
    if not tools.trainer_python.exists():
        pytest.skip("trainer environment .venv-trainer is missing (scripts/setup.sh)")
    return {"TPUCTL_CACHE_DIR": str(cache), "TPUCTL_TRAINER_PYTHON": str(tools.trainer_python)}


def _result(stdout: str) -> tuple[Path, float]:
    export = re.search(r"^SavedModel: (.+)$", stdout, re.M)
    accuracy = re.search(r"^validation accuracy: ([0-9.]+)$", stdout, re.M)
    assert export and accuracy, stdout[-2000:]
    return Path(export.group(1)), float(accuracy.group(1))


@pytest.mark.slow
def test_train_with_no_arguments_trains_exports_and_reports(env, tools, tmp_path, cache):
    """The embedded default, end to end; its record keeps when it started and when its process ran, the trainer's
    result when its first step ended and its steady step time, and `runs show` works out from them the same rows
    a cloud run has."""
    before = time.time()
    proc = tools.run_cli(["train"], env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    export, accuracy = _result(proc.stdout)
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and export.is_relative_to(runs[0])
    assert (export / "saved_model.pb").is_file()
    result = json.loads((runs[0] / "result.json").read_text())
    assert result["export_dir"] == str(export)
    assert round(result["val_accuracy"], 4) == accuracy
    assert result["validation_examples"] > 0 and result["strategy"] == "default"
    # The demo dataset landed in the cache, complete.
    manifest = json.loads((cache / "demo-data" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["examples"] == result["train_examples"]

    # Timings, from the same events for every target.
    launch = json.loads((runs[0] / "tpuctl-run.json").read_text())
    timing = result["timing"]
    assert before <= launch["started"] <= launch["provisioned"] <= timing["first_step_at"] <= launch["finished"]
    shown = tools.run_cli(["runs", "show", runs[0].name], env=env, cwd=tmp_path, timeout=300)
    assert shown.returncode == 0, shown.stderr[-3000:]
    rows = shown_rows(shown.stdout)
    assert rows["target"] == "local"
    assert rows["provisioned"].endswith(" after submission") and rows["first step"].endswith(" after submission")
    assert rows["step time"].endswith(" ms") or rows["step time"].endswith(" s")
    assert float(rows["examples/s"]) == pytest.approx(timing["examples_per_second"], abs=0.06)
    goodput = timing["total_steps"] * timing["step_seconds"] / (launch["finished"] - launch["started"])
    assert rows["goodput"] == f"{goodput:.0%}" and 0 < goodput < 1
    assert rows["spend"] == "-"                  # a local run has no price


@pytest.mark.slow
def test_killing_a_real_worker_fails_fast_without_orphans(env, tools, tmp_path):
    with Watched([str(tools.ops_python), "-m", "tpuctl.cli", "train", "--verbose", "--workers", "2", "--epochs", "50"],
                 env={**os.environ, **env}, cwd=tmp_path) as proc:
        started = {name: proc.wait_line(f"started {name} (pid", f"the {name}'s start", stream="err")
                   for name in ("chief", "worker 0")}
        pids = {name: int(re.search(r"\(pid (\d+)\)", line).group(1)) for name, line in started.items()}
        # inside the first epoch, past a step: both workers in collectives
        proc.wait_line("[chief] progress:", "a first training step of the cluster", after="[worker 0] epoch-start:")
        os.kill(pids["worker 0"], signal.SIGKILL)
        t0 = time.monotonic()
        proc.finish(timeout=120)
        elapsed = time.monotonic() - t0
    assert proc.returncode == 1
    last = [line for line in proc.err if line.strip()][-1].strip()
    assert last.startswith("error: worker 0 ") and f"(pid {pids['worker 0']})" in last and "SIGKILL" in last, last
    assert last.endswith("stopped chief"), last
    # the supervisor's poll and the chief's stop (its SIGTERM, SIGKILL after the 15 s grace), well before the
    # collective's own 60 s timeout would have ended the chief (generous: a loaded machine)
    assert elapsed < 58
    assert not tools.pid_alive(pids["chief"]) and not tools.pid_alive(pids["worker 0"])


@pytest.mark.slow
def test_sigterm_to_a_local_cluster_backs_up_its_step_and_the_run_continues_there(env, tools, tmp_path):
    """Two local workers (a MultiWorkerMirrored cluster on 127.0.0.1) stopped by SIGTERM to `tpuctl train -w 2` (what
    a VM's shutdown or a preemption notice sends): the supervisor passes it to both workers, which back up one agreed
    step within its grace period and end; the same command continues the interrupted run after that step and the
    two workers train one model to its export.

    The signal comes at the epoch's second-to-last step (each step followed by a half-second pause, so it lands
    there), so the workers agree on the epoch's last step. Issue 57: they used to save and stop at that step, before
    the epoch's validation, line and curves, and the continued run went on at the next epoch: the epoch was lost.
    Now the agreed backup of an epoch's last step is made once the epoch has ended; no TensorFlow deprecation warning
    is shown (12 lines used to follow the stop without --verbose)."""
    args = [str(tools.ops_python), "-m", "tpuctl.cli", "train", "--workers", "2", "--epochs", "2", "--name", "stopped",
            "--", "--steps_per_epoch", "20"]
    paused = {**os.environ, **env, "TPUCTL_TRAINER_TEST_STEP_PAUSE": "0.5"}
    with Watched([*args[:4], "--verbose", *args[4:]], env=paused, cwd=tmp_path) as proc:
        proc.wait_line("[chief] progress: 18/20", "the cluster's step 18", after="[chief] epoch-start: 1/2")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.finish(timeout=120) == 130, proc.tail()
        lines = [proc.wait_line(f"[{name}] preempted: ", f"the {name}'s backup", stream="err")
                 for name in ("chief", "worker 0")]
    steps = {re.search(r" epoch (\d+) step (\d+)/20", line).groups() for line in lines}
    assert len(steps) == 1, lines                       # one step, agreed by both workers
    [(epoch, step)] = steps
    done = int(epoch) * 20 - 20 + int(step)             # steps the backup holds
    # the signal landed in step 18's pause: the agreed step is 19 or 20 (or, on a machine slow to pass it on, the
    # next epoch's first); whichever, an epoch whose last step was trained was validated and shown
    assert 19 <= done <= 21, lines
    assert ("[chief] epoch-end: 1/2 " in "\n".join(proc.out)) is (done >= 20), proc.tail()
    assert "deprecated" not in "\n".join(proc.err), proc.tail()

    with Watched(args, env={**os.environ, **env}, cwd=tmp_path) as proc:
        proc.finish(timeout=300)
    assert proc.returncode == 0, proc.tail()
    shown_epochs = [line.split(":")[0] for line in proc.err if line.startswith("epoch ")]
    assert shown_epochs == (["epoch 2/2"] if done >= 20 else ["epoch 1/2", "epoch 2/2"]), proc.tail()
    assert any(line.startswith("started chief (pid") for line in proc.err)
    assert any(line.startswith("started worker 0 (pid") for line in proc.err)
    # the summary's time is the whole run's, as runs ls and runs show count it (issue 57)
    [took] = [line.split(None, 1)[1] for line in proc.err if line.startswith("  time ")]
    assert took.endswith("s this time)") and "since the run first started" in took, proc.tail()
    export, _ = _result("\n".join(proc.out))
    assert (export / "saved_model.pb").is_file()
    result = json.loads((tmp_path / "runs" / "stopped" / "result.json").read_text())
    assert result["num_workers"] == 2 and result["epochs"] == 2 and result["strategy"] == "multi_worker"
    # the resume and what it cost, in the run's record and `runs show` (the time from the backup to training again)
    [resume] = result["timing"]["resumes"]
    assert resume["from_step"] == done and resume["backup_at"] < resume["resumed_at"], resume
    shown = shown_rows(tools.run_cli(["runs", "show", "stopped"], env=env, cwd=tmp_path, timeout=300).stdout)
    assert f"from the backup of step {done}, training again " in shown["resume 1"], shown
    assert shown["time lost"].endswith("in 1 resume(s) from the backup"), shown


def _plugin_json(url: str, route: str, **query: str):
    """An answer of the profile plugin (``/data/plugin/profile/<route>``), gzip-encoded or not."""
    address = f"{url}data/plugin/profile/{route}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(address, timeout=120) as reply:
        body = reply.read()
        if reply.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    return json.loads(body)


def test_a_profile_captured_on_a_two_worker_run_is_there_for_board(env, tools, tmp_path):
    """`tpuctl train -w 2 --profile-steps 3-4`: the chief captures a TensorFlow profile of its steps 3-4 into the
    run's logs/profile/chief (worker 0, in lockstep with it, says why it captures none: TensorFlow 2.21's profiler
    crashed it; trainer/profiling.py); `tpuctl board RUN` says where the profile is, and its TensorBoard's Profile tab
    (tensorboard-plugin-profile in the trainer environment) lists the capture and opens it: the overview page
    converted from the capture shows the steps' TensorFlow ops."""
    proc = tools.run_cli(["train", "-w", "2", "--epochs", "1", "--name", "profiled", "--profile-steps", "3-4", "--",
                          "--steps_per_epoch", "6"], env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no profile from worker-0" in proc.stderr, proc.stderr[-3000:]
    logs = tmp_path / "runs" / "profiled" / "logs"
    traces = list((logs / "profile" / "chief" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(traces) == 1 and traces[0].stat().st_size > 1000, traces
    assert not (logs / "profile" / "worker-0").exists()
    with Watched([str(tools.ops_python), "-m", "tpuctl.cli", "board", "profiled"], env={**os.environ, **env},
                 cwd=tmp_path, preexec_fn=sigint_as_ctrl_c) as board:
        try:
            url = board.wait_line("TensorBoard on ", "TensorBoard's address").rsplit(": ", 1)[1].split()[0]
            with urllib.request.urlopen(url + "data/plugins_listing", timeout=30) as reply:
                plugins = json.loads(reply.read())
            assert "profile" in plugins, plugins      # the Profile tab (tensorboard-plugin-profile, trainer env)
            line = board.wait_line("profiles: ", "where the profiles are")
            assert "profile/chief" in line, line
            # the Profile tab's own questions (xprof 2.24.2 profile_plugin.py: /runs, /run_tools, /hosts, /data):
            # the capture is a run, its tools are listed and one of them is converted from the xplane
            runs = _plugin_json(url, "runs")
            [run] = [r for r in runs if r.startswith("profile/chief/")]
            assert "trace_viewer@" in _plugin_json(url, "run_tools", run=run), run   # the trace (TPU/GPU: same)
            [host] = [h["hostname"] for h in _plugin_json(url, "hosts", run=run, tag="overview_page")]
            overview = _plugin_json(url, "data", run=run, tag="overview_page", host=host)
            # converted from the capture: the share of host time in TensorFlow ops (the steps' own)
            assert float(overview[0]["p"]["host_tf_op_percent"].rstrip("%")) > 0, overview[0]["p"]
        finally:      # Ctrl-C: tpuctl stops its TensorBoard (a kill would leave it running)
            if board.proc.poll() is None:
                board.proc.send_signal(signal.SIGINT)
        assert board.finish(timeout=60) == 130
