"""The user's path end to end, with the real CLI as a process at every step:

tpuctl plan (example stack) → tpuctl hub-cache add (tiny hub module served from 127.0.0.1, into the
local GCS emulator, bucket and prefix taken from the plan's outputs) → tpuctl data sample →
tpuctl train --workers 2 --model hub (hub cache copied locally from the emulator) → the exported
SavedModel answers a prediction on a JPEG.

Run it alone with:  .venv/bin/python -m pytest tests/e2e -m e2e
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from ground import domain
from ground.envs import REPO_ROOT, ops_python, trainer_env, trainer_python
from ground.outputs import parse_outputs

from gcsfixtures import storage_emulator
from hubfixtures import ModelServer, build_tiny_module, download_prefix, tar_folder

TPUCTL = [str(ops_python()), "-m", "tpuctl.cli"]

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def gcs_emulator():
    with storage_emulator() as url:
        yield url


def tpuctl(args: list[str], env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([*TPUCTL, *args], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"tpuctl {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


PREDICT = textwrap.dedent("""
    import io, json, sys
    import numpy as np, tensorflow as tf
    from PIL import Image
    from sklearn.datasets import load_digits

    export_dir, size = sys.argv[1], int(sys.argv[2])
    digit = load_digits().images[7]                      # a "7", 8x8 grey levels 0..16
    grey = (digit / 16.0 * 255).astype("uint8")
    rgb = Image.fromarray(grey).convert("RGB").resize((size, size))
    buf = io.BytesIO(); rgb.save(buf, format="JPEG")
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    (name, spec), = serve.structured_input_signature[1].items()
    out = serve(**{name: tf.constant([buf.getvalue()])})
    print(json.dumps({"input_dtype": spec.dtype.name,
                      "probabilities": out["probabilities"].numpy()[0].tolist(),
                      "class_id": int(out["class_id"].numpy()[0]),
                      "class_name": out["class_name"].numpy()[0].decode()}))
""")


def test_plan_hub_cache_data_train_predict(tmp_path, gcs_emulator, monkeypatch):
    env = dict(os.environ)
    env.update(STORAGE_EMULATOR_HOST=gcs_emulator, GOOGLE_CLOUD_PROJECT="my-tpu-project",
               TPUCTL_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200")
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)

    # 1. Preview the example stack offline; its outputs feed the next steps like `pulumi stack output`.
    plan = json.loads(tpuctl(["plan", "--stack", "example", "--json"], env).stdout)
    assert not [v for v in plan["violations"] if v["level"] == "mandatory"]
    outputs = parse_outputs(plan["outputs"])
    hub_bucket = outputs.bucket("hub-cache")
    assert outputs.tfhub_cache_dir == f"gs://{hub_bucket}/{outputs.hub_cache_prefix}"
    outputs_file = tmp_path / "outputs.json"
    outputs_file.write_text(json.dumps(plan["outputs"]))

    # The stack would create the bucket; here the emulator gets it directly.
    from google.cloud import storage
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    client = storage.Client(project="my-tpu-project")
    client.create_bucket(hub_bucket)

    # 2. A tiny hub module (a real reusable SavedModel) served like tfhub.dev from 127.0.0.1.
    module = build_tiny_module(tmp_path / "module")
    server = ModelServer()   # stopped before training: the trainer can only use the cache
    server.archives["tiny/1"] = tar_folder(module, tmp_path / "module.tar.gz").read_bytes()
    handle = server.handle("tiny/1")
    try:
        added = tpuctl(["hub-cache", "add", handle, "--outputs", str(outputs_file)], env)
    finally:
        server.stop()
    assert any(r.startswith("/blobs/") for r in server.requests)   # fetched through the redirect
    assert outputs.tfhub_cache_dir in added.stdout
    key = domain.hub_cache_key(handle)
    prefix = f"{outputs.hub_cache_prefix}/{key}/"
    uploaded = {b.name[len(prefix):] for b in client.list_blobs(hub_bucket, prefix=prefix)}
    assert "saved_model.pb" in uploaded and any(n.startswith("variables/") for n in uploaded)

    # Copy the uploaded cache locally, as a worker's TFHUB_CACHE_DIR would see it.
    local_cache = download_prefix(client, hub_bucket, outputs.hub_cache_prefix, tmp_path / "hub-cache")

    # 3. The demo dataset.
    data_dir = tmp_path / "data"
    tpuctl(["data", "sample", str(data_dir)], env)
    manifest = json.loads((data_dir / "manifest.json").read_text())
    assert manifest["classes"] == [str(i) for i in range(10)]

    # 4. Two local worker processes training the hub model, network use impossible for the module.
    model_dir = tmp_path / "run"
    trained = tpuctl(["train", "--workers", "2", "--model", "hub", "--hub-handle", handle,
                      "--hub-cache-dir", str(local_cache), "--data-dir", str(data_dir),
                      "--model-dir", str(model_dir), "--epochs", "1"], env, timeout=900)
    result = json.loads((model_dir / "result.json").read_text())
    assert result["num_workers"] == 2 and result["model"] == "hub"
    assert result["export_dir"] in trained.stdout
    export_dir = Path(result["export_dir"])
    assert export_dir.parent == model_dir / "export" / export_dir.parent.name and export_dir.name.isdigit()

    # 5. The exported SavedModel answers a prediction on JPEG bytes.
    size = manifest["image_size"][0] if manifest.get("image_size") else 32
    proc = subprocess.run([str(trainer_python()), "-c", PREDICT, str(export_dir), str(size)],
                          env=trainer_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["input_dtype"] == "string"
    assert len(answer["probabilities"]) == 10 and abs(sum(answer["probabilities"]) - 1) < 1e-4
    assert answer["class_name"] == manifest["classes"][answer["class_id"]]
