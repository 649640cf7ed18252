"""Source folders for the data tool tests, written by a script in the trainer environment (a helper module,
imported by test_make_tfrecords and test_hostile; no tests here)."""

from __future__ import annotations

from pathlib import Path


def folder_from_script(tools, tmp_path_factory, name: str, script: str) -> Path:
    """A new folder ``<temporary>/<name>…/src`` filled by ``script`` (run with ``python -c``, the folder as its
    argument; it creates the folder)."""
    src = tmp_path_factory.mktemp(name) / "src"
    run = tools.run_module(["-c", script, str(src)], python_args=[])
    assert run.returncode == 0, run.stderr
    return src
