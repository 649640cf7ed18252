"""hub-cache add of a real tiny SavedModel, then hub.load/KerasLayer of the same handle in the trainer
environment with TFHUB_CACHE_DIR = a local copy of the uploaded prefix and the network blocked."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from ground.envs import trainer_env, trainer_python

from clifixtures import invoke
from hubfixtures import build_tiny_module, download_prefix, tar_folder
from netfixtures import BLOCK_NETWORK

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
@pytest.mark.skipif(not trainer_python().exists(), reason="trainer environment (.venv-trainer) not set up")
def test_uploaded_prefix_loads_with_hub_offline(gcs, model_server, tmp_path):
    module = build_tiny_module(tmp_path / "module")
    model_server.archives["tiny-features/1"] = tar_folder(module, tmp_path / "module.tar.gz").read_bytes()
    handle = model_server.handle("tiny-features/1")

    r = invoke(["hub-cache", "add", handle, "--bucket", "hub-bkt", "--prefix", "model-cache"])
    assert r.exit_code == 0, r.output
    assert "TFHUB_CACHE_DIR=gs://hub-bkt/model-cache" in r.stdout

    # a local copy of the uploaded prefix, exactly as stored
    local = download_prefix(gcs, "hub-bkt", "model-cache", tmp_path / "hub-cache-copy")

    # the model server is stopped too: the only way to the model is the cache folder
    model_server.stop()
    proc = subprocess.run(
        [str(trainer_python()), "-c", LOAD_OFFLINE, handle, str(module)],
        env=trainer_env({"TFHUB_CACHE_DIR": str(local)}),
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out["load"]) == 2 and len(out["load"][0]) == 8
    assert out["load"] == out["reference"] and out["keras"] == out["reference"]
    assert out["control"] != "loaded"
