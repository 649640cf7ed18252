"""An interrupted `hub-cache add` (a real process, SIGKILL or SIGINT) is never mistaken for a model.

tensorflow_hub uses any non-empty <TFHUB_CACHE_DIR>/<sha1>/ as the model (resolver.py atomic_download checks
only that the folder exists and lists something), so the folder must be complete or detectably not:
`tpuctl doctor`'s hub check, `hub-cache ls` and the trainer's preflight say INCOMPLETE with the repair
command, re-running `hub-cache add` repairs it, and the real tensorflow_hub then loads it offline (hub.load and
hub.KerasLayer of a local copy of the uploaded prefix, network blocked) to exactly what the module computes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import textwrap

import pytest

from ground.envs import ops_python, trainer_env, trainer_python

from clifixtures import invoke, sigint_as_ctrl_c
from hubfixtures import build_tiny_module, download_prefix, make_fake_model, slow_emulator
from netfixtures import BLOCK_NETWORK
from procfixtures import wait_for

needs_trainer = pytest.mark.skipif(not trainer_python().exists(), reason="trainer environment not set up")


def names(client, prefix="model-cache/"):
    return sorted(b.name for b in client.list_blobs("hub-bkt", prefix=prefix))


def start_add(handle, source, *extra):
    return subprocess.Popen([str(ops_python()), "-m", "tpuctl.cli", "hub-cache", "add", handle, "--from", str(source),
                             "--bucket", "hub-bkt", "--workers", "1", *extra],
                            env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_ctrl_c)


def wait_for_objects(client, prefix, count, proc):
    """Until ``count`` objects are under ``prefix`` (an object appears whole or not at all)."""
    wait_for(lambda: len(names(client, prefix)) >= count, f"{count} object(s) under {prefix}", proc=proc,
             interval=0.02)


def trainer_preflight(handle, cache_dir):
    return subprocess.run([str(trainer_python()), "-m", "trainer.hubcheck", handle, "--cache_dir", str(cache_dir)],
                          env=trainer_env(), capture_output=True, text=True, timeout=300)


def doctor_hub(client, handle):
    from bootstrap.doctor import check_hub_cache

    [check] = check_hub_cache(client, "hub-bkt", "model-cache", [handle])
    return check


LOAD_OFFLINE = BLOCK_NETWORK + textwrap.dedent("""
    import json, sys

    import tensorflow as tf
    import tensorflow_hub as hub

    handle, original = sys.argv[1], sys.argv[2]
    images = tf.random.stateless_uniform([2, 5, 5, 3], seed=[3, 4])
    loaded = hub.load(handle)                       # resolved through TFHUB_CACHE_DIR only
    layer = hub.KerasLayer(handle, trainable=False)
    reference = tf.saved_model.load(original)
    # control: a handle whose sha1 folder is not in the cache must fail (it would need the network)
    try:
        hub.load(handle + "/")
        control = "loaded"
    except Exception as exc:
        control = type(exc).__name__
    print(json.dumps({
        "control": control,
        "load": loaded(images).numpy().tolist(),
        "keras": layer(images).numpy().tolist(),
        "reference": reference(images).numpy().tolist(),
    }))
""")


@pytest.mark.slow
@needs_trainer
def test_killed_add_is_reported_incomplete_then_repaired_and_loads_offline(gcs, tmp_path):
    module = build_tiny_module(tmp_path / "module")
    handle = "https://tfhub.dev/tpuctl-tests/killed/1"
    key = hashlib.sha1(handle.encode()).hexdigest()
    files = [p for p in module.rglob("*") if p.is_file()]

    # slow server-side copies: kill the process once the first file is in <sha1>/ (copy phase)
    with slow_emulator(rewrite=1.0):
        proc = start_add(handle, module)
        wait_for_objects(gcs, f"model-cache/{key}/", 1, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    in_folder = names(gcs, f"model-cache/{key}/")
    assert 1 <= len(in_folder) < len(files)                 # a partial folder: what tensorflow_hub would load
    assert f"model-cache/{key}/.tpuctl-manifest.json" not in in_folder

    repair = f"tpuctl hub-cache add {handle} --bucket hub-bkt --prefix model-cache"
    check = doctor_hub(gcs, handle)
    assert check.status == "fail" and "INCOMPLETE" in check.detail and "no .tpuctl-manifest.json" in check.detail
    assert check.line().endswith(f"-> fix: {repair}")
    ls = invoke(["hub-cache", "ls", "--bucket", "hub-bkt"])
    assert "INCOMPLETE (no .tpuctl-manifest.json" in ls.stdout and "repair: tpuctl hub-cache add" in ls.stdout

    # the trainer's preflight on a copy of the bucket prefix (as a worker sees it) refuses it in one line
    broken = download_prefix(gcs, "hub-bkt", "model-cache", tmp_path / "broken-copy")
    pre = trainer_preflight(handle, broken)
    assert pre.returncode == 2, pre.stderr[-2000:]
    [line] = [x for x in pre.stderr.splitlines() if x.startswith("error: ")]   # TF may log warnings too
    assert line.startswith("error: ") and "INCOMPLETE" in line and f"repair: tpuctl hub-cache fetch {handle}" in line

    # re-running add repairs: the killed run's verified staged objects are reused, nothing re-sent
    r = invoke(["hub-cache", "add", handle, "--from", str(module), "--bucket", "hub-bkt"])
    assert r.exit_code == 0, r.output
    assert "0 uploaded" in r.stdout and "resumed" in r.stdout and "staging object(s) removed" in r.stdout
    assert "TFHUB_CACHE_DIR=gs://hub-bkt/model-cache" in r.stdout
    assert names(gcs, "model-cache/.staging/") == []
    assert doctor_hub(gcs, handle).status == "pass"
    fixed = download_prefix(gcs, "hub-bkt", "model-cache", tmp_path / "fixed-copy")
    assert trainer_preflight(handle, fixed).returncode == 0

    # the real tensorflow_hub, the network blocked: the only way to the model is the repaired cache, and it computes
    # what the module itself computes (hub.load and hub.KerasLayer alike)
    proc = subprocess.run([str(trainer_python()), "-c", LOAD_OFFLINE, handle, str(module)],
                          env=trainer_env({"TFHUB_CACHE_DIR": str(fixed)}), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out["load"]) == 2 and len(out["load"][0]) == 8
    assert out["load"] == out["reference"] and out["keras"] == out["reference"]
    assert out["control"] != "loaded"


def test_killed_while_staging_leaves_nothing_tensorflow_hub_reads(gcs, tmp_path):
    model = make_fake_model(tmp_path / "m")
    for i in range(8):
        (model / "assets" / f"extra-{i}.txt").write_text(str(i) * 100)
    handle = "https://tfhub.dev/tpuctl-tests/staged/1"
    key = hashlib.sha1(handle.encode()).hexdigest()
    with slow_emulator(upload=0.3):
        proc = start_add(handle, model)
        wait_for_objects(gcs, "model-cache/.staging/", 2, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert names(gcs, f"model-cache/{key}/") == []          # tensorflow_hub sees no folder at all
    staged = names(gcs, "model-cache/.staging/")
    assert staged and all(n.startswith(f"model-cache/.staging/{key}-") for n in staged)
    check = doctor_hub(gcs, handle)
    assert check.status == "fail" and "interrupted upload left" in check.detail
    assert check.fix == f"tpuctl hub-cache add {handle} --bucket hub-bkt --prefix model-cache"
    ls = invoke(["hub-cache", "ls", "--bucket", "hub-bkt"])
    assert "only an interrupted upload" in ls.stdout and "staged object(s)" in ls.stdout

    r = invoke(["hub-cache", "add", handle, "--from", str(model), "--bucket", "hub-bkt"])
    assert r.exit_code == 0, r.output
    assert "resumed" in r.stdout                            # verified staged files were not sent again
    assert names(gcs, "model-cache/.staging/") == []
    assert doctor_hub(gcs, handle).status == "pass"


def test_sigint_stops_submitting_exits_130_and_the_next_run_cleans_up(gcs, tmp_path):
    model = make_fake_model(tmp_path / "m")
    for i in range(60):
        (model / "assets" / f"vocab-{i:02}.txt").write_text(str(i))
    handle = "https://tfhub.dev/tpuctl-tests/sigint/1"
    key = hashlib.sha1(handle.encode()).hexdigest()
    with slow_emulator(upload=0.1):
        proc = start_add(handle, model)
        wait_for_objects(gcs, "model-cache/.staging/", 2, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: interrupted") and "run the same command again" in lines[0]
    staged = names(gcs, "model-cache/.staging/")
    assert names(gcs, f"model-cache/{key}") == []           # only staging objects: no folder, no descriptor
    assert 2 <= len(staged) <= 20 < 64                      # stopped submitting after the current window

    r = invoke(["hub-cache", "add", handle, "--from", str(model), "--bucket", "hub-bkt"])
    assert r.exit_code == 0, r.output
    assert names(gcs, "model-cache/.staging/") == []
    manifest = json.loads(gcs.bucket("hub-bkt").blob(f"model-cache/{key}/.tpuctl-manifest.json").download_as_bytes())
    assert len(manifest["files"]) == 64 and manifest["created_by"] == "tpuctl hub-cache add"


def test_corrupt_object_in_the_folder_is_found_and_repaired(gcs, tmp_path):
    model = make_fake_model(tmp_path / "m")
    handle = "https://tfhub.dev/tpuctl-tests/corrupt/1"
    key = hashlib.sha1(handle.encode()).hexdigest()
    assert invoke(["hub-cache", "add", handle, "--from", str(model), "--bucket", "hub-bkt"]).exit_code == 0
    name = f"model-cache/{key}/variables/variables.data-00000-of-00001"
    gcs.bucket("hub-bkt").blob(name).upload_from_string(b"v" * 5000)     # same size, other bytes
    check = doctor_hub(gcs, handle)
    assert check.status == "fail" and "differ from the manifest" in check.detail
    r = invoke(["hub-cache", "add", handle, "--from", str(model), "--bucket", "hub-bkt"])
    assert r.exit_code == 0 and "1 uploaded, 3 unchanged" in r.stdout, r.output
    assert gcs.bucket("hub-bkt").blob(name).download_as_bytes() == b"w" * 5000
    assert doctor_hub(gcs, handle).status == "pass"
