"""One run-target shape: every ``--target`` of ``train`` and ``tune`` is a target class driven by ``launch``
(pre-flight, then the request or the run; the run's cleanup lives in ``submit``'s context, on every path)."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from tpuctl.cli import load_command
from tpuctl.commands import train, tune
from tpuctl.services.runs.target import Outcome, launch


@pytest.mark.parametrize("command", [train, tune])
def test_every_target_a_command_offers_is_a_run_target_with_its_own_flags(command):
    target = next(p for p in load_command(command.__name__.rsplit(".", 1)[1]).params if p.name == "target")
    offered = {choice.value for choice in target.type_descriptor.annotation}   # the choices --help shows
    flags = command.target_flags()
    assert set(flags) == offered
    for name, own in flags.items():   # a flag no target of the command knows would never be refused
        assert own, name


class Recorder:
    name = "fake"
    flags = frozenset()

    def __init__(self, fail_in_follow: BaseException | None = None):
        self.calls: list[str] = []
        self.fail = fail_in_follow

    def preflight(self):
        self.calls.append("preflight")

    def describe(self):
        self.calls.append("describe")
        return {"request": 1}

    @contextmanager
    def submit(self):
        self.calls.append("submit")
        try:
            yield "handle"
        finally:
            self.calls.append("cleanup")

    def follow(self, handle):
        self.calls.append(f"follow {handle}")
        if self.fail is not None:
            raise self.fail
        return Outcome(self.name, "run-1", "SUCCEEDED", "/out")


def test_a_dry_run_is_the_request_after_the_preflight_and_creates_nothing():
    target = Recorder()
    assert launch(target, dry_run=True) == {"request": 1}
    assert target.calls == ["preflight", "describe"]


@pytest.mark.parametrize("failure", [None, KeyboardInterrupt(), RuntimeError("lost")])
def test_the_run_is_cleaned_up_on_every_path(failure):
    target = Recorder(failure)
    if failure is None:
        assert launch(target).state == "SUCCEEDED"
    else:
        with pytest.raises(type(failure)):
            launch(target)
    assert target.calls == ["preflight", "submit", "follow handle", "cleanup"]
