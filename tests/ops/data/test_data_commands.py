"""`tpuctl data make-tfrecords` / `tpuctl data sample` with the real trainer tools (trainer env), local and gs://."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clifixtures import error_line
from procfixtures import interrupt_when

MAKE_JPEGS = r"""
import sys
from pathlib import Path
import numpy as np
from PIL import Image
root = Path(sys.argv[1])
rng = np.random.default_rng(0)
for cls, n in (("cat", 7), ("dog", 6), ("owl", 5)):
    (root / cls).mkdir(parents=True)
    for i in range(n):
        pixels = rng.integers(0, 255, size=(24, 24, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / cls / f"{cls}{i}.jpg", quality=90)
(root / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
"""

READ_SHARDS = r"""
import json, sys
import tensorflow as tf
from trainer import data
folder = sys.argv[1]
counts = {}
for split in ("train", "validation"):
    ds = data.make_dataset(f"{folder}/*-{split}-*", batch_size=1, image_size=(24, 24), training=False)
    labels = [int(y[0]) for _, y in ds]
    counts[split] = {"n": len(labels), "labels": sorted(set(labels))}
    for x, _ in ds.take(1):
        counts[split]["shape"] = list(x.shape)
print("COUNTS=" + json.dumps(counts))
"""


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    """18 random JPEGs in 3 class folders plus one corrupt file (made once, with the trainer env's Pillow)."""
    import os
    import subprocess

    from ground.envs import REPO_ROOT as repo
    from ground.envs import trainer_python

    python = trainer_python()
    if not python.exists():
        pytest.skip(f"trainer environment {python} is missing (scripts/setup.sh)")
    src = tmp_path_factory.mktemp("jpegs") / "images"
    subprocess.run([str(python), "-c", MAKE_JPEGS, str(src)], check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": str(repo)})
    return src


def _summary(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_make_tfrecords_skips_the_corrupt_jpeg_and_the_trainer_reads_the_shards(cli, jpegs, tmp_path, trainer_run):
    dest = tmp_path / "records"
    summary = _summary(cli(["data", "make-tfrecords", str(jpegs), str(dest), "--validation-fraction", "0.3",
                            "--shard-mb", "0.002", "--json"]))
    assert summary["classes"] == ["cat", "dog", "owl"]
    assert summary["skipped"] == 1
    assert [Path(p).name for p in summary["skipped_files"]] == ["broken.jpg"]
    assert [(Path(r["file"]).name, r["kind"]) for r in summary["skipped_reasons"]] == [("broken.jpg", "truncated")]
    assert summary["train"] + summary["validation"] == 18
    assert summary["validation"] > 0
    shards = sorted(p.name for p in dest.glob("*.tfrecord*"))
    assert len(shards) == summary["shards"] > 2  # small --shard-mb: several shards
    assert summary["bytes"] == sum(p.stat().st_size for p in dest.glob("*.tfrecord*"))

    out = trainer_run(READ_SHARDS, str(dest))
    counts = json.loads(out.split("COUNTS=")[1])
    assert counts["train"]["n"] == summary["train"]
    assert counts["validation"]["n"] == summary["validation"]
    assert counts["train"]["labels"] == [0, 1, 2]
    assert counts["train"]["shape"] == [1, 24, 24, 3]


def test_full_decode_stores_the_same_records_and_skips_the_same_file(cli, jpegs, tmp_path):
    fast = _summary(cli(["data", "make-tfrecords", str(jpegs), str(tmp_path / "fast"), "--json"]))
    full = _summary(cli(["data", "make-tfrecords", str(jpegs), str(tmp_path / "full"), "--full-decode", "--json"]))
    assert [Path(p).name for p in full["skipped_files"]] == [Path(p).name for p in fast["skipped_files"]] \
        == ["broken.jpg"]
    shards = sorted(p.name for p in (tmp_path / "fast").iterdir())
    assert shards == sorted(p.name for p in (tmp_path / "full").iterdir()) and len(shards) >= 3
    for name in shards:  # JPEGs are kept byte for byte either way: identical shards and manifest
        assert (tmp_path / "fast" / name).read_bytes() == (tmp_path / "full" / name).read_bytes()


def test_make_tfrecords_table_output_names_the_skipped_file_and_why(cli, jpegs, tmp_path):
    """Old: `skipped (unreadable image): PATH` whatever was wrong with the file."""
    proc = cli(["data", "make-tfrecords", str(jpegs), str(tmp_path / "out")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "skipped files" in proc.stdout and "3: cat, dog, owl" in proc.stdout
    skipped = [l for l in proc.stdout.splitlines() if l.startswith("skipped: ")]
    assert len(skipped) == 1 and skipped[0].startswith(f"skipped: {jpegs / 'dog' / 'broken.jpg'}: truncated")


def test_make_tfrecords_max_side_downsizes_the_larger_images(cli, jpegs, tmp_path):
    """Old: no --max-side; every image was stored at its own size."""
    small = _summary(cli(["data", "make-tfrecords", str(jpegs), str(tmp_path / "small"), "--max-side", "16",
                          "--json"]))
    assert (small["max_side"], small["resized"], small["image_size"]) == (16, 18, [16, 16])
    assert json.loads((tmp_path / "small" / "manifest.json").read_text())["max_side"] == 16
    same = _summary(cli(["data", "make-tfrecords", str(jpegs), str(tmp_path / "same"), "--max-side", "24", "--json"]))
    assert (same["max_side"], same["resized"], same["image_size"]) == (24, 0, [24, 24])
    table = cli(["data", "make-tfrecords", str(jpegs), str(tmp_path / "table"), "--max-side", "16"])
    assert table.returncode == 0, table.stderr[-3000:]
    assert "resized images" in table.stdout and "18 (--max-side 16)" in table.stdout


def test_make_tfrecords_to_gcs_uploads_every_shard_and_the_manifest(cli, jpegs, gcs):
    url, client = gcs
    client.create_bucket("tpuctl-p-data")
    summary = _summary(cli(["data", "make-tfrecords", str(jpegs), "gs://tpuctl-p-data/pets/v1", "--json"],
                           env={"STORAGE_EMULATOR_HOST": url}))
    names = sorted(b.name for b in client.list_blobs("tpuctl-p-data"))
    assert "pets/v1/manifest.json" in names
    assert summary["uploaded"] == len(names) == summary["shards"] + 1
    manifest = json.loads(client.bucket("tpuctl-p-data").blob("pets/v1/manifest.json").download_as_bytes())
    listed = {f for split in manifest["splits"].values() for f in split["files"]}
    assert {f"pets/v1/{f}" for f in listed} == set(names) - {"pets/v1/manifest.json"}


@pytest.mark.slow
def test_sample_writes_the_demo_dataset_locally_and_to_gcs(cli, tmp_path, gcs, trainer_python):
    local = _summary(cli(["data", "sample", str(tmp_path / "demo"), "--json"]))
    assert local["train"] + local["validation"] == 1797  # scikit-learn digits
    assert local["classes"] == [str(d) for d in range(10)]
    assert (tmp_path / "demo" / "manifest.json").is_file()

    url, client = gcs
    client.create_bucket("tpuctl-p-data")
    proc = cli(["data", "sample", "gs://tpuctl-p-data/demo", "--json"], env={"STORAGE_EMULATOR_HOST": url})
    remote = _summary(proc)
    assert "Warning" not in proc.stderr
    names = sorted(b.name for b in client.list_blobs("tpuctl-p-data"))
    assert remote["uploaded"] == len(names) == local["shards"] + 1
    local_files = sorted(f"demo/{p.name}" for p in (tmp_path / "demo").iterdir())
    assert names == local_files


@pytest.mark.parametrize("args, fragment", [
    (["make-tfrecords", "/no/such/folder", "out"], "source folder /no/such/folder does not exist"),
    (["make-tfrecords", "{src}", "out", "--validation-fraction", "1.5"], "Invalid value for '--validation-fraction'"),
    (["make-tfrecords", "{src}", "out", "--validation-fraction", "nan"], "nan is not strictly between 0 and 1"),
    (["make-tfrecords", "{src}", "out", "--shard-mb", "0"], "Invalid value for '--shard-mb'"),
    (["make-tfrecords", "{src}", "out", "--shard-mb", "inf"], "Invalid value for '--shard-mb'"),
    (["make-tfrecords", "{src}", "{file}/out"], "is a file, not a folder"),
    (["make-tfrecords", "{src}", "{file}"], "exists and is not a folder"),
    (["make-tfrecords", "{src}", "/" + "o" * 5000], "longer than the OS allows"),
    (["make-tfrecords", "/" + "s" * 5000, "out"], "longer than the OS allows"),
    (["make-tfrecords", "{src}", "gs://missing-bucket/x"], "bucket missing-bucket does not exist"),
    (["make-tfrecords", "{src}", "gs://Bad_Bucket/x"], "destination gs://Bad_Bucket/x"),
    (["make-tfrecords", "{src}", "{src}/out"], "is inside the source folder"),
    (["make-tfrecords", "{src}", "{src}/a/out"], "is inside the source folder"),
    (["make-tfrecords", "{src}", "{link}/out"], "is inside the source folder"),
    (["make-tfrecords", "{src}", "out", "--max-side", "7"], "Invalid value for '--max-side'"),
    (["make-tfrecords", "{src}", "out", "--max-side", "65501"], "Invalid value for '--max-side'"),
    (["sample", "gs://missing-bucket/demo"], "bucket missing-bucket does not exist"),
])
def test_bad_input_is_one_line_and_writes_nothing(cli, tmp_path, gcs, args, fragment):
    url, _ = gcs
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "link").symlink_to(src)
    args = [a.replace("{src}", str(src)).replace("{file}", str(tmp_path / "a-file")).replace("{link}", str(tmp_path / "link"))
            for a in args]
    proc = cli(["data", *args], env={"STORAGE_EMULATOR_HOST": url, "TPUCTL_TRAINER_PYTHON": "/nonexistent/python"},
               cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and fragment in proc.stderr
    assert not (tmp_path / "out").exists()
    assert [p.name for p in src.rglob("*")] == ["a"]


def test_a_failed_rerun_into_a_local_destination_keeps_the_earlier_dataset(cli, jpegs, tmp_path):
    """Old: the tool deleted the earlier shards and manifest first, then found no readable image: DEST empty."""
    dest = tmp_path / "records"
    _summary(cli(["data", "make-tfrecords", str(jpegs), str(dest), "--json"]))
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    bad = tmp_path / "bad"
    for cls in ("a", "b"):
        (bad / cls).mkdir(parents=True)
        (bad / cls / "x.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    proc = cli(["data", "make-tfrecords", str(bad), str(dest)])
    line = error_line(proc, 2)
    assert proc.stderr.splitlines()[-1] == line     # the last line, the only error
    assert "readable images" in line and str(bad) in line and "(2 skipped)" in line and "nothing written" in line
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "records"]


SLOW_PNGS = r"""
import shutil, sys
from pathlib import Path
import numpy as np
from PIL import Image
root = Path(sys.argv[1])
ramp = np.linspace(0, 255, 1200, dtype=np.uint8)
root.mkdir(parents=True)
first = root / "seed.png"
Image.fromarray(np.stack([np.add.outer(ramp, ramp) // 2, np.tile(ramp, (1200, 1)), np.tile(ramp, (1200, 1)).T],
                         axis=-1).astype(np.uint8)).save(first)  # decoded and re-encoded: tens of ms each
for cls in ("a", "b"):
    (root / cls).mkdir()
    for i in range(40):
        shutil.copyfile(first, root / cls / f"{i:02d}.png")
first.unlink()
"""


def test_ctrl_c_during_a_local_rerun_keeps_the_earlier_dataset(cli, jpegs, tmp_path, trainer_run):
    """A real `tpuctl data make-tfrecords` (real trainer tool) over an earlier output, Ctrl-C mid-way. Old: the tool
    had already deleted the earlier shards and manifest, and removed what it wrote: DEST ended empty."""
    import subprocess

    from ground.envs import ops_python

    from clifixtures import sigint_as_ctrl_c

    dest = tmp_path / "records"
    _summary(cli(["data", "make-tfrecords", str(jpegs), str(dest), "--json"]))
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    slow = tmp_path / "slow"
    trainer_run(SLOW_PNGS, str(slow))
    proc = subprocess.Popen([str(ops_python()), "-m", "tpuctl.cli", "data", "make-tfrecords", str(slow), str(dest),
                             "--shard-mb", "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_ctrl_c)
    staging = tmp_path / ".records.writing"
    _, err = interrupt_when(
        proc, lambda: any(folder.is_dir() and list(folder.glob(".*.partial")) for folder in (staging, dest)),
        "the conversion started writing")
    assert proc.returncode == 130, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("error: interrupted by SIGINT")
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records", "slow"], err[-3000:]


def test_folder_names_reach_the_terminal_as_text(cli, jpegs, tmp_path):
    """One sanitiser for every string that reaches a terminal (issue 43): class folder names and the destination
    are never parsed as rich markup (a path with `[/x]` raised MarkupError) and their escape sequences (a window
    title, a screen clear) never reach the terminal."""
    import shutil

    src = tmp_path / "src"
    names = {"cat": "[bold]cat", "dog": "\x1b]0;evil\x07dog", "owl": "\x1b[2Jowl"}
    for old, new in names.items():
        shutil.copytree(jpegs / old, src / new)
    dest = tmp_path / "[" / "x]"           # written to: …/[/x]]
    proc = cli(["data", "make-tfrecords", str(src), str(dest)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout, repr(proc.stdout)
    assert f"written to: {dest}" in proc.stdout and "[bold]cat" in proc.stdout, proc.stdout
