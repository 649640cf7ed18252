"""One training run, one shape: ``RunSpec``, and ``plan``, the one planner that makes it from the run flags and the
stack's outputs.

Everything a run is, whatever its target, is derived here once: its name, data and model folders, accelerator and
distribution strategy, workers and parameter servers, the trainer's command line (``trainer.flags.TrainerArgs``),
its environment (``TF_USE_LEGACY_KERAS``, ``TFHUB_CACHE_DIR``, the TPU runtime), labels, identity, image, Spot and
recovery, budget and time bounds. Each target then turns the spec into its own request: the local processes
(``runs.local``), a Vertex AI CustomJob (``runs.vertex``), a queued resource of TPU VMs (``runs.tpuvm``), or a
search of trials (``runs.tuning``). Nothing is created here, but a local run's fresh folder (claimed by making it,
so two runs started in the same second never share one; ``claim=False`` for a dry run).
"""

from __future__ import annotations

import datetime
import re
import shlex
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cloud import clients
from cloud.google import aiplatform_v1, tpu_v2
from ground import domain
from ground.envs import REPO_ROOT
from ground.errors import UserError
from ground.files import printable
from ground.outputs import StackOutputs, require_outputs
from ground.storagepath import GsPath, cloud_folder, is_gs, normalized
from tpuctl.services import image as images
from tpuctl.services import usercode
from tpuctl.services.data import demo_data_dir, local_folder
from tpuctl.services.runs.flags import (
    MAX_BUDGET_USD,
    MAX_PARAMETER_SERVERS,
    MAX_RECOVERIES,
    MAX_RUN_TIME,
    MAX_WAIT,
    MAX_WORKERS,
    MIN_RUN_TIME,
    MIN_WAIT,
    RunFlags,
)
from tpuctl.services.runs.records import RESULT_FILE, LaunchRecord
from tpuctl.services.trainer_package import sdist_filename
from trainer.flags import HPARAM_PREFIX, TrainerArgs, flag_value, is_plugin_ref

Echo = Callable[[str], None]

#: How long a TPU VM slice may wait to become ACTIVE in one zone, and train in all, unless the flags say otherwise;
#: a Vertex AI job runs at most Google's documented default timeout (7 days) unless --max-run-time says less.
DEFAULT_MAX_WAIT = timedelta(hours=2)
DEFAULT_TPU_VM_RUN_TIME = timedelta(hours=24)
DEFAULT_VERTEX_RUN_TIME = timedelta(days=7)

#: Where a run's project folder (--code) is in the image it ships in (container/Dockerfile.code).
CODE_DIR_IN_IMAGE = "/opt/tpuctl/code"

_LOCAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_CLOUD_NAME = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")


class RunSpec(BaseModel):
    """A training run, planned (frozen; written as the run's plan record and read back by ``tpu attach``)."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    target: Literal["local", "vertex", "tpu-vm"]
    #: the run's name: its folder ``runs/NAME``, the Vertex AI job's display name, the TPU VM queued resource
    name: str = Field(max_length=128)
    #: the catalogue's name of the accelerator (``gpu-t4x2``, ``tpu-v5e-8``; a TPU VM slice's Cloud TPU API type,
    #: ``v5litepod-16``); None: locally, whatever the machine has
    accelerator: str | None = None
    workers: int = Field(1, ge=1, le=MAX_WORKERS)
    parameter_servers: int = Field(0, ge=0, le=MAX_PARAMETER_SERVERS)
    #: the trainer's command line (``trainer.flags.TrainerArgs``: ``--data_dir``, ``--model_dir`` …)
    trainer: TrainerArgs
    #: the user's own program (--command), run instead of the trainer on every worker; () for the trainer
    command: tuple[str, ...] = ()
    #: the user's project folder on this machine (--code): plug-ins are imported from it, --command runs in it, and
    #: a cloud run ships it in its image (at CODE_DIR_IN_IMAGE)
    code: str | None = None
    #: the trainer's environment on every worker (besides TF_CONFIG, which each target sets per worker)
    env: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    project: str | None = None
    region: str | None = None
    zone: str | None = None
    service_account: str | None = None
    #: the container image the workers run (Vertex AI, TPU VM): the trainer's own, the user's (--image), or Google's
    #: prebuilt TensorFlow image the trainer package runs on (``python_package``)
    image: str | None = None
    python_package: bool = False
    #: where the trainer package is staged (``python_package``)
    package_uri: str | None = None
    spot: bool = False
    #: how the accelerators are obtained, as asked (``--provisioning``, or ``spot`` for --spot); None: not asked
    #: (on-demand, and nothing about it in the request)
    provisioning: domain.Provisioning | None = None
    #: ``--reservation``: ``any`` or a reservation's name (or its full name), None: no reservation asked for
    reservation: str | None = Field(None, max_length=200)
    #: Vertex AI: the persistent resource (``tpuctl cluster``) the job runs on (``persistent_resource_id``)
    cluster: str | None = None
    #: TPU VM: Autocheckpoint requested (--autocheckpoint, on a generation that offers it: v2alpha1's node field)
    autocheckpoint: bool = False
    recover: int = Field(0, ge=0, le=MAX_RECOVERIES)
    #: TPU VM: the zones a preempted slice may be re-queued in after ``zone`` (quota pre-flight still to come)
    zones: tuple[str, ...] = Field((), max_length=100)
    #: the bounds of the flags that set them (a run plan read back from a bucket is held to them too)
    budget: float | None = Field(None, gt=0, le=MAX_BUDGET_USD, allow_inf_nan=False)
    max_run_time: timedelta | None = Field(None, ge=MIN_RUN_TIME, le=MAX_RUN_TIME)
    max_wait: timedelta | None = Field(None, ge=MIN_WAIT, le=MAX_WAIT)
    keep: bool = False
    #: locally: the demo dataset (made before the first run) is the data
    demo_data: bool = False
    #: locally: this plan made the (empty) run folder; it is removed again if the run leaves it empty
    claimed: bool = False

    @property
    def data_dir(self) -> str | None:
        return self.trainer.data_dir

    @property
    def model_dir(self) -> str:
        return self.trainer.model_dir

    @property
    def argv(self) -> list[str]:
        """``python -m trainer.task`` arguments, as every worker runs them (``command`` runs instead when set)."""
        return self.trainer.argv()

    @property
    def plugin(self) -> bool:
        """The bundled trainer runs the user's model or dataset function (trainer.plugin)."""
        return is_plugin_ref(self.trainer.model) or self.trainer.dataset is not None

    @property
    def program(self) -> list[str]:
        """What every worker runs: the user's command, or the trainer's arguments (after the image's entrypoint,
        ``python -m trainer.task``)."""
        return list(self.command) if self.command else self.argv

    @property
    def accel(self) -> domain.Accelerator | None:
        """Local and Vertex AI: the accelerator (None locally: auto-detect)."""
        return domain.parse_accelerator(self.accelerator) if self.accelerator and self.target != "tpu-vm" else None

    @property
    def slice(self) -> domain.TpuSlice:
        """TPU VM: the slice."""
        return domain.parse_tpu_vm_accelerator(self.accelerator or "")

    @property
    def location(self) -> str | None:
        """Where the run's cloud resources live: the TPU VM zone, the Vertex AI region."""
        return self.zone if self.target == "tpu-vm" else self.region

    @property
    def parent(self) -> str:
        if self.target == "tpu-vm":
            return tpu_v2.TpuClient.common_location_path(self.project, self.location)
        return aiplatform_v1.JobServiceClient.common_location_path(self.project, self.location)

    @property
    def run_time(self) -> timedelta:
        """The bound of the run's time (and of its cost estimate)."""
        if self.max_run_time is not None:
            return self.max_run_time
        return DEFAULT_TPU_VM_RUN_TIME if self.target == "tpu-vm" else DEFAULT_VERTEX_RUN_TIME

    @property
    def flex_start(self) -> bool:
        return self.provisioning == "flex-start"

    @property
    def preemptible_quota(self) -> bool:
        """Whether the run draws on the preemptible (Spot) quota: Spot, and flex-start where Google says so (Cloud
        TPU: request-using-flex-start; Vertex AI training: see ``bootstrap.quotas``)."""
        return self.spot or self.flex_start

    @property
    def wait_limit(self) -> timedelta:
        return self.max_wait or DEFAULT_MAX_WAIT

    def launch_record(self, **times: Any) -> LaunchRecord:
        """What ``runs ls`` reads of the run (``started``/``finished`` seconds since 1970, ``state``)."""
        return LaunchRecord(target=self.target, name=self.name, accelerator=self.accelerator or "auto",
                            workers=self.workers, parameter_servers=self.parameter_servers or None, args=self.program,
                            **{k: v for k, v in times.items() if v is not None})

    @property
    def resume_hint(self) -> str:
        """How to continue this run after an interruption: the same command with its name."""
        return f"run the same command again with --name {self.name}"


def timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def default_name(target: str, command: str = "train") -> str:
    """A run's name when --name is not given: ``<timestamp>`` locally, ``tpuctl-<timestamp>`` in the cloud (Google's
    names start with a letter); a search's: ``tune-<timestamp>``, ``tpuctl-tune-<timestamp>``."""
    stem = f"tune-{timestamp()}" if command == "tune" else timestamp()
    return stem if target == "local" else f"tpuctl-{stem}"


def check_name(name: str, target: str) -> str:
    """One name rule per target: a folder name locally (letters, digits, . _ -, at most 63); in the cloud Google's
    rule for a queued resource / job name (lowercase letters, digits and '-', a letter first, at most 63)."""
    if target == "local":
        if not _LOCAL_NAME.fullmatch(name):
            raise UserError(f"--name {printable(name, 80)!r}: use 1-63 letters, digits, '.', '_' or '-', starting "
                            "with a letter or digit (it becomes the folder runs/NAME)")
    elif not _CLOUD_NAME.fullmatch(name):
        raise UserError(f"--name {printable(name, 80)!r}: on {target} use 1-63 lowercase letters, digits and '-', "
                        "starting with a letter and not ending with '-' (it names the run's folder and its cloud "
                        "resources)")
    return name


def strategy(target: str, accel: domain.Accelerator | None, workers: int, parameter_servers: int) -> str:
    """The trainer's --distribution_strategy, the same rule for every target."""
    if target == "tpu-vm":
        return "tpu"
    if parameter_servers:
        return "parameter_server"
    if workers > 1:
        return "multi_worker"
    return accel.strategy if accel is not None else "auto"


# --------------------------------------------------------------------------------------------------- the planner

def plan(flags: RunFlags, outputs: StackOutputs | None, *, command: str = "train", claim: bool = True,
         echo: Echo | None = None, today: datetime.date | None = None, root: Path = REPO_ROOT) -> RunSpec:
    """The run the flags ask for, every input checked before anything exists (see the module docstring).
    ``command``: train or tune (a search's name and labels); ``claim``: make a local run's fresh folder (not for a
    dry run)."""
    target = flags.target
    cloud = target != "local"
    name = check_name(flags.name or default_name(target, command), target)
    accelerator, accel, tpu = _accelerator(flags)
    provisioning = _provisioning(flags, accel, tpu)
    _check_combination(flags, accel, tpu)       # what the flags alone rule out, before the stack is asked
    if target == "vertex" and accel is not None:
        _say(echo, domain.check_end_of_support(accel, today or datetime.date.today()))
    if cloud:
        outputs = require_outputs(outputs, f"--target {target}")
    project = outputs.require("project") if cloud and outputs is not None else None
    region = zone = None
    if target == "vertex":
        assert outputs is not None and accel is not None
        region = flags.region or outputs.require("region", "pass --region")
        _say(echo, domain.check_accelerator_region(accel, region))
        if accel.tpu is not None and accel.tpu.vertex is not None and accel.tpu.vertex.multi_host:
            other = "; --target tpu-vm runs the same slice as TPU VMs" if accel.tpu.tpu_vm else ""
            _say(echo, f"note: {accel.name} is one Vertex AI replica on {accel.tpu.vertex.vms} TPU VMs; the trainer finds "
                       "the slice from Vertex AI's TPU_CONFIG on every VM. Google documents TensorFlow on a Vertex AI "
                       f"TPU Pod only with its tf-tpu-pod-base image, and tpuctl has not run its own image on one{other}")
    elif target == "tpu-vm":
        assert outputs is not None
        zone = flags.zone or stack_zone(outputs) or outputs.require("tpu_zone", "pass --zone (e.g. us-central1-a)")
        domain.validate_tpu_vm_zone(zone)
        assert tpu is not None
        offered = domain.TPU_FLEX_ZONES.get(tpu.generation, ())
        if provisioning == "flex-start" and zone not in offered:
            _say(echo, f"note: Google lists TPU flex-start for {tpu.generation} only in "
                       f"{', '.join(offered) or 'no zone'} (cloud.google.com/tpu/docs/request-using-flex-start, read "
                       f"2026-11-27); the Cloud TPU API refuses it where it is not offered")

    reservation, cluster = _reservation(flags, project, region, zone), _cluster(flags)

    program = _command(flags)
    code = _code(flags, program)
    if (flags.dataset or program) and not flags.data_dir:
        data_dir, demo = None, False      # the user's code reads its own data: no default folder
    else:
        data_dir, demo = _data_dir(flags, outputs)
    hub_cache = flags.hub_cache_dir or (outputs.tfhub_cache_dir if outputs else None)
    if hub_cache and cloud:
        hub_cache = gs_folder(hub_cache, "--hub-cache-dir", "read hub models from", target)
    model = "hub" if flags.hub_handle and flags.model is None else flags.model
    if flags.hub_handle and model != "hub":
        raise UserError(f"--hub-handle only applies to --model hub (got --model {model})")
    if model == "hub" and not flags.hub_handle:
        raise UserError("--model hub needs --hub-handle (a TF-Hub/Kaggle handle or a local SavedModel path)")
    local_search = command == "tune" and target == "local"
    if local_search and (flags.workers != 1 or flags.parameter_servers):
        raise UserError("local tuning runs one process per trial: drop --workers / --parameter-servers")
    plugin = is_plugin_ref(model) or flags.dataset is not None
    # the same labels on every cloud target (the job, the queued resource); the accelerator in tpuctl's words
    labels = {**(outputs.labels if outputs else {}), "tpuctl-command": command,
              "accelerator": _label(tpu.vertex_name if tpu is not None else accelerator or "auto"),
              "model": _label("command" if program else (model or "small_cnn").rsplit(":", 1)[-1]),
              domain.TPU_VM_MANAGED_LABEL[0]: domain.TPU_VM_MANAGED_LABEL[1],
              domain.TPU_VM_RUN_LABEL: _label(name)}
    if provisioning == "flex-start":    # the v2 API tpuctl reads slices with has no field for it (`tpu list`)
        labels[domain.PROVISIONING_LABEL] = provisioning
    domain.validate_labels(labels)
    service_account = image = package_uri = None
    if cloud:
        assert outputs is not None
        service_account = outputs.training_service_account or outputs.principals.get(domain.TRAINING_SA_KEYWORD)
        image, package_uri = _image(flags, outputs, accel, target, region, name, today, echo, root,
                                    code if (plugin or program) else None)

    # last: the one thing a plan may create
    model_dir, claimed = _model_dir(flags, outputs, name, claim=claim, local_only=local_search)
    code_dir = (code if target == "local" else CODE_DIR_IN_IMAGE) if plugin and code is not None else None
    hparams = tuple(a for pair in flags.hparam for a in (f"--{HPARAM_PREFIX}{pair.split('=', 1)[0]}",
                                                         pair.split("=", 1)[1]))
    trainer = TrainerArgs(
        data_dir=data_dir, model_dir=model_dir,
        distribution_strategy=strategy(target, accel, flags.workers, flags.parameter_servers),
        num_gpus=accel.gpu_count if accel is not None and accel.kind == "gpu" else None,
        model=model, dataset=flags.dataset, code_dir=code_dir, hub_handle=flags.hub_handle,
        train_epochs=flags.epochs, train_batch_size=flags.batch_size,
        extra=(*hparams, *(("--profile_steps", flags.profile_steps) if flags.profile_steps else ()),
               *flags.trainer_args))

    env = {"TF_USE_LEGACY_KERAS": "1"}
    if program:
        # Vertex AI's output folders (CustomJobSpec.base_output_directory: <base>/model/, <base>/checkpoints/,
        # <base>/logs/), set for the user's program on every target; on Vertex AI the service sets them itself
        env.update({"AIP_MODEL_DIR": f"{model_dir}/model/", "AIP_CHECKPOINT_DIR": f"{model_dir}/checkpoints/",
                    "AIP_TENSORBOARD_LOG_DIR": f"{model_dir}/logs/"})
    if hub_cache:
        env["TFHUB_CACHE_DIR"] = hub_cache
    if accel is not None and accel.tpu is not None:
        # Vertex AI, one VM: the TPU is attached to the host it runs on. Several VMs (a Pod, v5e 4x4 and up): no
        # TPU_NAME, the trainer resolves the slice from Vertex AI's TPU_CONFIG (trainer.cluster.parse_vertex_tpu)
        if accel.tpu.vertex is None or not accel.tpu.vertex.multi_host:
            env["TPU_NAME"] = "local"
        env.update(domain.tpu_runtime_env(accel.tpu.generation))
    if tpu is not None:        # one host: the TPU is attached to this VM; several: the slice's node name
        env["TPU_NAME"] = name if tpu.multi_host else "local"
        env.update(domain.tpu_runtime_env(tpu.generation))

    return RunSpec(
        target=target, name=name, accelerator=accelerator, workers=flags.workers,
        parameter_servers=flags.parameter_servers, trainer=trainer, command=program,
        code=code if (plugin or program) else None, env=env, labels=labels, project=project,
        region=region, zone=zone, service_account=service_account, image=image, python_package=flags.python_package,
        package_uri=package_uri, spot=provisioning == "spot",
        provisioning=flags.provisioning or ("spot" if flags.spot else None),
        reservation=reservation, recover=flags.recover, cluster=cluster,
        autocheckpoint=flags.autocheckpoint and tpu is not None and tpu.generation in domain.AUTOCHECKPOINT_GENERATIONS,
        zones=_zones(flags, zone),
        budget=flags.budget, max_run_time=flags.max_run_time, max_wait=flags.max_wait, keep=flags.keep,
        demo_data=demo, claimed=claimed)


def _say(echo: Echo | None, line: str | None) -> None:
    if line and echo is not None:
        echo(line)


def _accelerator(flags: RunFlags) -> tuple[str | None, domain.Accelerator | None, domain.TpuSlice | None]:
    """(catalogue name, Accelerator for local/Vertex AI, TpuSlice for TPU VM)."""
    if flags.target == "tpu-vm":
        if not flags.accelerator:
            raise UserError("--target tpu-vm needs --accelerator, e.g. tpu-v5e-8 (one host) or tpu-v5e-16 (a "
                            "multi-host slice)")
        tpu = domain.parse_tpu_vm_accelerator(flags.accelerator)
        return tpu.name, None, tpu
    if flags.accelerator is None and flags.target == "local":
        return None, None, None
    accel = domain.parse_accelerator(flags.accelerator or "cpu")
    return accel.name, accel, None


def _check_combination(flags: RunFlags, accel: domain.Accelerator | None, tpu: domain.TpuSlice | None) -> None:
    """What no target can do, refused the same way on every target."""
    on_tpu = tpu is not None or (accel is not None and accel.kind == "tpu")
    name = tpu.name if tpu is not None else (accel.name if accel is not None else "")
    if on_tpu and flags.workers > 1:
        more = ("the slice's hosts are the workers: pick a larger slice, e.g. tpu-v5e-16" if tpu is not None else
                "a Vertex AI TPU job is one replica (its VMs are the workers): pick a larger TPU, e.g. tpu-v5e-16")
        raise UserError(f"--workers {flags.workers} cannot be combined with {name}: {more}")
    if on_tpu and flags.parameter_servers:
        raise UserError(f"--parameter-servers cannot be combined with {name}: TPUStrategy runs one process per host")
    if flags.recover and not (flags.spot or flags.provisioning in ("spot", "flex-start")):
        raise UserError("--recover needs --spot or --provisioning flex-start (it re-queues a preempted Spot slice, "
                        "or a flex-start slice still waiting after --max-wait)")
    if flags.zones and not flags.recover:
        raise UserError("--zones needs --recover N (the zones a preempted slice may be re-queued in)")
    for flag, option in (("data_dir", "--data-dir"), ("model_dir", "--model-dir")):
        if flag_value(flags.trainer_args, flag) is not None:
            raise UserError(f"--{flag} after `--`: tpuctl sets it; use {option}")
    for flag, option, given in (("train_epochs", "--epochs", flags.epochs), ("train_batch_size", "--batch-size",
                                flags.batch_size), ("model", "--model", flags.model),
                                ("hub_handle", "--hub-handle", flags.hub_handle),
                                ("profile_steps", "--profile-steps", flags.profile_steps)):
        if given is not None and flag_value(flags.trainer_args, flag) is not None:
            raise UserError(f"give {option} or --{flag} after `--`, not both")
    if flags.budget is not None and flags.keep:
        raise UserError("--budget cannot bound a slice kept with --keep (it is billed until `tpuctl tpu delete`)")


def _provisioning(flags: RunFlags, accel: domain.Accelerator | None, tpu: domain.TpuSlice | None) -> str:
    """--provisioning (--spot is --provisioning spot), and what each model rules out, in one line each."""
    if flags.spot and flags.provisioning not in (None, "spot"):
        raise UserError(f"--spot is --provisioning spot: give one of --spot and --provisioning {flags.provisioning}")
    provisioning = flags.provisioning or ("spot" if flags.spot else "on-demand")
    if flags.target == "local" and (flags.provisioning or flags.reservation or flags.cluster):
        raise UserError("--provisioning, --reservation and --cluster are for cloud runs: add --target vertex (or "
                        "tpu-vm)")
    if flags.reservation is not None and provisioning != "on-demand":
        raise UserError(f"--reservation runs on reserved capacity; --provisioning {provisioning} asks for other "
                        "capacity: drop one of them")
    if flags.target == "vertex":
        if flags.max_wait is not None and provisioning != "flex-start":
            raise UserError("--max-wait on Vertex AI bounds a flex-start job's wait for its resources: add "
                            "--provisioning flex-start (or drop --max-wait)")
        if provisioning == "flex-start" and accel is not None and (
                accel.kind != "gpu" or accel.gpu is None or accel.gpu.short not in domain.VERTEX_FLEX_GPUS):
            raise UserError(f"--provisioning flex-start on Vertex AI takes L4, A100, H100, H200 or B200 GPUs, not "
                            f"{accel.name} (cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws); use "
                            "--provisioning spot, or --target tpu-vm for a TPU")
    return provisioning


def _cluster(flags: RunFlags) -> str | None:
    """--cluster NAME: a persistent resource's id (Google's rule), and what it rules out: the cluster's machines are
    already there, so no provisioning model or reservation of the job's own."""
    if flags.cluster is None:
        return None
    if not _CLOUD_NAME.fullmatch(flags.cluster):
        raise UserError(f"--cluster {printable(flags.cluster, 80)!r}: a cluster's name is 1-63 lowercase letters, "
                        "digits and '-', starting with a letter (`tpuctl cluster ls` lists them)")
    for flag, given in (("--spot", flags.spot), ("--provisioning", flags.provisioning),
                        ("--reservation", flags.reservation), ("--max-wait", flags.max_wait)):
        if given:
            raise UserError(f"--cluster {flags.cluster} runs on the cluster's own machines; {flag} asks for other "
                            "capacity: drop one of them")
    if flags.budget is not None:
        raise UserError(f"--budget bounds what a job costs; a job on --cluster {flags.cluster} is not charged "
                        "separately (the cluster is billed while it runs): drop --budget")
    return flags.cluster


def _reservation(flags: RunFlags, project: str | None, region: str | None, zone: str | None) -> str | None:
    """--reservation, checked against where the run goes: Vertex AI takes ``any`` or a reservation's full name in
    its region (the proto asks for "the full resource name"); a TPU VM slice a name, or a full name in its zone."""
    if flags.reservation is None:
        return None
    reservation = domain.Reservation(flags.reservation)
    if flags.target == "vertex":
        if not reservation.any and reservation.zone is None:
            raise UserError(f"--reservation {flags.reservation}: Vertex AI needs the reservation's full name, "
                            f"projects/{project}/zones/ZONE/reservations/{flags.reservation} (ZONE in {region}), "
                            "or `any`")
        if reservation.zone is not None and reservation.zone.rsplit("-", 1)[0] != region:
            raise UserError(f"--reservation {flags.reservation} is in {reservation.zone}, not in the job's region "
                            f"{region}: pass --region {reservation.zone.rsplit('-', 1)[0]}")
    elif flags.target == "tpu-vm":
        if reservation.zone is not None and reservation.zone != zone:
            raise UserError(f"--reservation {flags.reservation} is in {reservation.zone}, not in the slice's zone "
                            f"{zone}: pass --zone {reservation.zone}")
        if not reservation.any and flags.zones:
            raise UserError(f"--reservation {flags.reservation} is in one zone; --zones would re-queue the slice "
                            "elsewhere: drop --zones (or use --reservation any)")
    return flags.reservation


def stack_zone(outputs: StackOutputs | None) -> str | None:
    """The zone TPU VM slices default to: the stack's ``tpu_zone`` output, else its ``zone``."""
    return (outputs.tpu_zone or outputs.zone) if outputs else None


def _zones(flags: RunFlags, zone: str | None) -> tuple[str, ...]:
    """--zones as given, checked as names of zones in ``zone``'s region (its quota is checked at pre-flight)."""
    if not flags.zones:
        return ()
    region = (zone or "").rsplit("-", 1)[0]
    out: list[str] = []
    for other in flags.zones:
        if other == zone or other in out:
            continue
        domain.validate_tpu_vm_zone(other)
        if other.rsplit("-", 1)[0] != region:
            raise UserError(f"--zones {other} is not in {region} (the region of --zone {zone}); a slice's data and "
                            "backup stay in one region")
        out.append(other)
    return tuple(out)


def gs_folder(value: str, flag: str, what: str, target: str) -> str:
    """A ``gs://BUCKET/PATH`` folder a flag names for a cloud target (its bucket name checked), without a trailing
    slash."""
    verb, _, rest = what.partition(" ")
    who = f"a Vertex AI job {verb}s" if target == "vertex" else f"TPU VMs {verb}"
    return cloud_folder(value, flag, f"{who} {rest}")


def _data_dir(flags: RunFlags, outputs: StackOutputs | None) -> tuple[str, bool]:
    """(data folder, whether it is the demo dataset)."""
    data_dir = flags.data_dir or (outputs.bucket_url("data") if outputs else None)
    if flags.target != "local":
        if not data_dir:
            raise UserError("no training data: the stack has no data bucket; pass --data-dir gs://BUCKET/PATH")
        hint = "" if is_gs(data_dir) else (
            "; upload it with `tpuctl data make-tfrecords SRC gs://BUCKET/PATH` and pass that")
        try:
            return gs_folder(data_dir, "--data-dir", "read from", flags.target), False
        except UserError as exc:
            raise UserError(f"{exc}{hint}") from None
    if data_dir is None:
        return str(demo_data_dir()), True
    if is_gs(data_dir):
        return normalized(data_dir), False
    folder = local_folder(data_dir, "data folder", must_exist=False)
    if not folder.is_dir():
        raise UserError(f"data folder {printable(data_dir, 200)} does not exist (make one with `tpuctl data "
                        "make-tfrecords`)")
    return str(folder), False


def _model_dir(flags: RunFlags, outputs: StackOutputs | None, name: str, *, claim: bool,
               local_only: bool = False) -> tuple[str, bool]:
    """(the run's folder, whether this plan made it). Default ``<artifacts>/runs/NAME`` (cloud targets, and local runs
    of a stack), else ``./runs/NAME``; ``local_only`` (a local search: its trials lock their folders) always a local
    folder. A folder that holds a finished run is refused: training again there would start over at epoch 1 over
    its checkpoints; one that holds an interrupted run is continued (its backup)."""
    target = flags.target
    if flags.model_dir and flags.name:
        raise UserError("give --name or --model-dir, not both (--name NAME is the folder runs/NAME)")
    artifacts = outputs.bucket_url("artifacts") if outputs and not local_only else None
    if local_only and flags.model_dir and is_gs(flags.model_dir):
        raise UserError("local tuning writes its trials to a local folder; pass a local --model-dir (or tune in "
                        "Vertex AI with --target vertex)")
    if flags.model_dir:
        if target != "local":
            return gs_folder(flags.model_dir, "--model-dir", "write to", target), False
        if is_gs(flags.model_dir):
            return normalized(flags.model_dir), False
        folder = local_folder(flags.model_dir, "model folder", must_exist=False)
        refuse_finished(str(folder))
        return str(folder), False
    if target != "local" or artifacts:
        if not artifacts:
            assert outputs is not None
            outputs.require("buckets.artifacts", "pass --model-dir gs://BUCKET/PATH")
        return f"{artifacts}/runs/{name}", False
    base = Path("runs").resolve()
    if flags.name is None:       # a fresh timestamped folder, suffixed if taken
        if not claim:
            return str(base / name), False
        return claim_fresh_dir(base, name, "model folder"), True
    folder = base / name
    refuse_finished(str(folder))
    if folder.exists() or not claim:
        return str(folder), False          # an interrupted run: continued from its backup
    try:
        folder.mkdir(parents=True)
    except FileExistsError:                # made in the meantime by another run of the same name: continued
        return str(folder), False
    except OSError as err:
        raise UserError(f"cannot create the model folder {folder} ({err.strerror or err})") from None
    return str(folder), True


def refuse_finished(model_dir: str, storage=None) -> None:
    """A run folder (local, or gs:// read through ``storage``) with the trainer's result.json holds a finished run:
    refused, one line (training there again would start over at epoch 1 over its checkpoints)."""
    if is_gs(model_dir):
        result = GsPath.parse(model_dir).join(RESULT_FILE)
        with clients.google_errors(f"reading {model_dir}", forbidden=f"permission denied reading {model_dir}: you "
                                                                      "need storage.objects.get on the bucket"):
            done = storage.bucket(result.bucket).get_blob(result.path) is not None
    else:
        done = (Path(model_dir) / RESULT_FILE).exists()
    if done:
        raise UserError(f"{model_dir} holds a finished run ({RESULT_FILE}): training there again would start over at "
                        "epoch 1 over its checkpoints; pick another --name (or --model-dir)")


def claim_fresh_dir(parent: Path, stem: str, what: str) -> str:
    """``parent/<stem>``, suffixed ``-2``, ``-3``… if taken: a reused folder would resume its backup.

    The folder is claimed by creating it (``mkdir`` fails if it exists), so runs (or tunes) started in the same
    second never share one (checking for it first let three concurrent runs pick the same folder)."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create {parent} for the {what} ({err.strerror or err}); pass --model-dir") from None
    n = 1
    while True:
        candidate = parent / (stem if n == 1 else f"{stem}-{n}")
        try:
            candidate.mkdir()
            return str(candidate)
        except FileExistsError:
            n += 1
        except OSError as err:
            raise UserError(f"cannot create the {what} {candidate} ({err.strerror or err}); pass --model-dir") from None


def release(spec: RunSpec) -> None:
    """Remove the run folder the plan made if the run left it empty (nothing half-created)."""
    if spec.claimed:
        try:
            Path(spec.model_dir).rmdir()
        except OSError:
            pass  # not empty (the trainer wrote into it) or already gone


def _label(value: str) -> str:
    """A label value from a catalogue name (labels take lowercase letters, digits, '_' and '-')."""
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]


def _command(flags: RunFlags) -> tuple[str, ...]:
    """--command as the argv every worker runs (shell words; no shell runs it), and what it rules out."""
    if flags.command is None:
        return ()
    try:
        words = tuple(shlex.split(flags.command))
    except ValueError as exc:
        raise UserError(f"--command {printable(flags.command, 120)!r}: {exc} (quote it as a shell would)") from None
    if not words:
        raise UserError("--command is empty: give your program and its arguments, e.g. \"python train.py\"")
    trainer_only = [flag_name for flag_name, given in (
        ("--model", flags.model), ("--dataset", flags.dataset), ("--hparam", flags.hparam or None),
        ("--hub-handle", flags.hub_handle), ("--epochs", flags.epochs), ("--batch-size", flags.batch_size),
        ("--profile-steps", flags.profile_steps),
        ("flags after `--`", flags.trainer_args or None), ("--parameter-servers", flags.parameter_servers or None),
        ("--python-package", flags.python_package or None)) if given is not None]
    if trainer_only:
        raise UserError(f"--command runs your program; {trainer_only[0]} is the bundled trainer's: pass it to your "
                        "program in --command")
    return words


def _code(flags: RunFlags, command: tuple[str, ...]) -> str | None:
    """The user's project folder (--code, default the current folder) when the run needs one: a plug-in or a
    --command; checked (a folder, what ships from it) before anything is made."""
    plugin = is_plugin_ref(flags.model) or flags.dataset is not None
    if flags.code is not None and not (plugin or command):
        raise UserError("--code is your project folder for --model/--dataset functions or --command; give one of them")
    if flags.hparam and not plugin:
        raise UserError("--hparam is a hyperparameter of your --model/--dataset function; name the function")
    if not (plugin or command):
        return None
    folder = local_folder(flags.code or ".", "--code folder", must_exist=True)
    return str(usercode.scan_project(folder).root)


def _image(flags: RunFlags, outputs: StackOutputs, accel: domain.Accelerator | None, target: str,
           region: str | None, name: str, today: datetime.date | None, echo: Echo | None,
           root: Path, code: str | None = None) -> tuple[str, str | None]:
    """(the image the workers run, where the trainer package is staged with --python-package). With ``code`` (a
    plug-in or --command, no --image): the image of the trainer with the project folder layered on, tagged by the
    content of both (``tpuctl image build --code``)."""
    if target == "vertex" and flags.python_package:
        assert accel is not None
        staging = domain.bucket_name_from(outputs.require("buckets.staging", "the trainer package is staged there"))
        package_uri = f"gs://{staging}/tpuctl/packages/{name}/{sdist_filename()}"
        if flags.image is not None:
            return flags.image, package_uri
        training_image = domain.prebuilt_training_image(accel)
        check_availability(training_image, today or datetime.date.today(), echo)
        return training_image.uri(region), package_uri
    if flags.image is not None:
        return flags.image, None
    variant = "tpu" if target == "tpu-vm" else (accel.kind if accel is not None else "cpu")
    outputs.require("region", "it locates the trainer image; pass --image")
    if code is not None:
        if flags.python_package:
            raise UserError("--python-package ships the bundled trainer only; your code ships in an image: drop "
                            "--python-package (the image is `tpuctl image build --code DIR`)")
        project = usercode.scan_project(code)
        return images.code_image_ref(outputs, variant, project, region=region, root=root).uri, None
    return images.image_ref(outputs, variant, region=region, root=root).uri, None


def check_availability(training_image: domain.TrainingImage, today: datetime.date, echo: Echo | None = None) -> None:
    """Refuse a prebuilt image past its end of availability; warn within 90 days of it."""
    warning = domain.availability_warning(
        f"Vertex AI's prebuilt image {training_image.name}", training_image.end_of_availability, today,
        past="(jobs using it are rejected); drop --python-package to run the trainer's own image "
             "(`tpuctl image build`), or name an executor image with --image",
        soon="move to the trainer's own image (drop --python-package)")
    if warning and echo is not None:
        echo(warning)
