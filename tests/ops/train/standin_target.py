"""A new run target, written as one module (issue 54): what a GKE target or any other would be. It plans through
the local target's planning hooks (a folder name, local folders) with one option of its own (``--greeting``) and a
field of its own in its spec, and runs its own way: the trainer as one process on this machine, its progress on the
display, its result read back. ``tests/ops/train/test_new_target.py`` adds it to the registry (one line) and drives
it through the real CLI."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from tpuctl.services.runs.local import LocalPlanning, LocalRun, run_local
from tpuctl.services.runs.request import VerboseOptions, flag
from tpuctl.services.runs.spec import Planning
from tpuctl.services.runs.target import SUCCEEDED, Outcome, Report


class StandInOptions(VerboseOptions):
    """``--target stand-in``: its own flag, and the common ones."""
    target: Literal["stand-in"] = "stand-in"
    greeting: str = flag("hello", "Stand-in: what the run says before it starts.", commands=("train",),
                         max_length=40)


class StandInRun(LocalRun):
    target: Literal["stand-in"] = "stand-in"
    greeting: str


@dataclass
class StandInTarget(LocalPlanning):
    name: ClassVar[str] = "stand-in"
    options: ClassVar[type] = StandInOptions
    Spec: ClassVar[type] = StandInRun

    spec: StandInRun
    report: Report = field(default_factory=Report)

    @classmethod
    def place(cls, p: Planning, accel: Any, name: str) -> dict[str, Any]:
        return {"greeting": p.options.greeting}

    def preflight(self) -> None:
        self.report.note(f"stand-in says {self.spec.greeting}")

    def describe(self) -> dict[str, Any]:
        return {"target": self.name, "greeting": self.spec.greeting, "model_dir": self.spec.model_dir,
                "command": ["python", "-m", "trainer.task", *self.spec.argv]}

    @contextmanager
    def submit(self) -> Iterator[float]:
        yield time.time()

    def follow(self, started: float) -> Outcome:
        display = self.report.new_display()
        sinks = {} if display is None else {"out": display.stdout_sink(), "err": display.stderr_sink(),
                                            "on_message": display.on_message}
        ran = run_local(self.spec.argv, env=self.spec.env, **sinks)
        return Outcome(self.name, self.spec.name, SUCCEEDED, self.spec.model_dir, result=ran.result)
