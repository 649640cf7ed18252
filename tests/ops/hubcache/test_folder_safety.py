"""Local sources (`--from DIR`, archives, `--dest`) give one line and write nothing, identically in add and fetch.

Every case here went wrong before: a symlink leaving the folder was uploaded/copied (its target's bytes),
dangling links, FIFOs and link loops were silently skipped or crashed, a truncated archive was a traceback,
a backslash member became an object name with `..` in the bucket, a FILE as --dest or a too long path
were tracebacks, and every file of a model was opened at once (EMFILE with tens of thousands of files)."""

from __future__ import annotations

import io
import os
import resource
import socket
import subprocess
import tarfile
from pathlib import Path

import pytest

from ground.envs import ops_python

from clifixtures import invoke
from hubfixtures import make_fake_model, tar_folder

HANDLE = "https://tfhub.dev/example/tiny/1"


def objects(client, prefix=""):
    return {b.name: b for b in client.list_blobs("hub-bkt", prefix=prefix)}


def _one_line(r, code=2):
    assert r.exit_code == code, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def _bad_folder(tmp_path: Path, kind: str) -> Path:
    model = make_fake_model(tmp_path / "model")
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-OUTSIDE-THE-MODEL")
    var = model / "variables"
    if kind == "symlink-outside":
        (var / "link").symlink_to(secret)
    elif kind == "symlink-outside-relative":
        (var / "link").symlink_to("../../secret.txt")
    elif kind == "dir-symlink-outside":
        (model / "assets" / "etc").symlink_to(tmp_path)
    elif kind == "dangling":
        (var / "gone").symlink_to(tmp_path / "does-not-exist")
    elif kind == "loop":
        (var / "a").symlink_to(var / "b")
        (var / "b").symlink_to(var / "a")
    elif kind == "dir-loop":
        (var / "up").symlink_to(model)
    elif kind == "fifo":
        os.mkfifo(var / "pipe")
    elif kind == "socket":
        # a unix socket path must be short: bind in a short cwd-relative name
        old = os.getcwd()
        os.chdir(var)
        try:
            s = socket.socket(socket.AF_UNIX)
            s.bind("sock")
            s.close()
        finally:
            os.chdir(old)
    elif kind == "backslash":
        (var / "a\\..\\..\\x").write_text("x")
    return model


@pytest.mark.parametrize("kind, message", [
    ("symlink-outside", "points outside the folder"),
    ("symlink-outside-relative", "points outside the folder"),
    ("dir-symlink-outside", "points outside the folder"),
    ("dangling", "dangling symlink"),
    ("loop", "symlink loop"),
    ("dir-loop", "symlink loop"),
    ("fifo", "it is a FIFO, not a regular file"),
    ("socket", "it is a socket, not a regular file"),
    ("backslash", "backslash"),
])
def test_bad_folder_refused_identically_by_add_and_fetch(gcs, tmp_path, kind, message):
    model = _bad_folder(tmp_path, kind)
    added = _one_line(invoke(["hub-cache", "add", HANDLE, "--from", model, "--bucket", "hub-bkt"]))
    assert message in added
    assert objects(gcs) == {}                                  # nothing uploaded, not even staging
    dest = tmp_path / "local"
    fetched = _one_line(invoke(["hub-cache", "fetch", HANDLE, "--from", model, "--dest", dest]))
    assert fetched == added
    assert not dest.exists() or list(dest.iterdir()) == []


def test_in_tree_symlink_is_uploaded_as_its_target(gcs, tmp_path):
    model = make_fake_model(tmp_path / "model")
    (model / "assets" / "same-labels.txt").symlink_to("labels.txt")
    r = invoke(["hub-cache", "add", HANDLE, "--from", model, "--bucket", "hub-bkt"])
    assert r.exit_code == 0, r.output
    names = {n.split("/", 2)[2] for n in objects(gcs, "model-cache/") if n.count("/") >= 2}
    assert "assets/same-labels.txt" in names


def _archive(path: Path, kind: str) -> Path:
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "not-a-tar":
        path.write_bytes(os.urandom(4000))
    elif kind == "truncated":
        model = make_fake_model(path.parent / "full", weights=os.urandom(200_000))
        data = tar_folder(model, path.parent / "full.tar.gz").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        with tarfile.open(path, "w:gz") as tar:
            for name, data in (("saved_model.pb", b"pb"), ({"backslash": "variables\\..\\..\\evil",
                                                            "dot": "variables/./x",
                                                            "empty-segment": "variables//x"}[kind], b"x")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("kind, message", [
    ("empty", "is empty"),
    ("not-a-tar", "is not a readable .tar/.tar.gz archive"),
    ("truncated", "truncated or damaged"),
    ("backslash", "backslash"),
    ("dot", "'.' or empty segments"),
    ("empty-segment", "'.' or empty segments"),
])
def test_bad_archive_is_one_line_in_add_and_fetch(gcs, tmp_path, kind, message):
    archive = _archive(tmp_path / f"{kind}.tar.gz", kind)
    added = _one_line(invoke(["hub-cache", "add", HANDLE, "--from", archive, "--bucket", "hub-bkt"]))
    assert message in added
    assert objects(gcs) == {}
    dest = tmp_path / "local"
    assert _one_line(invoke(["hub-cache", "fetch", HANDLE, "--from", archive, "--dest", dest])) == added
    assert not dest.exists() or list(dest.iterdir()) == []


def test_leading_dot_slash_members_are_accepted(tmp_path):
    """`tar -C DIR .` writes ./saved_model.pb (tfhub.dev archives look like this): not a '.' segment."""
    model = make_fake_model(tmp_path / "m")
    archive = tmp_path / "dot.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(model, arcname=".")
    dest = tmp_path / "local"
    r = invoke(["hub-cache", "fetch", HANDLE, "--from", archive, "--dest", dest])
    assert r.exit_code == 0, r.output


def test_existing_file_as_dest_is_one_line(tmp_path):
    model = make_fake_model(tmp_path / "m")
    dest = tmp_path / "a-file"
    dest.write_text("keep me")
    assert "is a file, not a folder" in _one_line(invoke(["hub-cache", "fetch", HANDLE, "--from", model,
                                                          "--dest", dest]))
    assert dest.read_text() == "keep me"


@pytest.mark.parametrize("which", ["--from", "--dest"])
def test_path_longer_than_the_os_allows_is_one_line(tmp_path, which):
    model = make_fake_model(tmp_path / "m")
    long = tmp_path / ("x" * 300) / "y"
    args = (["--from", long, "--dest", tmp_path / "d"] if which == "--from" else ["--from", model, "--dest", long])
    assert "path too long" in _one_line(invoke(["hub-cache", "fetch", HANDLE, *args]))


def test_many_files_are_not_opened_at_once(gcs, tmp_path):
    """A model with more files than the process may open: files are opened lazily, a few at a time."""
    model = make_fake_model(tmp_path / "m")
    limit = 128
    for i in range(limit + 32):
        (model / "assets" / f"vocab-{i:04}.txt").write_text(f"token {i}\n")

    def low_fd_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    proc = subprocess.run([str(ops_python()), "-m", "tpuctl.cli", "hub-cache", "add", HANDLE, "--from", str(model),
                           "--bucket", "hub-bkt", "--workers", "4"],
                          env=dict(os.environ), capture_output=True, text=True, timeout=300, preexec_fn=low_fd_limit)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{limit + 32 + 4} uploaded" in proc.stdout
    assert len([n for n in objects(gcs, "model-cache/") if "/assets/vocab-" in n]) == limit + 32
