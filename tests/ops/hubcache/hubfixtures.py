"""Helpers for the hub-cache tests: fake SavedModel folders, tarballs, a tfhub.dev-like server."""

import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

def make_fake_model(folder: Path, weights: bytes = b"w" * 5000) -> Path:
    """A folder shaped like a SavedModel (bytes only; enough for layout/upload tests)."""
    (folder / "variables").mkdir(parents=True, exist_ok=True)
    (folder / "saved_model.pb").write_bytes(b"\x08\x01fake-saved-model")
    (folder / "variables" / "variables.index").write_bytes(b"index-bytes")
    (folder / "variables" / "variables.data-00000-of-00001").write_bytes(weights)
    (folder / "assets").mkdir(exist_ok=True)
    (folder / "assets" / "labels.txt").write_text("a\nb\n")
    return folder


def tar_folder(folder: Path, out: Path) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        for p in sorted(folder.rglob("*")):
            tar.add(p, arcname=p.relative_to(folder).as_posix(), recursive=False)
    return out


class ModelServer:
    """Serves tarballs like tfhub.dev: /models/NAME?tf-hub-format=compressed -> 302 -> /blobs/NAME.tar.gz."""

    def __init__(self):
        self.archives: dict[str, bytes] = {}
        self.requests: list[str] = []
        server = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                server.requests.append(self.path)
                path, _, query = self.path.partition("?")
                if path.startswith("/models/") and "tf-hub-format=compressed" in query:
                    name = path[len("/models/"):]
                    self.send_response(302)
                    self.send_header("Location", f"/blobs/{name}.tar.gz")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if path.startswith("/blobs/") and path[len("/blobs/"):-len(".tar.gz")] in self.server.archives:
                    data = self.server.archives[path[len("/blobs/"):-len(".tar.gz")]]
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-tar")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.archives = self.archives
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def handle(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/models/{name}"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
