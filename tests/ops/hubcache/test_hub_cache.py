"""hub-cache add/ls/fetch with the real google-cloud-storage client against gcp-storage-emulator."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from clifixtures import error_line, invoke
from hubfixtures import make_fake_model, tar_folder


def run(*args: str):
    return invoke(args)


def objects(client, prefix="model-cache/"):
    return {b.name: b for b in client.list_blobs("hub-bkt", prefix=prefix)}


def test_add_from_http_with_redirect_uploads_sha1_layout(gcs, model_server, tmp_path):
    model = make_fake_model(tmp_path / "m")
    model_server.archives["tiny/1"] = tar_folder(model, tmp_path / "m.tar.gz").read_bytes()
    handle = model_server.handle("tiny/1")
    key = hashlib.sha1(handle.encode()).hexdigest()

    r = run("hub-cache", "add", handle, "--bucket", "gs://hub-bkt")
    assert r.exit_code == 0, r.output
    assert model_server.requests[0] == "/models/tiny/1?tf-hub-format=compressed"
    assert model_server.requests[1] == "/blobs/tiny/1.tar.gz"            # the redirect was followed
    names = set(objects(gcs))
    assert names == {f"model-cache/{key}/saved_model.pb", f"model-cache/{key}/variables/variables.index",
                     f"model-cache/{key}/variables/variables.data-00000-of-00001",
                     f"model-cache/{key}/assets/labels.txt", f"model-cache/{key}.descriptor.txt",
                     f"model-cache/{key}/.tpuctl-manifest.json"}          # no .staging/ object is left
    assert gcs.bucket("hub-bkt").blob(f"model-cache/{key}/variables/variables.data-00000-of-00001").download_as_bytes() == b"w" * 5000
    assert "4 uploaded, 0 unchanged" in r.stdout
    assert r.stdout.strip().splitlines()[-1] == "TFHUB_CACHE_DIR=gs://hub-bkt/model-cache"

    # ls shows the folder with its handle (from the descriptor) and marks it complete
    ls = run("hub-cache", "ls", "--bucket", "hub-bkt")
    assert ls.exit_code == 0, ls.output
    assert f"{key}  {handle}  4 files" in ls.stdout and "complete" in ls.stdout


def test_second_add_skips_unchanged_files_by_checksum(gcs, model_server, tmp_path):
    model = make_fake_model(tmp_path / "m")
    handle = "https://tfhub.dev/example/tiny/1"
    key = hashlib.sha1(handle.encode()).hexdigest()
    r = run("hub-cache", "add", handle, "--from", str(model), "--bucket", "hub-bkt", "--prefix", "cache/hub")
    assert r.exit_code == 0, r.output
    before = {n: b.generation for n, b in objects(gcs, "cache/hub/").items()}

    r = run("hub-cache", "add", handle, "--from", str(model), "--bucket", "hub-bkt", "--prefix", "cache/hub")
    assert r.exit_code == 0, r.output
    assert "0 uploaded, 4 unchanged" in r.stdout
    assert {n: b.generation for n, b in objects(gcs, "cache/hub/").items()} == before

    # one changed file (same size, different bytes): only it is uploaded again
    (model / "variables" / "variables.data-00000-of-00001").write_bytes(b"v" * 5000)
    r = run("hub-cache", "add", handle, "--from", str(model), "--bucket", "hub-bkt", "--prefix", "cache/hub")
    assert "1 uploaded, 3 unchanged" in r.stdout, r.output
    after = {n: b.generation for n, b in objects(gcs, "cache/hub/").items()}
    changed = {n for n in after if after[n] != before.get(n)}
    assert changed == {f"cache/hub/{key}/variables/variables.data-00000-of-00001", f"cache/hub/{key}.descriptor.txt",
                       f"cache/hub/{key}/.tpuctl-manifest.json"}
    assert r.stdout.strip().splitlines()[-1] == "TFHUB_CACHE_DIR=gs://hub-bkt/cache/hub"


def test_outputs_file_gives_bucket_prefix_and_handles(gcs, model_server, tmp_path):
    model = make_fake_model(tmp_path / "m")
    model_server.archives["a/1"] = tar_folder(model, tmp_path / "a.tar.gz").read_bytes()
    handle = model_server.handle("a/1")
    outputs = tmp_path / "out.json"
    outputs.write_text(json.dumps({"buckets": {"hub-cache": "hub-bkt"}, "hub_cache_prefix": "models",
                                   "hub_models": [handle]}))
    r = run("hub-cache", "ls", "--outputs", str(outputs))
    assert "MISSING" in r.stdout and f"tpuctl hub-cache add {handle}" in r.stdout
    r = run("hub-cache", "add", "--outputs", str(outputs))
    assert r.exit_code == 0, r.output
    assert f"models/{hashlib.sha1(handle.encode()).hexdigest()}/saved_model.pb" in objects(gcs, "models/")
    r = run("hub-cache", "ls", "--outputs", str(outputs))
    assert "MISSING" not in r.stdout and "complete" in r.stdout


def test_fetch_writes_same_layout_locally(model_server, tmp_path):
    model = make_fake_model(tmp_path / "m")
    # a tarball with one top-level folder is accepted too (saved_model.pb one level down)
    nested = tmp_path / "nested.tar.gz"
    with tarfile.open(nested, "w:gz") as tar:
        tar.add(model, arcname="tiny")
    model_server.archives["n/1"] = nested.read_bytes()
    handle = model_server.handle("n/1")
    dest = tmp_path / "cache"
    r = run("hub-cache", "fetch", handle, "--dest", str(dest))
    assert r.exit_code == 0, r.output
    key = hashlib.sha1(handle.encode()).hexdigest()
    assert (dest / key / "saved_model.pb").read_bytes() == (model / "saved_model.pb").read_bytes()
    assert (dest / key / "variables" / "variables.index").exists()
    assert (dest / f"{key}.descriptor.txt").read_text().startswith(f"Module: {handle}\n")
    assert sorted(p.name for p in dest.iterdir()) == sorted([key, f"{key}.descriptor.txt"])
    assert r.stdout.strip().splitlines()[-1] == f"TFHUB_CACHE_DIR={dest.resolve()}"


def _evil_tar(path: Path, kind: str) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        def add(name, data=b"x", **kw):
            info = tarfile.TarInfo(name)
            for k, v in kw.items():
                setattr(info, k, v)
            info.size = len(data) if info.type == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
        add("saved_model.pb", b"pb")
        add("variables/variables.index", b"idx")
        if kind == "dotdot":
            add("variables/../../escape.txt", b"pwned")
        elif kind == "absolute":
            add("/tmp/tpuctl-evil-absolute.txt", b"pwned")
        elif kind == "symlink":
            add("variables/link", type=tarfile.SYMTYPE, linkname="../../../etc/passwd")
        elif kind == "hardlink":
            add("variables/hard", type=tarfile.LNKTYPE, linkname="../outside.txt")
        elif kind == "through-a-link":       # each link alone stays inside; resolved through the first, it leaves
            add("variables/here", type=tarfile.SYMTYPE, linkname=".")
            add("variables/here/up", type=tarfile.SYMTYPE, linkname="../../escape.txt")
        elif kind == "hardlink-through-a-link":
            add("variables/top", type=tarfile.SYMTYPE, linkname="..")
            add("hard", type=tarfile.LNKTYPE, linkname="variables/top/../escape.txt")
    return path


@pytest.mark.parametrize("kind, message", [
    ("dotdot", "climbs out of the folder"),
    ("absolute", "absolute path"),
    ("symlink", "points outside the archive"),
    ("hardlink", "points outside the archive"),
    ("through-a-link", "refusing symlink 'variables/here/up'"),       # old: "not a readable … archive (… damaged"
    ("hardlink-through-a-link", "refusing hardlink 'hard'"),
])
def test_malicious_tarball_rejected_nothing_written(gcs, model_server, tmp_path, kind, message):
    archive = _evil_tar(tmp_path / f"{kind}.tar.gz", kind)
    model_server.archives["evil/1"] = archive.read_bytes()
    handle = model_server.handle("evil/1")
    workroot = tmp_path / "work"
    workroot.mkdir()

    r = run("hub-cache", "add", handle, "--bucket", "hub-bkt")
    assert r.exit_code == 2, r.output
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert objects(gcs, "") == {}                       # nothing uploaded

    dest = tmp_path / "local"
    r = run("hub-cache", "fetch", handle, "--dest", str(dest))
    assert r.exit_code == 2 and message in r.stderr
    assert not dest.exists() or list(dest.iterdir()) == []
    r = run("hub-cache", "fetch", "https://tfhub.dev/x/1", "--from", str(archive), "--dest", str(dest))
    assert r.exit_code == 2 and message in r.stderr
    assert not dest.exists() or list(dest.iterdir()) == []
    assert not (tmp_path / "escape.txt").exists() and not Path("/tmp/tpuctl-evil-absolute.txt").exists()


@pytest.mark.parametrize("args, message", [
    (["hub-cache", "add", "http://127.0.0.1:9/x", "--bucket", "no-such-bkt"], "bucket gs://no-such-bkt does not exist"),
    (["hub-cache", "add", "http://127.0.0.1:9/x", "--bucket", "Bad_Bucket"], "bucket name 'Bad_Bucket'"),
    (["hub-cache", "add", "http://127.0.0.1:9/x", "--bucket", "hub-bkt", "--prefix", "/abs"], "hub cache prefix"),
    (["hub-cache", "add", " http://x/1", "--bucket", "hub-bkt"], "surrounding spaces"),
    (["hub-cache", "add", "--bucket", "hub-bkt"], "name at least one HANDLE"),
    (["hub-cache", "add", "./does-not-exist", "--bucket", "hub-bkt"], "does not exist"),
])
def test_bad_input(gcs, args, message):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert objects(gcs, "") == {}


def test_download_http_error_is_one_line(gcs, model_server):
    r = run("hub-cache", "add", model_server.handle("nope/1"), "--bucket", "hub-bkt")
    assert r.exit_code == 1 and "HTTP 404" in r.stderr
    assert objects(gcs, "") == {}


def test_a_download_that_cannot_connect_says_why_in_words(tmp_path):
    """Before: `ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: …
    (Caused by NewConnectionError(…))` — requests' own text."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                    # bound, not listening: refused
        r = run("hub-cache", "fetch", f"http://127.0.0.1:{port}/m/1", "--dest", str(tmp_path / "hub"))
    line = error_line(r, 1, alone=True)      # what was downloaded, from where it failed, why: in words
    assert f"http://127.0.0.1:{port}/m/1 " in line and f"cannot reach 127.0.0.1:{port}" in line, line
    assert line.endswith("connection refused") and "HTTPConnectionPool" not in line, line
    assert not (tmp_path / "hub").exists() or not any((tmp_path / "hub").iterdir())


def test_upload_progress_counts_every_byte(gcs, tmp_path):
    from bootstrap import hubcache

    model = make_fake_model(tmp_path / "m", weights=b"z" * 300_000)
    m = hubcache.materialize("https://example.com/models/p/1", str(model))
    seen, totals = [], []
    result = hubcache.upload_model(gcs.bucket("hub-bkt"), "model-cache", m, workers=4,
                                   progress=seen.append, on_total=totals.append)
    size = sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
    assert totals == [size] and sum(seen) >= size
    assert sorted(result.uploaded) == ["assets/labels.txt", "saved_model.pb", "variables/variables.data-00000-of-00001",
                                       "variables/variables.index"]
    assert result.manifest_written                          # written last: a partial upload never looks complete
    key = m.key
    manifest = json.loads(gcs.bucket("hub-bkt").blob(f"model-cache/{key}/.tpuctl-manifest.json").download_as_bytes())
    assert manifest["handle"] == "https://example.com/models/p/1" and manifest["key"] == key
    assert {f["path"]: f["size"] for f in manifest["files"]} == {
        p.relative_to(model).as_posix(): p.stat().st_size for p in model.rglob("*") if p.is_file()}
    listed = objects(gcs)
    for f in manifest["files"]:
        assert listed[f"model-cache/{key}/{f['path']}"].crc32c == f["crc32c"]
    # the manifest object is the newest object of the folder: written after every file
    written = listed[f"model-cache/{key}/.tpuctl-manifest.json"].updated
    assert all(b.updated <= written for b in listed.values())


def _tgz(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def endless_server():
    """An HTTP server whose response has no Content-Length and never ends (until the client hangs up)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"   # the body ends when the connection closes

        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(10_000):          # 640 MB at most, should the client never stop
                    self.wfile.write(b"\0" * 65536)
            except OSError:
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/models/endless/1"
    httpd.shutdown()
    httpd.server_close()


def _no_workdir_left(tmp: Path) -> bool:
    return not list(tmp.glob("tpuctl-hub-*"))


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "endless"])
def test_a_download_past_the_size_bound_stops_and_leaves_nothing(gcs, model_server, endless_server, tmp_path,
                                                                 monkeypatch, declared):
    import tempfile

    from bootstrap.hubcache import model

    monkeypatch.setattr(model, "MAX_MODEL_BYTES", 1_000_000)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    if declared:
        model = make_fake_model(tmp_path / "m", weights=os.urandom(1_200_000))   # incompressible
        model_server.archives["big/1"] = tar_folder(model, tmp_path / "m.tar").read_bytes()
        handle = model_server.handle("big/1")
    else:
        handle = endless_server
    r = run("hub-cache", "add", handle, "--bucket", "hub-bkt")
    assert r.exit_code == 1, r.output
    assert len(r.stderr.strip().splitlines()) == 1, repr(r.stderr)
    [line] = r.stderr.strip().splitlines()
    assert handle in line and "stopped" in line and "1,000,000 bytes" in line, line
    assert objects(gcs, "") == {} and _no_workdir_left(tmp_path)


def test_an_archive_that_unpacks_past_the_bound_is_refused_before_extracting(gcs, tmp_path, monkeypatch):
    import tempfile

    from bootstrap.hubcache import model

    monkeypatch.setattr(model, "MAX_MODEL_BYTES", 1_000_000)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    bomb = _tgz(tmp_path / "bomb.tar.gz", {"saved_model.pb": b"\x08\x01", "variables/zeros": b"\0" * 3_000_000})
    assert bomb.stat().st_size < 100_000                     # small on disk, 3 MB unpacked
    r = run("hub-cache", "add", "https://example.com/bomb/1", "--from", str(bomb), "--bucket", "hub-bkt")
    assert r.exit_code != 0, r.output
    [line] = r.stderr.strip().splitlines()
    assert "3,000,002 bytes" in line and "1,000,000" in line, line       # how much, against which bound
    assert objects(gcs, "") == {} and _no_workdir_left(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.tar.gz"]     # nothing was unpacked anywhere


def test_an_archive_of_too_many_entries_is_refused(gcs, tmp_path, monkeypatch):
    from bootstrap.hubcache import model

    monkeypatch.setattr(model, "MAX_MODEL_FILES", 10)
    many = _tgz(tmp_path / "many.tar.gz", {"saved_model.pb": b"\x08\x01",
                                           **{f"assets/{i}.txt": b"" for i in range(20)}})
    r = run("hub-cache", "add", "https://example.com/many/1", "--from", str(many), "--bucket", "hub-bkt")
    assert r.exit_code != 0, r.output
    assert "has more than 10 entries" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert objects(gcs, "") == {}


@pytest.mark.parametrize("command", ["add", "ls"])
def test_the_prefix_help_names_the_catalogue_default(command):
    """The help text spells the default out (the catalogue is not imported for --help): it must stay the fact."""
    from ground import domain

    r = invoke(["hub-cache", command, "--help"], env={"COLUMNS": "400"})
    assert r.exit_code == 0 and f"default is {domain.DEFAULT_HUB_CACHE_PREFIX})" in " ".join(r.stdout.split())


def _link_ladder(path: Path, depth: int) -> Path:
    """An archive of in-tree links only: rung k holds two links to rung k-1, so rung ``depth`` reaches the one file
    of rung 0 by 2**depth paths (depth 26: 791 bytes, 2**26 paths to walk, issue 43's hostile trial)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in {"saved_model.pb": b"\x08\x01", "r0/f": b"x"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for k in range(1, depth + 1):
            for side in "ab":
                link = tarfile.TarInfo(f"r{k}/{side}")
                link.type, link.linkname = tarfile.SYMTYPE, f"../r{k - 1}"
                tar.addfile(link)
    return path


@pytest.mark.parametrize("depth, bound", [(12, 1000), (26, None)])
def test_an_archive_of_links_to_folders_is_refused_by_the_entries_walked(tmp_path, monkeypatch, depth, bound):
    """The scan walks a link to a folder again for every path to it: bounded by the entries it visits (old: 2**26
    paths for a 791-byte archive; 2**12 with a bound of 1000 were all copied)."""
    from bootstrap.hubcache import model

    if bound is not None:
        monkeypatch.setattr(model, "MAX_MODEL_FILES", bound)
    ladder = _link_ladder(tmp_path / "ladder.tar.gz", depth)
    r = run("hub-cache", "fetch", "https://example.com/ladder/1", "--from", str(ladder), "--dest", str(tmp_path / "c"))
    line = error_line(r, 2, alone=True)
    assert f"more than {model.MAX_MODEL_FILES:,} entries" in line, line
    assert not (tmp_path / "c").exists()


@pytest.fixture
def drip_server():
    """An HTTP server that promises 10 MB and sends one byte every 0.2 s, for 120 s at most (then hangs up)."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(10_000_000))
            self.end_headers()
            ends = time.monotonic() + 120
            try:
                while time.monotonic() < ends:
                    self.wfile.write(b"\0")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/models/drip/1"
    httpd.shutdown()
    httpd.server_close()


def test_a_download_that_drips_ends_at_its_deadline_in_one_line(drip_server, tmp_path, monkeypatch):
    """Every read answers within the per-read timeout, so only a deadline on the whole download ends it (old: it
    went on for as long as the server dripped)."""
    import tempfile

    from bootstrap.hubcache import model

    monkeypatch.setattr(model, "DOWNLOAD_DEADLINE", 3, raising=False)   # (old code: no deadline)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    r = run("hub-cache", "fetch", drip_server, "--dest", str(tmp_path / "c"))
    line = error_line(r, 1, alone=True)
    assert drip_server in line and "not finished within 3 s" in line, line
    assert _no_workdir_left(tmp_path) and not (tmp_path / "c").exists()


def test_a_handle_from_a_hub_manifest_reaches_the_terminal_without_escape_sequences(gcs, tmp_path):
    """One sanitiser for every string that reaches a terminal (issue 43): `ls` prints the handle a manifest in the
    bucket names (anyone who can write the bucket wrote it), `add` and `fetch` the handle given."""
    model = make_fake_model(tmp_path / "m")
    handle = "https://example.com/\x1b]0;evil\x07m/\x1b[2J1"
    for args in (("add", handle, "--from", str(model), "--bucket", "hub-bkt"),
                 ("ls", "--bucket", "hub-bkt"),
                 ("fetch", handle, "--from", str(model), "--dest", str(tmp_path / "c"))):
        r = run("hub-cache", *args)
        assert r.exit_code == 0, r.output
        assert "\x1b" not in r.output and "\x07" not in r.output, repr(r.output)
        assert "https://example.com/" in r.stdout and "m/1" in r.stdout, r.stdout


@pytest.mark.parametrize("manifest, expected", [
    (b"[1, 2]", "INCOMPLETE"),                       # old: AttributeError traceback ('list' has no .get)
    (b"{" + b" " * 5000 + b"}", "larger than 4096 bytes"),   # read bounded: never downloaded whole
    (b"[" * 4000, "INCOMPLETE"),                     # old: RecursionError traceback (issue 56)
    (b'{"format": "tpuctl-hub-manifest/1", "files": [{"path": ["saved_model.pb"], "size": 2, "crc32c": "x"}]}',
     "INCOMPLETE"),
])
def test_a_hostile_hub_manifest_in_the_bucket_is_read_bounded_and_shown_in_one_line(gcs, monkeypatch, manifest,
                                                                                   expected):
    from bootstrap.hubcache import bucket

    monkeypatch.setattr(bucket, "MAX_MANIFEST_BYTES", 4096, raising=False)   # (old code: read whole)
    handle = "https://tfhub.dev/example/tiny/1"
    key = hashlib.sha1(handle.encode()).hexdigest()
    blobs = gcs.bucket("hub-bkt")
    blobs.blob(f"model-cache/{key}/saved_model.pb").upload_from_string(b"pb")
    blobs.blob(f"model-cache/{key}/.tpuctl-manifest.json").upload_from_string(manifest)
    r = run("hub-cache", "ls", "--bucket", "hub-bkt")
    assert "Traceback" not in r.output
    assert expected in (r.stdout if r.exit_code == 0 else error_line(r, 2, alone=True)), r.output
