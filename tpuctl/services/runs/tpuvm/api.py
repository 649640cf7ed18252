"""The Cloud TPU API and the model folder while a run lives: create and wait for the queued resource, follow the
training (the chief's result, the hosts' exit reports, a preempted slice), delete it again.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

from cloud import clients
from cloud.google import api_exceptions, tpu_v2
from ground import domain
from ground.durations import format_duration
from ground.errors import UserError
from ground.files import printable
from ground.numbers import is_digits
from ground.polling import poll
from ground.storagepath import GsPath
from tpuctl.services.runs import logs
from tpuctl.services.runs.cloud import DEFAULT_MAX_WAIT, completion_problem, read_result
from tpuctl.services.runs.records import RECOVERIES_FILE, RESULT_FILE, RecoveriesRecord
from tpuctl.services.runs.tpuvm.plan import DEFAULT_TPU_VM_RUN_TIME, TpuVmRun
from tpuctl.services.runs.tpuvm.script import HOST_STATUS_DIR, api_version, build_queued_resource, v2alpha1_body
from tpuctl.services.supervisor import signal_handlers

DEFAULT_PROVISION_TIMEOUT = DEFAULT_MAX_WAIT.total_seconds()
DEFAULT_RUN_TIMEOUT = DEFAULT_TPU_VM_RUN_TIME.total_seconds()
DEFAULT_POLL_SECONDS = 30.0

QUEUED_STATES = frozenset({"STATE_UNSPECIFIED", "CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES"})
GONE_STATES = frozenset({"SUSPENDING", "SUSPENDED", "DELETING"})

Progress = Callable[[str], None]


def queued_resource_name(run: TpuVmRun) -> str:
    return f"{run.parent}/queuedResources/{run.name}"


def result_uri(run: TpuVmRun) -> str:
    return f"{run.model_dir}/{RESULT_FILE}"

# --------------------------------------------------------------------------------------------
# The Cloud TPU API
# --------------------------------------------------------------------------------------------

def tpu_client():
    """TpuClient over REST: ``TPUCTL_TPU_ENDPOINT`` if set (anonymous on loopback http), else Google's."""
    return clients.gapic(tpu_v2.TpuClient, "tpu")


def state_name(resource) -> str:
    return tpu_v2.QueuedResourceState.State(resource.state.state).name


def _reason(resource) -> str:
    error = resource.state.failed_data.error if "failed_data" in resource.state else None
    message = (error.message if error is not None else "") or ""
    return printable(" ".join(message.split()), 300) or "no reason given"


def node_labels(resource) -> dict[str, str]:
    specs = resource.tpu.node_spec if "tpu" in resource else []
    return dict(specs[0].node.labels) if specs else {}


def is_managed(resource) -> bool:
    key, value = domain.TPU_VM_MANAGED_LABEL
    return node_labels(resource).get(key) == value


class Refused(UserError):
    """The Cloud TPU API refused the slice in its zone (FAILED before ACTIVE: no capacity, say; or the create call
    itself: quota, a zone without that accelerator): another zone may have it."""


class WaitedTooLong(Refused):
    """The slice was still queued in its zone after --max-wait: with --recover it is deleted and the next zone
    tried, as after a refusal (flex-start asks Google to fail the request then too: ``queueingPolicy``)."""


class Preempted(UserError):
    """The slice went away while training (Spot preemption, FAILED): a recovery can re-queue it."""
    def __init__(self, message: str, what: str) -> None:
        super().__init__(message, 1)
        self.what = what


class Created:
    """What this process created, so every exit path deletes exactly that."""
    def __init__(self) -> None:
        self.maybe = False     # a create call was sent (it may have succeeded even if we never saw the answer)
        self.run: TpuVmRun | None = None   # the slice that call was for (a recovery may use another zone)


def delete_resource(client, name: str) -> str | None:
    """Delete the queued resource (force: its nodes too). None on success (or already gone), else why not."""
    try:
        with signal_handlers(signal.SIG_IGN):   # a second Ctrl-C must not abandon the deletion of what we created
            client.delete_queued_resource(request={"name": name, "force": True})
    except api_exceptions.NotFound:
        return None
    except Exception as exc:  # noqa: BLE001 - reported with the command that finishes the job
        translated = clients.as_user_error(exc, f"deleting {name}")
        return str(translated or exc).splitlines()[0][:300]
    return None


def _api_message(exc) -> str:
    """The API's own message of a failed call (over REST, without the ``POST <url>: `` the client puts first)."""
    try:
        message = exc.response.json()["error"]["message"]
    except (AttributeError, ValueError, KeyError, TypeError):
        message = None
    return " ".join(str(message if isinstance(message, str) else exc.message or exc).split())


def create_and_wait(client, run: TpuVmRun, *, progress: Progress, created: Created | None = None,
                    poll_seconds: float = DEFAULT_POLL_SECONDS, timeout: float = DEFAULT_PROVISION_TIMEOUT,
                    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
    """Create the queued resource and wait until it is ACTIVE; returns it. Raises UserError when the API
    refuses it (FAILED, with the API's reason), it disappears, or ``timeout`` passes."""
    created = created or Created()
    name = queued_resource_name(run)
    with clients.google_errors(f"checking for an existing queued resource {name}"):
        try:
            client.get_queued_resource(name=name)
        except api_exceptions.NotFound:
            pass
        else:
            raise UserError(f"a queued resource {run.name} already exists in {run.zone}; delete it with "
                            f"`tpuctl tpu delete {run.name} --zone {run.zone}` or pick another --name")
    created.maybe = True
    with clients.google_errors(f"creating queued resource {name}",
                               forbidden=f"permission denied creating {name}: you need {domain.TPU_VM_ROLE_HINT} and "
                                         "iam.serviceAccounts.actAs on the training service account"):
        try:
            if api_version(run) == "v2alpha1":
                create_v2alpha1(run)
            else:
                client.create_queued_resource(parent=run.parent, queued_resource=build_queued_resource(run),
                                              queued_resource_id=run.name)
        except api_exceptions.ClientError as exc:
            # A 4xx answer: the request was not taken, nothing exists. One that names the zone (quota, capacity,
            # no such accelerator there: domain.is_tpu_vm_zone_refusal) is a refusal another zone may not give.
            created.maybe = False
            message = _api_message(exc)
            if not domain.is_tpu_vm_zone_refusal(exc.code, message):
                raise
            raise Refused(f"the Cloud TPU API refused to create {run.slice.name} in {run.zone} (HTTP {exc.code}): "
                          f"{printable(message, 300)}", 1) from None
    waits = format_duration(run.wait_limit.total_seconds())
    tier = {"spot": "Spot", "flex-start": f"flex-start, waiting at most {waits} here"}.get(
        run.provisioning or "", "on-demand")
    if run.reservation is not None:
        tier += f", reservation {run.reservation}"
    if run.autocheckpoint:
        tier += ", Autocheckpoint"
    progress(f"requested {run.slice.name} ({run.slice.vms} host(s), {tier}) as queued resource {name}")
    return wait_active(client, run, progress=progress, poll_seconds=poll_seconds, timeout=timeout, sleep=sleep,
                       clock=clock)


def create_v2alpha1(run: TpuVmRun) -> None:
    """Create the queued resource through the v2alpha1 REST API (``script.v2alpha1_body``: Autocheckpoint, and
    flex-start's fields the google-cloud-tpu client has no type for, so no client method can send them; one route for
    both); an error answer raises the
    google-api-core exception the client would (``from_http_response``). Reading and deleting it stay on v2: one
    queued resource, whichever version created it."""
    session = clients.authorized_session("tpu")
    url = f"{clients.base_url('tpu')}/v2alpha1/{run.parent}/queuedResources"
    response = session.post(url, params={"queuedResourceId": run.name}, json=v2alpha1_body(run),
                            timeout=clients.REQUEST_TIMEOUT_SECONDS)
    if response.status_code >= 400:
        raise api_exceptions.from_http_response(response)


def wait_active(client, run: TpuVmRun, *, progress: Progress, poll_seconds: float = DEFAULT_POLL_SECONDS,
                timeout: float = DEFAULT_PROVISION_TIMEOUT, sleep: Callable[[float], None] = time.sleep,
                clock: Callable[[], float] = time.monotonic):
    """Wait until the queued resource is ACTIVE (each phase said once); returns it."""
    name = queued_resource_name(run)

    def read():
        with clients.google_errors(f"reading queued resource {name}",
                                   not_found=f"queued resource {name} disappeared while it was being provisioned "
                                             "(deleted outside tpuctl?)", exit_code=1):
            return client.get_queued_resource(name=name)

    def active(current) -> bool:
        state = state_name(current)
        if state == "FAILED":
            raise Refused(f"the Cloud TPU API refused {run.slice.name} in {run.zone}: {_reason(current)}", 1)
        if state in GONE_STATES:
            raise UserError(f"queued resource {run.name} went {state} before it became ACTIVE", 1)
        return state == "ACTIVE"

    def phase(current) -> str:   # the queued states are one phase: said once, as "queued: <first state>"
        state = state_name(current)
        return "queued" if state in QUEUED_STATES else state.lower()

    def say(current) -> None:
        progress(f"queued: {state_name(current)}" if phase(current) == "queued" else phase(current))

    late: list[str] = []

    def expired(current) -> str:
        late.append(state_name(current))
        return (f"queued resource {run.name} is still {state_name(current)} after {timeout:.0f} s "
                f"(--max-wait; waited for {run.slice.name} in {run.zone} to become ACTIVE)")

    try:
        return poll(read, active, interval=poll_seconds, timeout=timeout, sleep=sleep, clock=clock,
                    key=phase, on_change=say, expired=expired)
    except UserError as exc:
        if late:
            raise WaitedTooLong(str(exc), 1) from None
        raise


def earlier_outputs(storage, run: TpuVmRun) -> dict[str, int]:
    """The generations of the result.json and host reports already in the model folder before this launch
    (an earlier run's: the trainer keeps a finished run's result.json until the next one replaces it), so
    :func:`follow` waits for this run's, not an old one. Keyed by object name."""
    result = GsPath.parse(result_uri(run))
    hosts = GsPath.parse(run.model_dir).join(HOST_STATUS_DIR)
    with clients.google_errors(f"reading {run.model_dir}",
                               forbidden=f"permission denied reading {run.model_dir}: you need storage.objects.list "
                                         "and storage.objects.get on the model bucket"):
        found = {blob.name: blob.generation for blob in storage.list_blobs(hosts.bucket, prefix=hosts.prefix)}
        blob = storage.bucket(result.bucket).get_blob(result.path)
    if blob is not None:
        found[blob.name] = blob.generation
    return found


def _read_result(storage, run: TpuVmRun, earlier: dict[str, int] | None = None) -> dict[str, Any] | None:
    """This run's completion record (None: none yet); one that does not stand (``cloud.completion_problem``: not the
    trainer's record of this run, or no SavedModel where it says) ends the run, as a local run's does."""
    result = read_result(storage, run.model_dir, earlier)
    if result is None or run.command:
        return result
    problem = completion_problem(storage, result, run)
    if problem is not None:
        raise UserError(f"the trainer's completion record ({result_uri(run)}) does not stand ({problem}): the run did "
                        f"not finish as recorded (what ran: `tpuctl logs {run.name} --host all`)", 1)
    return result


#: What a host's exit file says when its VM went away under the trainer rather than the trainer failing: 143 (128 +
#: SIGTERM: the container stopped by the VM's shutdown) or the word "preempted" (written by a Spot host's preemption
#: watcher, script.preemption_watcher, as soon as its metadata server's preemption flag turns TRUE).
HOST_GONE_CODES = frozenset({"143", "preempted"})


def _host_reports(storage, run: TpuVmRun, earlier: dict[str, int] | None = None) -> dict[str, str]:
    """How each host that ended says its container ended: ``{host: what its exit file says}`` (``worker-0``: ``0``)."""
    hosts = GsPath.parse(run.model_dir).join(HOST_STATUS_DIR)
    reports = {}
    with clients.google_errors(f"reading host reports under {hosts}"):
        for blob in storage.list_blobs(hosts.bucket, prefix=hosts.prefix):
            if (earlier or {}).get(blob.name) == blob.generation:
                continue   # an earlier run's report
            code = printable(blob.download_as_bytes(start=0, end=15).decode("utf-8", "replace").strip(), 16)
            reports[printable(blob.name.rsplit("/", 1)[-1].removesuffix(".exit"), 80)] = code or "?"
    return reports


def _host_failures(reports: dict[str, str]) -> list[tuple[str, str]]:
    """The hosts whose exit file says something else than 0: ``(host, what it says)``, sorted."""
    return sorted((host, code) for host, code in reports.items() if code != "0")


#: The host whose trainer is the chief (it writes the run's completion record, result.json).
CHIEF_HOST = "worker-0"


def _node_gone(client, run: TpuVmRun, notes: set[str], progress: Progress) -> str | None:
    """What the slice's node says when its hosts are gone (state PREEMPTED/TERMINATED, health UNHEALTHY_MAINTENANCE:
    domain.TPU_VM_NODE_GONE_*), else None. Reading the node only adds to what the queued resource says: a node not
    found or an error is no news (a refused read is noted once and not tried again)."""
    if "no node reads" in notes:
        return None
    try:
        node = client.get_node(name=f"{run.parent}/nodes/{run.name}")
    except api_exceptions.PermissionDenied:
        notes.add("no node reads")
        progress(f"cannot read node {run.name}'s health (permission denied: tpu.nodes.get); a host that goes away "
                 "is seen from its exit file only")
        return None
    except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError):
        return None
    state = tpu_v2.Node.State(node.state).name
    health = tpu_v2.Node.Health(node.health).name
    if state in domain.TPU_VM_NODE_GONE_STATES:
        return f"node {state}"
    if health in domain.TPU_VM_NODE_GONE_HEALTH:
        return f"node {health}"
    return None


def follow(client, storage, run: TpuVmRun, *, progress: Progress, poll_seconds: float = DEFAULT_POLL_SECONDS,
           timeout: float = DEFAULT_RUN_TIMEOUT, sleep: Callable[[float], None] = time.sleep,
           clock: Callable[[], float] = time.monotonic, earlier: dict[str, int] | None = None,
           check: Callable[[], None] | None = None) -> dict[str, Any]:
    """Wait for the chief's result.json in the model folder (the trainer's completion record; a user's program
    instead ends when every host reported exit 0: its result is ``{}``); raise UserError when a host's trainer fails,
    the chief's trainer ends without its completion record (whatever its exit status: a plug-in that ended the
    process cannot make a run succeed), the slice fails or is preempted, or ``timeout`` passes. ``earlier``: the
    generations of the objects that were there before this launch (:func:`earlier_outputs`), ignored. ``check``:
    called at every poll without a result (the budget: it raises to stop the run)."""
    progress(f"training on {run.slice.vms} host(s); waiting for {result_uri(run)}")
    name = queued_resource_name(run)
    notes: set[str] = set()
    seen = {"state": "not read yet"}

    def read() -> dict[str, Any] | None:
        """This run's result, None while training goes on; raises when the slice or a host's trainer failed."""
        result = _read_result(storage, run, earlier)
        if result is not None:
            return result
        if check is not None:
            check()
        with clients.google_errors(f"reading queued resource {name}",
                                   not_found=f"queued resource {name} was deleted while training (outside tpuctl?); "
                                             f"to resume: {run.resume_hint}", exit_code=1):
            current = client.get_queued_resource(name=name)
        state = state_name(current)
        seen["state"] = state
        # The slice's state before the hosts' reports: a preempted host's trainer may report a kill first.
        if state in GONE_STATES:
            initiator = current.state.state_initiator.name if current.state.state_initiator else ""
            why = "preempted (Spot)" if run.spot and initiator != "USER" else f"stopped by the {initiator.lower() or 'service'}"
            raise Preempted(f"the TPU VM slice was {why}: queued resource {run.name} is {state}; checkpoints are kept "
                             f"in {run.model_dir}; to resume, {run.resume_hint}", f"{why}, {state}")
        if state == "FAILED":
            raise Preempted(f"queued resource {run.name} FAILED while training: {_reason(current)}; to resume, "
                             f"{run.resume_hint}", f"FAILED: {_reason(current)}")
        reports = _host_reports(storage, run, earlier)
        failures = _host_failures(reports)
        # A host gone under the trainer while the queued resource still says ACTIVE: a preemption, not a failure.
        gone = _node_gone(client, run, notes, progress)
        if gone is None and failures and all(code in HOST_GONE_CODES for _, code in failures):
            gone = ", ".join(f"{host} {'reported' if code == 'preempted' else 'exited'} {code}" for host, code in failures)
        if gone is not None:
            raise Preempted(f"a host of the TPU VM slice went away ({gone}) while queued resource {run.name} was "
                             f"{state}; checkpoints are kept in {run.model_dir}; to resume, {run.resume_hint}",
                             f"host gone ({gone})")
        if failures:
            listed = ", ".join(f"{host} exited {code}" for host, code in failures)
            raise host_failed(run, listed, failures[0][0], progress)
        if run.command and len(reports) >= run.slice.vms:
            return {}           # the user's program ended on every host, well
        if not run.command and reports.get(CHIEF_HOST) == "0":
            result = _read_result(storage, run, earlier)   # written before the trainer exits: read once more
            if result is not None:
                return result
            raise host_failed(run, f"{CHIEF_HOST} exited 0 without the trainer's completion record "
                                   f"({result_uri(run)}): the run did not finish", CHIEF_HOST, progress)
        return None

    return poll(read, lambda result: result is not None, interval=poll_seconds, timeout=timeout, sleep=sleep,
                clock=clock, expired=lambda _: f"no {result_uri(run)} after {timeout:.0f} s of training (waited for "
                                               f"the chief's result); the slice is {seen['state']}")


#: Lines of a failed host's log printed after the error line.
FAILED_HOST_LINES = 20


def host_failed(run: TpuVmRun, listed: str, host: str, progress: Progress) -> UserError:
    """The error of a host whose trainer failed, its last log lines (Cloud Logging: the container's output through
    the gcplogs driver) after the error line; logs that cannot be read are said in the error line itself, why."""
    index = host.removeprefix("worker-")
    message = f"the trainer failed on the TPU VM ({listed})"
    if not is_digits(index) or not run.project:
        return UserError(f"{message}; see its log: `tpuctl logs {run.name} --host all`", 1)
    try:
        lines = logs.last_lines(logs.tpu_vm_source(run.project, run.name, int(index)), FAILED_HOST_LINES,
                                retry_seconds=20.0)
    except logs.LogsUnavailable as exc:
        return UserError(f"{message}; its log lines could not be read ({exc})", 1)
    if not lines:
        return UserError(f"{message}; Cloud Logging has no lines of host {index} (`tpuctl logs {run.name} --host "
                         f"{index}` once they arrive)", 1)
    return UserError(f"{message}; the last {len(lines)} log line(s) of host {index} follow", 1,
                     details=tuple(line.text for line in lines))


def last_backup(storage, run: TpuVmRun) -> float | None:
    """When the trainer last wrote its preemption backup (epoch seconds of the newest object under
    ``<model_dir>/checkpoints/backup/``), or None when there is none."""
    backup = GsPath.parse(run.model_dir).join("checkpoints", "backup")
    with clients.google_errors(f"reading the backup under {backup}"):
        times = [blob.updated.timestamp() for blob in storage.list_blobs(backup.bucket, prefix=backup.prefix)
                 if blob.updated]
    return max(times) if times else None




def record_recoveries(storage, run: TpuVmRun, history: list[dict[str, Any]]) -> None:
    """Write the run's recovery history to ``<model_dir>/tpuctl/recoveries.json`` (replaced whole each time)."""
    file = GsPath.parse(run.model_dir).join(RECOVERIES_FILE)
    record = RecoveriesRecord.model_validate({"run": run.name, "recoveries": history})   # as `runs` reads it
    with clients.google_errors(f"writing {file}"):
        storage.bucket(file.bucket).blob(file.path).upload_from_string(
            record.model_dump_json(indent=2, exclude_unset=True) + "\n", content_type="application/json")


def delete_and_wait(client, run: TpuVmRun, *, poll_seconds: float, timeout: float,
                     sleep: Callable[[float], None], clock: Callable[[], float]) -> None:
    """Delete the queued resource and wait until it is gone (its name is free again in the zone)."""
    failed = delete_resource(client, queued_resource_name(run))
    if failed is not None:
        raise UserError(f"could NOT delete queued resource {run.name} in {run.zone} to recover ({failed}); delete it "
                        f"with `tpuctl tpu delete {run.name} --zone {run.zone}`", 1)

    def gone() -> bool:
        try:
            client.get_queued_resource(name=queued_resource_name(run))
        except api_exceptions.NotFound:
            return True
        except Exception as exc:
            translated = clients.as_user_error(exc, f"reading queued resource {queued_resource_name(run)}")
            if translated is None:
                raise
            raise translated from None
        return False

    poll(gone, bool, interval=poll_seconds, timeout=timeout, sleep=sleep, clock=clock,
         expired=lambda _: f"queued resource {run.name} in {run.zone} is still there {timeout:.0f} s after its "
                           "deletion; delete it with `tpuctl tpu delete` and resume with the same command")
