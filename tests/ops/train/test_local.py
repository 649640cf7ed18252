"""`tpuctl train --target local` with a fake trainer interpreter: defaults, streaming, exit codes, clusters,
failure of one worker, Ctrl-C. The real trainer runs in test_real_trainer.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from runfixtures import planned


def _log(env, name):
    return json.loads((Path(env["FAKE_LOG_DIR"]) / name).read_text())


def test_no_arguments_uses_demo_data_once_and_prints_export_and_accuracy(fake_trainer, tools, tmp_path):
    proc = tools.run_cli(["train", "--verbose"], env=fake_trainer, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    demo = Path(fake_trainer["TPUCTL_CACHE_DIR"]) / "demo-data"
    assert (demo / "manifest.json").is_file()
    chief = _log(fake_trainer, "chief-0.json")
    args = chief["args"]
    assert args[args.index("--distribution_strategy") + 1] == "auto"
    assert args[args.index("--data_dir") + 1] == str(demo)
    model_dir = Path(args[args.index("--model_dir") + 1])
    assert model_dir.parent == tmp_path / "runs"
    assert chief["tf_config"] == {}
    assert chief["env"]["TF_USE_LEGACY_KERAS"] == "1"
    assert f"SavedModel: {model_dir}/export/small_cnn/1" in proc.stdout
    assert "validation accuracy: 0.8750" in proc.stdout
    assert "chief-0: epoch 1/1" in proc.stdout  # trainer output streamed through (--verbose)

    # Second run: the cached demo data is reused, not generated again.
    proc = tools.run_cli(["train"], env=fake_trainer, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    calls = (Path(fake_trainer["FAKE_LOG_DIR"]) / "sample_data.calls").read_text().splitlines()
    assert len(calls) == 1


def test_incomplete_demo_data_is_regenerated(fake_trainer, tools, tmp_path):
    assert tools.run_cli(["train"], env=fake_trainer, cwd=tmp_path).returncode == 0
    demo = Path(fake_trainer["TPUCTL_CACHE_DIR"]) / "demo-data"
    (demo / "digits-validation-00000-of-00001.tfrecord").unlink()
    proc = tools.run_cli(["train"], env=fake_trainer, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (demo / "digits-validation-00000-of-00001.tfrecord").is_file()
    calls = (Path(fake_trainer["FAKE_LOG_DIR"]) / "sample_data.calls").read_text().splitlines()
    assert len(calls) == 2
    assert not [p for p in demo.parent.iterdir() if p.name.startswith("demo-data.partial")]


def test_concurrent_first_runs_share_one_demo_dataset(fake_trainer, tools, tmp_path):
    procs = [subprocess.Popen([str(tools.ops_python), "-m", "tpuctl.cli", "train"], env={**os.environ, **fake_trainer},
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "validation accuracy: 0.8750" in out
    cache = Path(fake_trainer["TPUCTL_CACHE_DIR"])
    assert [p.name for p in cache.iterdir()] == ["demo-data"]  # no partial folders left behind
    assert (cache / "demo-data" / "manifest.json").is_file()


def test_stack_defaults_flags_and_passthrough(fake_trainer, tools, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"project": "my-project-1", "region": "us-central1",
                                   "buckets": {"data": "d-bucket", "artifacts": "a-bucket"},
                                   "tfhub_cache_dir": "gs://h-bucket/model-cache"}))
    proc = tools.run_cli(["train", "--outputs", str(outputs), "--data-dir", str(data), "--model-dir",
                          str(tmp_path / "m"), "--epochs", "2", "--batch-size", "16", "--hub-handle",
                          "https://tfhub.dev/x/y/1", "--hub-cache-dir", "/tmp/hubcache", "--",
                          "--learning_rate", "0.01"], env=fake_trainer, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    chief = _log(fake_trainer, "chief-0.json")
    assert chief["args"] == [
        "--distribution_strategy", "auto", "--data_dir", str(data), "--model_dir", str(tmp_path / "m"),
        "--model", "hub", "--hub_handle", "https://tfhub.dev/x/y/1", "--train_epochs", "2",
        "--train_batch_size", "16", "--learning_rate", "0.01",
    ]
    assert chief["env"]["TFHUB_CACHE_DIR"] == "/tmp/hubcache"
    assert not (Path(fake_trainer["FAKE_LOG_DIR"]) / "sample_data.calls").exists()

    # Without overrides the stack's buckets and hub cache are the defaults.
    proc = tools.run_cli(["train", "--outputs", str(outputs), "--accelerator", "gpu-t4x2"],
                         env=fake_trainer, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    args = _log(fake_trainer, "chief-0.json")["args"]
    assert args[:4] == ["--distribution_strategy", "gpu", "--num_gpus", "2"]
    assert args[args.index("--data_dir") + 1] == "gs://d-bucket"
    assert args[args.index("--model_dir") + 1].startswith("gs://a-bucket/runs/")
    assert _log(fake_trainer, "chief-0.json")["env"]["TFHUB_CACHE_DIR"] == "gs://h-bucket/model-cache"


def test_trainer_exit_code_and_error_line_are_passed_on(fake_trainer, tools, tmp_path):
    env = dict(fake_trainer, FAKE_MODE="fail")
    proc = tools.run_cli(["train", "--accelerator", "tpu-v3-8"], env=env, cwd=tmp_path)
    assert proc.returncode == 3
    # one error line, the trainer's own (it knows the cause); the supervisor's "exited with code 3; last
    # stderr line: error: …" only repeated it
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert errors == ["error: --distribution_strategy tpu: no TPU found (fake)"], proc.stderr
    assert _log(env, "chief-0.json")["args"][:2] == ["--distribution_strategy", "tpu"]
    # the run folder claimed for it is given back: a failed run leaves no empty runs/<timestamp>
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


@pytest.mark.parametrize("args, fragment", [
    (["--accelerator", "tpu-v9-8"], "unknown accelerator 'tpu-v9-8'"),
    (["--accelerator", "tpu-v3-8", "--workers", "2"], "--workers 2 cannot be combined with tpu-v3-8"),
    (["--workers", "0"], "--workers"),
    (["--workers", "30000"], "--workers"),
    (["--epochs", "-3"], "--epochs"),
    (["--batch-size", "65537"], "--batch-size"),          # the trainer's own bound (trainer.flags.TASK_BOUNDS)
    (["--target", "vertex", "--dry-run", "--poll-seconds", "nan"], "--poll-seconds"),
    (["--model-dir", "{file}/sub"], "is a file, not a folder"),
    (["--data-dir", "/" + "d" * 5000], "longer than the OS allows"),
    (["--data-dir", "/does/not/exist"], "data folder /does/not/exist does not exist"),
    (["--model", "hub"], "--model hub needs --hub-handle"),
    (["--zone", "us-central1-a"], "--zone only applies to --target tpu-vm"),
    (["stray"], "unexpected argument 'stray'; trainer flags go after `--`"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_runs(fake_trainer, tools, tmp_path, args, fragment):
    (tmp_path / "a-file").write_text("not a folder")
    args = [a.replace("{file}", str(tmp_path / "a-file")) for a in args]
    proc = tools.run_cli(["train", *args], env=fake_trainer, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # exactly one line
    assert proc.stderr.startswith("error: ") and fragment in proc.stderr
    assert not Path(fake_trainer["FAKE_LOG_DIR"]).exists()  # no trainer, no demo data generation
    assert not (tmp_path / "runs").exists()


def test_missing_trainer_environment_is_a_clear_error(tools, tmp_path):
    proc = tools.run_cli(["train"], env={"TPUCTL_TRAINER_PYTHON": str(tmp_path / "nope" / "python"),
                                         "TPUCTL_CACHE_DIR": str(tmp_path / "c")}, cwd=tmp_path)
    assert proc.returncode == 2
    assert "trainer interpreter" in proc.stderr and "scripts/setup.sh" in proc.stderr


def test_trainer_interpreter_that_cannot_run_is_a_clear_error(tools, tmp_path):
    python = tmp_path / "python"
    python.write_text("not a program")  # exists, not executable
    proc = tools.run_cli(["train"], env={"TPUCTL_TRAINER_PYTHON": str(python), "TPUCTL_CACHE_DIR": str(tmp_path / "c")},
                         cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == f"error: cannot start {python}: Permission denied"


def test_two_workers_get_a_chief_worker_tf_config_on_free_local_ports(fake_trainer, tools, tmp_path):
    proc = tools.run_cli(["train", "--verbose", "--workers", "2", "--model-dir", str(tmp_path / "m")], env=fake_trainer,
                         cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    chief, worker = _log(fake_trainer, "chief-0.json"), _log(fake_trainer, "worker-0.json")
    cluster = chief["tf_config"]["cluster"]
    assert worker["tf_config"]["cluster"] == cluster
    assert set(cluster) == {"chief", "worker"} and len(cluster["chief"]) == len(cluster["worker"]) == 1
    hosts = cluster["chief"] + cluster["worker"]
    assert all(h.startswith("127.0.0.1:") for h in hosts) and len(set(hosts)) == 2
    assert chief["tf_config"]["task"] == {"type": "chief", "index": 0}
    assert worker["tf_config"]["task"] == {"type": "worker", "index": 0}
    for record in (chief, worker):
        assert record["args"][:2] == ["--distribution_strategy", "multi_worker"]
        assert record["pgid"] == record["pid"]  # each in its own process group
    assert "[chief] chief-0: epoch 1/1" in proc.stdout and "[worker 0] worker-0: epoch 1/1" in proc.stdout
    assert "validation accuracy: 0.8750" in proc.stdout


def _start_cluster(tools, env, cwd, workers=2):
    proc = subprocess.Popen([str(tools.ops_python), "-m", "tpuctl.cli", "train", "--workers", str(workers),
                             "--model-dir", str(cwd / "m")], env={**os.environ, **env}, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = Path(env["FAKE_LOG_DIR"])
    labels = ["chief-0"] + [f"worker-{i}" for i in range(workers - 1)]
    tools.wait_for(lambda: all((log / f"{label}.ready").exists() for label in labels),
                   f"every worker's ready file ({', '.join(labels)})", proc=proc)
    pids = {label: json.loads((log / f"{label}.json").read_text())["pid"] for label in labels}
    return proc, pids


def test_killed_worker_stops_the_others_fast_and_names_the_worker(fake_trainer, tools, tmp_path):
    env = dict(fake_trainer, FAKE_MODE="hang")
    proc, pids = _start_cluster(tools, env, tmp_path, workers=3)
    os.kill(pids["worker-0"], signal.SIGKILL)
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 15   # within a poll and the peers' exit, not when the 30 s wait gives up
    assert proc.returncode == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: worker 0 ") and f"(pid {pids['worker-0']})" in last and "SIGKILL" in last, last
    assert "stopped chief, worker 1" in last
    assert not any(tools.pid_alive(pid) for pid in pids.values())


def test_a_worker_that_stops_answering_ends_the_run_naming_it(fake_trainer, tools, tmp_path):
    """Issue 57: a worker whose process stopped (SIGSTOP; a parameter-server coordinator then waited for its steps
    for good) ends the run after the supervisor's bound, one line naming it, every process gone (the stopped one is
    sent SIGCONT with its SIGTERM, so it ends at once, not after the grace)."""
    from tpuctl.services.supervisor import STOPPED_SECONDS

    env = dict(fake_trainer, FAKE_MODE="hang")
    proc, pids = _start_cluster(tools, env, tmp_path, workers=3)
    os.kill(pids["worker-0"], signal.SIGSTOP)
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert STOPPED_SECONDS <= time.monotonic() - t0 < STOPPED_SECONDS + 10
    assert proc.returncode == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: worker 0 (pid {pids['worker-0']}) stopped answering"), last
    assert "stopped chief, worker 1" in last
    assert not any(tools.pid_alive(pid) for pid in pids.values())


def test_a_worker_that_ended_well_before_a_failed_run_is_named(fake_trainer, tools, tmp_path):
    """Issue 56 (a fresh trial): a worker's plug-in ended its process with status 0; the chief failed waiting for it,
    and the run ended with no line naming the worker."""
    env = dict(fake_trainer, FAKE_MODE="worker-leaves")
    proc = tools.run_cli(["train", "--workers", "2", "--model-dir", str(tmp_path / "m")], env=env, cwd=tmp_path,
                         timeout=60)
    assert proc.returncode == 2, proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if "exit status 0" in line]
    assert line.startswith("worker 0 (pid ") and "before the run finished" in line, proc.stderr
    assert "error: the peer stopped sending heartbeats (fake)" in proc.stderr


def test_worker_that_exits_with_an_error_is_reported_with_its_last_line(fake_trainer, tools, tmp_path):
    env = dict(fake_trainer, FAKE_MODE="worker-fails")
    proc = tools.run_cli(["train", "--workers", "2", "--model-dir", str(tmp_path / "m")], env=env, cwd=tmp_path,
                         timeout=60)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert errors == ["[worker 0] error: Collective ops is aborted by: peer went away (fake)"], proc.stderr
    chief = _log(env, "chief-0.json")
    assert not tools.pid_alive(chief["pid"])


# SIGHUP: the terminal closed; SIGQUIT: Ctrl-\ (issue 56, a fresh trial: tpuctl dumped core, its workers ran on)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_ctrl_c_stops_every_worker(fake_trainer, tools, tmp_path, sig):
    env = dict(fake_trainer, FAKE_MODE="hang")
    proc, pids = _start_cluster(tools, env, tmp_path)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    last = err.strip().splitlines()[-1]        # the signal, then the processes it stopped
    assert "interrupted" in last and signal.Signals(sig).name in last and last.endswith("chief, worker 0"), err
    assert not any(tools.pid_alive(pid) for pid in pids.values())


def test_worker_ignoring_sigterm_is_killed_after_the_grace_period(fake_trainer, tools, tmp_path):
    env = dict(fake_trainer, FAKE_MODE="ignore-term")
    proc, pids = _start_cluster(tools, env, tmp_path)
    os.kill(pids["worker-0"], signal.SIGKILL)
    out, err = proc.communicate(timeout=60)      # the supervisor's 15 s grace, then SIGKILL
    assert proc.returncode == 1
    assert not tools.pid_alive(pids["chief-0"])



def test_default_run_folder_is_never_reused(monkeypatch, tmp_path):
    from tpuctl.services.runs import local, spec

    monkeypatch.setattr(spec, "timestamp", lambda: "20261122-030000")
    monkeypatch.chdir(tmp_path)
    base = tmp_path / "runs"

    def fresh():
        return planned(claim=True).model_dir

    # each plan claims (creates) its folder, so runs started in the same second never share one
    assert fresh() == str(base / "20261122-030000")
    assert fresh() == str(base / "20261122-030000-2")
    assert fresh() == str(base / "20261122-030000-3")
    assert all((base / n).is_dir() for n in ("20261122-030000", "20261122-030000-2", "20261122-030000-3"))
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        claimed = list(pool.map(lambda _: planned(claim=True), range(16)))
    assert len({c.model_dir for c in claimed}) == 16 and str(base / "20261122-030000") not in {c.model_dir for c in claimed}
    # a run that fails before writing anything gives its claimed folder back
    local.release(claimed[0])
    assert not Path(claimed[0].model_dir).exists()
    (Path(claimed[1].model_dir) / "tpuctl-run.json").write_text("{}")
    local.release(claimed[1])
    assert Path(claimed[1].model_dir).is_dir()   # not empty: kept


def test_a_trainer_that_ends_well_without_its_completion_record_is_a_failed_run(fake_trainer, tools, tmp_path):
    """Issue 56: exit status 0 is not success. A trainer that ends without printing its completion record (a plug-in
    that called os._exit(0), say) is one line, exit 1, no result shown; the run is recorded as failed, and `runs ls`
    lists it so."""
    env = {**fake_trainer, "FAKE_MODE": "no-result"}
    proc = tools.run_cli(["train", "--name", "r-1", "--epochs", "1"], env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = [l for l in proc.stderr.splitlines() if l.startswith("error: ")]
    assert "exit status 0 but without its completion record" in line and "--name r-1" in line, line
    assert "SavedModel" not in proc.stdout and "run summary" not in proc.stderr
    listed = tools.run_cli(["runs", "ls"], env=env, cwd=tmp_path)
    [row] = [l for l in listed.stdout.splitlines() if "r-1" in l]
    assert "failed" in row, listed.stdout


def test_a_trainer_that_said_why_and_then_ended_well_is_one_line(fake_trainer, tools, tmp_path):
    """Issue 56 (a fifth trial): the trainer's own error line, then a plug-in's exit handler ended the process with
    status 0: "ended with exit status 0 but without its completion record" was a second error line. The trainer's
    line is the one; the run failed all the same."""
    env = {**fake_trainer, "FAKE_MODE": "said-then-exit-0"}
    proc = tools.run_cli(["train", "--name", "r-2", "--epochs", "1"], env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = [l for l in proc.stderr.splitlines() if "error: " in l]
    assert "raised ValueError: boom" in line, proc.stderr
    listed = json.loads(tools.run_cli(["runs", "ls", "--json"], env=env, cwd=tmp_path).stdout)
    assert [(row["run"], row["state"]) for row in listed] == [("r-2", "failed")], listed


@pytest.mark.parametrize("mode, key", [
    ("empty-export", "saved_model.pb is missing"),
    ("junk-export", "saved_model.pb is not a SavedModel"),
    ("no-signature", "holds no graph with the serving_default signature"),     # 4 bytes: a trial's forgery
    ("empty-variables", "its data shards are empty"),                          # a copied export, cut short
    ("no-result-file", "no readable result.json"),
    ("other-record", "is not the record the trainer printed"),
    ("minimal-record", "it has no 'exported_epoch'"),                          # a fifth trial: two fields only
    ("bad-value", "its 'val_accuracy' is no value the trainer writes"),
    ("other-model", "it is the record of a run of --model model.py:build, not of small_cnn"),   # a sixth trial
])
def test_a_completion_record_whose_export_is_not_there_is_a_failed_run(fake_trainer, tools, tmp_path, mode, key):
    """Issue 56 (two fresh trials): a plug-in that wrote a copied result.json, printed the completion record and left
    an empty export folder (or a one-byte saved_model.pb, or printed a record and no result.json) made a finished run
    with its accuracy. The record must be the run's result.json and its export a SavedModel in the run's folder: else
    one line, exit 1, nothing shown as exported, the run listed as failed."""
    env = {**fake_trainer, "FAKE_MODE": mode}
    proc = tools.run_cli(["train", "--name", "forged", "--epochs", "1"], env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = [l for l in proc.stderr.splitlines() if l.startswith("error: ")]
    assert "completion record does not stand" in line and key in line, line
    assert "SavedModel" not in proc.stdout and "run summary" not in proc.stderr
    listed = json.loads(tools.run_cli(["runs", "ls", "--json"], env=env, cwd=tmp_path).stdout)
    assert [(row["run"], row["state"]) for row in listed] == [("forged", "failed")], listed


def test_a_failed_run_with_a_result_file_is_listed_as_failed(fake_trainer, tools, tmp_path):
    """Issue 56 (a fresh trial): a plug-in's detached child wrote a copied result.json while its failed run was being
    stopped, and `runs ls` then listed the run as finished at the copied accuracy."""
    env = {**fake_trainer, "FAKE_MODE": "result-then-fail"}
    proc = tools.run_cli(["train", "--name", "broke", "--epochs", "1"], env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    listed = json.loads(tools.run_cli(["runs", "ls", "--json"], env=env, cwd=tmp_path).stdout)
    assert [(row["run"], row["state"]) for row in listed] == [("broke", "failed")], listed
    assert (tmp_path / "runs" / "broke" / "result.json.unproven").is_file()


def test_a_record_printed_after_the_trainers_changes_nothing(fake_trainer, tools, tmp_path):
    """Issue 56 (a fresh trial): an atexit handler printed a second completion record with a better accuracy, and
    the run's last line said 1.0000 under a summary that said 0.5469. The first record stands."""
    env = {**fake_trainer, "FAKE_MODE": "second-record"}
    proc = tools.run_cli(["train", "--name", "late", "--epochs", "1"], env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "validation accuracy: 0.8750" in proc.stdout + proc.stderr and "1.0000" not in proc.stdout + proc.stderr


def test_a_diverged_run_is_listed_as_failed(fake_trainer, tools, tmp_path):
    """Issue 56: a run whose loss became NaN ends with the trainer's line, exit 4, after writing its checkpoints; `runs
    ls` said "no runs" beside its folder (only an interrupted run or one without its completion record was
    recorded). Every failed run that left work behind is listed as failed."""
    env = {**fake_trainer, "FAKE_MODE": "diverged"}
    proc = tools.run_cli(["train", "--name", "nan-1", "--epochs", "1"], env=env, cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert [l for l in proc.stderr.splitlines() if l.startswith("error: ")] == [
        "error: training diverged at epoch 1 step 3/5: the loss is nan (fake)"], proc.stderr
    listed = json.loads(tools.run_cli(["runs", "ls", "--json"], env=env, cwd=tmp_path).stdout)
    assert [(row["run"], row["state"]) for row in listed] == [("nan-1", "failed")], listed


def test_a_local_dry_run_shows_the_processes_and_creates_nothing(fake_trainer, tools, tmp_path):
    proc = tools.run_cli(["train", "--dry-run", "--workers", "2", "--epochs", "1"], env=fake_trainer, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert [p["label"] for p in plan["processes"]] == ["chief", "worker 0"]
    assert plan["processes"][0]["command"][3:5] == ["--distribution_strategy", "multi_worker"]
    assert not (tmp_path / "runs").exists() and not Path(fake_trainer["FAKE_LOG_DIR"]).exists()

