"""A data folder's upload through storage that fails as Google's does now and then (issue 43, defect 2): a create
whose answer was lost after the server committed it is retried by the library (create-only writes carry
``ifGenerationMatch=0``), refused with 412, and recognised as this upload's own object by its bytes — the upload
completes; an object of that name with other bytes stays another writer's, and the error says so."""

from __future__ import annotations

import pytest
from faultfixtures import Fault, FaultyFront

from ground.errors import UserError
from tpuctl.services.data import upload_dir

from gcsfixtures import anonymous_client, storage_emulator

BUCKET = "faults-data"


@pytest.fixture
def storage():
    with storage_emulator() as upstream, FaultyFront(upstream) as front:
        client = anonymous_client(front.url)
        client.create_bucket(BUCKET)
        yield front, client


@pytest.fixture
def folder(tmp_path):
    local = tmp_path / "data"
    local.mkdir()
    for i in range(3):
        (local / f"p-train-{i:05d}-of-00003.tfrecord").write_bytes(bytes([i]) * 3000)
    (local / "manifest.json").write_text('{"splits": {}}\n')
    return local


def _names(client) -> set[str]:
    return {b.name for b in client.list_blobs(BUCKET)}


@pytest.mark.parametrize("body", [r'^\{"splits"', r"^\x01{3000}$"], ids=["the manifest", "a shard"])
def test_a_create_committed_with_its_answer_lost_completes_the_upload(storage, folder, body):
    front, client = storage
    # the request that commits a resumable upload: the session's PUT of the file's bytes
    fault = front.add(Fault("PUT", r"^/upload/.*upload_id=", body=body, status=503, committed=True))
    names = upload_dir(folder, f"gs://{BUCKET}/data", client, workers=2)
    assert fault.hits == 1
    assert set(names) == _names(client) == {f"data/{f.name}" for f in folder.iterdir()}


def test_another_writers_object_stays_and_the_error_says_so(storage, folder):
    front, client = storage
    client.bucket(BUCKET).blob("data/manifest.json").upload_from_string(b"someone else's")
    with pytest.raises(UserError) as err:
        upload_dir(folder, f"gs://{BUCKET}/data", client, workers=2)
    assert "manifest.json" in str(err.value) and "appeared meanwhile" in str(err.value), err.value
    assert _names(client) == {"data/manifest.json"}                      # the shards removed, theirs kept
    assert client.bucket(BUCKET).blob("data/manifest.json").download_as_bytes() == b"someone else's"
