"""The registry of run targets: which targets each command offers, by the name ``--target`` spells, and the three
calls every command makes through it (the request, the plan, the target). A new target is its module and one line
here; nothing else asks which target a run is for.

    request = targets.request("train", values)        # the flags given, checked: one line naming a bad one
    spec = targets.plan("train", request, outputs)    # spec.plan with the target's planning hooks
    target = targets.target("train", spec, report)    # ready for target.launch (preflight, describe | submit+follow)
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ground.envs import REPO_ROOT
from ground.outputs import StackOutputs
from tpuctl.services.runs import logs
from tpuctl.services.runs import spec as planner
from tpuctl.services.runs.local import LocalTarget
from tpuctl.services.runs.request import RunRequest, TargetOptions, build_request
from tpuctl.services.runs.spec import Echo, RunSpec
from tpuctl.services.runs.target import Report, RunTarget
from tpuctl.services.runs.tpuvm.target import TpuVmTarget
from tpuctl.services.runs.tuning.local import LocalTuningTarget
from tpuctl.services.runs.tuning.vertex import VertexTuningTarget
from tpuctl.services.runs.vertex import VertexTarget

#: Each command's targets, by the name ``--target`` spells (the first is the default).
REGISTRY: dict[str, dict[str, type[RunTarget]]] = {
    "train": {"local": LocalTarget, "vertex": VertexTarget, "tpu-vm": TpuVmTarget},
    "tune": {"local": LocalTuningTarget, "vertex": VertexTuningTarget},
}


def targets_of(command: str) -> Mapping[str, type[RunTarget]]:
    return REGISTRY[command]


def options_of(command: str) -> dict[str, type[TargetOptions]]:
    """Each target's options model (its own flags), for the CLI's options and the request."""
    return {name: target.options for name, target in REGISTRY[command].items()}


def request(command: str, values: Mapping[str, Any]) -> RunRequest:
    """The run request of ``command`` from the flags the user gave (a flag left at its default is not among
    ``values``): checked once; a flag the run's target does not take is one line naming the targets that take it."""
    targets = REGISTRY[command]
    return build_request(values, options_of(command), {name: t.notes for name, t in targets.items()})


def plan(command: str, request: RunRequest, outputs: StackOutputs | None, *, claim: bool = True,
         echo: Echo | None = None, today: datetime.date | None = None, root: Path = REPO_ROOT) -> RunSpec:
    """The run ``request`` asks ``command`` for, planned by its target (``spec.plan``)."""
    return planner.plan(request, REGISTRY[command][request.target], outputs, command=command, claim=claim,
                        echo=echo, today=today, root=root)


def run_logs(name: str, **where: Any) -> logs.RunLogs:
    """``tpuctl logs NAME``: the log source of a run, as its target keeps its logs (its class's ``log_source``, found
    by the target its run record names; a record without one is a local run's, as tpuctl wrote them first)."""
    def log_source(record: dict[str, Any], run: str, project: str | None, host: int | None) -> logs.Source:
        kind = REGISTRY["train"].get(record.get("target") or "local")
        if kind is None:
            raise logs.no_source(record, run, "target tpuctl knows")
        return kind.log_source(record, run, project, host)

    return logs.run_logs(name, log_source, **where)


def target(command: str, spec: RunSpec, report: Report, **inputs: Any) -> RunTarget:
    """The planned run ``spec`` as its target, speaking through ``report`` (``inputs``: what the command adds, a
    search and its trial count for ``tune``)."""
    return REGISTRY[command][spec.target](spec, report, **inputs)  # type: ignore[call-arg]
