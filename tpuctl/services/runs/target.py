"""The run-target protocol, its one outcome type, its one output interface and the one driver (see the package's
docstring)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from ground import domain
from tpuctl.services.runs.request import TargetOptions
from tpuctl.services.runs.spec import Planning, RunSpec

#: ``Outcome.state`` values: the run ended well, ended badly, or was submitted and is not followed.
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
SUBMITTED = "SUBMITTED"


def _silent(_line: str) -> None:
    """Where a line goes that nobody asked to see (a service called without a report)."""


@dataclass
class Report:
    """How a run speaks, the same for every target: ``note`` for what it says as it goes (the CLI: stderr),
    ``say`` for what a user or a script keeps (the CLI: stdout: the job's name, its console page), ``display`` for
    the live view of the trainer's progress (the CLI's ``TrainDisplay``: its protocol hook, its sinks, ``event``,
    ``history``), or a callable that makes a fresh one (a search: one per trial). Without one a service says
    nothing: only the CLI renders."""
    note: Callable[[str], None] = _silent
    say: Callable[[str], None] = _silent
    display: Any = None

    def new_display(self) -> Any:
        """A display for one run (a search makes one per trial), or None."""
        return self.display() if callable(self.display) else self.display


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
    #: when the run first started, where the target knows an earlier start than this launch (a local run continued
    #: after an interruption: its record's start): the run summary's time counts from it, as ``runs ls`` does
    started: float | None = None


class RunTarget(Protocol):
    """A target: its planning (class level: from a request to its ``RunSpec``) and its run (an instance made of a
    planned spec and a ``Report``: nothing is created before ``submit``). A new target is one module with one such
    class and one line in ``targets`` (the registry)."""
    #: the target's name, as ``--target`` spells it
    name: ClassVar[str]
    #: the flags only this target takes, as a model (``request.TargetOptions``; ``target`` is its name)
    options: ClassVar[type[TargetOptions]]
    #: the spec this target plans (a ``RunSpec`` subclass)
    Spec: ClassVar[type[RunSpec]]
    #: why this target does not take a flag another one takes (the refusal's note), by field name
    notes: ClassVar[Mapping[str, str]]
    #: what to do instead of ``--workers N`` on a TPU (one replica per host)
    TPU_WORKERS: ClassVar[str]
    #: whose row of Google's framework support applies here (``domain.backend_support``'s target: local, vertex,
    #: tpu-vm): which of TensorFlow and JAX the target trains, per accelerator (``spec.backend``)
    SUPPORT: ClassVar[str]

    # -- planning (spec.plan calls these, in this order) ----------------------------------------------------------
    @classmethod
    def default_name(cls, command: str) -> str: ...
    @classmethod
    def check_name(cls, name: str) -> str: ...
    @classmethod
    def accelerator(cls, p: Planning) -> domain.Accelerator | None:
        """The request's accelerator, parsed once (``domain.parse_accelerator``) and taken by this target (or
        refused in one line), or None where the target lets the machine decide."""
    @classmethod
    def place(cls, p: Planning, accel: domain.Accelerator | None, name: str) -> dict[str, Any]:
        """The target's own checks of the request and its fields of the spec (its stack outputs, region or zone,
        capacity), said notes included."""
    @classmethod
    def data_dir(cls, p: Planning) -> tuple[str | None, dict[str, Any]]: ...
    @classmethod
    def hub_cache(cls, p: Planning) -> str | None: ...
    @classmethod
    def check_plan(cls, p: Planning) -> None:
        """A last refusal of what this target (or command) cannot run, once the common checks passed."""
    @classmethod
    def image(cls, p: Planning, accel: domain.Accelerator | None, name: str, code: str | None) -> dict[str, Any]: ...
    @classmethod
    def model_dir(cls, p: Planning, name: str) -> tuple[str, dict[str, Any]]: ...
    @classmethod
    def code_dir(cls, code: str) -> str:
        """Where the trainer imports the user's plug-ins from on this target (the folder, or its place in the
        image)."""
    @classmethod
    def plugin_ref(cls, code: str, ref: str, flag: str) -> str:
        """A ``--model``/``--dataset`` function as this target's trainer imports it (checked against what ships)."""
    @classmethod
    def command_ref(cls, code: str, program: tuple[str, ...]) -> None:
        """The file a ``--command`` program runs, checked against what this target runs it from (what ships)."""
    @classmethod
    def environment(cls, p: Planning, accel: domain.Accelerator | None, name: str, program: tuple[str, ...],
                    model_dir: str) -> dict[str, str]: ...

    @classmethod
    def log_source(cls, record: dict[str, Any], name: str, project: str | None, host: int | None) -> Any:
        """Where the lines of a run of this target are (``tpuctl logs``), from its run record; one line when it
        keeps none."""

    # -- the run ----------------------------------------------------------------------------------------------------
    def preflight(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """The request ``submit`` would send (``--dry-run``)."""
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
    """``{target name: its own flags}`` (the fields of its options model), as the CLI refuses them for the others."""
    return {target.name: frozenset(target.options.model_fields) - {"target"} for target in targets}
