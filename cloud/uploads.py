"""The one folder uploader: local files to objects through google-cloud-storage's ``transfer_manager``.

Used by ``tpuctl data`` (a dataset to gs://), the hub cache (``tpuctl hub-cache add``) and ``tpuctl deploy``/
``predict --batch`` (an export). Callers hand over files they walked themselves (``data.files_to_upload``,
``localtree.scan_tree``, ``serving.exports.export_files``: symbolic links refused there, never followed here).

``upload_files`` uploads in the calling thread, or (``background``) in a thread of its own so that the calling thread
stays free to watch signals: ``stop`` ends the handing out of files, ``wait`` waits for the uploads in flight,
``created``/``in_flight`` say what exists or may yet, ``remove`` deletes it again. The library's workers are
non-daemon threads, joined at interpreter exit: a caller that gives up on uploads hanging in the network says so in
its error (``UserError(abandoned_threads=True)``) and the CLI ends the process without joining them.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cloud.google import api_exceptions, crc32c, transfer_manager
from ground.files import digest_b64

Progress = Callable[[int], None]


class Stopped(Exception):
    """A file that was never sent: the upload had been stopped before its first request."""


class LazyReader(io.RawIOBase):
    """A file for transfer_manager that opens on first use and closes at end of file.

    Tens of thousands of model files must not be open at once (EMFILE): a reader holds a descriptor
    only while its upload is reading it. Reads advance the progress bar; a retry's seek reopens. Its first use
    (the library asks for the position before the first request) marks the upload ``started``, or raises ``Stopped``
    once ``stop`` is set; an upload already started is never cut short (it may have created its object)."""

    def __init__(self, path: Path, progress: Progress | None, stop: threading.Event):
        self._path = path
        self._fh = None
        self._pos = 0
        self._progress = progress
        self._stop = stop
        self.started = False

    def _begin(self) -> None:
        if not self.started:
            self.started = True   # before the check: whoever reads it after setting ``stop`` misses no upload
            if self._stop.is_set():
                self.started = False
                raise Stopped(str(self._path))

    def _file(self):
        if self._fh is None:
            self._fh = open(self._path, "rb")
            self._fh.seek(self._pos)
        return self._fh

    def _release(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self._begin()
        if whence == os.SEEK_SET:
            self._pos = offset
        elif whence == os.SEEK_CUR:
            self._pos += offset
        else:
            self._pos = os.stat(self._path).st_size + offset
        if self._fh is not None:
            self._fh.seek(self._pos)
        return self._pos

    def tell(self) -> int:
        self._begin()
        return self._pos

    def read(self, size: int = -1) -> bytes:
        self._begin()
        data = self._file().read(size)
        self._pos += len(data)
        if not data or size is None or size < 0 or len(data) < size:
            self._release()      # end of file: give the descriptor back now
        if self._progress and data:
            self._progress(len(data))
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._release()
        super().close()


class Upload:
    """One folder upload by ``workers`` threads, in windows of ``window`` files (default a few per worker): at most
    one window is in flight (and open: ``LazyReader``), and a failure is seen when its window ends. ``stop`` is
    checked before each window and by each file before its first request: once it is set no file is sent any more,
    the ones already sent finish. The last ``last`` files go alone, after all others (a manifest naming them).
    crc32c is checked by the library. While it runs in another thread, ``created`` and ``in_flight`` may be read;
    ``errors`` (file index -> exception) is filled when a window ends."""

    def __init__(self, bucket, files: Sequence[tuple[Path, str]], *, workers: int = 8, progress: Progress | None = None,
                 upload_kwargs: dict[str, Any] | None = None, last: int = 0, stop: threading.Event | None = None,
                 window: int | None = None):
        self.bucket, self.files, self.workers, self.last = bucket, list(files), workers, last
        self.window = window or max(4 * workers, 16)
        self.kwargs = {"checksum": "crc32c", **(upload_kwargs or {})}
        self.stop = stop or threading.Event()
        self.readers = [LazyReader(path, progress, self.stop) for path, _ in self.files]
        self.blobs: list[Any] = [None] * len(self.files)
        self.errors: dict[int, BaseException] = {}
        self.error: BaseException | None = None   # what ended ``start``'s thread, if anything did
        self._thread: threading.Thread | None = None

    def _windows(self):
        size, body = self.window, len(self.files) - self.last
        for low, high in ((0, body), (body, len(self.files))):
            for start in range(low, high, size):
                yield range(start, min(start + size, high))

    def run(self, done: Callable[[int], None] | None = None) -> None:
        """Upload in the calling thread. The first failure (in file order) is raised when its window ended;
        ``done(i)`` is called for each file of a window that ended without one. Returns early once stopped."""

        for window in self._windows():
            if self.stop.is_set():
                return
            for i in window:
                self.blobs[i] = self.bucket.blob(self.files[i][1])
            try:
                results = transfer_manager.upload_many(
                    [(self.readers[i], self.blobs[i]) for i in window], worker_type=transfer_manager.THREAD,
                    max_workers=self.workers, upload_kwargs=dict(self.kwargs))   # it adds a key to the dict
            finally:
                for i in window:
                    self.readers[i].close()
            self.errors.update((i, r) for i, r in zip(window, results)
                               if isinstance(r, BaseException) and not isinstance(r, Stopped) and not self._landed(i))
            if self.errors:
                raise self.errors[min(self.errors)]
            for i, r in zip(window, results):
                if done and r is None:
                    done(i)

    def _landed(self, i: int) -> bool:
        """A create-only upload (``if_generation_match=0``) that failed as the client saw it, although the server may
        have committed it (its answer lost after the commit: the retry then meets a 412, or a resumable session the
        server no longer knows). Ours, and done, when the object now holds exactly this file's bytes (its crc32c);
        anything else stays an error (another writer's object is left alone). Checked by reading the object, not
        by what the client saw."""
        if self.kwargs.get("if_generation_match") != 0:
            return False
        path, name = self.files[i]
        try:
            blob = self.bucket.get_blob(name)
        except api_exceptions.GoogleAPIError:
            return False
        if blob is None or not blob.crc32c or blob.crc32c != digest_b64(path, crc32c.Checksum()):
            return False
        self.blobs[i] = blob
        return True

    def start(self, done: Callable[[int], None] | None = None) -> Upload:
        """``run`` in a daemon thread of its own; ``wait`` for it, then ``error`` says how it ended."""
        def windows() -> None:
            try:
                self.run(done)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                self.error = exc

        self._thread = threading.Thread(target=windows, name="tpuctl-upload", daemon=True)
        self._thread.start()
        return self

    def wait(self, seconds: float | None = None) -> bool:
        """True once ``start``'s thread ended: every upload finished, failed or never began, and the library's
        workers are gone. False while some still run (after ``seconds``)."""
        self._thread.join(seconds)  # type: ignore[union-attr]
        return not self._thread.is_alive()

    def created(self) -> dict[str, int]:
        """Object name -> generation of each object this upload created so far."""
        return {b.name: b.generation for b in self.blobs if b is not None and b.generation is not None}

    def in_flight(self) -> list[str]:
        """Objects whose upload was sent and has not ended (as far as known yet): they may still appear."""
        return [name for i, (_, name) in enumerate(self.files) if self.readers[i].started
                and self.blobs[i].generation is None and i not in self.errors]

    def remove(self) -> tuple[int, list[str]]:
        """Delete what this upload created, each object only in the generation it created (another writer's object
        of that name stays), and what is in flight by name. Returns (objects removed, names that could not be)."""

        created = self.created()
        removed, kept = 0, []
        for name in [*created, *self.in_flight()]:
            try:
                self.bucket.blob(name).delete(timeout=10, if_generation_match=created.get(name))
                removed += 1
            except (api_exceptions.NotFound, api_exceptions.PreconditionFailed):  # never created, gone, or someone else's
                pass
            except Exception:  # noqa: BLE001 - best effort; the caller names what is left
                kept.append(name)
        return removed, kept


def upload_files(bucket, files: Sequence[tuple[Path, str]], *, done: Callable[[int], None] | None = None,
                 background: bool = False, **options) -> Upload:
    """Upload ``files`` (local path, object name) into ``bucket`` (``options``: those of ``Upload``): ``done(i)`` for
    each file of a finished window, the first failure raised. In the calling thread (Ctrl-C there stops after the
    current window), or with ``background`` in a thread of its own: the call returns the started ``Upload`` at
    once and the caller ``wait``s for it, free to watch signals and set ``stop``."""
    upload = Upload(bucket, files, **options)
    if background:
        return upload.start(done)
    upload.run(done)
    return upload
