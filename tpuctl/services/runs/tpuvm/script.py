"""What every host of the slice runs: the startup script (``docker run`` of the trainer image), built from
shell-quoted words only, and the queued-resource request that carries it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from cloud import clients
from cloud.google import json_format, tpu_v2, tpu_v2alpha1
from ground import domain
from ground.errors import UserError
from tpuctl.services.runs.logs import RUN_LABEL, STARTUP_LOG, WORKER_LABEL
from tpuctl.services.runs.tpuvm.plan import TpuVmRun

#: Where every host reports how its trainer container ended: ``<model_dir>/HOST_STATUS_DIR/worker-<n>.exit``.
HOST_STATUS_DIR = "tpuctl/hosts"
#: The GCE metadata server every host of the slice asks (its worker number, its preemption flag).
METADATA_ROOT = "http://metadata.google.internal/computeMetadata/v1"
METADATA_URL = f"{METADATA_ROOT}/instance/attributes"
#: Seconds the trainer container gets between SIGTERM and SIGKILL when the VM shuts down (``docker run
#: --stop-timeout``; Docker's default is 10): a preempted VM has 30 s from the start of its preemption, an on-demand
#: one 90 s (https://cloud.google.com/compute/docs/shutdownscript, "Limitations", stored copy read 2026-11-27). On
#: SIGTERM the trainer backs up its step and exits 143 (trainer/callbacks.py), which --recover takes for a preemption.
STOP_TIMEOUT_SECONDS = 25


def registry_host(run: TpuVmRun) -> str:
    """The registry of the run's image (the startup script logs Docker in to it)."""
    return (run.image or "").split("/", 1)[0]


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


#: The container labels Docker's gcplogs driver copies into each of the container's log entries
#: (``jsonPayload.container.metadata``; tpuctl/services/runs/logs.py reads them): the run and the host.
LOG_LABELS = (RUN_LABEL, WORKER_LABEL)


#: ``docker run``'s exit status when Docker itself failed (the container never ran): a log driver that cannot reach or
#: write to Cloud Logging fails the container's start this way (the gcplogs driver pings Cloud Logging when it starts).
DOCKER_FAILED = 125


def host_command(run: TpuVmRun, worker: ShellVar | str = WORKER, *, cloud_logging: bool = True) -> list[Word]:
    """The ``docker run`` every TPU VM host runs, as shell words (``worker``: the host's index, the script's
    ``$WORKER`` on the VM). The container's output goes to Cloud Logging through Docker's ``gcplogs`` logging driver
    (https://docs.docker.com/engine/logging/drivers/gcplogs/, read 2026-11-27: on a Google Cloud VM it takes the
    project and credentials from the metadata server, i.e. the VM's service account, which needs
    ``roles/logging.logWriter``), one entry per line, labelled with the run and the host (``LOG_LABELS``)."""
    run_label, worker_label = LOG_LABELS
    argv: list[Word] = ["docker", "run", "--rm", "--net=host", "--privileged", "--name", "tpuctl-trainer",
                        "--stop-timeout", str(STOP_TIMEOUT_SECONDS)]
    if cloud_logging:
        argv += ["--log-driver", "gcplogs", "--log-opt", f"labels={','.join(LOG_LABELS)}",
                 "--label", f"{run_label}={run.name}", "--label", (f"{worker_label}=", worker)]
    for key, value in sorted(run.env.items()):
        argv += ["-e", f"{key}={value}"]
    argv += ["-e", ("TPUCTL_TPU_WORKER=", worker)]
    if run.command:         # the user's program instead of the image's entrypoint (python -m trainer.task)
        return [*argv, "--entrypoint", run.command[0], run.image, *run.command[1:]]
    return [*argv, run.image, *run.argv]


def host_command_line(run: TpuVmRun, *, cloud_logging: bool = True) -> str:
    return " ".join(shell_word(word) for word in host_command(run, cloud_logging=cloud_logging))


def host_report(run: TpuVmRun) -> str:
    """Where this host reports how its trainer ended (a shell word): ``<model_dir>/tpuctl/hosts/worker-$WORKER.exit``."""
    return shell_word((f"{run.model_dir}/{HOST_STATUS_DIR}/worker-", WORKER, ".exit"))


#: The shell function that watches this host's preemption flag (``watch_preemption &`` in a Spot slice's script).
PREEMPTION_WATCHER = "watch_preemption"


def preemption_watcher(run: TpuVmRun) -> list[str]:
    """Bash lines defining ``watch_preemption``: a hanging GET of the metadata server's preemption flag
    (``domain.TPU_VM_PREEMPTED_METADATA_KEY``, ``wait_for_change=true``; asked again whenever it returns without
    TRUE, 5 s later when the server could not be read) that writes ``preempted`` as this host's report once the flag
    is TRUE, so tpuctl sees the preemption before the queued resource's state changes. NOT verified on a TPU VM (see
    the fact's docstring)."""
    flag = shell_word(f"{METADATA_ROOT}/{domain.TPU_VM_PREEMPTED_METADATA_KEY}?wait_for_change=true")
    return [
        f"{PREEMPTION_WATCHER}() {{",
        "  local flag",
        "  while :; do",
        f"    flag=\"$(curl -sf --noproxy '*' -H 'Metadata-Flavor: Google' {flag})\" || {{ sleep 5; continue; }}",
        '    if [ "$flag" = TRUE ]; then',
        f"      echo preempted | gcloud storage cp - {host_report(run)}",
        "      return",
        "    fi",
        "  done",
        "}",
    ]


#: Lines of a failed command's stderr that the script's failure line carries (Docker's own reason, say).
ERROR_LINES = 5
#: Characters of one failure line at most (the rest of it stays in the host's journal).
FAILURE_CHARS = 2000
#: Seconds one failure line's write to Cloud Logging may take (an unreachable API never holds the exit report).
LOG_WRITE_SECONDS = 60
#: The shell word of a failure line's JSON entry inside ``log_failure`` (a field of the printed gcloud command).
ENTRY = '"$entry"'


def entry_format(run: TpuVmRun) -> str:
    """``printf``'s format of a failure line's JSON payload (``%s``: the escaped line, then the host's index): the
    ``message`` and ``container.metadata`` keys of the trainer container's gcplogs entries (``LOG_LABELS``)."""
    return json.dumps({"message": "%s", "container": {"metadata": {RUN_LABEL: run.name, WORKER_LABEL: "%s"}}})


def failure_logger(run: TpuVmRun) -> list[str]:
    """Bash lines defining ``with_errors CMD…`` (runs CMD, its stderr passed on to the host's journal and its last
    ``ERROR_LINES`` lines kept in ``$ERRORS``) and ``log_failure WHAT STATUS`` (one line, with those stderr lines, to
    the journal and to Cloud Logging's ``STARTUP_LOG`` as a JSON entry labelled like the trainer's lines, through
    ``gcloud logging write``: logs.py says where Google documents it). A write that fails (Cloud Logging refused or
    unreachable) is one more journal line; the script goes on."""
    return [
        'exec 3>&1',
        'ERRORS="$(mktemp 2>/dev/null || echo /tmp/tpuctl-startup-errors)"',
        'trap \'rm -f "$ERRORS"\' EXIT',
        'keep_errors() {',
        '  local line lines=()',
        '  while IFS= read -r line || [ -n "$line" ]; do',
        '    printf \'%s\\n\' "$line" >&2',
        '    lines+=("$line")',
        f'    if [ "${{#lines[@]}}" -gt {ERROR_LINES} ]; then lines=("${{lines[@]:1}}"); fi',
        '  done',
        '  printf \'%s\\n\' "${lines[@]}" > "$ERRORS"',
        '}',
        'with_errors() {',
        '  "$@" 2>&1 >&3 3>&- | keep_errors',
        '  return "${PIPESTATUS[0]}"',
        '}',
        'log_failure() {',
        '  local text entry',
        '  text="tpuctl: $1 (exit $2)"',
        '  if [ -s "$ERRORS" ]; then text="$text: $(tr \'\\n\' \' \' < "$ERRORS")"; text="${text% }"; fi',
        '  echo "$text" >&2',
        f'  text="$(printf \'%s\' "${{text:0:{FAILURE_CHARS}}}" | tr \'\\001-\\037\\177\' \' \')"',
        r'  text="${text//\\/\\\\}"',     # JSON: \ and " escaped, control characters were made spaces
        r'  text="${text//\"/\\\"}"',
        f'  printf -v entry {shell_word(entry_format(run))} "$text" "$WORKER"',
        f"  timeout {LOG_WRITE_SECONDS} gcloud logging write {STARTUP_LOG} {ENTRY} --payload-type=json --severity=ERROR "
        f"--project={shell_word(run.project or '')}",
        '  if [ "$?" != 0 ]; then echo "tpuctl: that line could not be written to Cloud Logging" >&2; fi',
        '}',
    ]


def startup_script(run: TpuVmRun) -> str:
    """The startup script of every TPU VM of the slice: log Docker in, (Spot) watch for the host's preemption, run the
    trainer, report the exit status. What fails on the way (Docker's login, a container that does not start, the
    report) is one line in Cloud Logging beside the trainer's (``failure_logger``), written before the report, so a
    failed host's last lines say why. Every value from the run enters it through ``shell_word``."""
    watch = [*preemption_watcher(run), f"{PREEMPTION_WATCHER} &", "WATCHER=$!"] if run.spot else []
    return "\n".join([
        "#!/bin/bash",
        "# tpuctl: the trainer container on every host of the TPU VM slice (see `tpuctl train --target tpu-vm`).",
        "set -uo pipefail",
        f"WORKER=\"$(curl -sf --noproxy '*' -H 'Metadata-Flavor: Google' {METADATA_URL}/agent-worker-number || echo 0)\"",
        'case "$WORKER" in ""|*[!0-9]*) WORKER=0 ;; esac',
        *failure_logger(run),
        f"with_errors gcloud auth configure-docker {shell_word(registry_host(run))} --quiet",
        "STATUS=$?",
        'if [ "$STATUS" != 0 ]; then',
        f'  log_failure "Docker\'s login to the image\'s registry failed (configure-docker for "{shell_word(registry_host(run))}")" '
        '"$STATUS"',
        "fi",
        *watch,
        f"with_errors {host_command_line(run)}",
        "STATUS=$?",
        # Cloud Logging refused or unreachable (the service account lacks roles/logging.logWriter, say), or the image
        # not pulled: the trainer is started again without the log driver, its output in the host's journal only
        f'if [ "$STATUS" = {DOCKER_FAILED} ]; then',
        '  log_failure "the trainer container did not start with Cloud Logging; starting it without" "$STATUS"',
        f"  with_errors {host_command_line(run, cloud_logging=False)}",
        "  STATUS=$?",
        f'  if [ "$STATUS" = {DOCKER_FAILED} ]; then',
        '    log_failure "the trainer container did not start" "$STATUS"',
        '  elif [ "$STATUS" != 0 ]; then',
        '    log_failure "the trainer, run without Cloud Logging, failed; its last stderr lines" "$STATUS"',
        "  fi",
        "fi",
        *(['kill "$WATCHER" 2>/dev/null'] if run.spot else []),
        f'echo "$STATUS" | with_errors gcloud storage cp - {host_report(run)}',
        'REPORTED=$?',
        'if [ "$REPORTED" != 0 ]; then',
        f'  log_failure "this host\'s exit report "{host_report(run)}" could not be written" "$REPORTED"',
        "fi",
        "",
    ])


def build_queued_resource(run: TpuVmRun):
    """The real ``google.cloud.tpu_v2.QueuedResource`` for ``run``."""
    node = tpu_v2.Node(
        accelerator_type=run.slice.name,
        runtime_version=run.slice.runtime_version,
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
    if run.reservation is not None:
        # a reservation's name in the slice's zone; `any`: "reservations/-", as the Cloud SDK sends --reserved
        assert run.project is not None and run.zone is not None
        resource.reservation_name = domain.Reservation(run.reservation).tpu_name(run.project, run.zone)
    return resource


def api_version(run: TpuVmRun) -> str:
    """The Cloud TPU API version a run's queued resource is created with: v2, or v2alpha1 for what only v2alpha1 has
    (Autocheckpoint: ``Node.autocheckpoint_enabled``; flex-start: ``provisioningModel`` and ``runDuration``;
    ground/domain/capacity.py). It is read and deleted through v2 either way: one queued resource."""
    return "v2alpha1" if run.flex_start or run.autocheckpoint else "v2"


def v2alpha1_body(run: TpuVmRun) -> dict[str, Any]:
    """The v2alpha1 REST body: the v2 request re-read strictly as google-cloud-tpu's ``tpu_v2alpha1.QueuedResource``
    (every field tpuctl sets exists there), with ``tpu.nodeSpec[].node.autocheckpointEnabled`` (Autocheckpoint); for
    a flex-start slice its ``queueingPolicy.validUntilDuration`` the wait in this zone (--max-wait: past it Google
    fails the request), then the two fields google-cloud-tpu 1.27 does not have yet, as the Cloud SDK 528 sends
    ``--provisioning-model flex-start --max-run-duration``: ``provisioningModel: FLEX_START`` and
    ``runDuration.maxRunDuration`` (the run's time bound, --max-run-time)."""
    v2 = build_queued_resource(run)
    alpha = tpu_v2alpha1.QueuedResource.from_json(tpu_v2.QueuedResource.to_json(v2), ignore_unknown_fields=False)
    if run.autocheckpoint:
        for spec in alpha.tpu.node_spec:
            spec.node.autocheckpoint_enabled = True
    if run.flex_start:
        alpha.queueing_policy = tpu_v2alpha1.QueuedResource.QueueingPolicy(valid_until_duration=run.wait_limit)
    body = json_format.MessageToDict(tpu_v2alpha1.QueuedResource.pb(alpha))
    if run.flex_start:
        body["provisioningModel"] = domain.TPU_FLEX_PROVISIONING_MODEL
        body["runDuration"] = {"maxRunDuration": f"{int(run.run_time.total_seconds())}s"}
    return body


def queued_resource_body(run: TpuVmRun) -> dict[str, Any]:
    """The queued resource as the REST API of ``api_version(run)`` spells it."""
    if api_version(run) == "v2alpha1":
        return v2alpha1_body(run)
    return json.loads(tpu_v2.QueuedResource.to_json(build_queued_resource(run)))


def request_document(run: TpuVmRun) -> dict[str, Any]:
    """What ``--dry-run`` prints: the request as the REST API spells it, and the per-host command."""
    return {
        "apiVersion": api_version(run),
        "parent": run.parent,
        "queuedResourceId": run.name,
        "queuedResource": queued_resource_body(run),
        "hosts": run.slice.vms,
        "hostCommand": host_command_line(run),
        "modelDir": run.model_dir,
        "image": run.image,
    }
