"""`tpuctl deploy` and the storage it copies the export to (issue 43, defect 5): a failed upload removes what it
had written and says so, and an export in a bucket is checked whole before Vertex AI is asked to serve it."""

from __future__ import annotations

import pytest
from faultfixtures import Fault, FaultyFront

from clifixtures import error_line, invoke
from gcsfixtures import anonymous_client, storage_emulator


@pytest.fixture
def faulty(monkeypatch, helpers):
    with storage_emulator() as upstream, FaultyFront(upstream) as front:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", front.url)
        client = anonymous_client(front.url, helpers.PROJECT)
        client.create_bucket(helpers.ARTIFACTS)
        yield front, client


def test_a_failed_upload_removes_what_it_wrote_and_deploys_nothing(fake_export, outputs_file, vertex, faulty, helpers):
    front, client = faulty
    fake = vertex()
    # a refusal the library does not retry (a 503 it retries for two minutes first)
    front.add(Fault("POST", r"^/upload/", body=r"variables\.index", status=400))
    r = invoke(["deploy", fake_export.run, "--outputs", outputs_file])
    line = error_line(r, 1)
    assert "variables" in line or "400" in line, line
    assert "removed the 1 object(s)" in line and "nothing was deployed" in line, line
    assert list(client.list_blobs(helpers.ARTIFACTS)) == []                 # saved_model.pb went again
    assert fake.posts(":upload") == []


@pytest.mark.parametrize("present", [["saved_model.pb"], ["saved_model.pb", "variables/variables.index"],
                                     ["saved_model.pb", "variables/variables.index",
                                      "variables/variables.data-00000-of-00002"]])
def test_an_export_in_a_bucket_that_is_not_whole_is_refused(outputs_file, vertex, faulty, helpers, present):
    _front, client = faulty
    fake = vertex()
    uri = f"gs://{helpers.ARTIFACTS}/models/partial/small_cnn/1"
    for name in present:
        client.bucket(helpers.ARTIFACTS).blob(f"models/partial/small_cnn/1/{name}").upload_from_string(b"x")
    r = invoke(["deploy", uri, "--outputs", outputs_file])
    line = error_line(r, 2)
    assert uri in line and "missing" in line and "variables" in line, line
    assert fake.posts(":upload") == []


def test_a_whole_export_in_a_bucket_is_deployed(outputs_file, vertex, faulty, helpers):
    _front, client = faulty
    fake = vertex()
    uri = f"gs://{helpers.ARTIFACTS}/models/whole/small_cnn/1"
    for name in ("saved_model.pb", "variables/variables.index", "variables/variables.data-00000-of-00001"):
        client.bucket(helpers.ARTIFACTS).blob(f"models/whole/small_cnn/1/{name}").upload_from_string(b"x")
    r = invoke(["deploy", uri, "--outputs", outputs_file])
    assert r.exit_code == 0, r.output
    assert len(fake.posts(":upload")) == 1
