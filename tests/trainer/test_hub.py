"""--model hub: a tiny hub module served from TFHUB_CACHE_DIR/<sha1(handle)>/ with networking blocked."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from netfixtures import BLOCK_NETWORK

HANDLE = "https://tfhub.dev/tpuctl-tests/tiny-image-features/feature_vector/1"
KEY = hashlib.sha1(HANDLE.encode("utf8")).hexdigest()


def write_manifest(folder, handle):
    """The manifest `tpuctl hub-cache fetch/add` writes last (the trainer checks handle, files, sizes)."""
    files = [{"path": p.relative_to(folder).as_posix(), "size": p.stat().st_size, "crc32c": "AAAAAA=="}
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".tpuctl-manifest.json"]
    (folder / ".tpuctl-manifest.json").write_text(json.dumps({
        "format": "tpuctl-hub-manifest/1", "handle": handle, "key": hashlib.sha1(handle.encode()).hexdigest(),
        "created_by": "test", "created": None, "descriptor": "", "files": files}))


@pytest.fixture(scope="module")
def hub_cache(tools, tmp_path_factory):
    spec = importlib.util.spec_from_file_location("make_tiny_hub_module",
                                                  tools.REPO / "tests" / "fixtures" / "make_tiny_hub_module.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cache = tmp_path_factory.mktemp("hub-cache")
    # tensorflow_hub's cache layout: <TFHUB_CACHE_DIR>/<sha1 of the exact handle>/saved_model.pb
    module.build(str(cache / KEY), dim=8)
    write_manifest(cache / KEY, HANDLE)
    blocker = tmp_path_factory.mktemp("no-network")
    (blocker / "sitecustomize.py").write_text(BLOCK_NETWORK)
    return cache, blocker


def _env(tools, cache, blocker):
    return {"TFHUB_CACHE_DIR": str(cache),
            "PYTHONPATH": os.pathsep.join([str(blocker), str(tools.REPO)])}


def test_hub_model_loads_from_the_cache_offline_and_trains(tools, demo_data, hub_cache, tmp_path):
    cache, blocker = hub_cache
    run = tools.run_module(["trainer.task", *tools.fast_flags(demo_data, tmp_path / "m", "--model", "hub",
                                                              "--hub_handle", HANDLE, "--fine_tuning_choice")],
                           env=_env(tools, cache, blocker))
    result = run.result
    assert result["model"] == "hub"
    assert result["export_dir"].endswith("/export/hub/1")

    import numpy as np
    import tensorflow as tf

    serving = tf.saved_model.load(result["export_dir"]).signatures["serving_default"]
    jpeg = tf.io.encode_jpeg(tf.zeros([32, 32, 3], tf.uint8)).numpy()
    out = serving(image_bytes=tf.constant([jpeg, jpeg]))
    assert out["probabilities"].shape == (2, 10)
    np.testing.assert_allclose(out["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5)


def test_network_is_really_blocked_for_uncached_handles(tools, demo_data, hub_cache, tmp_path):
    """Control: a handle not in the cache needs the network, which the sitecustomize blocks."""
    cache, blocker = hub_cache
    other = HANDLE.replace("/1", "/2")
    run = tools.run_module(["trainer.task", *tools.fast_flags(demo_data, tmp_path / "m", "--model", "hub",
                                                              "--hub_handle", other)],
                           env=_env(tools, cache, blocker), timeout=120)
    assert run.returncode == 2, run.stderr[-3000:]
    line = run.error_line()
    assert other in line and "TFHUB_CACHE_DIR" in line
    assert not (tmp_path / "m").exists()  # nothing written before every input was checked


def test_incomplete_cache_folder_is_refused_with_the_repair_command(tools, demo_data, hub_cache, tmp_path):
    """tensorflow_hub would use any non-empty <cache>/<sha1>/; an interrupted copy (a weights file missing)
    must stop the trainer before hub.load with one line naming the command that repairs it."""
    cache, blocker = hub_cache
    broken = tmp_path / "cache"
    shutil.copytree(cache, broken)
    (broken / KEY / "variables" / "variables.data-00000-of-00001").unlink()
    run = tools.run_module(["trainer.task", *tools.fast_flags(demo_data, tmp_path / "m", "--model", "hub",
                                                              "--hub_handle", HANDLE)],
                           env=_env(tools, broken, blocker), timeout=120)
    assert run.returncode == 2, run.stderr[-3000:]
    line = run.error_line()
    assert "INCOMPLETE" in line and "variables/variables.data-00000-of-00001" in line and "missing" in line, line
    assert f"repair: tpuctl hub-cache fetch {HANDLE} --dest {broken}" in line
    assert not (tmp_path / "m").exists()


class FakeGfile:
    """tf.io.gfile's calls hubcheck makes, over a dict of gs:// paths (TensorFlow's GCS filesystem cannot be
    pointed at a local emulator): a folder exists when an object has its name as a prefix."""

    def __init__(self, objects):
        self.objects = objects

    def exists(self, path):
        return path in self.objects or self.isdir(path)

    def isdir(self, path):
        return any(n.startswith(path.rstrip("/") + "/") for n in self.objects)

    def listdir(self, path):
        base = path.rstrip("/") + "/"
        return sorted({n[len(base):].split("/")[0] + ("/" if "/" in n[len(base):] else "")
                       for n in self.objects if n.startswith(base)})

    def stat(self, path):
        return type("Stat", (), {"length": len(self.objects[path])})()

    def GFile(self, path, mode="rb"):
        import io

        return io.BytesIO(self.objects[path])


def _gcs_cache(tmp_path, cache_dir, drop=()):
    folder = tmp_path / "model"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"pb" * 10)
    (folder / "variables" / "variables.index").write_bytes(b"idx")
    write_manifest(folder, HANDLE)
    return {f"{cache_dir}/{KEY}/{p.relative_to(folder).as_posix()}": p.read_bytes()
            for p in folder.rglob("*") if p.is_file() and p.relative_to(folder).as_posix() not in drop}


def test_hubcheck_gs_cache_complete_incomplete_and_staging_only(tmp_path):
    from trainer import hubcheck
    from trainer.errors import DataError

    cache = "gs://hub-bkt/model-cache"
    assert hubcheck.check(HANDLE, cache, FakeGfile(_gcs_cache(tmp_path / "a", cache))) == f"{cache}/{KEY}"
    # no copy at all: tensorflow_hub resolves the handle itself (maybe over the network)
    assert hubcheck.check(HANDLE, cache, FakeGfile({})) is None
    repair = f"repair: tpuctl hub-cache add {HANDLE} --bucket hub-bkt --prefix model-cache"
    for drop, why in [((".tpuctl-manifest.json",), "no .tpuctl-manifest.json"),
                      (("variables/variables.index",), "variables/variables.index is missing")]:
        with pytest.raises(DataError) as err:
            hubcheck.check(HANDLE, cache, FakeGfile(_gcs_cache(tmp_path / why[:2], cache, drop)))
        assert why in str(err.value) and repair in str(err.value) and "INCOMPLETE" in str(err.value)
    # a truncated object: right name, wrong size
    objects = _gcs_cache(tmp_path / "t", cache)
    objects[f"{cache}/{KEY}/saved_model.pb"] = b"p"
    with pytest.raises(DataError, match=r"saved_model\.pb\b.*\b1 bytes\b.*\bmanifest\b.*\b20\b"):
        hubcheck.check(HANDLE, cache, FakeGfile(objects))
    # only staged objects of an interrupted `hub-cache add`
    with pytest.raises(DataError, match="only an interrupted upload") as err:
        hubcheck.check(HANDLE, cache, FakeGfile({f"{cache}/.staging/{KEY}-0a1b/saved_model.pb": b"x"}))
    assert repair in str(err.value)
    # a manifest of another handle (a copied folder) is not this model
    other = HANDLE.replace("/1", "/2")
    objects = _gcs_cache(tmp_path / "o", cache)
    objects[f"{cache}/{KEY}/.tpuctl-manifest.json"] = objects[f"{cache}/{KEY}/.tpuctl-manifest.json"].replace(
        HANDLE.encode(), other.encode())
    with pytest.raises(DataError, match="not this handle"):
        hubcheck.check(HANDLE, cache, FakeGfile(objects))


def test_hubcheck_manifest_constants_match_the_ops_side():
    """trainer/hubcheck.py may not import tpuctl; the constants it copies are the domain's."""
    import re

    from trainer import hubcheck

    source = (Path(__file__).resolve().parents[2] / "ground" / "domain" / "hub.py").read_text()
    for name, value in (("HUB_MANIFEST", hubcheck.MANIFEST), ("HUB_MANIFEST_FORMAT", hubcheck.MANIFEST_FORMAT),
                        ("HUB_STAGING", hubcheck.STAGING)):
        assert re.search(rf'^{name} = "{re.escape(value)}"$', source, re.M), name


def test_hubcheck_refuses_a_fifo_as_a_local_caches_manifest(tmp_path):
    """The trainer's one bounded reader (trainer.localfiles): a FIFO in place of a local cache's manifest is an
    incomplete copy in one line, never opened for a blocking read (old: the check hung the run before training)."""
    import threading

    from trainer import hubcheck
    from trainer.errors import DataError

    folder = tmp_path / "cache" / KEY
    folder.mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"pb")
    os.mkfifo(folder / ".tpuctl-manifest.json")
    found = []

    def run():
        try:
            found.append(hubcheck.check(HANDLE, str(tmp_path / "cache")))
        except DataError as err:
            found.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(240)
    assert found, "the hub cache check blocked on a FIFO"
    assert isinstance(found[0], DataError) and "is a FIFO" in str(found[0]) and "INCOMPLETE" in str(found[0])
