"""--model hub: a tiny hub module served from TFHUB_CACHE_DIR/<sha1(handle)>/ with networking blocked."""

from __future__ import annotations

import hashlib
import importlib.util
import os

import pytest

from netfixtures import BLOCK_NETWORK

HANDLE = "https://tfhub.dev/tpuctl-tests/tiny-image-features/feature_vector/1"



@pytest.fixture(scope="module")
def hub_cache(tools, tmp_path_factory):
    spec = importlib.util.spec_from_file_location("make_tiny_hub_module",
                                                  tools.REPO / "tests" / "fixtures" / "make_tiny_hub_module.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cache = tmp_path_factory.mktemp("hub-cache")
    # tensorflow_hub's cache layout: <TFHUB_CACHE_DIR>/<sha1 of the exact handle>/saved_model.pb
    module.build(str(cache / hashlib.sha1(HANDLE.encode("utf8")).hexdigest()), dim=8)
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
