"""The edges of serve/deploy/predict --batch/tpu run/tune (issue 27, classes 6 and 9): a bad bucket, region or image
is the real error, in one line, before anything needs Google credentials; an export with a symlink (out of it or
not) or a FIFO is never uploaded. In-process; no credentials exist here, so reaching Google would say so."""

from __future__ import annotations

import os

import pytest

from ground.errors import UserError
from tpuctl.services import serving

from clifixtures import invoke
from stackfixtures import write_outputs


@pytest.fixture
def export(tmp_path):
    folder = tmp_path / "export" / "small_cnn" / "1"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"\x08\x01")
    (folder / "variables" / "variables.index").write_bytes(b"idx")
    return folder


@pytest.fixture
def outputs(tmp_path):
    return write_outputs(tmp_path / "outputs.json")


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))


def _one_line(result, code=2):
    assert result.exit_code == code, result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "credentials" not in lines[0]
    return lines[0]


@pytest.mark.parametrize("args, fragment", [
    (["deploy", "gs://UPPER/x/small_cnn/1"], "bucket name 'UPPER'"),
    (["deploy", "gs://UPPER/x/small_cnn/1", "--dry-run"], "bucket name 'UPPER'"),
    (["deploy", "{export}", "--model-name", ".."], "model name '..'"),
    (["deploy", "{export}", "--region", "us central", "--dry-run"], "region 'us central'"),
    (["deploy", "{export}", "--image", "x/y;rm -rf ~", "--dry-run"], "not a container image reference"),
    (["predict", "--batch", "gs://b-ok/x", "{export}", "--region", "EU!", "--dry-run"], "region 'EU!'"),
    (["serve", "{export}", "--image", "x;y", "--dry-run"], "not a container image reference"),
    (["train", "--target", "tpu-vm", "-a", "v5litepod-8", "--zone", "us-central1-a", "--image", "bad image", "--dry-run"],
     "not a container image reference"),
    (["tune", "--target", "vertex", "--image", "$(id)", "--dry-run"], "not a container image reference"),
])
def test_bad_values_give_the_real_error_before_any_credentials(export, outputs, no_credentials, args, fragment):
    args = [a.replace("{export}", str(export)) for a in args]
    if args[0] != "serve":
        args += ["--outputs", str(outputs)]
    assert fragment in _one_line(invoke(args))


def test_a_symlink_out_of_the_export_is_never_uploaded(export, outputs, tmp_path, no_credentials):
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the bucket")
    (export / "variables" / "extra").symlink_to(secret)
    with pytest.raises(UserError, match="symbolic link"):
        serving.export_files(export)
    line = _one_line(invoke(["deploy", str(export), "--outputs", str(outputs), "--dry-run"]))
    assert "symbolic link" in line


def test_a_symlinked_folder_or_a_fifo_in_the_export_is_refused(export, tmp_path):
    (export / "assets").symlink_to("/usr", target_is_directory=True)
    with pytest.raises(UserError, match="symbolic link"):
        serving.export_files(export)
    (export / "assets").unlink()
    os.mkfifo(export / "assets")
    with pytest.raises(UserError, match="not a regular file"):
        serving.export_files(export)
    (export / "assets").unlink()
    assert [p.name for p in serving.export_files(export)] == ["saved_model.pb", "variables.index"]
