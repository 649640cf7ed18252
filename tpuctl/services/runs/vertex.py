"""The Vertex AI target: a run planned for Vertex AI (``VertexRun``) as a CustomJob, submitted and followed.

The job runs ``python -m trainer.task`` with the spec's arguments and environment in the trainer's own image
(``containerSpec``, `tpuctl image build`; its ENTRYPOINT is ``python -m trainer.task``), or the user's program
(``--command``) in it. This replaces the seeds' ``gcloud ai-platform jobs submit training --scale-tier BASIC_TPU``
(AI Platform Training was shut down on 2025-01-31; the prebuilt-image route ``--python-package`` went when every
prebuilt TensorFlow image it could use was past its end of availability).

Spot and the run time are ``jobSpec.scheduling`` (google/cloud/aiplatform/v1/custom_job.proto, message
``Scheduling``, as installed in google-cloud-aiplatform 2.7: STRATEGY_UNSPECIFIED, ON_DEMAND, LOW_COST, STANDARD,
SPOT, FLEX_START): with Spot, ``restartJobOnWorkerRestart`` restarts the whole job when a worker is preempted, and it
resumes from the trainer's backup: Vertex AI sets ``AIP_CHECKPOINT_DIR=<baseOutputDirectory>/checkpoints/`` and the
trainer keeps its backup in ``<checkpoints>/backup`` (trainer/config.py ``OutputDirs``), the spec's model folder being
the job's base output directory. ``submit`` checks the image exists and creates the job; leaving its context on Ctrl-C says the job keeps running and where to see it (tpuctl never cancels
a job it stopped watching).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Literal

from bootstrap import quotas
from cloud import clients
from cloud.google import aiplatform_v1, api_exceptions, api_retry, json_format
from ground import domain
from ground.errors import EXIT_INTERRUPTED, DomainError, UserError
from ground.files import printable
from ground.polling import poll
from tpuctl.services import image as images
from tpuctl.services.runs import cost, logs, records
from tpuctl.services.runs.cloud import CloudRun, CloudTarget, completion_problem, read_result
from tpuctl.services.runs.records import RESULT_FILE
from tpuctl.services.runs.request import (
    MAX_RUN_TIME,
    CloudOptions,
    ClusterOptions,
    PollOptions,
    TargetOptions,
    VerboseOptions,
    flag,
)
from tpuctl.services.runs.spec import Planning, refuse_finished
from tpuctl.services.runs.target import FAILED, SUBMITTED, SUCCEEDED, Outcome, Report

Echo = Callable[[str], None]


def _silent(_line: str) -> None:
    """A note nobody asked to see (a pre-flight called without a report)."""

#: States after which a CustomJob no longer changes (google.cloud.aiplatform_v1.JobState names).
TERMINAL_STATES = frozenset({
    "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
})


# --------------------------------------------------------------------------------------------------- the run

class VertexSite(TargetOptions):
    """Where a Vertex AI job runs: its region and, optionally, a persistent resource's machines (train and tune)."""
    region: str | None = flag(None, "Vertex: region of the job (default: the stack's region).")
    cluster: str | None = flag(
        None, "Vertex: run on this persistent resource (`tpuctl cluster create NAME`): machines kept between jobs, so "
              "a retry or a tuning trial starts without provisioning (docs/capacity.md).", max_length=63)


class VertexOptions(ClusterOptions, CloudOptions, VertexSite, PollOptions, VerboseOptions):
    """``--target vertex``: a Vertex AI CustomJob."""
    target: Literal["vertex"] = "vertex"
    wait: bool = flag(True, "Vertex: follow the job until it ends.", commands=("train",))


class VertexRun(CloudRun):
    """A Vertex AI CustomJob (or the trial job of a tuning job), planned."""
    target: Literal["vertex"] = "vertex"
    region: str
    #: the persistent resource (``tpuctl cluster``) the job runs on (``persistent_resource_id``)
    cluster: str | None = None
    #: --wait/--no-wait: follow the job until it ends (not part of the job)
    wait: bool = True

    #: Google's documented default timeout of a job (custom_job.proto, Scheduling.timeout): the cost bound
    DEFAULT_RUN_TIME: ClassVar[timedelta] = MAX_RUN_TIME

    @property
    def location(self) -> str:
        return self.region

    @property
    def parent(self) -> str:
        return aiplatform_v1.JobServiceClient.common_location_path(self.project, self.region)


class VertexPlanning(CloudTarget):
    """The planning hooks of a Vertex AI job (``target.RunTarget``; the cloud ones from ``cloud.CloudTarget``): a
    catalogue accelerator Vertex AI offers (default cpu), its region and capacity rules, the trainer image of the
    accelerator's kind."""
    name: ClassVar[str] = "vertex"
    options: ClassVar[type] = VertexOptions
    Spec: ClassVar[type[CloudRun]] = VertexRun
    TPU_WORKERS: ClassVar[str] = ("a Vertex AI TPU job is one replica (its VMs are the workers): pick a larger TPU, "
                                  "e.g. tpu-v5e-16")
    SUPPORT: ClassVar[str] = "vertex"

    @classmethod
    def does(cls, verb: str) -> str:
        return f"a Vertex AI job {verb}s"

    @classmethod
    def accelerator(cls, p: Planning) -> domain.Accelerator:
        typed = p.request.accelerator or "cpu"
        return domain.vertex_accelerator(domain.parse_accelerator(typed), typed)

    @classmethod
    def site(cls, p: Planning, accel: domain.Accelerator | None, name: str, provisioning: str) -> dict[str, Any]:
        """Vertex AI's capacity rules, the GPU's end of support, the job's region (checked against Google's
        locations table), the reservation and the cluster."""
        assert accel is not None
        options = p.options
        if options.max_wait is not None and provisioning != "flex-start":
            raise UserError("--max-wait on Vertex AI bounds a flex-start job's wait for its resources: add "
                            "--provisioning flex-start (or drop --max-wait)")
        if provisioning == "flex-start" and (accel.kind != "gpu" or accel.gpu is None
                                             or accel.gpu.short not in domain.VERTEX_FLEX_GPUS):
            raise UserError(f"--provisioning flex-start on Vertex AI takes L4, A100, H100, H200 or B200 GPUs, not "
                            f"{accel.name} (cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws); use "
                            "--provisioning spot, or --target tpu-vm for a TPU")
        p.say(domain.check_end_of_support(accel, p.today))
        outputs = cls.outputs(p)
        project = outputs.require("project")
        region = options.region or outputs.require("region", "pass --region")
        p.say(domain.check_accelerator_region(accel, region))
        if accel.tpu is not None and accel.tpu.vertex is not None and accel.tpu.vertex.multi_host:
            other = "; --target tpu-vm runs the same slice as TPU VMs" if accel.tpu.tpu_vm else ""
            how = ("the trainer finds the slice from Vertex AI's TPU_CONFIG on every VM. Google documents TensorFlow "
                   "on a Vertex AI TPU Pod only with its tf-tpu-pod-base image" if p.backend == "tensorflow" else
                   "the trainer joins them with jax.distributed.initialize(), which reads the slice's hosts itself")
            p.say(f"note: {accel.name} is one Vertex AI replica on {accel.tpu.vertex.vms} TPU VMs; {how}, and tpuctl "
                  f"has not run its own image on one{other}")
        if options.reservation is not None:
            reservation = domain.Reservation(options.reservation)
            if not reservation.any and reservation.zone is None:
                raise UserError(f"--reservation {options.reservation}: Vertex AI needs the reservation's full name, "
                                f"projects/{project}/zones/ZONE/reservations/{options.reservation} (ZONE in "
                                f"{region}), or `any`")
            if reservation.zone is not None and reservation.zone.rsplit("-", 1)[0] != region:
                raise UserError(f"--reservation {options.reservation} is in {reservation.zone}, not in the job's "
                                f"region {region}: pass --region {reservation.zone.rsplit('-', 1)[0]}")
        return {"region": region, "cluster": _cluster(options),
                **({"wait": options.wait} if "wait" in type(options).model_fields else {})}

    @classmethod
    def log_source(cls, record: dict[str, Any], name: str, project: str | None, host: int | None) -> logs.Source:
        """Where a job's lines are (Cloud Logging, the job's entries; ``host``: one replica's)."""
        if not (record.get("job") and project):
            raise logs.no_source(record, name)
        return logs.vertex_source(project, record["job"], host)

    @classmethod
    def environment(cls, p: Planning, accel: domain.Accelerator | None, name: str, program: tuple[str, ...],
                    model_dir: str) -> dict[str, str]:
        """The TPU runtime's variables (Vertex AI sets the AIP_* folders itself from the base output directory).
        One VM: the TPU is attached to the host it runs on. Several VMs (a Pod, v5e 4x4 and up): no TPU_NAME, the
        trainer resolves the slice from Vertex AI's TPU_CONFIG (trainer.cluster.parse_vertex_tpu)."""
        if accel is None or accel.tpu is None:
            return {}
        env = {} if accel.tpu.vertex is not None and accel.tpu.vertex.multi_host else {"TPU_NAME": "local"}
        return {**env, **domain.tpu_runtime_env(accel.tpu.generation, p.backend)}


def _cluster(options: Any) -> str | None:
    """--cluster NAME: a persistent resource's id (Google's rule), and what it rules out: the cluster's machines are
    already there, so no provisioning model or reservation of the job's own."""
    if options.cluster is None:
        return None
    if not domain.CLUSTER_ID.fullmatch(options.cluster):
        raise UserError(f"--cluster {printable(options.cluster, 80)!r}: a cluster's name is 1-63 lowercase letters, "
                        "digits and '-', starting with a letter (`tpuctl cluster ls` lists them)")
    for flag_name, given in (("--spot", options.spot), ("--provisioning", options.provisioning),
                             ("--reservation", options.reservation), ("--max-wait", options.max_wait)):
        if given:
            raise UserError(f"--cluster {options.cluster} runs on the cluster's own machines; {flag_name} asks for "
                            "other capacity: drop one of them")
    if options.budget is not None:
        raise UserError(f"--budget bounds what a job costs; a job on --cluster {options.cluster} is not charged "
                        "separately (the cluster is billed while it runs): drop --budget")
    return options.cluster


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


def worker_pool_specs(spec: VertexRun) -> list[dict[str, Any]]:
    """Pool 0: the chief (one replica). With --workers N, pool 1: N-1 identical workers; with parameter servers,
    pool 1 holds the --workers workers and pool 2 the ps replicas (Vertex sets TF_CONFIG "chief" / "worker" / "ps"
    for pools 0 / 1 / 2: cloud.google.com/vertex-ai/docs/training/distributed-training#cluster-spec-format, checked
    2026-11-22). Every pool runs the same arguments and environment."""
    assert spec.accelerator is not None
    env = [{"name": k, "value": v} for k, v in sorted(spec.env.items())]
    if spec.command:       # the user's program instead of the image's entrypoint (python -m trainer.task)
        code = {"container_spec": {"image_uri": spec.image, "command": list(spec.command), "env": env}}
    else:
        code = {"container_spec": {"image_uri": spec.image, "args": spec.argv, "env": env}}
    machine = machine_spec(spec.accelerator)
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


def reservation_affinity(spec: VertexRun) -> dict[str, Any] | None:
    """``MachineSpec.reservation_affinity`` of --reservation (ground/domain/capacity.py): ANY_RESERVATION, or
    SPECIFIC_RESERVATION keyed ``compute.googleapis.com/reservation-name`` with the reservation's full name."""
    if spec.reservation is None:
        return None
    reservation = domain.Reservation(spec.reservation)
    if reservation.any:
        return {"reservation_affinity_type": "ANY_RESERVATION"}
    return {"reservation_affinity_type": "SPECIFIC_RESERVATION", "key": domain.VERTEX_RESERVATION_KEY,
            "values": [reservation.vertex_value()]}


def scheduling(spec: VertexRun):
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


def build_custom_job(spec: VertexRun):
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


def check_quota(spec: VertexRun, *, client=None, echo: Echo = _silent) -> int | None:
    """The run's quota pre-flight (before anything is built): raise ``UserError`` when the region's Vertex AI quota
    for the accelerator (its Spot quota with Spot) is below what the job's replicas need (GPUs, or TPU cores).
    Returns the limit, or None when there was nothing to check or it could not be read: then a note says why and
    the job goes on (Vertex AI enforces the quota). A job on a cluster or a reservation is not checked.

    Flex-start: the preemptible quota is read too, and a shortfall is a note, not a refusal: Google says flex-start
    draws on Vertex AI's preemptible quota for inference (vertex-ai/docs/predictions/use-flex-start-vms, read
    2026-11-27) but its training page (vertex-ai/docs/training/schedule-jobs-dws) names no quota."""
    accel = spec.accelerator
    assert accel is not None
    if spec.cluster is not None:
        echo(f"note: quota check skipped: the job runs on cluster {spec.cluster}'s machines, already provisioned")
        return None
    if spec.reservation is not None:
        echo("note: quota check skipped: a job on a reservation uses reserved capacity (tpuctl does not read "
             "reservations; Vertex AI checks it)")
        return None
    need = domain.job_quota_need(accel, spec.workers, spot=spec.preemptible_quota)
    if need is None:
        return None
    metric, units = need
    project, region = spec.project, spec.region
    try:
        got = quotas.preflight_limit(lambda c: quotas.quota_info_for_metric(project, metric, c), region,
                                     client=client, echo=echo)
    except DomainError as exc:          # no quota of the service has the metric: the catalogue is wrong
        fact = domain.unverified_metric_fact(metric)
        if fact is None:
            raise UserError(str(exc), 1) from None
        # a metric no Google page confirmed: not grounds to stop a job Vertex AI may well accept
        echo(f"note: quota check skipped: {exc} (tpuctl's metric is unverified: {fact}; Vertex AI enforces the "
             "quota itself)")
        return None
    if got is None:
        return None
    info, limit = got
    if 0 <= limit < units:   # -1: unlimited
        short = (f"Vertex AI quota {info.quota_id} ({metric}) in {region} is {limit}, the job needs {units}; "
                 + quotas.vertex_quota_fix(project, region, accel, metric, info.quota_id, units))
        if spec.flex_start:
            echo(f"note: {short} (a flex-start training job may draw on it: Google documents the preemptible quota "
                 "for flex-start inference only; the job is submitted and Vertex AI decides)")
            return limit
        raise UserError(short, 1)
    return limit


def check_cluster(spec: VertexRun, *, api=None, echo: Echo = _silent) -> None:
    """--cluster NAME: the cluster exists and has a pool of the job's machine (``check_cluster_for_run``); without
    credentials (an offline dry run) a note."""
    if spec.cluster is None:
        return
    assert spec.accelerator is not None
    if api is None and (why := clients.missing_credentials("vertex")):
        echo(f"note: cluster {spec.cluster} not checked: {why}")
        return
    check_cluster_for_run(spec.project, spec.region, spec.cluster, machine_spec(spec.accelerator), api=api,
                          echo=echo)


def require_image(spec: VertexRun, image_exists: Callable[[str], bool] | None = None) -> None:
    """The trainer image tpuctl builds must exist (else the one command that builds it is the error); an image
    tpuctl did not build (--image) is Vertex AI's to find."""
    ref = images.parse_uri(spec.image)
    if ref is None:
        return
    exists = image_exists(spec.image) if image_exists else images.tag_exists(ref)
    if not exists:
        raise UserError(f"the trainer image {spec.image} is not built yet: run `tpuctl image build --variant "
                        f"{ref.variant} --project {ref.project} --region {ref.region} --repository {ref.repository}` "
                        "(or with --stack), then train again")


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
class VertexTarget(VertexPlanning):
    """A planned CustomJob. The report's ``note`` takes the pre-flight and progress lines, ``say`` the job's name
    and console page, ``display`` the chief's progress read back from Cloud Logging. ``image_exists``, ``prices``,
    ``cluster_api`` and ``sleep`` are there for tests."""

    spec: VertexRun
    report: Report = field(default_factory=Report)
    image_exists: Callable[[str], bool] | None = None
    prices: Any = None
    #: the PersistentResourceService client --cluster is checked with (tests; default: the regional one)
    cluster_api: Any = None
    sleep: Callable[[float], None] = time.sleep
    custom_job: Any = None
    estimate: Any = None
    #: the run's record could not be written once (said in one note): not tried again
    unrecorded: bool = False
    display: Any = None

    def __post_init__(self) -> None:
        if self.display is None and self.spec.wait:
            self.display = self.report.new_display()

    @property
    def note(self) -> Echo:
        return self.report.note

    @property
    def say(self) -> Echo:
        return self.report.say

    def preflight(self) -> None:
        """The quota pre-flight, then the request and its cost estimate (refused over --budget): before anything
        is built or uploaded."""
        check_quota(self.spec, echo=self.note)   # offline: a note
        check_cluster(self.spec, api=self.cluster_api, echo=self.note)
        self.custom_job = build_custom_job(self.spec)
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
        require_image(self.spec, self.image_exists)
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
        if not self.spec.wait:
            return Outcome(self.name, created.name, SUBMITTED, outputs, console_url=created.console_url)
        with self._progress_from_logs(created.name):
            final = follow_job(created.client, created.name, poll_seconds=self.spec.poll_seconds, echo=self.say,
                               sleep=self.sleep)
        self._record(final)
        state = state_name(final)
        if state == "JOB_STATE_SUCCEEDED":
            return self._completed(created)
        detail = f": {final.error.message}" if final.error.message else ""
        return Outcome(self.name, created.name, FAILED, outputs, console_url=created.console_url,
                       error=f"job {created.name} ended in {state}{detail} ({created.console_url})")


    def _completed(self, created: SubmittedJob) -> Outcome:
        """A job Vertex AI says SUCCEEDED: the bundled trainer's run finished only when its chief wrote the completion
        record (result.json in the model folder; a plug-in that ended the process with status 0 leaves none): its
        result, else the run FAILED. The user's own program (--command) has no such record: the job's state is all.
        A record that cannot be read at all is said in a note and the job's state stands."""
        outputs = self.spec.model_dir
        if self.spec.command:
            return Outcome(self.name, created.name, SUCCEEDED, outputs, console_url=created.console_url)
        try:
            storage = clients.storage_client(self.spec.project)
            result = read_result(storage, outputs)
            problem = completion_problem(storage, result, self.spec) if result is not None else None
        except UserError as exc:
            self.note(f"note: the job succeeded; its completion record could not be read: {exc}")
            return Outcome(self.name, created.name, SUCCEEDED, outputs, console_url=created.console_url)
        if result is None:
            return Outcome(self.name, created.name, FAILED, outputs, console_url=created.console_url,
                           error=f"job {created.name} ended in JOB_STATE_SUCCEEDED but the trainer left no completion "
                                 f"record ({outputs}/{RESULT_FILE}): it did not finish training (its logs say why: "
                                 f"`tpuctl logs {self.spec.name}`)")
        if problem is not None:
            return Outcome(self.name, created.name, FAILED, outputs, console_url=created.console_url,
                           error=f"job {created.name} ended in JOB_STATE_SUCCEEDED but the trainer's completion record "
                                 f"({outputs}/{RESULT_FILE}) does not stand ({problem}): the run did not finish as "
                                 f"recorded (its logs say what ran: `tpuctl logs {self.spec.name}`)")
        return Outcome(self.name, created.name, SUCCEEDED, outputs, result=result, console_url=created.console_url)

    def _progress_from_logs(self, job_name: str):
        """While the job runs, its chief's log lines drive the display (``logs.LogFeed``); nothing without one."""
        if self.display is None:
            return contextlib.nullcontext()
        return logs.LogFeed(logs.vertex_source(self.spec.project, job_name, host=0), logs.feed_display(self.display),
                            self.note, interval=min(self.spec.poll_seconds, 5.0), since=time.time() - 60)

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

def check_cluster_name(name: str) -> str:
    if not domain.CLUSTER_ID.fullmatch(name):
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
                          echo: Echo = _silent) -> None:
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
