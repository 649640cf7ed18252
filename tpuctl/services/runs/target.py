"""The run-target protocol, its one outcome type and the one driver (see the package's docstring)."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

#: ``Outcome.state`` values: the run ended well, ended badly, or was submitted and is not followed.
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
SUBMITTED = "SUBMITTED"


@dataclass
class Outcome:
    """How a run ended, the same for every target; the CLI renders it (and turns FAILED into an exit code)."""
    target: str
    name: str
    state: str
    #: where the run's outputs are (model folder, the job's base output directory, a tuning folder)
    outputs: str
    #: the chief's result (``export_dir``, ``val_accuracy``…) when the target reads it
    result: dict[str, Any] | None = None
    #: FAILED: what went wrong, one line
    error: str | None = None
    #: a page to look at the run (Vertex AI's console), if there is one
    console_url: str | None = None
    #: a tuning search: its trials (``tuning.TrialRow``), best first
    trials: list[Any] = field(default_factory=list)
    #: a TPU VM run: its recoveries from preemption (zone, time trained and lost…)
    recoveries: list[dict[str, Any]] = field(default_factory=list)


class RunTarget(Protocol):
    """A planned run on one target. Nothing is created before ``submit``."""
    #: the target's name, as ``--target`` spells it
    name: ClassVar[str]
    #: the CLI parameters only this target takes (a parameter no target of a command lists is common to all)
    flags: ClassVar[frozenset[str]]

    def preflight(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """The request ``submit`` would send (``--dry-run``); only targets that take ``dry_run`` have one."""
        ...

    def submit(self) -> AbstractContextManager[Any]: ...

    def follow(self, handle: Any) -> Outcome: ...


def launch(target: RunTarget, *, dry_run: bool = False) -> Outcome | dict[str, Any]:
    """Pre-flight, then the request (``dry_run``) or the run: submitted, followed, cleaned up on every path."""
    target.preflight()
    if dry_run:
        return target.describe()
    with target.submit() as handle:
        return target.follow(handle)


def target_flags(targets: Iterable[type[RunTarget]]) -> dict[str, frozenset[str]]:
    """``{target name: its own flags}`` of a command's targets, for ``commands.options.refuse_other_targets``."""
    return {target.name: target.flags for target in targets}
