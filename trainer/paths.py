"""Paths the trainer reads and writes: local folders and ``gs://`` URLs alike (no TensorFlow here)."""

from __future__ import annotations

import posixpath


def join_path(base: str, *names: str) -> str:
    """``base/name/...`` for a local folder or a ``gs://bucket/prefix`` (a trailing ``/`` on ``base`` is dropped;
    ``os.path``/``tf.io.gfile.join`` would give the same on a local path)."""
    return posixpath.join(base.rstrip("/") or base, *names)
