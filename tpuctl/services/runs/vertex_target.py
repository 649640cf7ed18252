"""The Vertex AI targets: a CustomJob (``train --target vertex``) and a HyperparameterTuningJob (``tune``).

``submit`` stages the trainer (the image must exist, or the sdist is uploaded) and creates the job; leaving its
context on Ctrl-C says the job keeps running and where to see it (tpuctl never cancels a job it stopped watching).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from tpuctl.ground.errors import EXIT_INTERRUPTED, UserError
from tpuctl.ground.polling import poll
from tpuctl.services import vertex
from tpuctl.services.targets.base import FAILED, SUBMITTED, SUCCEEDED, Outcome

Echo = Callable[[str], None]


@dataclass
class SubmittedJob:
    """A job Vertex AI accepted: the client that created it, its resource name and its console page."""

    client: Any
    name: str
    console_url: str


def _create(what: str, create) -> Any:
    from google.api_core import exceptions

    try:
        return create()
    except exceptions.GoogleAPICallError as exc:
        raise UserError(f"Vertex AI rejected the {what}: {exc.message or exc}", 1) from None


@contextmanager
def _watching(created: SubmittedJob) -> Iterator[SubmittedJob]:
    try:
        yield created
    except KeyboardInterrupt:
        raise UserError(f"stopped following {created.name}; the job keeps running ({created.console_url})",
                        EXIT_INTERRUPTED) from None


@dataclass
class VertexTarget:
    """A planned CustomJob (``job``: ``vertex.plan_job``). ``note``: pre-flight lines (stderr); ``say``: what
    the run prints as it goes (stdout). ``image_exists`` and ``sleep`` are there for tests."""

    name: ClassVar[str] = "vertex"
    flags: ClassVar[frozenset[str]] = frozenset({"region", "job_name", "image", "python_package", "spot",
                                                 "max_run_time", "budget", "dry_run", "wait", "poll_seconds",
                                                 "parameter_servers"})

    job: vertex.VertexJob
    spot: bool = False
    max_run_time: timedelta | None = None
    budget: float | None = None
    wait: bool = True
    poll_seconds: float = 30.0
    note: Echo = print
    say: Echo = print
    image_exists: Callable[[str], bool] | None = None
    sleep: Callable[[float], None] = time.sleep
    custom_job: Any = None

    def preflight(self) -> None:
        """The quota pre-flight, then Spot / timeout and the cost estimate (refused over ``budget``): before
        anything is built or uploaded."""
        from tpuctl.services import cloudrun

        vertex.check_quota(self.job, echo=self.note, spot=self.spot)   # offline: a note
        cloud = cloudrun.plan_cloud_run(self.job, spot=self.spot, max_run_time=self.max_run_time, budget=self.budget)
        for line in cloud.estimate.lines():
            self.note(line)
        self.custom_job = cloud.custom_job

    def describe(self) -> dict[str, Any]:
        return vertex.job_to_dict(self.request())

    def request(self):
        return self.custom_job if self.custom_job is not None else vertex.build_custom_job(self.job)

    @contextmanager
    def submit(self) -> Iterator[SubmittedJob]:
        vertex.stage_trainer(self.job, self.say, self.image_exists)
        client = vertex.job_client(self.job.region)
        job = _create("job", lambda: client.create_custom_job(parent=self.job.parent, custom_job=self.request()))
        created = SubmittedJob(client, job.name, vertex.console_url(job.name))
        self.say(f"submitted {created.name}")
        self.say(f"console: {created.console_url}")
        with _watching(created):
            yield created

    def follow(self, created: SubmittedJob) -> Outcome:
        """Poll the job until it reaches a terminal state (each state change said); without ``wait``, at once."""
        outputs = self.job.base_output_dir
        if not self.wait:
            return Outcome(self.name, created.name, SUBMITTED, outputs, console_url=created.console_url)
        final = follow_job(created.client, created.name, poll_seconds=self.poll_seconds, echo=self.say,
                           sleep=self.sleep)
        state = vertex.state_name(final)
        if state == "JOB_STATE_SUCCEEDED":
            return Outcome(self.name, created.name, SUCCEEDED, outputs, console_url=created.console_url)
        detail = f": {final.error.message}" if final.error.message else ""
        return Outcome(self.name, created.name, FAILED, outputs, console_url=created.console_url,
                       error=f"job {created.name} ended in {state}{detail} ({created.console_url})")


def follow_job(client, name: str, *, poll_seconds: float, echo: Echo, sleep: Callable[[float], None] = time.sleep):
    """Poll a CustomJob until it reaches a terminal state; print each state change. Returns the job."""
    from google.api_core import exceptions
    from google.api_core import retry as retries

    retry = retries.Retry(predicate=retries.if_transient_error, initial=1.0, maximum=30.0, timeout=300.0)

    def read():
        try:
            return client.get_custom_job(name=name, retry=retry)
        except exceptions.GoogleAPICallError as exc:
            raise UserError(f"cannot read the state of {name}: {exc.message or exc}", 1) from None

    return poll(read, lambda job: vertex.state_name(job) in vertex.TERMINAL_STATES, interval=poll_seconds,
                key=vertex.state_name, on_change=lambda job: echo(f"state: {vertex.state_name(job)}"), sleep=sleep)


@dataclass
class VertexTuningTarget:
    """A planned HyperparameterTuningJob over the trainer's CustomJob (``job``) and a search (``spec``). It is
    submitted, not followed: ``tpuctl tune status JOB`` reads its trials."""

    name: ClassVar[str] = "vertex"
    flags: ClassVar[frozenset[str]] = frozenset({"region", "job_name", "image", "python_package", "spot",
                                                 "max_run_time", "budget", "dry_run"})

    job: vertex.VertexJob
    spec: Any
    trials: int | None = None
    spot: bool = False
    max_run_time: timedelta | None = None
    budget: float | None = None
    note: Echo = print
    say: Echo = print
    client: Any = None
    hp_job: Any = None

    def preflight(self) -> None:
        """The request (Spot / timeout on every trial) and the cost of the study, refused over ``budget``."""
        from tpuctl.services import cloudrun, tuning

        if self.budget is not None:
            cloudrun.check_budget_value(self.budget)
        if self.spot:
            cloudrun.backup_dir(self.job)
        custom_job = cloudrun.with_scheduling(vertex.build_custom_job(self.job), spot=self.spot,
                                              max_run_time=self.max_run_time)
        self.hp_job = tuning.build_tuning_job(self.job, self.spec, custom_job, max_trials=self.trials)
        estimate = tuning.estimate_tuning(self.hp_job, self.job.region)
        for line in estimate.lines():
            self.note(line)
        cloudrun.check_budget(estimate, self.budget)

    def describe(self) -> dict[str, Any]:
        return vertex.job_to_dict(self.hp_job)

    @contextmanager
    def submit(self) -> Iterator[SubmittedJob]:
        from tpuctl.services import tuning

        vertex.stage_trainer(self.job, self.say)
        client = self.client or vertex.job_client(self.job.region)
        job = _create("tuning job", lambda: client.create_hyperparameter_tuning_job(
            parent=self.job.parent, hyperparameter_tuning_job=self.hp_job))
        created = SubmittedJob(client, job.name, tuning.tuning_console_url(job.name))
        self.say(f"submitted {created.name}")
        self.say(f"console: {created.console_url}")
        self.say(f"follow it with: tpuctl tune status {created.name}")
        with _watching(created):
            yield created

    def follow(self, created: SubmittedJob) -> Outcome:
        return Outcome(self.name, created.name, SUBMITTED, self.job.base_output_dir, console_url=created.console_url)
