"""A Ctrl-C that Python swallowed (raised inside a weakref callback) still ends the wait loop (ground.interrupts)."""

from __future__ import annotations

import sys
import time
import weakref

import pytest

from ground import interrupts
from ground.polling import poll


def _swallowed_interrupt() -> None:
    """A KeyboardInterrupt raised where Python cannot propagate it: a weakref callback (as the import system's
    module-lock callback was when the signal came)."""
    class Thing:
        pass

    def callback(_ref):
        raise KeyboardInterrupt("SIGINT")

    thing = Thing()
    ref = weakref.ref(thing, callback)
    del thing           # the callback runs here; its exception goes to sys.unraisablehook, not to this frame
    assert ref() is None


def test_a_swallowed_interrupt_ends_the_wait_loop_at_its_next_turn():
    reads = []
    with interrupts.kept():
        _swallowed_interrupt()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            poll(lambda: reads.append(1), lambda _: False, interval=0.01, timeout=30, expired=lambda _: "never")
    assert len(reads) == 1 and time.monotonic() - started < 30
    # raised once: a later wait (the clean-up's) is not interrupted again
    with interrupts.kept():
        assert poll(lambda: len(reads), lambda n: n >= 1, interval=0.01) == 1


def test_other_unraisable_errors_still_reach_the_previous_hook(monkeypatch):
    seen = []
    hook = lambda u: seen.append(type(u.exc_value))   # noqa: E731
    monkeypatch.setattr(sys, "unraisablehook", hook)

    class Thing:
        def __del__(self):
            raise ValueError("in __del__")

    with interrupts.kept():
        Thing()
    assert seen == [ValueError] and sys.unraisablehook is hook


def test_without_the_hook_the_interrupt_is_lost(monkeypatch):
    """What the hook is for: without it, the wait goes on (here until its deadline)."""
    from ground.errors import UserError

    monkeypatch.setattr(sys, "unraisablehook", lambda u: None)     # Python's own prints "Exception ignored in"
    _swallowed_interrupt()
    with pytest.raises(UserError, match="never"):
        poll(lambda: None, lambda _: False, interval=0.01, timeout=0.05, expired=lambda _: "never")
