"""HubModelCache under mocks: every file of every model in tensorflow_hub's sha1 cache layout."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from infra.mocks import run_program
from tpuctl.ground import tokens as T


def test_hub_objects_use_the_sha1_layout_tensorflow_hub_reads(hub_folder, handles):
    root = hub_folder(list(handles))
    run = run_program({"tpuctl:project": "my-tpu-project", "tpuctl:hubModels": list(handles),
                       "tpuctl:hubCacheSource": str(root), "tpuctl:hubCachePrefix": "hub/models"})
    bucket = "tpuctl-my-tpu-project-hub-cache"
    objects = {r.inputs["name"]: r for r in run.of_type(T.BUCKET_OBJECT)}
    expected = set()
    for handle in handles:
        key = hashlib.sha1(handle.encode("utf8")).hexdigest()   # what tensorflow_hub computes
        for rel in ("saved_model.pb", "variables/variables.index", "variables/variables.data-00000-of-00001"):
            expected.add(f"hub/models/{key}/{rel}")
    assert set(objects) == expected
    for name, obj in objects.items():
        assert obj.name == name                    # stable, unique resource name
        assert obj.inputs["bucket"] == bucket
        assert obj.parent_type == T.HUB_MODEL_CACHE
        assert run.named(T.BUCKET, "hub-cache").urn in obj.dependencies
        source = Path(obj.inputs["source"].path)
        assert source == root / name.split("/", 2)[2]
        assert obj.outputs["md5hash"] == base64.b64encode(hashlib.md5(source.read_bytes()).digest()).decode()
    assert run.outputs["hub_models"] == list(handles)
    assert run.outputs["hub_cache_prefix"] == "hub/models"
    assert run.outputs["tfhub_cache_dir"] == f"gs://{bucket}/hub/models"


def test_extra_folders_in_the_cache_are_not_uploaded(hub_folder, handles):
    root = hub_folder(list(handles))
    run = run_program({"tpuctl:project": "my-tpu-project", "tpuctl:hubModels": [handles[1]],
                       "tpuctl:hubCacheSource": str(root)})
    keys = {r.inputs["name"].split("/")[1] for r in run.of_type(T.BUCKET_OBJECT)}
    assert keys == {hashlib.sha1(handles[1].encode()).hexdigest()}
    assert all(r.inputs["name"].startswith("model-cache/") for r in run.of_type(T.BUCKET_OBJECT))


def test_no_hub_models_no_objects_but_cache_dir_still_exported():
    run = run_program({"tpuctl:project": "my-tpu-project"})
    assert run.of_type(T.BUCKET_OBJECT) == []
    assert run.outputs["hub_models"] == []
    assert run.outputs["tfhub_cache_dir"] == "gs://tpuctl-my-tpu-project-hub-cache/model-cache"
