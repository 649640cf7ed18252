"""One training run, one shape: ``RunSpec`` (what every run is), and ``plan``, the one planner that makes a run of
a request (``request.RunRequest``) and the stack's outputs for its target.

Everything every run is, whatever its target, is derived here once: its name, accelerator (parsed once into the
catalogue's record) and distribution strategy, workers and parameter servers, the trainer's command line
(``trainer.flags.TrainerArgs``), its environment, labels, the user's program and project folder. What only a
target knows it says through the hooks of ``target.RunTarget`` (its name rule, which accelerators it takes, where
its data and run folder are, its place: region or zone, capacity, image) and turns into its own ``RunSpec``
subclass: ``local.LocalRun``, ``vertex.VertexRun``, ``tpuvm.plan.TpuVmRun``. The planner never asks which target it
plans for. Nothing is created here, but a local run's fresh folder (claimed by making it, so two runs started in
the same second never share one; ``claim=False`` for a dry run).
"""

from __future__ import annotations

import argparse
import datetime
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, InstanceOf, PlainSerializer, WithJsonSchema

from cloud import clients
from ground import domain
from ground.envs import REPO_ROOT
from ground.errors import UserError
from ground.files import printable
from ground.outputs import StackOutputs
from ground.storagepath import GsPath, is_gs
from tpuctl.services import usercode
from tpuctl.services.data import local_folder
from tpuctl.services.runs.records import RESULT_FILE, LaunchRecord
from tpuctl.services.runs.request import ParameterServers, RunRequest, Workers
from trainer.flags import (
    DEFAULT_BACKEND,
    HPARAM_PREFIX,
    TASK_BOUNDS,
    TF_KERAS_ONLY,
    TrainerArgs,
    flag_value,
    is_plugin_ref,
    parse_profile_steps,
)

Echo = Callable[[str], None]

_LOCAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_CLOUD_NAME = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")


def _accelerator(value: Any) -> Any:
    return value if value is None or isinstance(value, domain.Accelerator) else domain.parse_accelerator(str(value))


#: The accelerator a run carries: the catalogue's record (``domain.Accelerator``), written as its name and read
#: back through the catalogue (a run plan record).
AcceleratorRecord = Annotated[InstanceOf[domain.Accelerator], BeforeValidator(_accelerator),
                              PlainSerializer(lambda accel: accel.name, return_type=str),
                              WithJsonSchema({"type": "string"})]


class RunSpec(BaseModel):
    """A training run, planned (frozen); each target's subclass adds what only it has."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    #: the run's name: its folder ``runs/NAME``, the Vertex AI job's display name, the TPU VM queued resource
    name: str = Field(max_length=128)
    #: None: locally, whatever the machine has
    accelerator: AcceleratorRecord | None = None
    workers: Workers = 1
    parameter_servers: ParameterServers = 0
    #: the trainer's command line (``trainer.flags.TrainerArgs``: ``--data_dir``, ``--model_dir`` …)
    trainer: TrainerArgs
    #: the user's own program (--command), run instead of the trainer on every worker; () for the trainer
    command: tuple[str, ...] = ()
    #: the user's project folder on this machine (--code): plug-ins are imported from it, --command runs in it, and
    #: a cloud run ships it in its image
    code: str | None = None
    #: the trainer's environment on every worker (besides TF_CONFIG, which each target sets per worker)
    env: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)

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
    def backend(self) -> str:
        """What trains the model: tensorflow or jax (the trainer's --backend)."""
        return self.trainer.backend or DEFAULT_BACKEND

    @property
    def accelerator_name(self) -> str:
        return self.accelerator.name if self.accelerator is not None else "auto"

    def launch_record(self, **times: Any) -> LaunchRecord:
        """What ``runs ls`` reads of the run (``started``/``finished`` seconds since 1970, ``state``)."""
        return LaunchRecord(target=self.target, name=self.name, accelerator=self.accelerator_name,
                            workers=self.workers, parameter_servers=self.parameter_servers or None, args=self.program,
                            command=True if self.command else None,
                            **{k: v for k, v in times.items() if v is not None})

    @property
    def resume_hint(self) -> str:
        """How to continue this run after an interruption: the same command with its name."""
        return f"run the same command again with --name {self.name}"


@dataclass
class Planning:
    """What the planner and a target's planning hooks read: the request, the stack's outputs, the command planning
    (train or tune), whether a local run may claim its folder, where notes go, today's date, the repository."""
    request: RunRequest
    outputs: StackOutputs | None
    command: str = "train"
    claim: bool = True
    echo: Echo | None = None
    today: datetime.date = field(default_factory=datetime.date.today)
    root: Path = REPO_ROOT
    #: the target's own fields of the spec, once ``place`` made them (its region or zone, its capacity)
    place: dict[str, Any] = field(default_factory=dict)
    #: what trains the model (tensorflow | jax), once the accelerator is known (``backend``): the image and the
    #: environment hooks read it
    backend: str = DEFAULT_BACKEND

    @property
    def options(self) -> Any:
        return self.request.options

    def say(self, line: str | None) -> None:
        if line and self.echo is not None:
            self.echo(line)


def timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def local_name(command: str) -> str:
    """A local run's name when --name is not given: ``<timestamp>`` (a search's: ``tune-<timestamp>``)."""
    return f"tune-{timestamp()}" if command == "tune" else timestamp()


def cloud_name(command: str) -> str:
    """A cloud run's name when --name is not given (Google's names start with a letter): ``tpuctl-<timestamp>``."""
    return f"tpuctl-{local_name(command)}"


def check_local_name(name: str) -> str:
    """A folder name: letters, digits, . _ -, at most 63."""
    if not _LOCAL_NAME.fullmatch(name):
        raise UserError(f"--name {printable(name, 80)!r}: use 1-63 letters, digits, '.', '_' or '-', starting "
                        "with a letter or digit (it becomes the folder runs/NAME)")
    return name


def check_cloud_name(name: str, target: str) -> str:
    """Google's rule for a queued resource / job name: lowercase letters, digits and '-', a letter first, at most
    63."""
    if not _CLOUD_NAME.fullmatch(name):
        raise UserError(f"--name {printable(name, 80)!r}: on {target} use 1-63 lowercase letters, digits and '-', "
                        "starting with a letter and not ending with '-' (it names the run's folder and its cloud "
                        "resources)")
    return name


def aip_folders(model_dir: str) -> dict[str, str]:
    """The folders Vertex AI gives a job's program (``AIP_MODEL_DIR`` …: CustomJobSpec.base_output_directory's
    <base>/model/, <base>/checkpoints/, <base>/logs/), for a user's program run elsewhere the same way."""
    return {"AIP_MODEL_DIR": f"{model_dir}/model/", "AIP_CHECKPOINT_DIR": f"{model_dir}/checkpoints/",
            "AIP_TENSORBOARD_LOG_DIR": f"{model_dir}/logs/"}


def strategy(accel: domain.Accelerator | None, workers: int, parameter_servers: int) -> str:
    """The trainer's --distribution_strategy, the same rule for every target: a TPU's own, parameter servers,
    several workers, else what the accelerator runs (``auto`` where the machine decides)."""
    if accel is not None and accel.kind == "tpu":
        return "tpu"
    if parameter_servers:
        return "parameter_server"
    if workers > 1:
        return "multi_worker"
    return accel.strategy if accel is not None else "auto"


# --------------------------------------------------------------------------------------------------- the planner

def plan(request: RunRequest, target: Any, outputs: StackOutputs | None, *, command: str = "train",
         claim: bool = True, echo: Echo | None = None, today: datetime.date | None = None,
         root: Path = REPO_ROOT) -> RunSpec:
    """The run ``request`` asks for on ``target`` (its class: ``target.RunTarget``'s planning hooks), every input
    checked before anything exists (see the module docstring). ``command``: train or tune (a search's name and
    labels); ``claim``: make a local run's fresh folder (not for a dry run)."""
    p = Planning(request, outputs, command, claim, echo, today or datetime.date.today(), root)
    name = target.check_name(request.name or target.default_name(command))
    accel = target.accelerator(p)
    _check_request(request, accel, target)     # what the flags alone rule out, before the stack is asked
    p.backend = backend(request, accel, target)
    place = p.place = target.place(p, accel, name)   # the target's own checks and fields (stack, place, capacity)

    program = _command(request)
    code = _code(request, program)
    if (request.dataset or program) and not request.data_dir:
        data_dir, data = None, {}          # the user's code reads its own data: no default folder
    else:
        data_dir, data = target.data_dir(p)
    hub_cache = target.hub_cache(p)
    model = "hub" if request.hub_handle and request.model is None else request.model
    if request.hub_handle and model != "hub":
        raise UserError(f"--hub-handle only applies to --model hub (got --model {model})")
    if model == "hub" and not request.hub_handle:
        raise UserError("--model hub needs --hub-handle (a TF-Hub/Kaggle handle or a local SavedModel path)")
    target.check_plan(p)
    plugin = is_plugin_ref(model) or request.dataset is not None
    ships = code if (plugin or program) else None
    if ships is not None:   # the user's functions, as the target runs them (a cloud run: what its image holds)
        model = target.plugin_ref(ships, model, "--model") if is_plugin_ref(model) else model
        dataset = target.plugin_ref(ships, request.dataset, "--dataset") if request.dataset else None
        if p.backend == "jax" and is_plugin_ref(model) and not program:
            _check_keras3(ships, model, _why_jax(request, accel, target))
        if program:
            target.command_ref(ships, program)
    else:
        dataset = request.dataset
    labels = run_labels(p, name, accel, model, program, place)
    image = target.image(p, accel, name, ships)

    # last: the one thing a plan may create
    model_dir, folder = target.model_dir(p, name)
    hparams = tuple(a for pair in request.hparam for a in (f"--{HPARAM_PREFIX}{pair.split('=', 1)[0]}",
                                                           pair.split("=", 1)[1]))
    chosen = strategy(accel, request.workers, request.option("parameter_servers", 0))
    trainer = TrainerArgs(
        data_dir=data_dir, model_dir=model_dir, distribution_strategy=chosen,
        # a GPU count is the one-machine strategy's; a cluster's workers use every GPU they have (the trainer refuses
        # --num_gpus beside multi_worker: a multi-worker GPU run failed once its machines were there)
        num_gpus=accel.gpu_count if accel is not None and accel.kind == "gpu" and p.backend == "tensorflow"
        and chosen in ("gpu", "auto") else None,
        model=model, dataset=dataset, code_dir=target.code_dir(code) if plugin and code is not None else None,
        backend=p.backend,
        hub_handle=request.hub_handle, train_epochs=request.epochs, train_batch_size=request.batch_size,
        extra=(*hparams, *(("--profile_steps", request.profile_steps) if request.profile_steps else ()),
               *(("--export_name", request.export_name) if request.export_name else ()), *request.trainer_args))
    if not program:
        _check_trainer_argv(trainer)
    env = {"TF_USE_LEGACY_KERAS": "1"}
    if hub_cache:
        env["TFHUB_CACHE_DIR"] = hub_cache
    env.update(target.environment(p, accel, name, program, model_dir))
    return target.Spec(
        target=target.name, name=name, accelerator=accel, workers=request.workers,
        parameter_servers=request.option("parameter_servers", 0), trainer=trainer, command=program, code=ships,
        env=env, labels=labels, **place, **data, **image, **folder)


def backend(request: RunRequest, accel: domain.Accelerator | None, target: Any) -> str:
    """What trains the model: --backend, or for ``auto`` what Google supports on the accelerator and target
    (``domain.default_backend``: TensorFlow wherever it is supported, else JAX); a backend Google does not support
    there, or one the run's model or cluster cannot use, is one line."""
    kind = accel.kind if accel is not None else "cpu"      # locally, no accelerator: whatever the machine has
    generation = accel.tpu.generation if accel is not None and accel.tpu is not None else None
    chosen = (domain.default_backend(kind, generation, target.SUPPORT) if request.backend == "auto"
              else request.backend)
    domain.check_backend(kind, generation, target.SUPPORT, chosen)
    if chosen == "jax":
        why = _why_jax(request, accel, target)
        model = "hub" if request.hub_handle and request.model is None else request.model
        parameter_servers = request.option("parameter_servers", 0)
        if model in TF_KERAS_ONLY:
            raise UserError(f"--model {model} trains on TensorFlow only ({TF_KERAS_ONLY[model]}), and {why}: use "
                            "your own Keras 3 model function (docs/your-code.md)")
        if parameter_servers:
            raise UserError(f"--parameter-servers: {TF_KERAS_ONLY['parameter_server']}; {why} trains data-parallel "
                            "over every worker: drop --parameter-servers")
    return chosen


def _why_jax(request: RunRequest, accel: domain.Accelerator | None, target: Any) -> str:
    """Why a run trains on JAX, as a refusal says it: asked for, or the only backend Google supports there."""
    if request.backend == "jax":
        return "--backend jax"
    return f"{accel.name if accel is not None else 'this accelerator'} on {target.name} trains on JAX only"


def _check_keras3(code: str, model: str, why: str) -> None:
    """A model function whose module imports tf_keras (not Keras 3) cannot train on JAX: one line before anything
    is made (the trainer would refuse it only once the run's machines were there)."""
    if usercode.keras_of(usercode.scan_project(code), model) == "tf_keras":
        raise UserError(f"--model {printable(model, 200)} imports tf_keras and {why}, which trains Keras 3 models: "
                        "build it with `import keras` (docs/your-code.md, Keras 3), or pass --backend tensorflow")


def _check_trainer_argv(trainer: TrainerArgs) -> None:
    """The trainer's command line read by the trainer's own parser (trainer.config, no TensorFlow), before anything
    is created: a flag after `--` it does not know (an abbreviation included), a value it refuses, is one line here
    rather than on a provisioned machine."""
    from trainer.config import parse_args
    from trainer.errors import UsageError as TrainerUsageError

    try:
        parse_args(trainer.argv())
    except TrainerUsageError as err:
        raise UserError(f"the trainer refuses its flags: {printable(str(err), 300)}") from None


def _check_request(request: RunRequest, accel: domain.Accelerator | None, target: Any) -> None:
    """What no target can do, refused the same way on every target."""
    parameter_servers = request.option("parameter_servers", 0)
    if accel is not None and accel.kind == "tpu" and request.workers > 1:
        raise UserError(f"--workers {request.workers} cannot be combined with {accel.name}: {target.TPU_WORKERS}")
    if accel is not None and accel.kind == "tpu" and parameter_servers:
        raise UserError(f"--parameter-servers cannot be combined with {accel.name}: TPUStrategy runs one process "
                        "per host")
    for flag, option in (("data_dir", "--data-dir"), ("model_dir", "--model-dir"), ("code_dir", "--code"),
                         ("dataset", "--dataset"), ("model", "--model")):
        # a plug-in function is resolved against what ships (usercode.resolve_ref): after `--` it would not be
        if flag_value(request.trainer_args, flag) is not None:
            raise UserError(f"--{flag} after `--`: tpuctl sets it; use {option}")
    names = [arg[2:].partition("=")[0] for arg in request.trainer_args if arg.startswith("--") and len(arg) > 2]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:       # the trainer would take the last one silently
        raise UserError(f"--{printable(twice, 60)} is given twice after `--`; give it once")
    # the trainer's numbers after `--` as the trainer reads them (ASCII digits, its bounds), before anything is
    # created (issue 56, a fresh trial: `-- --seed ١` passed a cloud dry run)
    parsers = {**{flag: bound.parse for flag, bound in TASK_BOUNDS.items()}, "profile_steps": parse_profile_steps}
    for flag, parse in parsers.items():
        value = flag_value(request.trainer_args, flag)
        if value is not None:
            try:
                parse(value)
            except argparse.ArgumentTypeError as err:
                raise UserError(f"--{flag} after `--`: {err}") from None
    for flag, option, given in (("train_epochs", "--epochs", request.epochs), ("train_batch_size", "--batch-size",
                                request.batch_size), ("hub_handle", "--hub-handle", request.hub_handle),
                                ("profile_steps", "--profile-steps", request.profile_steps),
                                ("export_name", "--export-name", request.export_name)):
        if given is not None and flag_value(request.trainer_args, flag) is not None:
            raise UserError(f"give {option} or --{flag} after `--`, not both")
    if request.model_dir and request.name:
        raise UserError("give --name or --model-dir, not both (--name NAME is the folder runs/NAME)")


def run_labels(p: Planning, name: str, accel: domain.Accelerator | None, model: str | None,
               program: tuple[str, ...], place: dict[str, Any]) -> dict[str, str]:
    """The same labels on every cloud resource of a run (the job, the queued resource), the accelerator in
    tpuctl's words."""
    labels = {**(p.outputs.labels if p.outputs else {}), "tpuctl-command": p.command,
              "accelerator": _label(accel.name if accel is not None else "auto"),
              "model": _label("command" if program else (model or "small_cnn").rsplit(":", 1)[-1]),
              domain.TPU_VM_MANAGED_LABEL[0]: domain.TPU_VM_MANAGED_LABEL[1],
              domain.TPU_VM_RUN_LABEL: _label(name)}
    if place.get("provisioning") == "flex-start":   # the v2 API tpuctl reads slices with has no field for it
        labels[domain.PROVISIONING_LABEL] = "flex-start"
    domain.validate_labels(labels)
    return labels


def _label(value: str) -> str:
    """A label value from a catalogue name (labels take lowercase letters, digits, '_' and '-')."""
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]


#: Words that only a shell gives a meaning (POSIX sh: control and redirection operators), and the first words a
#: shell runs itself (a variable assignment, its builtins that change the shell: ``cd``, ``export``, ``source``).
_SHELL_OPERATORS = frozenset({"|", "||", "&&", "&", ";", ";;", ">", ">>", "<", "<<", "2>", "2>>", "2>&1", ">&", "|&"})
_SHELL_BUILTINS = frozenset({"cd", "export", "source", ".", "set", "unset", "alias", "exec"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)


def _command(request: RunRequest) -> tuple[str, ...]:
    """--command as the argv every worker runs (shell words; no shell runs it), and what it rules out."""
    if request.command is None:
        return ()
    try:
        words = tuple(shlex.split(request.command))
    except ValueError as exc:
        raise UserError(f"--command {printable(request.command, 120)!r}: {exc} (quote it as a shell would)") from None
    if not words:
        raise UserError("--command is empty: give your program and its arguments, e.g. \"python train.py\"")
    # no shell runs it (locally, in a container, on a host): a shell's syntax would reach the program as words
    shell = next((w for w in words if w in _SHELL_OPERATORS), None)
    if shell is None and (_ASSIGNMENT.fullmatch(words[0]) or words[0] in _SHELL_BUILTINS):
        shell = words[0]
    if shell is not None:
        raise UserError(f"--command {printable(request.command, 120)!r}: {printable(shell, 40)!r} is shell syntax, and "
                        "no shell runs --command (its words are the program and its arguments): run a shell, "
                        "e.g. --command \"bash -c 'cd sub && python train.py'\", or a script of your own")
    trainer_only = [flag_name for flag_name, given in (
        ("--model", request.model), ("--dataset", request.dataset), ("--hparam", request.hparam or None),
        ("--hub-handle", request.hub_handle), ("--epochs", request.epochs), ("--batch-size", request.batch_size),
        ("--profile-steps", request.profile_steps), ("--export-name", request.export_name),
        ("flags after `--`", request.trainer_args or None),
        ("--parameter-servers", request.option("parameter_servers", 0) or None)) if given is not None]
    if trainer_only:
        raise UserError(f"--command runs your program; {trainer_only[0]} is the bundled trainer's: pass it to your "
                        "program in --command")
    return words


def _code(request: RunRequest, command: tuple[str, ...]) -> str | None:
    """The user's project folder (--code, default the current folder) when the run needs one: a plug-in or a
    --command; checked (a folder, what ships from it) before anything is made."""
    plugin = is_plugin_ref(request.model) or request.dataset is not None
    if request.code is not None and not (plugin or command):
        raise UserError("--code is your project folder for --model/--dataset functions or --command; give one of them")
    if request.hparam and not plugin:
        raise UserError("--hparam is a hyperparameter of your --model/--dataset function; name the function")
    if not (plugin or command):
        return None
    folder = local_folder(request.code or ".", "--code folder", must_exist=True)
    return str(usercode.scan_project(folder).root)


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
