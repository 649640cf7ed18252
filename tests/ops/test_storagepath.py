"""ground.storagepath: the one shape of a local-or-gs:// place (issue 40)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ground.errors import DomainError, UserError
from ground.storagepath import GsPath, cloud_folder, is_gs, normalized

_segment = st.text(alphabet="abcxyz019_-.", min_size=1, max_size=8).filter(lambda s: s not in {".", ".."})


@given(st.lists(_segment, max_size=4), st.sampled_from(["", "/", "//"]))
def test_parse_round_trips_and_drops_trailing_slashes(parts, tail):
    place = GsPath.parse("gs://my-bucket/" + "/".join(parts) + tail)
    assert place == GsPath("my-bucket", "/".join(parts))
    assert GsPath.parse(str(place)) == place
    assert place.prefix == (f"{place.path}/" if parts else None)


def test_join_and_prefix():
    root = GsPath.parse("gs://my-bucket")
    assert str(root) == "gs://my-bucket" and root.prefix is None
    run = root.join("runs", "exp1/")
    assert run == GsPath("my-bucket", "runs/exp1") and run.prefix == "runs/exp1/"
    assert str(run.join("tpuctl/recoveries.json")) == "gs://my-bucket/runs/exp1/tpuctl/recoveries.json"


@pytest.mark.parametrize("bad", ["gs://Bad_Bucket/x", "gs:///x", "gs://ab/x", "s3://bucket/x", "bucket/x"])
def test_a_bad_address_is_one_domain_error(bad):
    with pytest.raises(DomainError):
        GsPath.parse(bad)


def test_is_gs_and_normalized():
    assert is_gs("gs://b/x") and not is_gs("runs/gs://b") and not is_gs("/tmp/x")
    assert normalized("gs://my-bucket/runs/") == "gs://my-bucket/runs" and normalized("runs/") == "runs/"


def test_cloud_folder_needs_cloud_storage():
    assert cloud_folder("gs://my-bucket/data/", "--data-dir", "a Vertex AI job reads from") == "gs://my-bucket/data"
    with pytest.raises(UserError) as err:
        cloud_folder("./data", "--data-dir", "a Vertex AI job reads from")
    assert "gs://BUCKET/PATH" in str(err.value) and str(err.value).startswith("--data-dir ./data:")
    with pytest.raises(DomainError):
        cloud_folder("gs://UPPER/data", "--data-dir", "a Vertex AI job reads from")
