"""The Vertex AI target: a planned run (``spec.RunSpec``) as a CustomJob, submitted and followed.

The job runs ``python -m trainer.task`` with the spec's arguments and environment: the trainer's own image
(``containerSpec``, `tpuctl image build`; its ENTRYPOINT is ``python -m trainer.task``), or the trainer as a source
distribution on Google's prebuilt TensorFlow image (``pythonPackageSpec``, ``--python-package``). This replaces the
seeds' ``gcloud ai-platform jobs submit training --scale-tier BASIC_TPU`` (AI Platform Training was shut down on
2025-01-31).

Spot and the run time are ``jobSpec.scheduling`` (google/cloud/aiplatform/v1/custom_job.proto, message
``Scheduling``, as installed in google-cloud-aiplatform 2.7: STRATEGY_UNSPECIFIED, ON_DEMAND, LOW_COST, STANDARD,
SPOT, FLEX_START): with Spot, ``restartJobOnWorkerRestart`` restarts the whole job when a worker is preempted, and it
resumes from the trainer's backup: Vertex AI sets ``AIP_CHECKPOINT_DIR=<baseOutputDirectory>/checkpoints/`` and the
trainer keeps its backup in ``<checkpoints>/backup`` (trainer/config.py ``OutputDirs``), the spec's model folder being
the job's base output directory. ``submit`` stages the trainer (the image must exist, or the sdist is uploaded) and
creates the job; leaving its context on Ctrl-C says the job keeps running and where to see it (tpuctl never cancels
a job it stopped watching).
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bootstrap import quotas
from cloud import clients
from cloud.google import aiplatform_v1, api_exceptions, api_retry, json_format
from ground import domain
from ground.errors import EXIT_INTERRUPTED, UserError
from ground.files import printable
from ground.polling import poll
from ground.storagepath import GsPath
from tpuctl.services import image as images
from tpuctl.services.runs import cost, logs, records
from tpuctl.services.runs.spec import RunSpec, refuse_finished
from tpuctl.services.runs.target import FAILED, SUBMITTED, SUCCEEDED, Outcome
from tpuctl.services.trainer_package import TRAINER_MODULE, build_trainer_sdist

Echo = Callable[[str], None]

#: States after which a CustomJob no longer changes (google.cloud.aiplatform_v1.JobState names).
TERMINAL_STATES = frozenset({
    "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
})


# --------------------------------------------------------------------------------------------------- the request

def machine_spec(accel: domain.Accelerator) -> dict[str, Any]:
    """MachineSpec fields (proto field names) for one replica of ``accel``."""
    spec: dict[str, Any] = {"machine_type": accel.machine_type}
    if accel.kind == "gpu":
        assert accel.gpu is not None
        spec["accelerator_type"] = accel.gpu.vertex_accelerator
        spec["accelerator_count"] = accel.gpu_count
    elif accel.kind == "tpu":
        assert accel.tpu is not None and accel.tpu.vertex is not None
        if accel.tpu.vertex.accelerator_type:
            spec["accelerator_type"] = accel.tpu.vertex.accelerator_type
            spec["accelerator_count"] = accel.tpu.vertex.accelerator_count
        if accel.tpu.vertex.topology:
            spec["tpu_topology"] = accel.tpu.vertex.topology
    return spec


def worker_pool_specs(spec: RunSpec) -> list[dict[str, Any]]:
    """Pool 0: the chief (one replica). With --workers N, pool 1: N-1 identical workers; with parameter servers,
    pool 1 holds the --workers workers and pool 2 the ps replicas (Vertex sets TF_CONFIG "chief" / "worker" / "ps"
    for pools 0 / 1 / 2: cloud.google.com/vertex-ai/docs/training/distributed-training#cluster-spec-format, checked
    2026-11-22). Every pool runs the same arguments and environment."""
    assert spec.accel is not None and spec.image is not None
    # Vertex AI sets the AIP_* folders itself from baseOutputDirectory (to the same <model_dir>/model/ … the plan
    # gives a --command run elsewhere)
    env = [{"name": k, "value": v} for k, v in sorted(spec.env.items()) if not k.startswith("AIP_")]
    if spec.python_package:
        code = {"python_package_spec": {"executor_image_uri": spec.image, "package_uris": [spec.package_uri],
                                        "python_module": TRAINER_MODULE, "args": spec.argv, "env": env}}
    elif spec.command:       # the user's program instead of the image's entrypoint (python -m trainer.task)
        code = {"container_spec": {"image_uri": spec.image, "command": list(spec.command), "env": env}}
    else:
        code = {"container_spec": {"image_uri": spec.image, "args": spec.argv, "env": env}}
    machine = machine_spec(spec.accel)
    affinity = reservation_affinity(spec)
    if affinity is not None:
        machine["reservation_affinity"] = affinity
    pool = {"machine_spec": machine, "replica_count": 1, **code}
    pools = [pool]
    if spec.parameter_servers:
        pools.append({**pool, "replica_count": spec.workers})
        pools.append({**pool, "replica_count": spec.parameter_servers})
    elif spec.workers > 1:
        pools.append({**pool, "replica_count": spec.workers - 1})
    return pools


def reservation_affinity(spec: RunSpec) -> dict[str, Any] | None:
    """``MachineSpec.reservation_affinity`` of --reservation (ground/domain/capacity.py): ANY_RESERVATION, or
    SPECIFIC_RESERVATION keyed ``compute.googleapis.com/reservation-name`` with the reservation's full name."""
    if spec.reservation is None:
        return None
    reservation = domain.Reservation(spec.reservation)
    if reservation.any:
        return {"reservation_affinity_type": "ANY_RESERVATION"}
    return {"reservation_affinity_type": "SPECIFIC_RESERVATION", "key": domain.VERTEX_RESERVATION_KEY,
            "values": [reservation.vertex_value()]}


def scheduling(spec: RunSpec):
    """``CustomJobSpec.scheduling`` of the run, or None when it asks for nothing: the provisioning model's
    ``strategy`` (STANDARD only when --provisioning on-demand was asked for), Spot's restart of the whole job on a
    worker's restart (it resumes from the trainer's backup), flex-start's ``max_wait_duration`` (--max-wait; Vertex
    AI's default is 24 h), and --max-run-time."""
    if spec.provisioning is None and spec.max_run_time is None:
        return None
    result = aiplatform_v1.Scheduling()
    if spec.max_run_time is not None:
        result.timeout = spec.max_run_time
    if spec.provisioning is not None:
        result.strategy = aiplatform_v1.Scheduling.Strategy[domain.VERTEX_STRATEGY[spec.provisioning]]
    if spec.spot:
        result.restart_job_on_worker_restart = True
    if spec.flex_start and spec.max_wait is not None:
        result.max_wait_duration = spec.max_wait
    return result


def build_custom_job(spec: RunSpec):
    """The real ``aiplatform_v1.CustomJob`` for the spec, with ``scheduling`` (``scheduling()``) and each pool's
    reservation affinity (``reservation_affinity()``), parsed back
    from its REST JSON with unknown fields refused (what Vertex AI would be sent)."""
    job_spec = aiplatform_v1.CustomJobSpec(
        persistent_resource_id=spec.cluster or "",
        worker_pool_specs=worker_pool_specs(spec),
        service_account=spec.service_account or "",
        base_output_directory=aiplatform_v1.GcsDestination(output_uri_prefix=spec.model_dir),
    )
    planned = scheduling(spec)
    if planned is not None:
        job_spec.scheduling = planned
    return strict(aiplatform_v1.CustomJob(display_name=spec.name, labels=dict(spec.labels), job_spec=job_spec))


def strict(message):
    """``message`` parsed back from its REST JSON with unknown fields refused: what Vertex AI would be sent."""
    cls = type(message)
    return cls.from_json(cls.to_json(message), ignore_unknown_fields=False)


def job_to_dict(message) -> dict[str, Any]:
    """A request as the REST API spells it (camelCase, enum names): what --dry-run prints."""
    return json_format.MessageToDict(type(message).pb(message))


# --------------------------------------------------------------------------------------------------- cloud calls

def job_client(region: str):
    """JobServiceClient over REST: TPUCTL_VERTEX_ENDPOINT if set (anonymous on loopback http), else the regional
    endpoint with Application Default Credentials."""
    return clients.gapic(aiplatform_v1.JobServiceClient, "vertex",
                         default_endpoint=domain.VERTEX_API_HOST.format(region=region))


def console_url(job_name: str) -> str:
    parts = job_name.split("/")
    # projects/P/locations/R/customJobs/ID
    fields = dict(zip(parts[0::2], parts[1::2]))
    return domain.VERTEX_CUSTOM_JOB_CONSOLE_URL.format(
        region=fields.get("locations", "?"), job_id=fields.get("customJobs", "?"),
        project=fields.get("projects", "?"))


def state_name(job) -> str:
    return aiplatform_v1.JobState(job.state).name


def check_quota(spec: RunSpec, *, client=None, echo: Echo = print) -> int | None:
    """The pre-flight of ``bootstrap.quotas.check_vertex_room`` for this run (before anything is built)."""
    assert spec.accel is not None and spec.project is not None and spec.region is not None
    if spec.cluster is not None:
        echo(f"note: quota check skipped: the job runs on cluster {spec.cluster}'s machines, already provisioned")
        return None
    if spec.reservation is not None:
        echo("note: quota check skipped: a job on a reservation uses reserved capacity (tpuctl does not read "
             "reservations; Vertex AI checks it)")
        return None
    return quotas.check_vertex_room(spec.project, spec.region, spec.accel, spec.workers, spot=spec.spot,
                                    flex_start=spec.flex_start, client=client, echo=echo)


def check_cluster(spec: RunSpec, *, api=None, echo: Echo = print) -> None:
    """--cluster NAME: the cluster exists and has a pool of the job's machine (``check_cluster_for_run``); without
    credentials (an offline dry run) a note."""
    if spec.cluster is None:
        return
    assert spec.project is not None and spec.region is not None and spec.accel is not None
    if api is None and (why := clients.missing_credentials("vertex")):
        echo(f"note: cluster {spec.cluster} not checked: {why}")
        return
    check_cluster_for_run(spec.project, spec.region, spec.cluster, machine_spec(spec.accel), api=api, echo=echo)


def require_image(spec: RunSpec, image_exists: Callable[[str], bool] | None = None) -> None:
    """The trainer image tpuctl builds must exist; an image tpuctl did not build (--image) is Vertex AI's to find."""
    assert spec.image is not None
    ref = images.parse_uri(spec.image)
    if ref is None:
        return
    exists = image_exists(spec.image) if image_exists else images.tag_exists(ref)
    if not exists:
        raise UserError(f"the trainer image {spec.image} is not built yet: run `tpuctl image build --variant "
                        f"{ref.variant} --project {ref.project} --region {ref.region} --repository {ref.repository}` "
                        "(or with --stack), then train again")


def stage_trainer(spec: RunSpec, echo: Echo, image_exists: Callable[[str], bool] | None = None) -> None:
    """Container route: the image must exist (else the one command that builds it is the error). Python-package
    route: the sdist is built and uploaded to staging."""
    if not spec.python_package:
        require_image(spec, image_exists)
        return
    assert spec.package_uri is not None
    tensorflow = domain.VERTEX_TRAINING_IMAGES[spec.accel.kind if spec.accel else "cpu"].tensorflow
    package = GsPath.parse(spec.package_uri)
    with tempfile.TemporaryDirectory(prefix="tpuctl-package-") as tmp:
        sdist = build_trainer_sdist(Path(tmp), tensorflow)
        try:
            blob = clients.storage_client(spec.project).bucket(package.bucket).blob(package.path)
            blob.upload_from_filename(str(sdist), content_type="application/gzip")
        except api_exceptions.GoogleAPICallError as exc:
            raise UserError(f"uploading the trainer package to {spec.package_uri} failed: {exc.message or exc}",
                            1) from None
    echo(f"uploaded trainer package: {spec.package_uri}")


# --------------------------------------------------------------------------------------------------- the targets

@dataclass
class SubmittedJob:
    """A job Vertex AI accepted: the client that created it, its resource name and its console page."""
    client: Any
    name: str
    console_url: str


def create(what: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except api_exceptions.GoogleAPICallError as exc:
        raise UserError(f"Vertex AI rejected the {what}: {exc.message or exc}", 1) from None


@contextmanager
def watching(created: SubmittedJob) -> Iterator[SubmittedJob]:
    try:
        yield created
    except KeyboardInterrupt:
        raise UserError(f"stopped following {created.name}; the job keeps running ({created.console_url})",
                        EXIT_INTERRUPTED) from None


@dataclass
class VertexTarget:
    """A planned CustomJob. ``note``: pre-flight lines (stderr); ``say``: what the run prints as it goes (stdout).
    ``image_exists``, ``prices`` and ``sleep`` are there for tests."""

    name: ClassVar[str] = "vertex"
    flags: ClassVar[frozenset[str]] = frozenset({"region", "image", "python_package", "spot", "max_run_time",
                                                 "budget", "wait", "poll_seconds", "parameter_servers",
                                                 "provisioning", "reservation", "max_wait", "cluster", "verbose"})

    spec: RunSpec
    note: Echo = print
    say: Echo = print
    image_exists: Callable[[str], bool] | None = None
    prices: Any = None
    #: the PersistentResourceService client --cluster is checked with (tests; default: the regional one)
    cluster_api: Any = None
    sleep: Callable[[float], None] = time.sleep
    #: --wait/--no-wait and --poll-seconds: how this process follows the job (not part of the run)
    wait: bool = True
    poll_seconds: float = 30.0
    custom_job: Any = None
    estimate: Any = None
    #: the run's record could not be written once (said in one note): not tried again
    unrecorded: bool = False
    #: the live display (the CLI's TrainDisplay), fed with the chief's protocol lines read back from Cloud Logging
    display: Any = None

    def preflight(self) -> None:
        """The quota pre-flight, then the request and its cost estimate (refused over --budget): before anything
        is built or uploaded."""
        check_quota(self.spec, echo=self.note)   # offline: a note
        check_cluster(self.spec, api=self.cluster_api, echo=self.note)
        self.custom_job = build_custom_job(self.spec)
        assert self.spec.region is not None
        self.estimate = estimate = cost.estimate_custom_job(self.custom_job, self.spec.region, prices=self.prices)
        for line in estimate.lines():
            self.note(line)
        cost.check_budget(estimate, self.spec.budget)

    def describe(self) -> dict[str, Any]:
        return job_to_dict(self.request())

    def request(self):
        return self.custom_job if self.custom_job is not None else build_custom_job(self.spec)

    @contextmanager
    def submit(self) -> Iterator[SubmittedJob]:
        refuse_finished(self.spec.model_dir, clients.storage_client(self.spec.project))
        stage_trainer(self.spec, self.say, self.image_exists)
        client = job_client(self.spec.region or "")
        job = create("job", lambda: client.create_custom_job(parent=self.spec.parent, custom_job=self.request()))
        created = SubmittedJob(client, job.name, console_url(job.name))
        self.say(f"submitted {created.name}")
        self._write_record(self.spec.launch_record(started=time.time(), spot=self.spec.spot, project=self.spec.project,
                                                   job=created.name))   # `tpuctl logs` finds the job while it runs
        self.say(f"console: {created.console_url}")
        with watching(created):
            yield created

    def follow(self, created: SubmittedJob) -> Outcome:
        """Poll the job until it reaches a terminal state (each state change said); without --wait, at once."""
        outputs = self.spec.model_dir
        if not self.wait:
            return Outcome(self.name, created.name, SUBMITTED, outputs, console_url=created.console_url)
        with self._progress_from_logs(created.name):
            final = follow_job(created.client, created.name, poll_seconds=self.poll_seconds, echo=self.say,
                               sleep=self.sleep)
        self._record(final)
        state = state_name(final)
        if state == "JOB_STATE_SUCCEEDED":
            return Outcome(self.name, created.name, SUCCEEDED, outputs, console_url=created.console_url)
        detail = f": {final.error.message}" if final.error.message else ""
        return Outcome(self.name, created.name, FAILED, outputs, console_url=created.console_url,
                       error=f"job {created.name} ended in {state}{detail} ({created.console_url})")


    def _progress_from_logs(self, job_name: str):
        """While the job runs, its chief's log lines drive the display (``logs.LogFeed``); nothing without one."""
        if self.display is None or not self.spec.project:
            return contextlib.nullcontext()
        return logs.LogFeed(logs.vertex_source(self.spec.project, job_name, host=0), logs.feed_display(self.display),
                            self.note, interval=min(self.poll_seconds, 5.0), since=time.time() - 60)

    def _record(self, job) -> None:
        """The run record ``runs show`` reads (``<model_dir>/tpuctl-run.json``), from Vertex AI's own times of the
        job: created, first RUNNING, ended (CustomJob.create_time / start_time / end_time,
        google/cloud/aiplatform/v1/custom_job.proto as installed in google-cloud-aiplatform 2.7); the spend is the
        estimate's hourly list price for the time it ran. A record that cannot be written is one note."""
        created, started, ended = (job_time(job, f) for f in ("create_time", "start_time", "end_time"))
        hourly = self.estimate.hourly if self.estimate is not None else None
        spent = hourly * (ended - started) / 3600 if hourly is not None and started and ended else None
        record = self.spec.launch_record(started=created, provisioned=started, finished=ended, spot=self.spec.spot,
                                         spent_usd=round(spent, 4) if spent is not None else None,
                                         project=self.spec.project, job=job.name)
        self._write_record(record)

    def _write_record(self, record) -> None:
        if self.unrecorded:
            return
        try:
            with clients.google_errors(f"recording the run's times in {self.spec.model_dir}"):
                storage = clients.storage_client(self.spec.project)
            records.write_launch_record(self.spec.model_dir, record, storage_client=storage)
        except UserError as exc:
            self.unrecorded = True
            self.note(f"note: the run's times were not recorded: {exc}")


def job_time(job, field: str) -> float | None:
    """One of a job's times (seconds since 1970), None when Vertex AI has not set it."""
    value = getattr(job, field, None)
    return value.timestamp() if value else None


def follow_job(client, name: str, *, poll_seconds: float, echo: Echo, sleep: Callable[[float], None] = time.sleep):
    """Poll a CustomJob until it reaches a terminal state; print each state change. Returns the job."""
    retry = api_retry.Retry(predicate=api_retry.if_transient_error, initial=1.0, maximum=30.0, timeout=300.0)

    def read():
        try:
            return client.get_custom_job(name=name, retry=retry)
        except api_exceptions.GoogleAPICallError as exc:
            raise UserError(f"cannot read the state of {name}: {exc.message or exc}", 1) from None

    return poll(read, lambda job: state_name(job) in TERMINAL_STATES, interval=poll_seconds, key=state_name,
                on_change=lambda job: echo(f"state: {state_name(job)}"), sleep=sleep)


# --------------------------------------------------------------------------------------------------- clusters

#: Google's rule for a persistent resource's id (CreatePersistentResourceRequest.persistent_resource_id).
CLUSTER_ID = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")


def check_cluster_name(name: str) -> str:
    if not CLUSTER_ID.fullmatch(name):
        raise UserError(f"cluster name {printable(name, 80)!r}: use 1-63 lowercase letters, digits and '-', starting "
                        "with a letter and not ending with '-' (Vertex AI's rule for a persistent resource id)")
    return name


def cluster_client(region: str):
    """PersistentResourceServiceClient over REST: TPUCTL_VERTEX_ENDPOINT if set, else the regional endpoint."""
    return clients.gapic(aiplatform_v1.PersistentResourceServiceClient, "vertex",
                         default_endpoint=domain.VERTEX_API_HOST.format(region=region))


def cluster_name(project: str, region: str, name: str) -> str:
    return aiplatform_v1.PersistentResourceServiceClient.persistent_resource_path(project, region, name)


def get_cluster(project: str, region: str, name: str, *, api=None):
    """The cluster ``name``, or one line saying it does not exist."""
    api = api or cluster_client(region)
    full = cluster_name(project, region, check_cluster_name(name))
    with clients.google_errors(f"reading cluster {name}", not_found=f"no cluster {name} in {region} of {project} "
                                                                    "(`tpuctl cluster ls` lists them)", exit_code=1):
        return api.get_persistent_resource(name=full)


def check_cluster_for_run(project: str, region: str, name: str, machine: dict[str, Any], *, api=None,
                          echo: Echo = print) -> None:
    """Before a job is sent to ``--cluster NAME``: it exists, is RUNNING (else a note: Vertex AI may queue or
    refuse the job), and has a pool of the job's machine (else one line: Vertex AI would reject the job)."""
    found = get_cluster(project, region, name, api=api)
    state = aiplatform_v1.PersistentResource.State(found.state).name
    if state != "RUNNING":
        echo(f"note: cluster {name} is {state}; the job waits for it or is refused by Vertex AI")
    wanted = (machine.get("machine_type"), machine.get("accelerator_type") or None,
              int(machine.get("accelerator_count") or 0))
    pools = [(p.machine_spec.machine_type,
              aiplatform_v1.AcceleratorType(p.machine_spec.accelerator_type).name if p.machine_spec.accelerator_count
              else None, p.machine_spec.accelerator_count) for p in found.resource_pools]
    if wanted not in pools:
        raise UserError(f"cluster {name} has no pool of {wanted[0]}"
                        + (f" + {wanted[2]} × {wanted[1]}" if wanted[1] else "")
                        + f" (its pools: {', '.join(f'{m}' + (f' + {c} × {a}' if a else '') for m, a, c in pools)}); "
                        "pass the --accelerator the cluster was created with", 2)
