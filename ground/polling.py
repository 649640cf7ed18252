"""The one wait loop: read something until it is done, saying each change once, within a deadline.

Every long-running Google operation tpuctl follows (a Vertex AI CustomJob, a Cloud Build, a queued TPU
resource being created, trained on or deleted, a service agent being generated) and a local server coming up
(TensorBoard, a served model) is waited for by :func:`poll`, so they share one shape: the same deadline arithmetic,
the same "print a state once, when it changes", and one place to inject a fake clock in tests. A loop that does
work in each round and decides itself when it is done (a stream of log lines, supervised processes) takes its
rounds from :func:`ticks`, which sleeps between them the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from ground.errors import UserError
from ground.interrupts import raise_lost

T = TypeVar("T")

_UNSEEN = object()


def poll(read: Callable[[], T], done: Callable[[T], bool], *, interval: float, timeout: float | None = None,
         expired: Callable[[T], str] | None = None, key: Callable[[T], object] | None = None,
         on_change: Callable[[T], None] | None = None, sleep: Callable[[float], None] = time.sleep,
         clock: Callable[[], float] = time.monotonic) -> T:
    """Call ``read()`` every ``interval`` seconds until ``done(value)``; return that value.

    - ``done`` may raise to end the wait with an error (a job that FAILED): that error is what the caller sees.
    - ``on_change(value)`` is called for the first value and whenever ``key(value)`` differs from the last one
      (a state change is said once, not at every poll).
    - ``timeout`` seconds after the first read (None: no deadline) the wait ends with
      ``UserError(expired(value), 1)``, ``value`` being the last one read.
    - A Ctrl-C that Python swallowed (:mod:`ground.interrupts`) is raised again before each sleep.
    """
    if timeout is not None and expired is None:
        raise ValueError("a poll with a timeout needs `expired` (the message when it runs out)")
    deadline = None if timeout is None else clock() + timeout
    last: object = _UNSEEN
    while True:
        value = read()
        if key is not None and on_change is not None:
            current = key(value)
            if current != last:
                last = current
                on_change(value)
        if done(value):
            return value
        if deadline is not None and clock() >= deadline:
            assert expired is not None
            raise UserError(expired(value), 1)
        raise_lost()
        sleep(interval)


def ticks(interval: float, *, sleep: Callable[[float], None] = time.sleep) -> Iterator[int]:
    """The rounds (0, 1, 2 …) of a loop that reads something every ``interval`` seconds and ends itself (``break``,
    ``return``): the next round comes ``interval`` seconds after the last one ended; as in :func:`poll`, a Ctrl-C
    that Python swallowed is raised again before each sleep."""
    round_ = 0
    while True:
        yield round_
        round_ += 1
        raise_lost()
        sleep(interval)


def wait_until(done: Callable[[], bool], *, timeout: float, interval: float,
               sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> bool:
    """Whether ``done()`` came true within ``timeout`` seconds, asked every ``interval``: for a cleanup that gives
    something a grace period (processes asked to stop) and then acts either way; it never raises (a cleanup must
    finish), so a swallowed Ctrl-C is left for the next wait loop to raise."""
    deadline = clock() + timeout
    while not done():
        if clock() >= deadline:
            return False
        sleep(interval)
    return True
