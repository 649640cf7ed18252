"""The TF Serving export: layout, signature (saved_model_cli), and predictions equal to the Keras model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from trainer import data, export, models
from trainer.config import TrainConfig


def test_saved_model_cli_lists_a_string_input(default_run):
    model_dir, result = default_run.model_dir, default_run.result
    export_dir = Path(result["export_dir"])
    assert export_dir == model_dir / "export" / "small_cnn" / "1"
    cli = Path(sys.executable).parent / "saved_model_cli"
    proc = subprocess.run([str(cli), "show", "--dir", str(export_dir), "--tag_set", "serve",
                           "--signature_def", "serving_default"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    inputs, outputs = proc.stdout.split("The given SavedModel SignatureDef contains the following output(s):")
    assert "inputs['image_bytes']" in inputs and "dtype: DT_STRING" in inputs and "shape: (-1)" in inputs
    for name, dtype in (("probabilities", "DT_FLOAT"), ("class_id", "DT_INT64"), ("class_name", "DT_STRING")):
        block = outputs.split(f"outputs['{name}']")[1].split("outputs[")[0]
        assert dtype in block


def test_exported_model_matches_the_checkpointed_model(default_run, demo_data, tools):
    """Reload the export and compare with the Keras model rebuilt from the exported (best) epoch's checkpoint."""
    model_dir, result = default_run.model_dir, default_run.result
    jpegs = tools.validation_jpegs(demo_data, 12)
    serving = tf.saved_model.load(result["export_dir"]).signatures["serving_default"]
    out = serving(image_bytes=tf.constant(jpegs))

    model = models.small_cnn((32, 32), 10)
    model.load_weights(str(model_dir / "checkpoints" / f"ckpt-{result['exported_epoch']:04d}")).expect_partial()
    images = tf.stack([data.decode_image(j, (32, 32)) for j in jpegs])
    expected = tf.nn.softmax(model(images, training=False)).numpy()
    np.testing.assert_allclose(out["probabilities"].numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["class_id"].numpy(), expected.argmax(axis=1))
    assert [c.decode() for c in out["class_name"].numpy()] == [str(i) for i in expected.argmax(axis=1)]


def test_in_memory_model_and_reloaded_export_agree(demo_data, tmp_path, tools):
    cfg = TrainConfig(model_dir=str(tmp_path), data_dir=str(demo_data), seed=5)
    model = models.build_model(cfg, 10, (32, 32))
    ds = data.make_dataset(str(demo_data / "digits-train-*"), 32, (32, 32), training=True, seed=5)
    model.fit(ds, epochs=1, steps_per_epoch=8, verbose=0)
    classes = [f"digit-{i}" for i in range(10)]
    export_dir = export.export_saved_model(model, str(tmp_path / "export" / "small_cnn" / "1"), export.Serving.images((32, 32), classes))

    jpegs = tools.validation_jpegs(demo_data, 9)
    images = tf.stack([data.decode_image(j, (32, 32)) for j in jpegs])
    expected = tf.nn.softmax(model(images, training=False)).numpy()

    reloaded = tf.saved_model.load(export_dir)
    out = reloaded.signatures["serving_default"](image_bytes=tf.constant(jpegs))
    np.testing.assert_allclose(out["probabilities"].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert [c.decode() for c in out["class_name"].numpy()] == [classes[i] for i in expected.argmax(axis=1)]
    np.testing.assert_allclose(out["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5)
    # A batch of one, and a PNG instead of a JPEG, go through the same signature.
    png = tf.io.encode_png(tf.cast(images[0] * 255.0, tf.uint8)).numpy()
    one = reloaded.signatures["serving_default"](image_bytes=tf.constant([png]))
    assert one["probabilities"].shape == (1, 10)
    # The Keras model reloads too (tf_keras SavedModel).
    again = keras.models.load_model(export_dir, compile=False)
    np.testing.assert_allclose(again(images, training=False).numpy(), model(images, training=False).numpy(),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("existing, expected", [([], 1), (["1", "2", "10", "notes"], 11)])
def test_next_version(tmp_path, existing, expected):
    for name in existing:
        (tmp_path / name).mkdir()
    assert export.next_version(str(tmp_path)) == expected


def test_an_export_interrupted_by_ctrl_c_leaves_no_version_and_keeps_the_earlier_ones(tmp_path, monkeypatch):
    """Ctrl-C while the SavedModel is written: no half-written <version> (the highest, the one TF Serving would
    load), no staging folder; the earlier versions stay; a staging folder a killed run left is cleared first."""
    cfg = TrainConfig(model_dir=str(tmp_path), data_dir=str(tmp_path), seed=5)
    model = models.build_model(cfg, 3, (16, 16))
    base = tmp_path / "export" / "small_cnn"
    (base / "1").mkdir(parents=True)
    (base / "1" / "saved_model.pb").write_bytes(b"earlier")
    (base / ".7.writing").mkdir()   # left by a run killed while exporting
    real_save = export.export_saved_model

    def interrupted(model, export_dir, *args, **kw):
        real_save(model, export_dir, *args, **kw)
        Path(export_dir, "variables", "variables.data-00000-of-00001").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "export_saved_model", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export.export_version(model, str(base), export.Serving.images((16, 16), ["a", "b", "c"]))
    assert sorted(p.name for p in base.iterdir()) == ["1"]
    assert (base / "1" / "saved_model.pb").read_bytes() == b"earlier"
    monkeypatch.setattr(export, "export_saved_model", real_save)
    done = export.export_version(model, str(base), export.Serving.images((16, 16), ["a", "b", "c"]))
    assert done == f"{base}/2" and (base / "2" / "saved_model.pb").is_file()
    assert sorted(p.name for p in base.iterdir()) == ["1", "2"]


def test_result_file_is_replaced_whole(tmp_path, monkeypatch):
    path = tmp_path / "result.json"
    path.write_text('{"old": 1}\n')
    monkeypatch.setattr(tf.io.gfile, "rename", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        export.write_atomically(str(path), '{"new": 2}\n')
    assert path.read_text() == '{"old": 1}\n' and [p.name for p in tmp_path.iterdir()] == ["result.json"]
    monkeypatch.undo()
    export.write_atomically(str(path), '{"new": 2}\n')
    assert path.read_text() == '{"new": 2}\n' and [p.name for p in tmp_path.iterdir()] == ["result.json"]
