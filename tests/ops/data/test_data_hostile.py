"""`tpuctl data` against hostile destinations and folders (issue 27): an earlier dataset in gs:// is never written
over, and an upload never follows a symbolic link out of the folder it uploads."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud.storage import Blob

from ground.errors import UserError
from tpuctl.services import data as datatools

from clifixtures import error_line


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
    line = error_line(proc, 2, alone=True)
    # the destination, an object already in it, the two ways out (a new path; the exact command removing the old)
    assert "destination gs://tpuctl-p-data/pets/v1 " in line and "gs://tpuctl-p-data/pets/v1/manifest.json" in line
    assert "new path" in line and "(`gcloud storage rm -r gs://tpuctl-p-data/pets/v1/`)" in line, line
    assert _objects(client, "tpuctl-p-data") == earlier


def test_only_objects_under_the_destination_count(gcs):
    _, client = gcs
    client.create_bucket("bkt")
    _put(client, "bkt", {"pets/v10/x": b"", "pets/v1.txt": b""})  # beside gs://bkt/pets/v1, not in it
    datatools.check_gcs_empty("gs://bkt/pets/v1", client)
    with pytest.raises(UserError) as refused:
        datatools.check_gcs_empty("gs://bkt", client)
    msg = str(refused.value)
    assert "destination gs://bkt " in msg and "gs://bkt/pets/v1.txt" in msg and "gs://bkt/NEW-NAME" in msg, msg
    assert "rm" not in msg and "remove" not in msg, msg    # the bucket root: no hint to remove everything in it


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
    with pytest.raises(UserError, match=rf"^{local / 'x'} .*symbolic link\b.*{target}\b.*never follow"):
        datatools.upload_dir(local, "gs://bkt/data", client)
    assert _objects(client, "bkt") == {}


class _Objects:
    """A bucket that enforces generation preconditions (the storage emulator ignores them)."""

    def __init__(self, **objects: int):
        self.objects = dict(objects)  # name -> generation
        self.next_generation = 100
        self.on_upload = lambda name: None

    def blob(self, name):
        return _Blob(name, self)

    def get_blob(self, name):
        """An object's metadata (the upload reads it after a failure: its own object, or another writer's?); these
        objects carry no checksum, so none passes for this run's."""
        if name not in self.objects:
            return None
        blob = _Blob(name, self)
        blob._set_properties({"name": name, "generation": str(self.objects[name])})
        return blob


class _Blob(Blob):
    """A real Blob (transfer_manager takes nothing else) whose upload and delete act on ``bucket.objects``."""

    def _prep_and_do_upload(self, file_obj, if_generation_match=None, **_):  # what transfer_manager calls
        self.bucket.on_upload(self.name)
        if if_generation_match is not None and self.bucket.objects.get(self.name, 0) != if_generation_match:
            raise exceptions.PreconditionFailed("conditionNotMet")
        self.bucket.next_generation += 1
        self.bucket.objects[self.name] = self.bucket.next_generation
        self._set_properties({"name": self.name, "generation": str(self.bucket.next_generation)})

    def delete(self, timeout=None, if_generation_match=None):
        if self.name not in self.bucket.objects:
            raise exceptions.NotFound("gone")
        if if_generation_match is not None and self.bucket.objects[self.name] != if_generation_match:
            raise exceptions.PreconditionFailed("conditionNotMet")
        del self.bucket.objects[self.name]


def test_a_concurrent_writers_objects_are_neither_replaced_nor_deleted(tmp_path):
    """Two runs uploading into one gs:// path at once (both found it empty). Old: this run replaced the other's
    object, then its cleanup deleted every name it had uploaded, the other run's objects included."""
    local = tmp_path / "out"
    local.mkdir()
    for name in ("a.tfrecord", "b.tfrecord", "c.tfrecord", "manifest.json"):
        (local / name).write_text(name)
    bucket = _Objects(**{"pets/c.tfrecord": 7})  # the other run's object, created after the emptiness check

    def other_run_replaces_a(name):
        if name == "pets/c.tfrecord":  # meanwhile the other run also wrote a.tfrecord over ours
            bucket.objects["pets/a.tfrecord"] = 50

    bucket.on_upload = other_run_replaces_a

    class Client:
        def bucket(self, name):
            return bucket

    with pytest.raises(UserError) as failed:
        datatools.upload_dir(local, "gs://bkt/pets", Client(), workers=1)
    msg = str(failed.value)     # which file, where, how far; why (another run), what was cleaned up
    assert msg.startswith("uploading c.tfrecord to gs://bkt/pets ") and "(1 of 4 files)" in msg, msg
    assert "appeared meanwhile" in msg and "another run" in msg and "removed the 1 object(s)" in msg, msg
    assert bucket.objects == {"pets/a.tfrecord": 50, "pets/c.tfrecord": 7}  # theirs, untouched


@pytest.mark.parametrize("special", ["manifest.json", "d-train-00000-of-00001.tfrecord"])
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_special_file_in_the_demo_dataset_makes_it_incomplete_without_blocking(tmp_path, special, kind):
    """The one bounded reader (issue 43): a FIFO or a link to a device in the cached demo dataset counts as an
    incomplete dataset (made again) instead of hanging `tpuctl train` (old: the manifest was read with read_text,
    a FIFO blocked it forever; a FIFO shard passed and hung the trainer)."""
    import json
    import os
    import threading

    folder = tmp_path / "demo-data"
    folder.mkdir()
    shards = ["d-train-00000-of-00001.tfrecord", "d-validation-00000-of-00001.tfrecord"]
    for name in shards:
        (folder / name).write_bytes(b"x" * 64)
    (folder / "manifest.json").write_text(json.dumps({"splits": {"train": {"files": shards[:1]},
                                                                 "validation": {"files": shards[1:]}}}))
    assert datatools.demo_data_complete(folder)
    (folder / special).unlink()
    if kind == "fifo":
        os.mkfifo(folder / special)
    else:
        (folder / special).symlink_to("/dev/zero")
    found = []
    thread = threading.Thread(target=lambda: found.append(datatools.demo_data_complete(folder)), daemon=True)
    thread.start()
    thread.join(240)
    assert found == [False]
