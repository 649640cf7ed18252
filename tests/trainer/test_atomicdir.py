"""trainer.atomicdir: an earlier output survives a failed or interrupted write; one writer per folder."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from trainer import atomicdir
from trainer.errors import DataError


def _old(dest):
    dest.mkdir()
    (dest / "a").write_text("old")
    return {"a": "old"}


def _files(folder):
    return {p.name: p.read_text() for p in folder.iterdir()}


def test_a_failed_block_keeps_the_earlier_output_and_leaves_nothing(tmp_path):
    dest = tmp_path / "out"
    before = _old(dest)
    with pytest.raises(OSError), atomicdir.replacing(dest, "tool: destination") as out:
        assert out != dest and out.parent == dest.parent and list(out.iterdir()) == []
        (out / "a").write_text("new, half")
        raise OSError("disk full")
    assert _files(dest) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_complete_block_replaces_the_earlier_output_whole(tmp_path):
    dest = tmp_path / "out"
    _old(dest)
    with atomicdir.replacing(dest, "tool: destination") as out:
        (out / "b").write_text("new")
    assert _files(dest) == {"b": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with atomicdir.replacing(tmp_path / "new" / "deeper", "tool: destination") as out:  # missing: created
        (out / "c").write_text("x")
    assert _files(tmp_path / "new" / "deeper") == {"c": "x"}


def test_a_second_writer_is_refused_in_one_line_and_the_first_finishes(tmp_path):
    dest = tmp_path / "out"
    with atomicdir.replacing(dest, "tool: destination") as out:
        with pytest.raises(atomicdir.Busy, match=r"^tool: destination .*out\b.*\banother run\b"):
            with atomicdir.replacing(dest, "tool: destination"):
                raise AssertionError("not reached")
        (out / "mine").write_text("1")
    assert _files(dest) == {"mine": "1"}
    with atomicdir.replacing(dest, "tool: destination") as out:  # released: the next run claims it
        (out / "next").write_text("2")
    assert _files(dest) == {"next": "2"}


@contextlib.contextmanager
def _sigint_between_the_renames(monkeypatch, handler):
    """SIGINT raised right after the old output is renamed away, with ``handler`` as the process's SIGINT handler
    (set here: a shell starts background jobs with SIGINT ignored, and Python then installs no handler of its own)."""
    rename = os.rename

    def rename_then_signal(src, dst):
        rename(src, dst)
        if str(dst).endswith(".replaced"):
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(atomicdir.os, "rename", rename_then_signal)
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_during_the_swap_is_delivered_after_it(tmp_path, monkeypatch):
    """A signal between the two renames must not leave the old output renamed away and no new one in place."""
    dest = tmp_path / "out"
    _old(dest)
    with _sigint_between_the_renames(monkeypatch, signal.default_int_handler):
        with pytest.raises(KeyboardInterrupt), atomicdir.replacing(dest, "tool: destination") as out:
            (out / "b").write_text("new")
    assert _files(dest) == {"b": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_signal_the_process_ignores_stays_ignored_after_the_swap(tmp_path, monkeypatch):
    dest = tmp_path / "out"
    _old(dest)
    with _sigint_between_the_renames(monkeypatch, signal.SIG_IGN):
        with atomicdir.replacing(dest, "tool: destination") as out:
            (out / "b").write_text("new")
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    assert _files(dest) == {"b": "new"}


def test_the_next_claim_repairs_what_a_hard_kill_left(tmp_path):
    dest = tmp_path / "out"
    replaced, writing = atomicdir.sibling(dest, "replaced"), atomicdir.sibling(dest, "writing")
    replaced.mkdir()
    (replaced / "a").write_text("old")  # killed between the renames: the old output is only here
    writing.mkdir()
    (writing / "half").write_text("x")
    with pytest.raises(RuntimeError), atomicdir.replacing(dest, "tool: destination"):
        raise RuntimeError("this run fails too")
    assert _files(dest) == {"a": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_check_refuses_before_and_right_before_the_swap(tmp_path):
    dest = tmp_path / "out"
    _old(dest)

    def only_ours(folder):
        if (folder / "user-file").exists():
            raise DataError("tool: destination holds a user's file")

    with pytest.raises(DataError, match="user's file"), atomicdir.replacing(dest, "tool", check=only_ours) as out:
        (out / "b").write_text("new")
        (dest / "user-file").write_text("mine")  # appeared while the run was writing
    assert _files(dest) == {"a": "old", "user-file": "mine"}
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match=r"^tool .*\bfile\b.*\bnot a folder"):
        with atomicdir.replacing(tmp_path / "file", "tool"):
            raise AssertionError("not reached")


def test_a_symlinked_output_folder_is_replaced_where_it_is_and_the_link_stays(tmp_path):
    real = tmp_path / "disk" / "data"
    real.parent.mkdir()
    _old(real)
    link = tmp_path / "data"
    link.symlink_to(real)
    with atomicdir.replacing(link, "tool") as out:
        (out / "b").write_text("new")
    assert link.is_symlink() and _files(real) == {"b": "new"}
