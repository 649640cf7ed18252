"""What every cloud target shares (Vertex AI, TPU VMs; a GKE target would too): ``CloudRun``, the fields of a run
in a Google Cloud project (its image, identity, capacity, time and money bounds), and ``CloudTarget``, the planning
hooks they share: Google's name rule, the stack's outputs, ``gs://`` folders, the trainer image, the capacity
flags. Each cloud target subclasses both and adds its place (a region, a zone) and its request."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import Field

from cloud import clients
from ground import domain
from ground.errors import UserError
from ground.files import printable
from ground.outputs import StackOutputs, require_outputs
from ground.storagepath import GsPath, cloud_folder, is_gs
from tpuctl.services import image as images
from tpuctl.services import usercode
from tpuctl.services.runs import exports
from tpuctl.services.runs.records import RESULT_FILE, record_problem
from tpuctl.services.runs.request import MAX_RUN_TIME, Budget, RunTime, WaitTime
from tpuctl.services.runs.spec import Planning, RunSpec, check_cloud_name, cloud_name
from trainer.flags import DEFAULT_MODEL

#: A trainer's result.json is a few hundred bytes: anything larger is not the trainer's.
MAX_RESULT_BYTES = 1 << 20
#: A cloud run's saved_model.pb up to this size is read back and walked (``exports.saved_model_problem``); a larger
#: one (a graph of hundreds of MiB) is proven by its presence and size only, not downloaded whole after every run.
MAX_SAVED_MODEL_READ = 256 << 20
#: Objects of an export folder listed (a SavedModel holds a few: saved_model.pb, fingerprint.pb, variables/, assets/).
MAX_EXPORT_OBJECTS = 10_000
#: Where a run's project folder (--code) is in the image it ships in (container/Dockerfile.code).
CODE_DIR_IN_IMAGE = "/opt/tpuctl/code"
#: How long a slice or a flex-start job may wait for its resources when --max-wait does not say.
DEFAULT_MAX_WAIT = timedelta(hours=2)


class CloudRun(RunSpec):
    """A run in a Google Cloud project: what it runs, as whom, on which capacity, and its bounds."""
    project: str
    service_account: str | None = None
    #: the container image the workers run: the trainer's own, the user's (--image), or the trainer's with the
    #: user's project folder layered on
    image: str
    spot: bool = False
    #: how the accelerators are obtained, as asked (``--provisioning``, or ``spot`` for --spot); None: not asked
    #: (on-demand, and nothing about it in the request)
    provisioning: domain.Provisioning | None = None
    #: ``--reservation``: ``any`` or a reservation's name (or its full name), None: no reservation asked for
    reservation: str | None = Field(None, max_length=200)
    budget: Budget = None
    max_run_time: RunTime = None
    max_wait: WaitTime = None
    #: seconds between status reads while this process follows the run
    poll_seconds: float = 30.0

    #: how long the run may train when --max-run-time does not say (each target's own)
    DEFAULT_RUN_TIME: ClassVar[timedelta] = MAX_RUN_TIME

    @property
    def flex_start(self) -> bool:
        return self.provisioning == "flex-start"

    @property
    def preemptible_quota(self) -> bool:
        """Whether the run draws on the preemptible (Spot) quota: Spot, and flex-start where Google says so (Cloud
        TPU: request-using-flex-start; Vertex AI training: see ``tpuctl.services.runs.vertex.check_quota``)."""
        return self.spot or self.flex_start

    @property
    def run_time(self) -> timedelta:
        """The bound of the run's time (and of its cost estimate)."""
        return self.max_run_time if self.max_run_time is not None else self.DEFAULT_RUN_TIME

    @property
    def wait_limit(self) -> timedelta:
        return self.max_wait or DEFAULT_MAX_WAIT


class CloudTarget:
    """The planning hooks every cloud target shares (``target.RunTarget``); a subclass sets ``name``, ``Spec``,
    ``options``, ``TPU_WORKERS`` and its place (``site``), and says who reads a folder (``does``)."""
    name: ClassVar[str]
    notes: ClassVar[dict[str, str]] = {}

    @classmethod
    def does(cls, verb: str) -> str:
        """``a Vertex AI job reads`` / ``TPU VMs read``: who does what with a folder, for error lines."""
        raise NotImplementedError

    @classmethod
    def default_name(cls, command: str) -> str:
        return cloud_name(command)

    @classmethod
    def check_name(cls, name: str) -> str:
        return check_cloud_name(name, cls.name)

    @classmethod
    def outputs(cls, p: Planning) -> StackOutputs:
        return require_outputs(p.outputs, f"--target {cls.name}")

    @classmethod
    def place(cls, p: Planning, accel: domain.Accelerator | None, name: str) -> dict[str, Any]:
        """The capacity flags checked (each model's rules in one line), the stack's project and identity, then the
        target's own place (``site``)."""
        options = p.options
        if options.spot and options.provisioning not in (None, "spot"):
            raise UserError(f"--spot is --provisioning spot: give one of --spot and --provisioning "
                            f"{options.provisioning}")
        provisioning = options.provisioning or ("spot" if options.spot else "on-demand")
        if options.reservation is not None and provisioning != "on-demand":
            raise UserError(f"--reservation runs on reserved capacity; --provisioning {provisioning} asks for other "
                            "capacity: drop one of them")
        site = cls.site(p, accel, name, provisioning)
        outputs = cls.outputs(p)
        return {"project": outputs.require("project"),
                "service_account": outputs.training_service_account or outputs.principals.get(
                    domain.TRAINING_SA_KEYWORD),
                "spot": provisioning == "spot", "provisioning": options.provisioning or ("spot" if options.spot
                                                                                          else None),
                "reservation": options.reservation, "budget": options.budget, "max_run_time": options.max_run_time,
                "max_wait": options.max_wait,
                **({"poll_seconds": options.poll_seconds} if "poll_seconds" in type(options).model_fields else {}),
                **site}

    @classmethod
    def site(cls, p: Planning, accel: domain.Accelerator | None, name: str, provisioning: str) -> dict[str, Any]:
        """The target's own checks and fields (its region or zone, its capacity rules)."""
        raise NotImplementedError

    @classmethod
    def gs_folder(cls, value: str, flag: str, what: str) -> str:
        """A ``gs://BUCKET/PATH`` folder a flag names (its bucket name checked), without a trailing slash."""
        verb, _, rest = what.partition(" ")
        return cloud_folder(value, flag, f"{cls.does(verb)} {rest}")

    @classmethod
    def data_dir(cls, p: Planning) -> tuple[str | None, dict[str, Any]]:
        data_dir = p.request.data_dir or (p.outputs.bucket_url("data") if p.outputs else None)
        if not data_dir:
            raise UserError("no training data: the stack has no data bucket; pass --data-dir gs://BUCKET/PATH")
        hint = "" if is_gs(data_dir) else (
            "; upload it with `tpuctl data make-tfrecords SRC gs://BUCKET/PATH` and pass that")
        try:
            return cls.gs_folder(data_dir, "--data-dir", "read from"), {}
        except UserError as exc:
            raise UserError(f"{exc}{hint}") from None

    @classmethod
    def hub_cache(cls, p: Planning) -> str | None:
        hub_cache = p.request.hub_cache_dir or (p.outputs.tfhub_cache_dir if p.outputs else None)
        return cls.gs_folder(hub_cache, "--hub-cache-dir", "read hub models from") if hub_cache else None

    @classmethod
    def check_plan(cls, p: Planning) -> None:
        return None

    @classmethod
    def image_variant(cls, accel: domain.Accelerator | None, backend: str) -> str:
        """Which trainer image the workers run (``tpuctl image build --variant``): the accelerator's kind and the
        backend's (``domain.image_variant``)."""
        return domain.image_variant(accel.kind if accel is not None else "cpu", backend)

    @classmethod
    def image(cls, p: Planning, accel: domain.Accelerator | None, name: str, code: str | None) -> dict[str, Any]:
        """The image the workers run: --image, else the trainer's own; with ``code`` (a plug-in or --command) the
        trainer's with the project folder layered on, tagged by the content of both (``tpuctl image build
        --code``)."""
        if p.options.image is not None:
            return {"image": p.options.image}
        outputs, variant = cls.outputs(p), cls.image_variant(accel, p.backend)
        region = p.place.get("region")      # a regional target's images are in its region's repository
        outputs.require("region", "it locates the trainer image; pass --image")
        if code is not None:
            project = usercode.scan_project(code)
            return {"image": images.code_image_ref(outputs, variant, project, region=region, root=p.root).uri}
        return {"image": images.image_ref(outputs, variant, region=region, root=p.root).uri}

    @classmethod
    def model_dir(cls, p: Planning, name: str) -> tuple[str, dict[str, Any]]:
        """--model-dir (a gs:// folder), else ``<artifacts>/runs/NAME``; a finished run there is refused when the
        run is submitted (``spec.refuse_finished``: reading the bucket needs credentials)."""
        if p.request.model_dir:
            return cls.gs_folder(p.request.model_dir, "--model-dir", "write to"), {}
        artifacts = p.outputs.bucket_url("artifacts") if p.outputs else None
        if not artifacts:
            cls.outputs(p).require("buckets.artifacts", "pass --model-dir gs://BUCKET/PATH")
        return f"{artifacts}/runs/{name}", {}

    @classmethod
    def code_dir(cls, code: str) -> str:
        return CODE_DIR_IN_IMAGE

    @classmethod
    def plugin_ref(cls, code: str, ref: str, flag: str) -> str:
        """A ``--model``/``--dataset`` function as the image sees it, checked against what ships from ``code``
        (``usercode.resolve_ref``): a file outside the folder, missing, left out, or a name it does not define is
        one line before anything is created (the run would fail only after machines were provisioned)."""
        return usercode.resolve_ref(usercode.scan_project(code), ref, flag)

    @classmethod
    def command_ref(cls, code: str, program: tuple[str, ...]) -> None:
        """The script a ``--command`` runs (``python train.py``, ``bash run.sh``…), checked against what ships from
        ``code`` (``usercode.resolve_command``): outside the folder, left out or missing is one line before anything
        is created."""
        usercode.resolve_command(usercode.scan_project(code), program)


def read_result(storage, model_dir: str, earlier: dict[str, int] | None = None) -> dict[str, Any] | None:
    """The trainer's completion record of the run in ``model_dir`` (``result.json``, written last, by the chief, only
    when training finished), read through ``storage``: None when there is none yet (``earlier``: the generations of
    objects an earlier run left, ignored) or it is being written; a file that is not the trainer's is one line."""
    where = GsPath.parse(model_dir).join(RESULT_FILE)
    with clients.google_errors(f"reading {where}", forbidden=f"permission denied reading {where}: you need "
                                                            "storage.objects.get on the model bucket"):
        blob = storage.bucket(where.bucket).get_blob(where.path)
        if blob is None or (earlier or {}).get(blob.name) == blob.generation:
            return None   # none yet, or an earlier run's
        # This generation (a newer one may replace it meanwhile), bounded.
        data = clients.download_bounded(blob, MAX_RESULT_BYTES, str(where), "not the trainer's result", 1)
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None  # being written: read it on the next poll
    return value if isinstance(value, dict) else None


def completion_problem(storage, result: dict[str, Any], run: RunSpec) -> str | None:
    """Why a cloud run's completion record does not stand (None: it does), as a local run's is checked: the
    trainer's record of this run (``records.record_problem``), naming an export in the run's own folder that has a
    SavedModel's shape (``exports``; issue 56, a sixth trial: the cloud targets took any JSON object as a finished
    run)."""
    problem = record_problem(result, run.trainer.model or DEFAULT_MODEL)
    if problem is not None:
        return problem
    export, folder = result["export_dir"], GsPath.parse(run.model_dir)
    try:
        where = GsPath.parse(export) if isinstance(export, str) and is_gs(export) else None
    except UserError:
        where = None
    if where is None or where.bucket != folder.bucket or not where.path.startswith(folder.prefix or "") \
            or ".." in where.path.split("/"):
        return f"its export {printable(str(export), 200)} is not in the run's folder {run.model_dir}"
    with clients.google_errors(f"reading {where}", forbidden=f"permission denied reading {where}: you need "
                                                             "storage.objects.list and storage.objects.get on the "
                                                             "model bucket"):
        blobs = {blob.name.removeprefix(where.prefix or ""): blob
                 for blob in storage.list_blobs(where.bucket, prefix=where.prefix, max_results=MAX_EXPORT_OBJECTS)}
        pb = blobs.get("saved_model.pb")
        if pb is None or not pb.size:
            return f"{where}/saved_model.pb is missing or empty"
        if pb.size <= MAX_SAVED_MODEL_READ:
            data = clients.download_bounded(pb, MAX_SAVED_MODEL_READ, f"{where}/saved_model.pb", "not a SavedModel", 1)
            problem = exports.saved_model_problem(data, f"{where}/saved_model.pb")
            if problem is not None:
                return problem
        index = blobs.get("variables/variables.index")
        tail = (index.download_as_bytes(start=max(0, index.size - len(exports.TABLE_MAGIC)))
                if index is not None and index.size else b"")
    shards = {name.removeprefix("variables/"): blob.size or 0 for name, blob in blobs.items()
              if name.startswith("variables/")}
    return exports.variables_problem(f"{where}/variables", tail, shards)
