"""A cloud run's log lines, read back from Cloud Logging: `tpuctl logs RUN`, and a failed TPU VM host's last lines.

The Cloud Logging API's ``ListLogEntries`` (google/logging/v2/logging.proto: ``resource_names``, ``filter``,
``order_by``, ``page_size``, ``page_token``; the answer's ``entries`` and ``next_page_token``) through
google-cloud-logging's own GAPIC client, ``LoggingServiceV2Client`` on its gRPC transport (``logging_client``;
``TPUCTL_LOGGING_ENDPOINT`` redirects it). Following a run asks again every few seconds from the newest entry seen,
as gcloud 528's ``ai custom-jobs stream-logs`` does (command_lib/ai/log_util.py through command_lib/logs/stream.py
``LogFetcher``, which polls ``entries.list``). Throttling (RESOURCE_EXHAUSTED), server errors and calls that get no
answer in time are retried with google-api-core's retry; a denied or unreachable API is one ``LogsUnavailable`` line.

Which entries are a run's:

- **Vertex AI** job: its monitored resource (``domain.VERTEX_JOB_LOG_RESOURCE``) and ``resource.labels.job_id``; one
  replica: ``resource.labels.task_name`` (``domain.vertex_task_name``; the facts and their source are there). Host 0
  is the chief (pool 0), host N the N-th replica after it (pool 1, replica N-1).
- **TPU VM** hosts: the trainer container's output goes to Cloud Logging through Docker's ``gcplogs`` logging driver
  (script.py): log ``gcplogs-docker-driver``, one entry per line, ``jsonPayload.message`` the line and
  ``jsonPayload.container.metadata`` the container labels the driver was told to copy (``--log-opt labels=…``):
  ``tpuctl_run`` and ``tpuctl_worker`` (moby/moby daemon/logger/gcplogs/gcplogging.go, the driver's source, and
  https://docs.docker.com/engine/logging/drivers/gcplogs/, read 2026-11-27). The startup script's own failures
  (Docker's login, a container that did not start, the exit report) go to the log ``tpuctl-startup`` through
  ``gcloud logging write LOG_NAME MESSAGE --payload-type=json`` (https://cloud.google.com/sdk/gcloud/reference/logging/write
  and the Cloud SDK 528's lib/surface/logging/write.py: the JSON object becomes the entry's ``jsonPayload``), with the
  same ``message`` and ``container.metadata`` keys, so one filter (``logName=("A" OR "B")``:
  https://cloud.google.com/logging/docs/view/logging-query-language, read 2026-11-27) and one reader take both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cloud import clients
from cloud.google import api_exceptions, api_retry, api_timeout, json_format, logging_v2
from ground import domain
from ground.errors import UserError
from ground.files import printable
from ground.numbers import is_digits
from ground.outputs import StackOutputs
from ground.polling import ticks
from tpuctl.services.runs import records
from trainer import protocol

#: The log Docker's gcplogs driver writes to (its ``c.Logger("gcplogs-docker-driver")``).
DOCKER_LOG = "gcplogs-docker-driver"
#: The log a TPU VM host's startup script writes its own failures to (script.py ``log_failure``).
STARTUP_LOG = "tpuctl-startup"
#: The container labels every TPU VM host's trainer carries, copied into each entry by the gcplogs driver.
RUN_LABEL, WORKER_LABEL = "tpuctl_run", "tpuctl_worker"
#: Entries asked for per page (the API allows up to 1000).
PAGE_SIZE = 1000
#: At most this many pages are read in one listing (a stream that never ends its pages is bounded).
MAX_PAGES = 1000
#: How long throttled or failing requests are retried before the listing gives up (one line).
RETRY_SECONDS = 60.0


class LogsUnavailable(UserError):
    """Cloud Logging cannot be read (denied, unreachable, throttled too long): one line, never a failed run."""


@dataclass(frozen=True)
class LogLine:
    host: str           # "host 0", "host 1": the chief is host 0
    timestamp: str      # RFC 3339, as Cloud Logging gives it
    text: str
    insert_id: str = ""


@dataclass(frozen=True)
class Source:
    """Where a run's lines are: the project, the filter of its entries, and how to name an entry's host."""
    project: str
    filter: str
    host_of: Callable[[dict[str, Any]], str]


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def vertex_source(project: str, job_name: str, host: int | None = None) -> Source:
    """A Vertex AI CustomJob's entries (``job_name``: projects/P/locations/R/customJobs/ID), one host's with ``host``."""
    job_id = job_name.rstrip("/").rsplit("/", 1)[-1]
    clauses = [f"resource.type={_quoted(domain.VERTEX_JOB_LOG_RESOURCE)}", f"resource.labels.job_id={_quoted(job_id)}"]
    if host is not None:
        clauses.append(f"resource.labels.task_name={_quoted(vertex_task(host))}")

    def host_of(entry: dict[str, Any]) -> str:
        task = str(((entry.get("resource") or {}).get("labels") or {}).get("task_name") or "")
        pool, _, replica = task.removeprefix("workerpool").partition("-")
        if is_digits(pool) and is_digits(replica) and len(pool) + len(replica) < 20:
            return f"host {int(replica) if pool == '0' else int(replica) + 1}"
        return f"host {printable(task, 40) or '?'}"

    return Source(project, " AND ".join(clauses), host_of)


def vertex_task(host: int) -> str:
    """The task name of host N of a job tpuctl built (pool 0: the chief; pool 1: the other workers)."""
    return domain.vertex_task_name(0, 0) if host == 0 else domain.vertex_task_name(1, host - 1)


def tpu_vm_source(project: str, run: str, host: int | None = None) -> Source:
    """A TPU VM run's entries (its trainer containers' lines and its startup scripts' failures), one host's with
    ``host``."""
    names = " OR ".join(_quoted(f"projects/{project}/logs/{log}") for log in (DOCKER_LOG, STARTUP_LOG))
    clauses = [f"logName=({names})",
               f"jsonPayload.container.metadata.{RUN_LABEL}={_quoted(run)}"]
    if host is not None:
        clauses.append(f"jsonPayload.container.metadata.{WORKER_LABEL}={_quoted(str(host))}")

    def host_of(entry: dict[str, Any]) -> str:
        metadata = (((entry.get("jsonPayload") or {}).get("container") or {}).get("metadata") or {})
        return f"host {printable(str(metadata.get(WORKER_LABEL, '?')), 20)}"

    return Source(project, " AND ".join(clauses), host_of)


def _text(entry: dict[str, Any]) -> str:
    payload = entry.get("jsonPayload")
    if isinstance(payload, dict):
        return str(payload.get("message") or "")
    return str(entry.get("textPayload") or "")


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


#: Seconds one ``ListLogEntries`` call may take; a stalled answer is retried like an unavailable service.
REQUEST_SECONDS = 60.0


def logging_client():
    """google-cloud-logging's GAPIC client (``LoggingServiceV2Client``, its gRPC transport), redirected by
    ``TPUCTL_LOGGING_ENDPOINT`` and failing fast on an endpoint it cannot reach (``cloud.clients.gapic``)."""
    return clients.gapic(logging_v2.services.logging_service_v2.LoggingServiceV2Client, "logging", transport="grpc")


def _transient(exc: BaseException) -> bool:
    """Throttled (429), failing (5xx) or a call that got no answer in time: worth asking again."""
    return api_retry.if_transient_error(exc) or isinstance(exc, api_exceptions.DeadlineExceeded)


def _line(source: Source, entry: Any) -> LogLine:
    when = entry.timestamp      # a datetime (UTC); written with six digits so the times sort as text
    as_json = json_format.MessageToDict(type(entry).pb(entry))
    return LogLine(source.host_of(as_json), rfc3339(when.timestamp()) if when else "", _text(as_json),
                   entry.insert_id)


@contextmanager
def _reading(project: str, retry_seconds: float = RETRY_SECONDS, request_seconds: float = REQUEST_SECONDS):
    """Every way reading Cloud Logging fails, as one ``LogsUnavailable`` line."""
    where = f"Cloud Logging for project {project}"
    try:
        yield
    except (api_exceptions.Forbidden, api_exceptions.PermissionDenied):
        raise LogsUnavailable(f"permission denied reading {where}: you need logging.logEntries.list "
                              "(roles/logging.viewer)", 1) from None
    except api_exceptions.RetryError as exc:
        cause = exc.cause
        why = (f"no answer within {request_seconds:g} s" if isinstance(cause, api_exceptions.DeadlineExceeded)
               else getattr(cause, "message", None) or str(cause or exc))
        raise LogsUnavailable(f"{where} kept failing for {retry_seconds:.0f} s ({printable(str(why), 200)})",
                              1) from None
    except api_exceptions.GoogleAPICallError as exc:
        raise LogsUnavailable(f"reading {where} failed: {printable(exc.message or str(exc), 200)}", 1) from None
    except UserError as exc:     # unreachable endpoint, no credentials
        raise LogsUnavailable(str(exc), exc.exit_code) from None
    except Exception as exc:     # credentials and transport failures, translated once
        translated = clients.as_user_error(exc, f"reading {where}")
        if translated is None:
            raise
        raise LogsUnavailable(str(translated), 1) from None


def entries(source: Source, *, since: float | None = None, from_time: str | None = None, limit: int | None = None,
            client=None, page_size: int = PAGE_SIZE, retry_seconds: float = RETRY_SECONDS,
            request_seconds: float = REQUEST_SECONDS) -> list[LogLine]:
    """The run's lines, oldest first (``since``: epoch seconds; ``from_time``: an RFC 3339 time, both inclusive),
    every page; the newest ``limit`` lines when given. Raises ``LogsUnavailable`` (one line) when the API cannot be
    read."""
    clauses = [source.filter]
    if since is not None:
        clauses.append(f'timestamp>="{rfc3339(since)}"')
    if from_time is not None:
        clauses.append(f"timestamp>={_quoted(from_time)}")
    retry = api_retry.Retry(predicate=_transient, initial=0.5, maximum=10.0, timeout=retry_seconds)
    with _reading(source.project, retry_seconds, request_seconds):
        request = logging_v2.types.ListLogEntriesRequest(
            resource_names=[f"projects/{source.project}"], filter=" AND ".join(clauses),
            order_by="timestamp desc" if limit else "timestamp asc", page_size=min(page_size, limit or page_size))
        client = client or logging_client()
        pages = client.list_log_entries(request=request, retry=retry,
                                        timeout=api_timeout.ConstantTimeout(request_seconds)).pages
        lines: list[LogLine] = []
        seen_tokens: set[str] = set()
        for number, page in enumerate(pages, start=1):
            lines.extend(_line(source, entry) for entry in page.entries)
            token = page.next_page_token
            if not token or (limit and len(lines) >= limit) or token in seen_tokens or number >= MAX_PAGES:
                break
            seen_tokens.add(token)
    return lines[:limit][::-1] if limit else lines


def follow(source: Source, *, since: float | None, done: Callable[[], bool], interval: float = 5.0,
           client=None, sleep: Callable[[float], None] = time.sleep) -> Iterator[LogLine]:
    """The run's lines as they arrive (asked again every ``interval`` seconds from the newest time seen), until
    ``done()`` says the run ended and one more read found nothing new. An entry is shown once (its insert id)."""
    with _reading(source.project):
        client = client or logging_client()      # one channel for the whole follow
    shown: set[Any] = set()
    newest: str | None = None
    finished = False
    for _ in ticks(interval, sleep=sleep):
        fresh = [line for line in entries(source, since=since if newest is None else None, from_time=newest,
                                          client=client)
                 if (line.insert_id or (line.timestamp, line.host, line.text)) not in shown]
        for line in fresh:
            shown.add(line.insert_id or (line.timestamp, line.host, line.text))
            newest = max(newest or line.timestamp, line.timestamp)
            yield line
        if finished and not fresh:
            return
        finished = done()   # ended: one more read, a round later (Cloud Logging may still take the last lines)


def last_lines(source: Source, count: int = 20, **kwargs: Any) -> list[LogLine]:
    """The newest ``count`` lines (oldest first)."""
    return entries(source, limit=count, **kwargs)


@dataclass(frozen=True)
class RunLogs:
    """A cloud run's log source and how to tell that it ended (its record says so, or its result is there)."""
    name: str
    folder: str
    source: Source
    ended: Callable[[], bool]


def run_logs(name: str, log_source: Callable[[dict[str, Any], str, str | None, int | None], Source], *,
             base: str | None = None, outputs: StackOutputs | None = None, host: int | None = None,
             storage_client=None) -> RunLogs:
    """The log source of the cloud run ``name`` in ``base`` (a ``gs://`` folder of runs) or the stack's
    ``<artifacts>/runs``, from its run record (``tpuctl-run.json``: target, project, the Vertex AI job), written when
    the run was submitted; ``log_source(record, name, project, host)`` is the run's target's (``targets.run_logs``
    picks it by the record's target). One line when there is no such run or it keeps no logs."""
    if outputs is not None:
        base = f"{outputs.require('buckets.artifacts')}/runs"
    if not base:
        raise UserError("pass --stack NAME or --outputs FILE (the runs in the stack's artifacts bucket), or --dir "
                        "gs://BUCKET/runs")
    if base.startswith("gs:"):
        try:
            domain.split_gs_uri(base)         # `--dir gs://` said "no cloud run … in gs://" (issue 56, a fresh trial)
        except UserError as err:
            raise UserError(f"--dir {printable(base, 200)}: {err}") from None
    if name in ("", ".", "..") or any(c in name for c in "/\\\x00") or len(name) > 255:
        raise UserError(f"{printable(name, 80)!r} is not a run's name: a run is one folder in {printable(base, 200)} "
                        "(`tpuctl runs ls` lists them)")
    folder = f"{base.rstrip('/')}/{name}"
    record = read_run_record(name, folder, base, storage_client)
    project = record.get("project") or (outputs.project if outputs else None)
    source = log_source(record, name, project, host)

    def ended() -> bool:
        again = records.read_launch_record(folder, storage_client=storage_client) or {}
        return again.get("finished") is not None

    return RunLogs(name, folder, source, ended)


def read_run_record(name: str, folder: str, base: str, storage_client=None) -> dict[str, Any]:
    """A cloud run's launch record, or one line saying there is no such run."""
    record = records.read_launch_record(folder, storage_client=storage_client)
    if record is None:
        raise UserError(f"no cloud run {printable(name, 80)} in {printable(base, 200)} (no {records.RUN_FILE}): "
                        "`tpuctl runs ls` lists the finished ones")
    return record


def no_source(record: dict[str, Any], name: str, what: str = "a project or job") -> UserError:
    """The line for a record that does not say where its logs are."""
    return UserError(f"the record of {printable(name, 80)} names no {what}; a run from an older tpuctl has no logs "
                     "to find")


class LogFeed:
    """The chief's lines of a running cloud run, followed in a thread and handed to ``on_line`` (the live display
    reads the trainer's protocol lines from them); a read that fails is one ``note`` and ends the feed, never the
    run. Used as a context manager around the wait for the run: on the way out one last read takes what is left."""

    def __init__(self, source: Source, on_line: Callable[[LogLine], None], note: Callable[[str], None], *,
                 interval: float = 5.0, since: float | None = None):
        self.source, self.on_line, self.note, self.interval = source, on_line, note, interval
        self.since = time.time() - 60 if since is None else since
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tpuctl-log-feed", daemon=True)

    def _run(self) -> None:
        try:
            for line in follow(self.source, since=self.since, done=self.stop.is_set, interval=self.interval,
                               sleep=self.stop.wait):
                self.on_line(line)
        except LogsUnavailable as exc:
            self.note(f"note: no live progress from the run's logs: {exc}")

    def __enter__(self) -> LogFeed:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        self.thread.join(timeout=RETRY_SECONDS + 30)


def entry_time(timestamp: str) -> float | None:
    """An entry's RFC 3339 timestamp (Cloud Logging's, up to nanoseconds) as epoch seconds; None when unreadable."""
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def feed_display(display) -> Callable[[LogLine], None]:
    """A log line of the chief to the live display (the CLI's TrainDisplay: ``on_message``, ``event``, ``verbose``):
    a protocol line drives it (epoch, steps, metrics), as a local trainer's stdout does; the trainer's own ``error:``
    and ``warning:`` lines are shown, labelled by host; with --verbose every line is shown as it was logged."""
    def on_line(line: LogLine) -> None:
        message = protocol.parse(line.text)
        consumed = message is not None and display.on_message("chief", message, at=entry_time(line.timestamp))
        if not consumed and (display.verbose or line.text.startswith(SAID_LINES)):
            display.event(f"[{line.host}] {printable(line.text, 2000)}")
    return on_line


#: The lines a live display shows without --verbose: the trainer's one-line errors and warnings, the startup script's
#: failures (a TPU VM host: script.failure_logger).
SAID_LINES = ("error: ", "warning: ", "tpuctl: ")
