"""`tpuctl data` against hostile destinations and folders (issue 27): an earlier dataset in gs:// is never written
over, and an upload never follows a symbolic link out of the folder it uploads."""

from __future__ import annotations

import pytest

from tpuctl.ground.errors import UserError
from tpuctl.services import data as datatools


def _put(client, bucket: str, objects: dict[str, bytes]) -> None:
    for name, body in objects.items():
        client.bucket(bucket).blob(name).upload_from_string(body)


def _objects(client, bucket: str) -> dict[str, bytes]:
    return {b.name: b.download_as_bytes() for b in client.list_blobs(bucket)}


def test_a_gcs_destination_holding_an_earlier_dataset_is_refused_and_kept(cli, tmp_path, gcs):
    """Old: the upload replaced the earlier shards under their manifest, and a failed upload's cleanup deleted
    the objects it had replaced: the earlier dataset was lost."""
    url, client = gcs
    client.create_bucket("tpuctl-p-data")
    earlier = {"pets/v1/manifest.json": b"{}", "pets/v1/pets-train-00000-of-00001.tfrecord": b"old"}
    _put(client, "tpuctl-p-data", earlier)
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    proc = cli(["data", "make-tfrecords", str(src), "gs://tpuctl-p-data/pets/v1/"],
               env={"STORAGE_EMULATOR_HOST": url, "TPUCTL_TRAINER_PYTHON": "/nonexistent/python"}, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (
        "error: destination gs://tpuctl-p-data/pets/v1 already holds objects (e.g. gs://tpuctl-p-data/pets/v1/"
        "manifest.json); tpuctl data never writes over an earlier dataset: choose a new path, or remove the old one "
        "first (`gcloud storage rm -r gs://tpuctl-p-data/pets/v1/`)\n")
    assert _objects(client, "tpuctl-p-data") == earlier


def test_only_objects_under_the_destination_count(gcs):
    _, client = gcs
    client.create_bucket("bkt")
    _put(client, "bkt", {"pets/v10/x": b"", "pets/v1.txt": b""})  # beside gs://bkt/pets/v1, not in it
    datatools.check_gcs_empty("gs://bkt/pets/v1", client)
    with pytest.raises(UserError) as refused:
        datatools.check_gcs_empty("gs://bkt", client)
    assert str(refused.value) == (  # the bucket root: no hint to remove everything in it
        "destination gs://bkt already holds objects (e.g. gs://bkt/pets/v1.txt); tpuctl data never writes over "
        "an earlier dataset: choose a new path (gs://bkt/NEW-NAME)")


def test_objects_that_appear_during_the_conversion_stop_the_upload(gcs, tmp_path, monkeypatch):
    """Checked again right before uploading: a concurrent run that wrote there first keeps its dataset."""
    _, client = gcs
    client.create_bucket("bkt")
    theirs = {"pets/manifest.json": b"theirs"}

    def tool_while_another_run_uploads(module, args, on_progress=None):
        out = datatools.Path(args[-1])
        out.mkdir(parents=True)
        (out / "manifest.json").write_text("ours")
        _put(client, "bkt", theirs)
        return {"train": 1}

    monkeypatch.setattr(datatools, "run_tool", tool_while_another_run_uploads)
    with pytest.raises(UserError, match=r"^destination gs://bkt/pets already holds objects"):
        datatools.sample("gs://bkt/pets", client=client)
    assert _objects(client, "bkt") == theirs


@pytest.mark.parametrize("link", ["file", "folder"])
def test_an_upload_never_follows_a_symbolic_link_out_of_its_folder(gcs, tmp_path, link):
    """Old: the walk uploaded what a linked file pointed at (rglob + is_file follow file links)."""
    _, client = gcs
    client.create_bucket("bkt")
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "id_rsa").write_text("private")
    local = tmp_path / "out"
    local.mkdir()
    (local / "manifest.json").write_text("{}")
    target = secret / "id_rsa" if link == "file" else secret
    (local / "x").symlink_to(target)
    with pytest.raises(UserError, match=rf"^{local / 'x'} is a symbolic link \(to {target}\); uploads never follow"):
        datatools.upload_dir(local, "gs://bkt/data", client)
    assert _objects(client, "bkt") == {}
