"""The local targets: the trainer as processes on this machine (``train --target local``) and a local tuning
search (``tune --target local``, one trainer run per trial).

A local run exists once its run folder is claimed (``training.plan_local``); leaving ``submit``'s context on a
failure or Ctrl-C removes that folder when the run left it empty, and records a run that left work behind as
interrupted (``runs ls``). There is no request to print: neither target takes ``--dry-run``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TextIO

from tpuctl.services import runs, training
from tpuctl.services.supervisor import TaskFailed
from tpuctl.services.targets.base import FAILED, SUCCEEDED, Outcome
from tpuctl.services.training import LocalPlan, TrainOptions, release_run_dir

Echo = Callable[[str], None]


@dataclass
class LocalTarget:
    """A planned local run. ``display`` filters and shows the trainer's output (``stdout_sink()``,
    ``stderr_sink()``, ``on_message``, ``event(line)``, ``close()``, as the CLI's ``TrainDisplay``); without
    one the output goes through unchanged."""

    name: ClassVar[str] = "local"
    flags: ClassVar[frozenset[str]] = frozenset({"name", "parameter_servers", "verbose"})

    opts: TrainOptions
    plan: LocalPlan
    display: Any = None
    note: Echo | None = None
    #: without a display: where the trainer's output goes (None: this process's stdout / stderr)
    out: TextIO | None = None
    err: TextIO | None = None
    #: a line on the display when each process starts (a tuning trial shows only its own line)
    say_started: bool = True

    def preflight(self) -> None:
        if self.note is not None:
            self.note(f"{'demo dataset' if self.plan.demo_data else 'data'}: {self.plan.data_dir}")
            self.note(f"model dir: {self.plan.model_dir}")

    @contextmanager
    def submit(self) -> Iterator[float]:
        """The run, from its start time: a run that fails before writing anything leaves no empty folder, and an
        interrupted one that left work behind is recorded as such."""
        started = time.time()
        try:
            yield started
        except BaseException as exc:
            release_run_dir(self.plan)
            if isinstance(exc, KeyboardInterrupt) or (isinstance(exc, TaskFailed) and exc.exit_code == 130):
                self._record(started, state="interrupted")
            raise
        finally:
            if self.display is not None:
                self.display.close()

    def follow(self, started: float) -> Outcome:
        display = self.display
        sinks: dict[str, Any] = dict(out=self.out, err=self.err)
        if display is not None:
            sinks = dict(out=display.stdout_sink(), err=display.stderr_sink(), on_message=display.on_message)
            if self.say_started:
                sinks["on_started"] = lambda task: display.event(f"started {task.label} (pid {task.pid})")
        outcome = training.run_local(self.plan.args, workers=self.plan.workers, env=self.plan.env,
                                     parameter_servers=self.plan.parameter_servers, **sinks)
        self._record(started)
        return Outcome(self.name, Path(self.plan.model_dir).name, SUCCEEDED, self.plan.model_dir,
                       result=outcome.result)

    def _record(self, started: float, state: str | None = None) -> None:
        """The launch record ``runs ls`` reads. An interrupted run is recorded only when it left work behind
        (checkpoints, logs) and no result."""
        record = {"target": "local", "accelerator": self.opts.accelerator or "auto", "workers": self.plan.workers,
                  "args": self.plan.args, "started": started, "finished": time.time()}
        if state is None:
            runs.write_launch_record(self.plan.model_dir, record)
            return
        folder = Path(self.plan.model_dir)
        if self.plan.model_dir.startswith("gs://") or not folder.is_dir() or (folder / runs.RESULT_FILE).exists():
            return
        try:
            runs.write_launch_record(self.plan.model_dir, {**record, "state": state})
        except OSError:
            pass   # the interrupt is what the user sees; the record is a courtesy


@dataclass
class LocalTuningTarget:
    """Trials of a search (``spec``) run one after another on this machine, each a local run in
    ``<tuning folder>/trial-<n>`` (``tuning.run_local_tuning``); ``display()`` makes a fresh display per trial."""

    name: ClassVar[str] = "local"
    flags: ClassVar[frozenset[str]] = frozenset({"seed", "verbose"})

    opts: TrainOptions
    spec: Any
    trials: int
    seed: int | None = None
    display: Callable[[], Any] | None = None
    note: Echo = print

    def preflight(self) -> None:
        """Nothing to check before the first trial: each trial is planned (and refused) as a local run."""

    @contextmanager
    def submit(self) -> Iterator[None]:
        yield None   # each trial claims (and on failure releases) its own folder

    def follow(self, _handle: None) -> Outcome:
        from tpuctl.services import tuning

        base, rows = tuning.run_local_tuning(self.opts, self.spec, trials=self.trials, seed=self.seed,
                                             echo=self.note, display=self.display)
        failed = bool(rows) and all(row.state == "FAILED" for row in rows)
        return Outcome(self.name, Path(base).name, FAILED if failed else SUCCEEDED, base, trials=rows,
                       error=f"every trial failed ({len(rows)} of {len(rows)}; the lines above say why)"
                       if failed else None)
