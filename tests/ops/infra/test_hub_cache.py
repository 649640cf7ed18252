"""HubModelCache under mocks: every file of every model in tensorflow_hub's sha1 cache layout."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import google_crc32c

from ground import tokens as T
from infra.mocks import run_program


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
    files = {n: o for n, o in objects.items() if not n.endswith((".tpuctl-manifest.json", ".descriptor.txt"))}
    assert set(files) == expected
    for name, obj in objects.items():
        assert obj.name == name                    # stable, unique resource name
        assert obj.inputs["bucket"] == bucket
        assert obj.parent_type == T.HUB_MODEL_CACHE
        assert run.named(T.BUCKET, "hub-cache").urn in obj.dependencies
    for name, obj in files.items():
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
    keys = {r.inputs["name"].split("/")[1].split(".")[0] for r in run.of_type(T.BUCKET_OBJECT)}
    assert keys == {hashlib.sha1(handles[1].encode()).hexdigest()}
    assert all(r.inputs["name"].startswith("model-cache/") for r in run.of_type(T.BUCKET_OBJECT))


def test_no_hub_models_no_objects_but_cache_dir_still_exported():
    run = run_program({"tpuctl:project": "my-tpu-project"})
    assert run.of_type(T.BUCKET_OBJECT) == []
    assert run.outputs["hub_models"] == []
    assert run.outputs["tfhub_cache_dir"] == "gs://tpuctl-my-tpu-project-hub-cache/model-cache"


def _crc(data: bytes) -> str:
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


def test_manifest_is_written_last_and_lists_every_file(hub_folder, handles):
    """A `pulumi up` that fails half-way leaves no manifest: the manifest object depends on every file
    object (and the descriptor), so the engine creates it only after all of them exist."""
    root = hub_folder(list(handles))
    run = run_program({"tpuctl:project": "my-tpu-project", "tpuctl:hubModels": list(handles),
                       "tpuctl:hubCacheSource": str(root)})
    objects = {r.inputs["name"]: r for r in run.of_type(T.BUCKET_OBJECT)}
    for handle in handles:
        key = hashlib.sha1(handle.encode()).hexdigest()
        manifest = objects[f"model-cache/{key}/.tpuctl-manifest.json"]
        descriptor = objects[f"model-cache/{key}.descriptor.txt"]
        files = {n: o for n, o in objects.items()
                 if n.startswith(f"model-cache/{key}/") and n != manifest.name}
        assert len(files) == 3
        for obj in [*files.values(), descriptor]:
            assert obj.urn in manifest.dependencies, obj.name
        for obj in files.values():
            assert obj.urn in descriptor.dependencies
            assert manifest.urn not in obj.dependencies
        body = json.loads(manifest.inputs["source"].text)
        assert manifest.inputs["contentType"] == "application/json"
        assert body["format"] == "tpuctl-hub-manifest/1" and body["handle"] == handle and body["key"] == key
        assert body["created"] is None                     # deterministic: no diff on every `pulumi up`
        local = root / key
        assert {f["path"]: (f["size"], f["crc32c"]) for f in body["files"]} == {
            p.relative_to(local).as_posix(): (p.stat().st_size, _crc(p.read_bytes()))
            for p in local.rglob("*") if p.is_file()}
        assert descriptor.inputs["source"].text.startswith(f"Module: {handle}\n")


def test_a_local_manifest_from_fetch_is_not_uploaded_as_a_file(hub_folder, handles):
    root = hub_folder([handles[0]])
    key = hashlib.sha1(handles[0].encode()).hexdigest()
    (root / key / ".tpuctl-manifest.json").write_text('{"stale": true}')
    run = run_program({"tpuctl:project": "my-tpu-project", "tpuctl:hubModels": [handles[0]],
                       "tpuctl:hubCacheSource": str(root)})
    manifests = [r for r in run.of_type(T.BUCKET_OBJECT) if r.inputs["name"].endswith(".tpuctl-manifest.json")]
    assert len(manifests) == 1
    body = json.loads(manifests[0].inputs["source"].text)
    assert ".tpuctl-manifest.json" not in {f["path"] for f in body["files"]}
