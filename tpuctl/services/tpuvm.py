"""`tpuctl tpu run|list|delete`: train on TPU VMs created through Cloud TPU queued resources.

One run = one queued resource (Spot or on-demand) holding one TPU VM slice, single-host or multi-host.
Every TPU VM of the slice runs the same startup script: ``docker run`` of the trainer's tpu image with the
arguments and environment a Vertex AI job gets (data and model folders in gs://, ``TPU_NAME``). tpuctl
creates the queued resource, follows it (queued -> provisioning -> active), then watches the model folder
until the chief's ``result.json`` appears, a host reports a failure, or the slice fails or is preempted;
then it deletes the queued resource (``keep=True`` keeps it), also on Ctrl-C / SIGTERM.

A relaunch resumes: the trainer keeps its BackupAndRestore state under ``<model_dir>/checkpoints/backup``
in Cloud Storage, and the default model folder is derived from the run name, so the same command with the
same ``--name`` continues from the last backup. With ``recover=N`` (``--spot --recover N``) tpuctl does that
itself: a preempted slice is deleted and queued again (the run's zone first, then ``--zones``), at most N times.

Facts used here (checked 2026-11-22):
- Cloud TPU v2 API, queued resources (googleapis google/cloud/tpu/v2/cloud_tpu.proto as shipped in
  google-cloud-tpu 1.27.0 ``tpu_v2``): states CREATING/ACCEPTED/WAITING_FOR_RESOURCES -> PROVISIONING -> ACTIVE,
  FAILED (``failed_data.error``), SUSPENDING/SUSPENDED (resources deleted, ``state_initiator`` SERVICE or
  USER), DELETING; ``DeleteQueuedResourceRequest.force`` also deletes the nodes.
- TPU VM metadata attributes ``agent-worker-number`` (this VM's index in the slice) and
  ``worker-network-endpoints``: what JAX reads to find its place in a slice
  (github.com/jax-ml/jax jax/_src/clusters/cloud_tpu_cluster.py).
- Containers on TPU VMs run ``docker run --net=host --privileged`` (cloud.google.com/tpu/docs/run-in-container);
  base runtimes include Docker (cloud.google.com/tpu/docs/runtimes).
NOT verified (no TPU VM here): that ``gcloud`` is on the base runtime images (the startup script uses it to
log Docker into Artifact Registry and to report a host's exit status), that the image's non-root user can
open the TPU devices under ``--privileged``, and how TensorFlow's TPUStrategy spans the hosts of a multi-host
slice when every host runs the program (see docs/tpu-vm.md).
"""

from __future__ import annotations

import json
import shlex
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bootstrap import clients
from tpuctl.ground import domain
from tpuctl.ground.envs import REPO_ROOT
from tpuctl.ground.errors import EXIT_INTERRUPTED, UserError
from tpuctl.ground.files import printable
from tpuctl.ground.outputs import StackOutputs, require_outputs
from tpuctl.ground.polling import poll
from tpuctl.services.supervisor import raise_interrupt, signal_handlers
from tpuctl.services.training import TrainOptions, check_common, model_args, timestamp

#: Where every host reports how its trainer container ended: ``<model_dir>/HOST_STATUS_DIR/worker-<n>.exit``.
HOST_STATUS_DIR = "tpuctl/hosts"
RESULT_FILE = "result.json"
#: The chief's result.json is a few hundred bytes; more is not the trainer's.
MAX_RESULT_BYTES = 1 << 20
METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/instance/attributes"
DEFAULT_PROVISION_TIMEOUT = 2 * 3600.0
DEFAULT_RUN_TIMEOUT = 24 * 3600.0
DEFAULT_POLL_SECONDS = 30.0

QUEUED_STATES = frozenset({"STATE_UNSPECIFIED", "CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES"})
GONE_STATES = frozenset({"SUSPENDING", "SUSPENDED", "DELETING"})

Progress = Callable[[str], None]


@dataclass(frozen=True)
class TpuVmRun:
    """Everything the queued-resource request and the per-host command are built from, validated."""

    project: str
    zone: str
    name: str
    accelerator: domain.TpuVmAccelerator
    spot: bool
    image_uri: str
    service_account: str | None
    trainer_args: list[str]
    env: dict[str, str]
    model_dir: str
    data_dir: str
    labels: dict[str, str] = field(default_factory=dict)
    resume_hint: str = ""

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}"

    @property
    def queued_resource_name(self) -> str:
        return f"{self.parent}/queuedResources/{self.name}"

    @property
    def result_uri(self) -> str:
        return f"{self.model_dir}/{RESULT_FILE}"

    @property
    def registry_host(self) -> str:
        return self.image_uri.split("/", 1)[0]


# --------------------------------------------------------------------------------------------
# Plan: validate everything, build nothing
# --------------------------------------------------------------------------------------------

def _gs(value: str, flag: str, what: str) -> str:
    if not value.startswith("gs://"):
        raise UserError(f"{flag} {value}: TPU VMs {what} Cloud Storage; use gs://BUCKET/PATH")
    domain.bucket_name_from(value)
    return value.rstrip("/")


def _stack_zone(outputs: StackOutputs | None) -> str | None:
    """The zone TPU VM slices default to: the stack's ``tpu_zone`` output, else its ``zone``."""
    return (outputs.tpu_zone or outputs.zone) if outputs else None


def plan_run(opts: TrainOptions, outputs: StackOutputs | None, *, zone: str | None = None, spot: bool = False,
             name: str | None = None, image: str | None = None, root: Path = REPO_ROOT) -> TpuVmRun:
    """Validate the inputs and assemble the run (``opts`` as ``tpuctl train`` builds them; ``opts.accelerator``
    is a Cloud TPU API accelerator type such as ``v5litepod-16``). Nothing is created here."""
    check_common(opts)
    if opts.workers != 1:
        raise UserError(f"--workers {opts.workers} does not apply to TPU VMs: the slice's hosts are the workers "
                        "(pick a larger accelerator type, e.g. v5litepod-16)")
    if not opts.accelerator:
        raise UserError("TPU VMs need --accelerator, e.g. v5litepod-8 (one host) or v5litepod-16 (a multi-host slice)")
    accel = domain.parse_tpu_vm_accelerator(opts.accelerator)
    outputs = require_outputs(outputs, "--target tpu-vm")
    project = outputs.require("project")
    zone = zone or _stack_zone(outputs) or outputs.require("tpu_zone", "pass --zone (e.g. us-central1-a)")
    domain.validate_tpu_vm_zone(zone)
    name = domain.validate_tpu_vm_name(name or f"tpuctl-{timestamp()}")

    data_dir = opts.data_dir or outputs.bucket_url("data")
    if not data_dir:
        raise UserError("no training data: the stack has no data bucket; pass --data-dir gs://BUCKET/PATH")
    data_dir = _gs(data_dir, "--data-dir", "read from")
    if opts.model_dir:
        model_dir = _gs(opts.model_dir, "--model-dir", "write to")
    else:
        model_dir = f"{outputs.require('buckets.artifacts', 'pass --model-dir gs://BUCKET/PATH')}/runs/{name}"

    service_account = outputs.training_service_account or outputs.principals.get(domain.TRAINING_SA_KEYWORD)
    labels = {**outputs.labels, domain.TPU_VM_MANAGED_LABEL[0]: domain.TPU_VM_MANAGED_LABEL[1],
              domain.TPU_VM_RUN_LABEL: name}
    domain.validate_labels(labels)

    env = {"TF_USE_LEGACY_KERAS": "1",
           # One host: the TPU is attached to this VM (as on Vertex AI). Several: the slice's node name.
           "TPU_NAME": name if accel.multi_host else "local",
           # TensorFlow on v5e runs through PJRT, switched on by two variables (domain.TF_PJRT_ENV, Google's source there)
           **domain.tpu_runtime_env(accel.generation)}
    hub_cache = opts.hub_cache_dir or outputs.tfhub_cache_dir
    if hub_cache:
        env["TFHUB_CACHE_DIR"] = _gs(hub_cache, "--hub-cache-dir", "read hub models from")
    args = ["--distribution_strategy", "tpu", "--data_dir", data_dir, "--model_dir", model_dir,
            *model_args(opts), *opts.extra]
    if image is None:
        from tpuctl.services import image as images

        outputs.require("region", "it locates the trainer image; pass --image")
        image = images.image_ref(outputs, "tpu", root=root).uri
    run = TpuVmRun(project=project, zone=zone, name=name, accelerator=accel, spot=spot, image_uri=image,
                   service_account=service_account, trainer_args=args, env=env, model_dir=model_dir,
                   data_dir=data_dir, labels=labels,
                   resume_hint=f"run the same command again with --name {name}"
                               + ("" if opts.model_dir else f" (it reuses {model_dir})"))
    startup_script(run)   # a value no command can take (a NUL byte) is refused here, before anything exists
    return run


def check_quota(run: TpuVmRun, *, client=None, echo: Progress = print) -> int | None:
    """The pre-flight of ``bootstrap.quotas.check_tpu_vm_room`` for this slice (before anything is created)."""
    from bootstrap import quotas

    return quotas.check_tpu_vm_room(run.project, run.zone, run.accelerator, spot=run.spot, client=client, echo=echo)


def recovery_zones(run: TpuVmRun, zones: str | None, *, client=None, echo: Progress = print) -> list[str]:
    """``--zones``: the run's zone, then each zone given (same region, no repeats) whose quota pre-flight shows
    room for the slice (an unreadable quota is a note and the zone stays: the API enforces it)."""
    from dataclasses import replace

    region = run.zone.rsplit("-", 1)[0]
    order = [run.zone]
    given = [] if zones is None else [z.strip() for z in zones.split(",")]
    if "" in given:
        raise UserError(f"--zones {printable(zones, 100)!r} has an empty entry; give zones like us-central1-b,us-central1-f")
    for zone in given:
        if zone in order:
            continue
        domain.validate_tpu_vm_zone(zone)
        if zone.rsplit("-", 1)[0] != region:
            raise UserError(f"--zones {zone} is not in {region} (the region of --zone {run.zone}); a slice's data and "
                            "backup stay in one region")
        try:
            check_quota(replace(run, zone=zone), client=client, echo=lambda line, zone=zone: echo(f"{line} ({zone})"))
        except UserError as exc:
            echo(f"note: {zone} left out of the recovery zones: {str(exc).split(';')[0]}")
            continue
        order.append(zone)
    return order


@dataclass(frozen=True)
class ShellVar:
    """A variable the startup script sets itself (the host's index): expanded by bash, never text from a user."""

    name: str


#: This host's index in the slice, read from the metadata server by the startup script.
WORKER = ShellVar("WORKER")
#: A shell word: literal text, or pieces of literal text and script variables joined into one word.
Word = str | tuple[str | ShellVar, ...]


def shell_word(word: Word) -> str:
    """The one way a value enters a shell script: literal text is single-quoted (``shlex.quote``), so ``$(…)``,
    quotes, backquotes and newlines arrive as typed; a ``ShellVar`` piece becomes ``"$NAME"``. A NUL byte
    cannot be passed to any command, so it is one line instead of a truncated argument."""
    pieces = (word,) if isinstance(word, str) else word
    out = []
    for piece in pieces:
        if isinstance(piece, ShellVar):
            out.append(f'"${piece.name}"')
        elif "\x00" in piece:
            raise UserError(f"{piece[:80]!r}: a value with a NUL byte cannot be passed to the TPU VM's command")
        elif piece or len(pieces) == 1:
            out.append(shlex.quote(piece))
    return "".join(out)


def host_command(run: TpuVmRun, worker: ShellVar | str = WORKER) -> list[Word]:
    """The ``docker run`` every TPU VM host runs, as shell words (``worker``: the host's index, the script's
    ``$WORKER`` on the VM)."""
    argv: list[Word] = ["docker", "run", "--rm", "--net=host", "--privileged", "--name", "tpuctl-trainer"]
    for key, value in sorted(run.env.items()):
        argv += ["-e", f"{key}={value}"]
    argv += ["-e", ("TPUCTL_TPU_WORKER=", worker)]
    return [*argv, run.image_uri, *run.trainer_args]


def host_command_line(run: TpuVmRun) -> str:
    return " ".join(shell_word(word) for word in host_command(run))


def startup_script(run: TpuVmRun) -> str:
    """The startup script of every TPU VM of the slice: log Docker in, run the trainer, report the exit status.
    Every value from the run enters it through ``shell_word``."""
    status = shell_word((f"{run.model_dir}/{HOST_STATUS_DIR}/worker-", WORKER, ".exit"))
    return "\n".join([
        "#!/bin/bash",
        "# tpuctl: the trainer container on every host of the TPU VM slice (see `tpuctl tpu run`).",
        "set -uo pipefail",
        f"WORKER=\"$(curl -sf -H 'Metadata-Flavor: Google' {METADATA_URL}/agent-worker-number || echo 0)\"",
        'case "$WORKER" in ""|*[!0-9]*) WORKER=0 ;; esac',
        f"gcloud auth configure-docker {shell_word(run.registry_host)} --quiet",
        host_command_line(run),
        "STATUS=$?",
        f'echo "$STATUS" | gcloud storage cp - {status}',
        "",
    ])


def build_queued_resource(run: TpuVmRun):
    """The real ``google.cloud.tpu_v2.QueuedResource`` for ``run``."""
    from google.cloud import tpu_v2

    node = tpu_v2.Node(
        accelerator_type=run.accelerator.name,
        runtime_version=run.accelerator.runtime_version,
        labels=dict(run.labels),
        metadata={"startup-script": startup_script(run)},
        description=f"tpuctl run {run.name}",
    )
    if run.service_account:
        node.service_account = tpu_v2.ServiceAccount(email=run.service_account, scope=[clients.CLOUD_PLATFORM_SCOPE])
    spec = tpu_v2.QueuedResource.Tpu.NodeSpec(parent=run.parent, node_id=run.name, node=node)
    resource = tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[spec]))
    if run.spot:
        resource.spot = tpu_v2.QueuedResource.Spot()
    return resource


def request_document(run: TpuVmRun) -> dict[str, Any]:
    """What ``--dry-run`` prints: the request as the REST API spells it, and the per-host command."""
    from google.cloud import tpu_v2

    resource = build_queued_resource(run)
    return {
        "parent": run.parent,
        "queuedResourceId": run.name,
        "queuedResource": json.loads(tpu_v2.QueuedResource.to_json(resource)),
        "hosts": run.accelerator.vms,
        "hostCommand": host_command_line(run),
        "modelDir": run.model_dir,
        "image": run.image_uri,
    }


# --------------------------------------------------------------------------------------------
# The Cloud TPU API
# --------------------------------------------------------------------------------------------

def tpu_client():
    """TpuClient over REST: ``TPUCTL_TPU_ENDPOINT`` if set (anonymous on loopback http), else Google's."""
    from google.cloud import tpu_v2

    return clients.gapic(tpu_v2.TpuClient, "tpu")


def state_name(resource) -> str:
    from google.cloud import tpu_v2

    return tpu_v2.QueuedResourceState.State(resource.state.state).name


def _reason(resource) -> str:
    error = resource.state.failed_data.error if "failed_data" in resource.state else None
    message = (error.message if error is not None else "") or ""
    return printable(" ".join(message.split()), 300) or "no reason given"


def _node_labels(resource) -> dict[str, str]:
    specs = resource.tpu.node_spec if "tpu" in resource else []
    return dict(specs[0].node.labels) if specs else {}


def _managed(resource) -> bool:
    key, value = domain.TPU_VM_MANAGED_LABEL
    return _node_labels(resource).get(key) == value


@dataclass
class RunResult:
    name: str
    model_dir: str
    result: dict[str, Any]
    kept: bool
    #: One entry per preemption that was recovered from (``--recover``): zone, what happened, seconds lost.
    recoveries: list[dict[str, Any]] = field(default_factory=list)


class _Refused(UserError):
    """The Cloud TPU API refused the slice (FAILED before ACTIVE: no capacity, say): another zone may have it."""


class _Preempted(UserError):
    """The slice went away while training (Spot preemption, FAILED): a recovery can re-queue it."""

    def __init__(self, message: str, what: str) -> None:
        super().__init__(message, 1)
        self.what = what


def _minutes(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class _Created:
    """What this process created, so every exit path deletes exactly that."""

    def __init__(self) -> None:
        self.maybe = False     # a create call was sent (it may have succeeded even if we never saw the answer)
        self.run: TpuVmRun | None = None   # the slice that call was for (a recovery may use another zone)


def _delete(client, name: str) -> str | None:
    """Delete the queued resource (force: its nodes too). None on success (or already gone), else why not."""
    from google.api_core import exceptions

    try:
        with signal_handlers(signal.SIG_IGN):   # a second Ctrl-C must not abandon the deletion of what we created
            client.delete_queued_resource(request={"name": name, "force": True})
    except exceptions.NotFound:
        return None
    except Exception as exc:  # noqa: BLE001 - reported with the command that finishes the job
        translated = clients.as_user_error(exc, f"deleting {name}")
        return str(translated or exc).splitlines()[0][:300]
    return None


def create_and_wait(client, run: TpuVmRun, *, progress: Progress, created: _Created | None = None,
                    poll_seconds: float = DEFAULT_POLL_SECONDS, timeout: float = DEFAULT_PROVISION_TIMEOUT,
                    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
    """Create the queued resource and wait until it is ACTIVE; returns it. Raises UserError when the API
    refuses it (FAILED, with the API's reason), it disappears, or ``timeout`` passes."""
    from google.api_core import exceptions

    created = created or _Created()
    name = run.queued_resource_name
    with clients.google_errors(f"checking for an existing queued resource {name}"):
        try:
            client.get_queued_resource(name=name)
        except exceptions.NotFound:
            pass
        else:
            raise UserError(f"a queued resource {run.name} already exists in {run.zone}; delete it with "
                            f"`tpuctl tpu delete {run.name} --zone {run.zone}` or pick another --name")
    created.maybe = True
    with clients.google_errors(f"creating queued resource {name}",
                               forbidden=f"permission denied creating {name}: you need tpu.queuedResources.create "
                                         "in the project and iam.serviceAccounts.actAs on the training service account"):
        client.create_queued_resource(parent=run.parent, queued_resource=build_queued_resource(run),
                                      queued_resource_id=run.name)
    tier = "Spot" if run.spot else "on-demand"
    progress(f"requested {run.accelerator.name} ({run.accelerator.vms} host(s), {tier}) as queued resource {name}")

    def read():
        with clients.google_errors(f"reading queued resource {name}",
                                   not_found=f"queued resource {name} disappeared while it was being provisioned "
                                             "(deleted outside tpuctl?)", exit_code=1):
            return client.get_queued_resource(name=name)

    def active(current) -> bool:
        state = state_name(current)
        if state == "FAILED":
            raise _Refused(f"the Cloud TPU API refused {run.accelerator.name} in {run.zone}: {_reason(current)}", 1)
        if state in GONE_STATES:
            raise UserError(f"queued resource {run.name} went {state} before it became ACTIVE", 1)
        return state == "ACTIVE"

    def phase(current) -> str:   # the queued states are one phase: said once, as "queued: <first state>"
        state = state_name(current)
        return "queued" if state in QUEUED_STATES else state.lower()

    def say(current) -> None:
        progress(f"queued: {state_name(current)}" if phase(current) == "queued" else phase(current))

    return poll(read, active, interval=poll_seconds, timeout=timeout, sleep=sleep, clock=clock,
                key=phase, on_change=say,
                expired=lambda current: f"queued resource {run.name} is still {state_name(current)} after "
                                        f"{timeout:.0f} s (waited for {run.accelerator.name} in {run.zone} to "
                                        "become ACTIVE)")


def _earlier_outputs(storage, run: TpuVmRun) -> dict[str, int]:
    """The generations of the result.json and host reports already in the model folder before this launch
    (an earlier run's: the trainer keeps a finished run's result.json until the next one replaces it), so
    :func:`follow` waits for this run's, not an old one. Keyed by object name."""
    bucket, result_path = domain.split_gs_uri(run.result_uri)
    _, hosts = domain.split_gs_uri(f"{run.model_dir}/{HOST_STATUS_DIR}/")
    with clients.google_errors(f"reading {run.model_dir}",
                               forbidden=f"permission denied reading {run.model_dir}: you need storage.objects.list "
                                         "and storage.objects.get on the model bucket"):
        found = {blob.name: blob.generation for blob in storage.list_blobs(bucket, prefix=hosts)}
        result = storage.bucket(bucket).get_blob(result_path)
    if result is not None:
        found[result.name] = result.generation
    return found


def _read_result(storage, run: TpuVmRun, earlier: dict[str, int] | None = None) -> dict[str, Any] | None:
    bucket, path = domain.split_gs_uri(run.result_uri)
    with clients.google_errors(f"reading {run.result_uri}",
                               forbidden=f"permission denied reading {run.result_uri}: you need storage.objects.get "
                                         "on the model bucket"):
        blob = storage.bucket(bucket).get_blob(path)
        if blob is None or (earlier or {}).get(blob.name) == blob.generation:
            return None   # none yet, or an earlier run's
        # This generation (a newer one may replace it meanwhile), bounded: a result is a few hundred bytes.
        data = clients.download_bounded(blob, MAX_RESULT_BYTES, run.result_uri, "not the trainer's result", 1)
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None  # being written: read it on the next poll
    return value if isinstance(value, dict) else None


#: What a host's exit file says when its VM went away under the trainer rather than the trainer failing: 143 (128 +
#: SIGTERM: the container stopped by the VM's shutdown) or the word "preempted".
HOST_GONE_CODES = frozenset({"143", "preempted"})


def _host_failures(storage, run: TpuVmRun, earlier: dict[str, int] | None = None) -> list[tuple[str, str]]:
    """The hosts whose exit file says something else than 0: ``(host, what it says)``, sorted."""
    bucket, path = domain.split_gs_uri(f"{run.model_dir}/{HOST_STATUS_DIR}/")
    failures = []
    with clients.google_errors(f"reading host reports under {run.model_dir}/{HOST_STATUS_DIR}"):
        for blob in storage.list_blobs(bucket, prefix=path):
            if (earlier or {}).get(blob.name) == blob.generation:
                continue   # an earlier run's report
            code = printable(blob.download_as_bytes(start=0, end=15).decode("utf-8", "replace").strip(), 16)
            if code != "0":
                host = printable(blob.name.rsplit("/", 1)[-1].removesuffix(".exit"), 80)
                failures.append((host, code or "?"))
    return sorted(failures)


def _node_gone(client, run: TpuVmRun, notes: set[str], progress: Progress) -> str | None:
    """What the slice's node says when its hosts are gone (state PREEMPTED/TERMINATED, health UNHEALTHY_MAINTENANCE:
    domain.TPU_VM_NODE_GONE_*), else None. Reading the node only adds to what the queued resource says: a node not
    found or an error is no news (a refused read is noted once and not tried again)."""
    from google.api_core import exceptions
    from google.cloud import tpu_v2

    if "no node reads" in notes:
        return None
    try:
        node = client.get_node(name=f"{run.parent}/nodes/{run.name}")
    except exceptions.PermissionDenied:
        notes.add("no node reads")
        progress(f"cannot read node {run.name}'s health (permission denied: tpu.nodes.get); a host that goes away "
                 "is seen from its exit file only")
        return None
    except (exceptions.GoogleAPICallError, exceptions.RetryError):
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
           clock: Callable[[], float] = time.monotonic, earlier: dict[str, int] | None = None) -> dict[str, Any]:
    """Wait for the chief's result.json in the model folder; raise UserError when a host's trainer fails,
    the slice fails or is preempted, or ``timeout`` passes. ``earlier``: the generations of the objects that
    were there before this launch (:func:`_earlier_outputs`), ignored."""
    progress(f"training on {run.accelerator.vms} host(s); waiting for {run.result_uri}")
    name = run.queued_resource_name
    notes: set[str] = set()
    seen = {"state": "not read yet"}

    def read() -> dict[str, Any] | None:
        """This run's result, None while training goes on; raises when the slice or a host's trainer failed."""
        result = _read_result(storage, run, earlier)
        if result is not None:
            return result
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
            raise _Preempted(f"the TPU VM slice was {why}: queued resource {run.name} is {state}; checkpoints are kept "
                             f"in {run.model_dir}; to resume, {run.resume_hint}", f"{why}, {state}")
        if state == "FAILED":
            raise _Preempted(f"queued resource {run.name} FAILED while training: {_reason(current)}; to resume, "
                             f"{run.resume_hint}", f"FAILED: {_reason(current)}")
        failures = _host_failures(storage, run, earlier)
        # A host gone under the trainer while the queued resource still says ACTIVE: a preemption, not a failure.
        gone = _node_gone(client, run, notes, progress)
        if gone is None and failures and all(code in HOST_GONE_CODES for _, code in failures):
            gone = ", ".join(f"{host} exited {code}" for host, code in failures)
        if gone is not None:
            raise _Preempted(f"a host of the TPU VM slice went away ({gone}) while queued resource {run.name} was "
                             f"{state}; checkpoints are kept in {run.model_dir}; to resume, {run.resume_hint}",
                             f"host gone ({gone})")
        if failures:
            listed = ", ".join(f"{host} exited {code}" for host, code in failures)
            raise UserError(f"the trainer failed on the TPU VM ({listed}); see the VM's serial console "
                            f"or Cloud Logging for {run.name}", 1)
        return None

    return poll(read, lambda result: result is not None, interval=poll_seconds, timeout=timeout, sleep=sleep,
                clock=clock, expired=lambda _: f"no {run.result_uri} after {timeout:.0f} s of training (waited for "
                                               f"the chief's result); the slice is {seen['state']}")


def _last_backup(storage, run: TpuVmRun) -> float | None:
    """When the trainer last wrote its preemption backup (epoch seconds of the newest object under
    ``<model_dir>/checkpoints/backup/``), or None when there is none."""
    bucket, path = domain.split_gs_uri(f"{run.model_dir}/checkpoints/backup/")
    with clients.google_errors(f"reading the backup under {run.model_dir}/checkpoints/backup"):
        times = [blob.updated.timestamp() for blob in storage.list_blobs(bucket, prefix=path) if blob.updated]
    return max(times) if times else None


#: The recoveries of a run (``--recover``), kept next to the host reports: ``<model_dir>/RECOVERIES_FILE``.
RECOVERIES_FILE = "tpuctl/recoveries.json"


def _record_recoveries(storage, run: TpuVmRun, history: list[dict[str, Any]]) -> None:
    """Write the run's recovery history to ``<model_dir>/tpuctl/recoveries.json`` (replaced whole each time)."""
    bucket, path = domain.split_gs_uri(f"{run.model_dir}/{RECOVERIES_FILE}")
    with clients.google_errors(f"writing {run.model_dir}/{RECOVERIES_FILE}"):
        storage.bucket(bucket).blob(path).upload_from_string(
            json.dumps({"run": run.name, "recoveries": history}, indent=2) + "\n", content_type="application/json")


def _delete_and_wait(client, run: TpuVmRun, *, poll_seconds: float, timeout: float,
                     sleep: Callable[[float], None], clock: Callable[[], float]) -> None:
    """Delete the queued resource and wait until it is gone (its name is free again in the zone)."""
    from google.api_core import exceptions

    failed = _delete(client, run.queued_resource_name)
    if failed is not None:
        raise UserError(f"could NOT delete queued resource {run.name} in {run.zone} to recover ({failed}); delete it "
                        f"with `tpuctl tpu delete {run.name} --zone {run.zone}`", 1)

    def gone() -> bool:
        try:
            client.get_queued_resource(name=run.queued_resource_name)
        except exceptions.NotFound:
            return True
        except Exception as exc:
            translated = clients.as_user_error(exc, f"reading queued resource {run.queued_resource_name}")
            if translated is None:
                raise
            raise translated from None
        return False

    poll(gone, bool, interval=poll_seconds, timeout=timeout, sleep=sleep, clock=clock,
         expired=lambda _: f"queued resource {run.name} in {run.zone} is still there {timeout:.0f} s after its "
                           "deletion; delete it with `tpuctl tpu delete` and resume with the same command")


def _recovering(client, storage, run: TpuVmRun, created: _Created, *, progress: Progress, recover: int,
                zones: list[str], poll_seconds: float, provision_timeout: float, run_timeout: float,
                sleep: Callable[[float], None], clock: Callable[[], float], wall: Callable[[], float],
                history: list[dict[str, Any]]) -> dict[str, Any]:
    """Create, follow, and on a preemption delete and re-queue the slice in the first of ``zones`` that
    takes it (the same backup folder: the trainer resumes), at most ``recover`` times. Training (the
    slices' ACTIVE time) is bounded by ``run_timeout`` in total, so the cost estimate still holds."""
    from dataclasses import replace

    training_deadline: float | None = None
    preempted_at: float | None = None
    while True:
        for i, zone in enumerate(zones):
            current = replace(run, zone=zone)
            created.run = current
            earlier = _earlier_outputs(storage, current)
            if domain.split_gs_uri(current.result_uri)[1] in earlier and preempted_at is None and i == 0:
                progress(f"{current.result_uri} is an earlier run's; waiting for this run's to replace it")
            try:
                create_and_wait(client, current, progress=progress, created=created, poll_seconds=poll_seconds,
                                timeout=provision_timeout, sleep=sleep, clock=clock)
            except _Refused as exc:
                # With --recover a refusal (no capacity, say) moves on to the next zone, on the first launch too
                # (no recovery is counted: nothing was trained); without it the refusal ends the run.
                if not recover or i == len(zones) - 1:
                    raise
                _delete_and_wait(client, current, poll_seconds=poll_seconds, timeout=provision_timeout, sleep=sleep,
                                 clock=clock)
                created.maybe = False
                progress(f"{exc}; trying {zones[i + 1]}")
                continue
            break
        if preempted_at is not None:
            down = clock() - preempted_at
            history[-1].update(resumed_zone=zone, seconds_down=round(down, 1))
            _record_recoveries(storage, current, history)
            if training_deadline is not None:   # a preempted slice is not billed: the wait does not count
                training_deadline += down
            progress(f"recovered in {zone}: training again {_minutes(down)} after the preemption")
        active = clock()
        if training_deadline is None:
            training_deadline = active + run_timeout
        try:
            return follow(client, storage, current, progress=progress, poll_seconds=poll_seconds,
                          timeout=max(training_deadline - active, 0.0), sleep=sleep, clock=clock, earlier=earlier)
        except _Preempted as exc:
            now = clock()
            if len(history) >= recover:
                if recover:
                    raise UserError(f"{exc} (after {len(history)} recoveries, the most --recover allows)", 1) from None
                raise
            backup = _last_backup(storage, current)
            trained = now - active
            lost = min(trained, wall() - backup) if backup is not None else trained
            history.append({"zone": zone, "what": exc.what, "seconds_trained": round(trained, 1),
                            "seconds_lost": round(max(lost, 0.0), 1),
                            "since": "last backup" if backup is not None else "slice became ACTIVE"})
            _record_recoveries(storage, current, history)
            progress(f"preemption {len(history)}/{recover}: {exc.what} in {zone} after {_minutes(trained)} of "
                     f"training; lost {_minutes(lost)} (since the {history[-1]['since']}); re-queueing in "
                     f"{', '.join(zones)}")
            _delete_and_wait(client, current, poll_seconds=poll_seconds, timeout=provision_timeout, sleep=sleep,
                             clock=clock)
            created.maybe = False
            preempted_at = clock()


def run_tpu_vm(run: TpuVmRun, *, keep: bool = False, progress: Progress = print, client=None, storage=None,
               poll_seconds: float = DEFAULT_POLL_SECONDS, provision_timeout: float = DEFAULT_PROVISION_TIMEOUT,
               run_timeout: float = DEFAULT_RUN_TIMEOUT, sleep: Callable[[float], None] = time.sleep,
               recover: int = 0, zones: list[str] | None = None, clock: Callable[[], float] = time.monotonic,
               wall: Callable[[], float] = time.time) -> RunResult:
    """Create the slice, train, and delete what was created on success, failure and Ctrl-C/SIGTERM (``keep``:
    keep it on every path, and say how to delete it). An interrupt ends as ``UserError(..., 130)`` naming what
    was deleted or kept. ``recover``: re-queue a preempted slice at most this many times, in the first of
    ``zones`` (default: the run's zone only; the run's zone first) that takes it."""
    client = client or tpu_client()
    storage = storage or clients.storage_client(run.project)
    created = _Created()
    created.run = run
    order = [run.zone, *[z for z in (zones or []) if z != run.zone]]
    history: list[dict[str, Any]] = []
    outcome: BaseException | None = None
    try:
        # SIGTERM raises KeyboardInterrupt while a run is followed (the CLI does the same; a direct caller too).
        with signal_handlers(raise_interrupt, (signal.SIGTERM,)):
            result = _recovering(client, storage, run, created, progress=progress, recover=recover, zones=order,
                                 poll_seconds=poll_seconds, provision_timeout=provision_timeout,
                                 run_timeout=run_timeout, sleep=sleep, clock=clock, wall=wall, history=history)
    except (KeyboardInterrupt, UserError) as exc:
        outcome = exc
    current = created.run
    name = current.queued_resource_name
    if not created.maybe:
        if isinstance(outcome, KeyboardInterrupt):
            raise UserError("interrupted before anything was created" if not history else
                            f"interrupted while recovering; nothing is left in {current.zone}; resume with the same "
                            "command", EXIT_INTERRUPTED) from None
        raise outcome  # type: ignore[misc]
    if keep:
        cleanup = (f"kept queued resource {current.name} (--keep): it is billed until you run "
                   f"`tpuctl tpu delete {current.name} --zone {current.zone}`")
    else:
        progress(f"deleting queued resource {name}")
        failed = _delete(client, name)
        cleanup = (f"deleted queued resource {current.name}" if failed is None else
                   f"could NOT delete queued resource {current.name} ({failed}); delete it with "
                   f"`tpuctl tpu delete {current.name} --zone {current.zone}`")
        if failed is not None and outcome is None:
            raise UserError(f"training finished ({run.model_dir}) but {cleanup}", 1)
    if isinstance(outcome, KeyboardInterrupt):
        raise UserError(f"interrupted; {cleanup}", EXIT_INTERRUPTED) from None
    if isinstance(outcome, UserError):
        raise UserError(f"{outcome}; {cleanup}", outcome.exit_code) from None
    progress(cleanup)
    if history:
        lost = sum(h["seconds_lost"] for h in history)
        progress(f"recovered from {len(history)} preemption(s); training lost {_minutes(lost)} in all")
    return RunResult(current.name, run.model_dir, result, kept=keep, recoveries=history)


# --------------------------------------------------------------------------------------------
# list / delete: only what tpuctl created (labelled managed-by=tpuctl)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunSummary:
    name: str
    state: str
    accelerator: str
    spot: bool
    run: str
    create_time: str


def _zone_parent(outputs: StackOutputs | None, project: str | None, zone: str | None) -> str:
    project = project or (outputs.project if outputs else None)
    zone = zone or _stack_zone(outputs)
    if not project or not zone:
        raise UserError("TPU VMs need a project and a zone: pass --stack/--outputs (or --project and --zone)")
    domain.validate_project_id(project)
    domain.validate_tpu_vm_zone(zone)
    return f"projects/{project}/locations/{zone}"


def list_runs(outputs: StackOutputs | None, *, project: str | None = None, zone: str | None = None,
              client=None) -> list[RunSummary]:
    parent = _zone_parent(outputs, project, zone)
    client = client or tpu_client()
    runs = []
    with clients.google_errors(f"listing queued resources in {parent}",
                               forbidden=f"permission denied listing {parent}: you need tpu.queuedResources.list"):
        for resource in client.list_queued_resources(parent=parent):
            if not _managed(resource):
                continue
            specs = resource.tpu.node_spec
            created = resource.create_time.isoformat() if resource.create_time else ""
            runs.append(RunSummary(resource.name.rsplit("/", 1)[-1], state_name(resource),
                                   specs[0].node.accelerator_type if specs else "?", "spot" in resource,
                                   _node_labels(resource).get(domain.TPU_VM_RUN_LABEL, ""), created))
    return sorted(runs, key=lambda r: r.name)


def delete(name: str, outputs: StackOutputs | None, *, project: str | None = None, zone: str | None = None,
           client=None) -> str:
    """Delete a tpuctl-created queued resource (and its nodes); refuses one tpuctl did not label."""
    domain.validate_tpu_vm_name(name)
    parent = _zone_parent(outputs, project, zone)
    full = f"{parent}/queuedResources/{name}"
    client = client or tpu_client()
    with clients.google_errors(f"reading queued resource {full}",
                               not_found=f"no queued resource {name} in {parent.rsplit('/', 1)[-1]} "
                                         "(`tpuctl tpu list` shows tpuctl's)"):
        resource = client.get_queued_resource(name=full)
    if not _managed(resource):
        key, value = domain.TPU_VM_MANAGED_LABEL
        raise UserError(f"queued resource {name} was not created by tpuctl (no {key}={value} label); "
                        "tpuctl leaves it alone: delete it with gcloud if you mean to")
    failed = _delete(client, full)
    if failed is not None:
        raise UserError(f"could not delete queued resource {name}: {failed}", 1)
    return full
