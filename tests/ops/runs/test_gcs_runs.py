"""gs:// runs end to end, the trainer's I/O through TensorFlow's own GCS client: `tpuctl train --data-dir gs://…
--model-dir gs://…` (data read, checkpoints, backups, logs, the SavedModel export), a Ctrl-C mid-run and a re-run that
continues from the gs:// backup, then `runs ls|show|compare` and `board` on those runs.

The bucket is the project's storage emulator behind tests/fixtures/tfgcsfixtures.py's TLS front (TensorFlow ignores
STORAGE_EMULATOR_HOST; it follows https_proxy and trusts the test CA); the ops side reads the same bucket through
google-cloud-storage and STORAGE_EMULATOR_HOST. Small on purpose (a CI budget): 16x16 digits, two or three steps an
epoch, one validation batch.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request

import pytest

from ground.envs import ops_python

from clifixtures import invoke, run_process, sigint_as_ctrl_c
from procfixtures import Watched, wait_for
from runfixtures import trainer_digits
from tfgcsfixtures import tf_storage

pytestmark = pytest.mark.slow

BUCKET = "tf-runs"
RUNS = f"gs://{BUCKET}/runs"
#: the trainer's flags after `--`: few steps, one validation batch (the digits' validation split is 360 images)
SMALL = ["--steps_per_epoch", "2", "--validation_batch_size", "360", "--seed", "1"]


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    """The bucket (its emulator and TLS front) holding the digits dataset at gs://tf-runs/data."""
    root = tmp_path_factory.mktemp("gcs-runs")
    python, data = trainer_digits(root)
    with tf_storage(root / "ca", [BUCKET]) as storage:
        bucket = storage.client.bucket(BUCKET)
        for file in data.iterdir():
            bucket.blob(f"data/{file.name}").upload_from_filename(str(file))
        storage.env.update(TPUCTL_TRAINER_PYTHON=str(python), TPUCTL_CACHE_DIR=str(root / "cache"), COLUMNS="200")
        yield storage


def train_args(name: str, epochs: int, *trainer: str, verbose: bool = False) -> list[str]:
    return ["train", *(["--verbose"] if verbose else []), "--data-dir", f"gs://{BUCKET}/data", "--model-dir",
            f"{RUNS}/{name}", "--epochs", str(epochs), "--", *SMALL, *trainer]


def result(storage, name: str) -> dict | None:
    blob = storage.client.bucket(BUCKET).get_blob(f"runs/{name}/result.json")
    return None if blob is None else json.loads(blob.download_as_bytes())


@pytest.fixture(scope="module")
def first(storage, tmp_path_factory):
    """A run of one epoch, uninterrupted: what `tpuctl train` printed, and the requests TensorFlow made."""
    before = len(storage.front.seen)
    proc = run_process(train_args("first", 1), env=storage.env, cwd=tmp_path_factory.mktemp("first"), timeout=600)
    return proc, storage.front.seen[before:]


@pytest.fixture(scope="module")
def second(storage, tmp_path_factory):
    """A run of two epochs stopped by Ctrl-C once its first step backup is in the bucket, then run again."""
    args = train_args("second", 2, "--backup_every_steps", "1", verbose=True)   # the trainer's lines too
    cwd = tmp_path_factory.mktemp("second")
    backup = storage.client.bucket(BUCKET)
    # tf.train.CheckpointManager writes the `checkpoint` state file last: a backup that can be restored
    with Watched([str(ops_python()), "-m", "tpuctl.cli", *args], env={**os.environ, **storage.env}, cwd=cwd,
                 preexec_fn=sigint_as_ctrl_c) as proc:
        proc.wait(lambda: backup.get_blob("runs/second/checkpoints/backup/chief/checkpoint"),
                  "the first step backup in the bucket")
        proc.proc.send_signal(signal.SIGINT)
        proc.finish(timeout=120)
    interrupted = (proc.returncode, proc.out, proc.err, result(storage, "second"))
    rerun = run_process(args, env=storage.env, cwd=cwd, timeout=600)
    return interrupted, rerun


def test_train_reads_data_and_writes_its_run_and_export_to_gs(storage, first):
    proc, seen = first
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = result(storage, "first")
    export = f"{RUNS}/first/export/small_cnn/1"
    assert done["export_dir"] == export and done["epochs"] == 1 and export in proc.stdout
    names = {b.name for b in storage.client.list_blobs(BUCKET, prefix="runs/first/")}
    assert {"runs/first/export/small_cnn/1/saved_model.pb", "runs/first/export/small_cnn/1/variables/variables.index",
            "runs/first/checkpoints/ckpt-0001.index"} <= names
    assert any(n.startswith("runs/first/logs/train/events.out.tfevents.") for n in names)
    assert not any(".writing" in n for n in names)            # the export's staging folder was renamed away
    # all of it through TensorFlow's own client: the data's shards read as media, the staging folder renamed
    # after asking the bucket's layout, objects uploaded
    asked = {(s.method, s.host, s.target.split("?")[0]) for s in seen}
    assert ("GET", "storage.googleapis.com", f"/{BUCKET}/data%2Fdigits-train-00000-of-00002.tfrecord") in asked
    assert ("GET", "www.googleapis.com", f"/storage/v1/b/{BUCKET}/storageLayout") in asked
    assert any(m == "POST" and "/rewriteTo/" in t and "export" in t for m, _, t in asked)
    assert not storage.front.refused and not storage.front.failed


def test_ctrl_c_mid_run_then_a_rerun_continues_from_the_gs_backup(storage, second):
    (code, out, err, finished), rerun = second
    assert code == 130, "\n".join(err[-20:])
    assert finished is None                                    # stopped before its result
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    resumed = [line for line in rerun.stdout.splitlines() if line.startswith("resuming: ")]
    assert len(resumed) == 1 and not resumed[0].startswith("resuming: 0 "), rerun.stdout[-2000:]
    assert result(storage, "second")["epochs"] == 2
    assert not storage.front.refused and not storage.front.failed


def test_runs_ls_show_and_compare_read_gs_runs(storage, first, second):
    env = storage.env
    listed = invoke(["runs", "ls", "--dir", RUNS, "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    rows = {row["run"]: row for row in json.loads(listed.stdout)}
    assert set(rows) == {"first", "second"} and not any(row["problem"] for row in rows.values())
    assert (rows["first"]["epochs"], rows["second"]["epochs"]) == (1, 2)
    shown = invoke(["runs", "show", "first", "--dir", RUNS], env=env)
    assert shown.exit_code == 0, shown.output
    curves = {line.split()[0] for line in shown.stdout.splitlines() if "epoch_" in line}
    assert {"train/epoch_loss", "validation/epoch_accuracy"} <= curves, shown.stdout
    compared = invoke(["runs", "compare", "first", "second", "--dir", RUNS], env=env)
    assert compared.exit_code == 0, compared.output
    assert "train/epoch_loss" in compared.stdout and "final/val_accuracy" in compared.stdout


def test_board_serves_the_scalars_of_every_gs_run(storage, first, second, tmp_path):
    with Watched([str(ops_python()), "-m", "tpuctl.cli", "board", "--dir", RUNS], env={**os.environ, **storage.env},
                 cwd=tmp_path, preexec_fn=sigint_as_ctrl_c) as proc:
        try:
            line = proc.wait_line("TensorBoard on ", "TensorBoard's address")
            url = line.rsplit(": ", 1)[1].split()[0]

            def tags() -> dict | None:
                with urllib.request.urlopen(url + "data/plugin/scalars/tags", timeout=10) as resp:
                    runs = json.loads(resp.read())
                train = {run for run, t in runs.items() if run.endswith("/logs/train") and "epoch_loss" in t}
                return runs if train == {"first/logs/train", "second/logs/train"} else None

            # TensorBoard loads event files in the background: asked until both runs' curves are there
            wait_for(tags, "both gs:// runs' training loss in TensorBoard", interval=1)
        finally:      # Ctrl-C: tpuctl stops its TensorBoard (a kill would leave it running)
            if proc.proc.poll() is None:
                proc.proc.send_signal(signal.SIGINT)
        assert proc.finish(timeout=60) == 130      # stopped as a Ctrl-C stops it (its TensorBoard too: nothing left)
    assert not storage.front.refused and not storage.front.failed
