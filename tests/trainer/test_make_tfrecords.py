"""python -m trainer.make_tfrecords on generated JPEG/PNG folders, including a corrupt image."""

from __future__ import annotations

import json

import pytest

from tests.trainer.image_sources import folder_from_script

from procfixtures import interrupt_when

MAKE_IMAGES = r"""
import sys
from pathlib import Path
import numpy as np
from PIL import Image
root = Path(sys.argv[1])
rng = np.random.default_rng(0)
for cls, n in (("cat", 9), ("dog", 8), ("owl", 7)):
    (root / cls / "sub").mkdir(parents=True)
    for i in range(n):
        pixels = rng.integers(0, 255, size=(20, 28, 3), dtype=np.uint8)
        if i % 4 == 0:
            Image.fromarray(pixels).convert("RGBA").save(root / cls / "sub" / f"{cls}{i}.png")
        else:
            Image.fromarray(pixels).save(root / cls / f"{cls}{i}.jpg", quality=90)
(root / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
(root / "owl" / "notes.txt").write_text("not an image")
"""


@pytest.fixture(scope="module")
def image_folder(tools, tmp_path_factory):
    return folder_from_script(tools, tmp_path_factory, "imgs", MAKE_IMAGES)


def _summary(run) -> dict:
    assert run.returncode == 0, run.stderr[-3000:]
    last = run.stdout_lines[-1]
    assert last.startswith("summary: ")
    return json.loads(last[len("summary: "):])


def test_converts_in_parallel_skips_the_corrupt_image_and_trains(tools, image_folder, tmp_path):
    dest = tmp_path / "records"
    run = tools.run_module(["trainer.make_tfrecords", str(image_folder), str(dest), "--shard-mb", "0.004",
                            "--validation-fraction", "0.25", "--workers", "2", "--prefix", "pets"], timeout=180)
    summary = _summary(run)
    assert summary["classes"] == ["cat", "dog", "owl"]
    assert summary["skipped"] == 1 and summary["skipped_files"] == [str(image_folder / "dog" / "broken.jpg")]
    assert [l for l in run.stderr_lines if l.startswith("skipped: ")] == [
        l for l in run.stderr_lines if "broken.jpg" in l]
    assert summary["train"] + summary["validation"] == 24
    assert summary["validation"] in (5, 6)  # 25 % per class planned (2 + 2 + 2), minus the broken one if drawn
    progress = [l for l in run.stdout_lines if l.startswith("progress: ")]
    assert progress[-1] == "progress: 25/25"
    shards = sorted(p.name for p in dest.glob("*.tfrecord"))
    assert len(shards) == summary["shards"] > 2  # small --shard-mb: several shards
    assert summary["bytes"] == sum(p.stat().st_size for p in dest.glob("*.tfrecord"))
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["prefix"] == "pets" and manifest["image_size"] == [20, 28]
    assert set(manifest["splits"]["train"]["files"]) | set(manifest["splits"]["validation"]["files"]) == set(shards)
    assert manifest["splits"]["train"]["examples"] == summary["train"]

    import tensorflow as tf

    from trainer import data

    labels = []
    for _, y in data.make_dataset(str(dest / "pets-train-*"), 1, (20, 28), training=False):
        labels.append(int(y[0]))
    assert len(labels) == summary["train"] and sorted(set(labels)) == [0, 1, 2]
    # PNGs (with alpha) were re-encoded: every stored image is a JPEG.
    for raw in tf.data.TFRecordDataset([str(dest / s) for s in shards]):
        ex = tf.train.Example.FromString(raw.numpy())
        assert ex.features.feature["image/encoded"].bytes_list.value[0][:2] == b"\xff\xd8"

    # The trainer trains on it.
    model_dir = tmp_path / "model"
    trained = tools.run_module(["trainer.task", "--data_dir", str(dest), "--model_dir", str(model_dir),
                                "--train_epochs", "1", "--train_batch_size", "4", "--validation_batch_size", "2"])
    assert trained.result["train_examples"] == summary["train"]

    # Same output folder again: replaced, deterministic.
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    again = _summary(tools.run_module(["trainer.make_tfrecords", str(image_folder), str(dest), "--shard-mb", "0.004",
                                       "--validation-fraction", "0.25", "--workers", "1", "--prefix", "pets"]))
    assert again == summary
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before


@pytest.mark.parametrize("args, needle", [
    (["{missing}", "{out}"], "does not exist"),
    (["{src}", "{out}", "--shard-mb", "0"], "--shard-mb"),
    (["{src}", "{out}", "--validation-fraction", "1"], "--validation-fraction"),
    (["{src}", "{foreign}"], "not empty"),
    (["{one_class}", "{out}"], "at least 2"),
])
def test_bad_input_one_line_exit_2_nothing_written(tools, image_folder, tmp_path, args, needle):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "x.txt").write_text("mine")
    one_class = tmp_path / "one"
    (one_class / "only").mkdir(parents=True)
    (one_class / "only" / "a.jpg").write_bytes((image_folder / "cat" / "cat1.jpg").read_bytes())
    paths = {"missing": tmp_path / "nope", "out": tmp_path / "out", "src": image_folder, "foreign": foreign,
             "one_class": one_class}
    run = tools.run_module(["trainer.make_tfrecords", *[a.format(**paths) for a in args]], timeout=60)
    assert run.returncode == 2
    assert needle in run.error_line()
    assert not (tmp_path / "out").exists()
    assert [p.name for p in foreign.iterdir()] == ["x.txt"]


def test_a_kept_jpeg_is_written_only_if_it_is_still_the_checked_file(image_folder, tmp_path):
    import shutil

    from trainer import make_tfrecords

    jpeg = tmp_path / "a.jpg"
    shutil.copy(image_folder / "cat" / "cat1.jpg", jpeg)
    ok, (head, checked, tail, height, width, _) = make_tfrecords._prepare((str(jpeg), 0, "cat", "cat/a.jpg"))
    assert ok and isinstance(checked, tuple) and (height, width) == (20, 28)
    ok, raw = make_tfrecords._read_unchanged(jpeg, checked)
    assert ok and raw == jpeg.read_bytes()
    data = bytearray(raw)
    data[len(data) // 2] ^= 0xFF  # same size, other bytes (the file was replaced while converting)
    jpeg.write_bytes(bytes(data))
    ok, skip = make_tfrecords._read_unchanged(jpeg, checked)
    assert not ok and skip.kind == "changed"
    jpeg.unlink()
    ok, skip = make_tfrecords._read_unchanged(jpeg, checked)
    assert not ok and skip.kind == "unreadable" and "FileNotFoundError" in skip.reason


def test_the_check_of_a_kept_jpeg_gives_its_records_checksum(image_folder):
    """One CRC pass over a kept JPEG in the writing process: the one proving it unchanged, run on from the
    head's CRC, is the record's up to the end of the image."""
    import google_crc32c

    from trainer import make_tfrecords, tfrecord

    jpeg = image_folder / "cat" / "cat1.jpg"
    ok, (head, checked, tail, _, _, _) = make_tfrecords._prepare((str(jpeg), 0, "cat", "cat/cat1.jpg"))
    size, start, crc_to_image_end = checked
    assert ok and start == google_crc32c.value(head)
    ok, raw = make_tfrecords._read_unchanged(jpeg, checked)
    assert ok and size == len(raw)
    record = [head, raw, tail]
    crc = google_crc32c.extend(crc_to_image_end, tail)
    assert crc == google_crc32c.value(b"".join(record))
    assert tfrecord.frame(record, crc) == tfrecord.frame(record)


@pytest.mark.parametrize("dest", ["gs://bucket/records", "gs:/bucket/records", "s3://bucket/records"])
def test_a_url_destination_is_refused_not_made_a_local_folder(image_folder, tmp_path, monkeypatch, dest):
    """Path('gs://b/x') is the relative path gs:/b/x: without the check both tools made a local folder 'gs:'."""
    from trainer import make_tfrecords, sample_data
    from trainer.errors import DataError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=r"make_tfrecords: destination (gs:/+bucket|s3://bucket)/records\b.*\blocal folder"):
        make_tfrecords.convert(image_folder, dest, workers=1)
    with pytest.raises(DataError, match=r"sample_data: destination .*\blocal folder"):
        sample_data.write_demo_dataset(dest)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ an earlier output survives (issue 27)
SLOW_IMAGES = r"""
import shutil, sys
from pathlib import Path
import numpy as np
from PIL import Image
root = Path(sys.argv[1])
ramp = np.linspace(0, 255, 1200, dtype=np.uint8)
pixels = np.stack([np.add.outer(ramp, ramp) // 2, np.tile(ramp, (1200, 1)), np.tile(ramp, (1200, 1)).T], axis=-1)
root.mkdir(parents=True)
first = root / "seed.png"
Image.fromarray(pixels.astype(np.uint8)).save(first)  # PNG: decoded and re-encoded, tens of ms each
for cls in ("a", "b"):
    (root / cls).mkdir()
    for i in range(40):
        shutil.copyfile(first, root / cls / f"{i:02d}.png")
first.unlink()
"""


def _earlier_output(image_folder, dest) -> dict:
    from trainer import make_tfrecords

    make_tfrecords.convert(image_folder, dest, workers=1, progress=lambda done, total: None)
    return {p.name: p.read_bytes() for p in dest.iterdir()}


def test_ctrl_c_and_a_concurrent_run_leave_the_earlier_output_intact(tools, image_folder, tmp_path_factory):
    """Old: the re-run deleted the earlier shards and manifest before converting, Ctrl-C left DEST empty, and a
    second run into the same DEST mixed its files with the first's."""
    import subprocess
    import sys

    slow = folder_from_script(tools, tmp_path_factory, "slow", SLOW_IMAGES)
    tmp_path = tmp_path_factory.mktemp("interrupted")
    dest = tmp_path / "out"
    before = _earlier_output(image_folder, dest)
    staging = tmp_path / ".out.writing"
    proc = subprocess.Popen([sys.executable, "-m", "trainer.make_tfrecords", str(slow), str(dest), "--workers", "1",
                             "--shard-mb", "0.05"], cwd=tools.REPO, env=tools.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    def second_run_is_refused():
        second = tools.run_module(["trainer.make_tfrecords", str(image_folder), str(dest), "--workers", "1"])
        assert second.returncode == 2
        line = second.error_line()     # the tool, the destination, the lock the other run holds; the ways out
        assert line.startswith(f"error: make_tfrecords: destination {dest} ") and "another run" in line, line
        assert f"{tmp_path / '.out.lock'}" in line and "wait" in line and "another folder" in line, line
        assert proc.poll() is None, "the first run ended before the second was refused: not a concurrent run"

    out, err = interrupt_when(
        proc, lambda: any(folder.is_dir() and list(folder.glob(".*.partial")) for folder in (staging, dest)),
        "the conversion started writing", before=second_run_is_refused)
    assert proc.returncode == 130 and [l for l in err.splitlines() if l.startswith("error")] == ["error: interrupted"]
    assert "summary: " not in out  # it really was stopped mid-way
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_source_with_no_readable_image_keeps_the_earlier_output(tools, image_folder, tmp_path):
    dest = tmp_path / "out"
    before = _earlier_output(image_folder, dest)
    bad = tmp_path / "bad"
    for cls in ("a", "b"):
        (bad / cls).mkdir(parents=True)
        (bad / cls / "x.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    run = tools.run_module(["trainer.make_tfrecords", str(bad), str(dest), "--workers", "1"])
    assert run.returncode == 2
    line = run.error_line()
    assert "readable images" in line and f"{bad} " in line and "(2 skipped)" in line and "nothing written" in line
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "out"]


def test_a_failed_sample_data_run_keeps_the_earlier_demo_dataset(tmp_path, monkeypatch):
    from trainer import sample_data, tfrecord

    dest = tmp_path / "demo"
    sample_data.write_demo_dataset(dest, shards=1, image_size=8)
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    make_example, calls = tfrecord.make_example, []

    def fails_half_way(**fields):
        calls.append(1)
        if len(calls) > 500:
            raise OSError(28, "No space left on device")
        return make_example(**fields)

    monkeypatch.setattr(tfrecord, "make_example", fails_half_way)
    with pytest.raises(OSError, match="No space left"):
        sample_data.write_demo_dataset(dest, shards=1, image_size=8)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]


# ------------------------------------------------------------------ nothing packed from outside SRC
def _source_with_link(image_folder, tmp_path, where: str):
    """A copy of two classes plus one symbolic link leading out of it; returns (src, the link's name in SRC)."""
    import shutil

    src = tmp_path / "src"
    for cls in ("cat", "dog"):
        shutil.copytree(image_folder / cls, src / cls)
    outside = tmp_path / "elsewhere"
    shutil.copytree(image_folder / "owl", outside)
    link = {"class folder": src / "owl", "folder in a class": src / "cat" / "more",
            "file": src / "dog" / "x.jpg"}[where]
    link.symlink_to(outside / "owl1.jpg" if where == "file" else outside)
    return src, link.relative_to(src).as_posix()


@pytest.mark.parametrize("where", ["class folder", "folder in a class", "file"])
def test_a_symbolic_link_out_of_the_source_is_refused_naming_it(tools, image_folder, tmp_path, where):
    """Old: a symlinked class folder (and a linked file) packed the files it led to, which `tpuctl data` then
    uploads."""
    src, name = _source_with_link(image_folder, tmp_path, where)
    dest = tmp_path / "out"
    run = tools.run_module(["trainer.make_tfrecords", str(src), str(dest), "--workers", "1"])
    assert run.returncode == 2
    line = run.error_line()
    assert line.startswith(f"error: source folder {src}: {name} ") and "symbolic link" in line, line
    assert line.endswith("remove the link"), line
    assert not dest.exists() and not (tmp_path / ".out.writing").exists()


def test_a_linked_file_inside_the_source_is_packed(image_folder, tmp_path):
    import shutil

    from trainer import make_tfrecords

    src = tmp_path / "src"
    for cls in ("cat", "dog"):
        shutil.copytree(image_folder / cls, src / cls)
    (src / "dog" / "alias.jpg").symlink_to(src / "cat" / "cat1.jpg")
    classes, images = make_tfrecords.find_images(src)
    assert src / "dog" / "alias.jpg" in images[1]


def test_a_fifo_or_an_oversized_file_in_place_of_an_image_is_skipped_unread(image_folder, tmp_path, monkeypatch):
    """Old: the decoder read the path whatever it was: a FIFO swapped in after the scan blocked a worker forever."""
    import os
    import threading

    from trainer import make_tfrecords

    fifo = tmp_path / "x.jpg"
    os.mkfifo(fifo)
    result = []
    worker = threading.Thread(target=lambda: result.append(make_tfrecords._prepare((str(fifo), 0, "c", "c/x.jpg"))),
                              daemon=True)
    worker.start()
    worker.join(10)
    try:
        [(ok, skip)] = result
        assert not ok and skip.kind == "unreadable" and "FIFO" in skip.reason, skip
    finally:
        if worker.is_alive():
            with open(fifo, "wb"):  # unblock the reader of the old code
                pass
    jpeg = image_folder / "cat" / "cat1.jpg"
    monkeypatch.setattr(make_tfrecords, "MAX_IMAGE_BYTES", jpeg.stat().st_size - 1)
    size = jpeg.stat().st_size
    ok, skip = make_tfrecords._prepare((str(jpeg), 0, "cat", "cat/cat1.jpg"))
    assert not ok and skip.kind == "too-large" and f"{size} bytes" in skip.reason and f"{size - 1}-byte" in skip.reason


def test_a_previous_manifest_is_read_bounded(tmp_path, monkeypatch):
    import json

    from trainer import records
    from trainer.errors import DataError

    dest = tmp_path / "out"
    dest.mkdir()
    manifest = records.build_manifest(prefix="p", classes=["a", "b"], image_size=None, shards={}, source="x")
    (dest / "manifest.json").write_text(json.dumps(manifest) + " " * 1000)
    assert records.check_output_dir(dest, "tool") == [dest / "manifest.json"]
    monkeypatch.setattr(records, "_MAX_PREVIOUS_MANIFEST_BYTES", 500)
    with pytest.raises(DataError, match=r"\bnot empty\b.*\bprevious output"):
        records.check_output_dir(dest, "tool")


@pytest.mark.parametrize("yours", ["photos/", "notes.txt", "thesis.partial", "link.tfrecord"])
def test_a_manifest_that_names_your_files_does_not_make_them_replaceable(tmp_path, yours):
    """DEST holding a manifest.json that lists a folder or file of the user's (issue 43: the tools deleted them when
    they replaced the 'previous output'), a *.partial of the user's, or a symbolic link: refused, nothing removed."""
    import json

    from trainer import records
    from trainer.errors import DataError

    dest = tmp_path / "out"
    dest.mkdir()
    name = yours.rstrip("/")
    if yours.endswith("/"):
        (dest / name).mkdir()
        (dest / name / "holiday.jpg").write_bytes(b"mine")
    elif yours == "link.tfrecord":
        (tmp_path / "elsewhere").write_bytes(b"mine")
        (dest / name).symlink_to(tmp_path / "elsewhere")
    else:
        (dest / name).write_bytes(b"mine")
    manifest = records.build_manifest(prefix="p", classes=["a", "b"], image_size=None, shards={}, source="x")
    shard = dest / records.shard_name("p", "train", 0, 1)       # a real shard beside them does not change that
    shard.write_bytes(b"")
    manifest["splits"] = {"train": {"files": [shard.name, name], "examples": 1}}
    (dest / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"\bnot empty\b.*\bprevious output"):
        records.check_output_dir(dest, "tool")
    assert sorted(p.name for p in dest.iterdir()) == sorted(["manifest.json", name, shard.name])


def test_an_interrupted_conversion_removes_its_staging_and_lock_before_stopping_the_decoders(image_folder, tmp_path,
                                                                                          monkeypatch):
    """The decoder pool is stopped only after the half-written folder and its lock are gone: stopping spawned
    workers can outlast the supervisor's SIGTERM grace on a loaded machine, and a SIGKILL then must find nothing
    half-created next to DEST (it once left .records.writing and .records.lock)."""
    import contextlib

    from trainer import make_tfrecords

    dest = tmp_path / "records"
    seen_at_teardown: list[list[str]] = []
    real = make_tfrecords._decoded

    @contextlib.contextmanager
    def decoded(tasks, workers, full_decode=False, max_side=None):
        with real(tasks, 1, full_decode, max_side) as produced:
            def interrupted():
                yield next(iter(produced))
                raise KeyboardInterrupt      # Ctrl-C (or SIGTERM via run_cli) while waiting for the decoders
            try:
                yield interrupted()
            finally:                         # where the pool is terminated
                seen_at_teardown.append(sorted(p.name for p in tmp_path.iterdir()))

    monkeypatch.setattr(make_tfrecords, "_decoded", decoded)
    with pytest.raises(KeyboardInterrupt):
        make_tfrecords.convert(image_folder, dest, workers=2, progress=lambda *_: None)
    assert seen_at_teardown == [[]]          # no .records.writing, no .records.lock left for a SIGKILL to freeze
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ------------------------------------------------------------------ real folders (issue 41)
REAL_FOLDER = r"""
import io, sys
from pathlib import Path
import numpy as np
from PIL import Image
root = Path(sys.argv[1])
rng = np.random.default_rng(1)
def picture(height, width):
    return Image.fromarray(rng.integers(0, 255, size=(height, width, 3), dtype=np.uint8))
for cls in ("cat", "dog"):
    (root / cls).mkdir(parents=True)
    for i in range(3):
        picture(30, 40).save(root / cls / f"{cls}{i}.jpg", quality=90)
picture(90, 300).convert("RGBA").save(root / "cat" / "wide.png")      # longer side 300, over --max-side 64
picture(200, 100).save(root / "dog" / "tall.jpg", quality=90)         # longer side 200
picture(30, 40).save(root / "dog" / "small.webp")
whole = io.BytesIO()
picture(30, 40).save(whole, format="PNG")
(root / "cat" / "cut.png").write_bytes(whole.getvalue()[:300])
(root / "cat" / "empty.jpg").write_bytes(b"")
(root / "dog" / "page.jpg").write_bytes(b"<!DOCTYPE html><html><body>Not found</body></html>")
(root / "dog" / "phone.jpg").write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(64))
jpeg = (root / "cat" / "cat0.jpg").read_bytes()
(root / "dog" / "marker.jpg").write_bytes(jpeg[:2] + b"\xff\x02" + jpeg[4:])     # a marker no JPEG has
"""
REAL_SKIPPED = {"cut.png": "truncated", "empty.jpg": "empty", "page.jpg": "not-an-image",
                "phone.jpg": "unsupported-format", "marker.jpg": "corrupt"}


@pytest.fixture(scope="module")
def real_folder(tools, tmp_path_factory):
    return folder_from_script(tools, tmp_path_factory, "real", REAL_FOLDER)


def _stored(dest) -> dict[str, tuple[int, int, bytes]]:
    """file name -> (height, width, encoded) of every record in ``dest``."""
    import tensorflow as tf

    out = {}
    for raw in tf.data.TFRecordDataset(sorted(str(p) for p in dest.glob("*.tfrecord"))):
        feature = tf.train.Example.FromString(raw.numpy()).features.feature
        name = feature["image/filename"].bytes_list.value[0].decode().rsplit("/", 1)[-1]
        out[name] = (feature["image/height"].int64_list.value[0], feature["image/width"].int64_list.value[0],
                     feature["image/encoded"].bytes_list.value[0])
    return out


def test_each_skipped_file_says_why(tools, real_folder, tmp_path):
    """Old: every skipped file was an "unreadable image" to the user (stderr carried a Pillow message naming a
    BytesIO object; the summary only listed paths)."""
    run = tools.run_module(["trainer.make_tfrecords", str(real_folder), str(tmp_path / "out"), "--workers", "2"])
    summary = _summary(run)
    reasons = {r["file"].rsplit("/", 1)[-1]: r for r in summary["skipped_reasons"]}
    assert {name: r["kind"] for name, r in reasons.items()} == REAL_SKIPPED
    assert sorted(summary["skipped_files"]) == sorted(r["file"] for r in summary["skipped_reasons"])
    assert "HEIC" in reasons["phone.jpg"]["reason"] and "HTML" in reasons["page.jpg"]["reason"]
    assert not any("BytesIO" in r["reason"] for r in reasons.values())
    assert sorted(l for l in run.stderr_lines if l.startswith("skipped: ")) == sorted(
        f"skipped: {r['file']}: {r['reason']}" for r in summary["skipped_reasons"])


def test_max_side_downsizes_only_the_images_over_it(tools, real_folder, tmp_path):
    """Old: no such option; a 12000x9000 PNG became a ~60 MB record decoded every epoch."""
    dest = tmp_path / "small"
    summary = _summary(tools.run_module(["trainer.make_tfrecords", str(real_folder), str(dest), "--max-side", "64",
                                         "--workers", "2"]))
    assert summary["max_side"] == 64 and summary["resized"] == 2
    stored = _stored(dest)
    assert stored["wide.png"][:2] == (19, 64)   # 90x300 -> longer side 64, aspect ratio kept
    assert stored["tall.jpg"][:2] == (64, 32)   # a JPEG over the side is re-encoded too
    for name in ("wide.png", "tall.jpg", "small.webp"):
        assert stored[name][2][:2] == b"\xff\xd8", name
    for name in ("cat1.jpg", "dog2.jpg"):      # JPEGs within the side are kept byte for byte, as without it
        assert stored[name] == (30, 40, (real_folder / name[:3] / name).read_bytes())
    assert json.loads((dest / "manifest.json").read_text())["max_side"] == 64

    full = _summary(tools.run_module(["trainer.make_tfrecords", str(real_folder), str(tmp_path / "full"),
                                      "--workers", "2"]))
    assert full["max_side"] is None and full["resized"] == 0
    assert _stored(tmp_path / "full")["tall.jpg"] == (200, 100, (real_folder / "dog" / "tall.jpg").read_bytes())
    assert _stored(tmp_path / "full")["wide.png"][:2] == (90, 300)

    for bad in ("7", "0", "x", "65501"):
        run = tools.run_module(["trainer.make_tfrecords", str(real_folder), str(tmp_path / "bad"), "--max-side", bad])
        assert run.returncode == 2 and "--max-side" in run.error_line()
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("inside", ["records", "cat/records", "link/records"])
def test_an_output_folder_inside_the_source_is_refused_before_anything_is_written(tools, real_folder, tmp_path,
                                                                                  inside):
    """Old: DEST inside SRC was written (as SRC/.records.writing, then SRC/records): the next run read it as a
    class folder."""
    import shutil

    src = tmp_path / "src"
    shutil.copytree(real_folder, src)
    (tmp_path / "link").symlink_to(src)
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    dest = tmp_path / "link" / "records" if inside.startswith("link") else src / inside
    run = tools.run_module(["trainer.make_tfrecords", str(src), str(dest), "--workers", "1"])
    assert run.returncode == 2
    assert run.error_line().startswith(f"error: make_tfrecords: destination {dest} is inside the source folder {src}")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before
