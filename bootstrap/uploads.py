"""The one folder uploader: local files to objects through google-cloud-storage's ``transfer_manager``.

Used by the hub cache (``tpuctl hub-cache add``) and by ``tpuctl deploy``/``predict --batch`` (an export). Not yet
by ``tpuctl data upload``: its create-only upload that removes what it wrote on Ctrl-C keeps its own workers
(tpuctl/services/data.py). Callers hand over files they walked with ``localtree.scan_tree`` or
``serving.exports.export_files`` (symbolic links refused there, never followed here).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Progress = Callable[[int], None]


class LazyReader(io.RawIOBase):
    """A file for transfer_manager that opens on first use and closes at end of file.

    Tens of thousands of model files must not be open at once (EMFILE): a reader holds a descriptor
    only while its upload is reading it. Reads advance the progress bar; a retry's seek reopens."""

    def __init__(self, path: Path, progress: Progress | None):
        self._path = path
        self._fh = None
        self._pos = 0
        self._progress = progress

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
        return self._pos

    def read(self, size: int = -1) -> bytes:
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



def upload_files(bucket, files: Sequence[tuple[Path, str]], *, workers: int = 8, progress: Progress | None = None,
                 done: Callable[[int], None] | None = None, upload_kwargs: dict[str, Any] | None = None) -> None:
    """Upload ``files`` (local path, object name) into ``bucket`` with ``transfer_manager.upload_many``, in windows
    of a few files per worker: at most one window is in flight (and open: ``LazyReader``), Ctrl-C stops
    submitting after the current window, and ``done(i)`` is called for each file of a finished window.
    The first failure raises (``raise_exception=True``); crc32c is checked by the library."""
    from google.cloud.storage import transfer_manager

    window = max(4 * workers, 16)
    for start in range(0, len(files), window):
        chunk = files[start:start + window]
        pairs = [(LazyReader(path, progress), bucket.blob(name)) for path, name in chunk]
        try:
            transfer_manager.upload_many(
                pairs, worker_type=transfer_manager.THREAD, max_workers=workers, raise_exception=True,
                upload_kwargs={"checksum": "crc32c", **(upload_kwargs or {})},
            )
        finally:
            for reader, _ in pairs:
                reader.close()
        if done:
            for i in range(start, start + len(chunk)):
                done(i)
