"""``tpuctl serve``: TF Serving in a local container (docker or podman) over the export.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ground import domain
from ground.errors import UserError
from ground.files import write_atomically
from ground.loopback import get_local
from ground.polling import poll
from tpuctl.services.serving.exports import Export


@dataclass(frozen=True)
class ServePlan:
    argv: list[str]
    runtime: str | None                 # path of docker/podman, None when neither is installed
    batching_file: Path | None = None
    batching_text: str | None = None
    status_url: str | None = None      # the model's status on the published REST port: ready when AVAILABLE

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


def container_runtime(which: Callable[[str], str | None] = shutil.which) -> str | None:
    """docker if on PATH, else podman, else None."""
    return which("docker") or which("podman")


def _check_port(port: int, flag: str) -> None:
    if not 1 <= port <= 65535:
        raise UserError(f"{flag} {port} is not a TCP port (1-65535)")


def plan_serve(export: Export, *, port: int = domain.TF_SERVING_REST_PORT,
               grpc_port: int = domain.TF_SERVING_GRPC_PORT, batching: bool = False,
               image: str = domain.TF_SERVING_IMAGE, runtime: str | None = None,
               parameters: domain.BatchingParameters | None = None) -> ServePlan:
    """The docker/podman command serving ``export`` (its version folder mounted read-only at
    ``/models/<name>/<version>``), REST and gRPC published on 127.0.0.1 only."""
    if not export.is_local:
        raise UserError(f"{export.path} is in Cloud Storage: `tpuctl serve` mounts a local export "
                        "(copy it first: gcloud storage cp -r URL DIR) or use `tpuctl deploy`")
    _check_port(port, "--port")
    _check_port(grpc_port, "--grpc-port")
    if port == grpc_port:
        raise UserError(f"--port and --grpc-port are both {port}")
    if not image or any(c.isspace() for c in image):
        raise UserError(f"--image {image!r} is not an image reference")
    source = export.path
    if "," in source or "=" in source:
        raise UserError(f"{source}: a path with ',' or '=' cannot be given to `--mount` (move the export)")
    tool = Path(runtime).name if runtime else "docker"
    name = export.model_name
    target = f"{domain.TF_SERVING_MODEL_BASE}/{name}/{export.version}"
    argv = [tool, "run", "--rm", "--name", f"tpuctl-serve-{name}-{port}",
            "-p", f"127.0.0.1:{port}:{domain.TF_SERVING_REST_PORT}",
            "-p", f"127.0.0.1:{grpc_port}:{domain.TF_SERVING_GRPC_PORT}",
            "--mount", f"type=bind,source={source},target={target},readonly"]
    batching_file = batching_text = None
    if batching:
        batching_file = Path(source).parent / domain.BATCHING_FILE_NAME
        batching_text = (parameters or domain.BatchingParameters()).text()
        argv += ["--mount", f"type=bind,source={batching_file},target={domain.TF_SERVING_BATCHING_FILE},readonly"]
    argv += ["-e", f"MODEL_NAME={name}", image]
    if batching:
        argv += ["--enable_batching", f"--batching_parameters_file={domain.TF_SERVING_BATCHING_FILE}"]
    status_url = f"http://127.0.0.1:{port}{domain.model_status_path(name)}"
    return ServePlan(argv, runtime, batching_file, batching_text, status_url)


def model_available(status_url: str, timeout: float = 2.0) -> bool:
    """Whether TF Serving answers ``status_url`` with a version in state AVAILABLE (anything else: not yet)."""


    try:
        body = json.loads(get_local(status_url, timeout=timeout) or b"{}")
    except (ValueError, RecursionError):
        return False
    versions = body.get("model_version_status") if isinstance(body, dict) else None
    return isinstance(versions, list) and any(isinstance(v, dict) and v.get("state") == "AVAILABLE"
                                              for v in versions)


def _say_when_ready(proc: subprocess.Popen, status_url: str | None, on_ready: Callable[[], None],
                    poll_seconds: float = 0.5) -> None:
    """Call ``on_ready`` once the served model is AVAILABLE; never when the container ends first (docker could
    not start it, TF Serving failed to load the export): then only the failure is said."""
    def state() -> str:
        if proc.poll() is not None:
            return "ended"
        return "ready" if status_url is None or model_available(status_url) else "loading"

    if poll(state, lambda now: now != "loading", interval=poll_seconds) == "ready" and proc.poll() is None:
        on_ready()


def run_serve(plan: ServePlan, on_start: Callable[[], None] = lambda: None) -> int:
    """Write the batching file (if any), then run the container in the foreground; its exit status.
    ``on_start`` is called once the model answers as AVAILABLE on the REST port (not when the container
    fails first). Without docker or podman nothing is written."""
    if plan.runtime is None:
        raise UserError("neither docker nor podman is installed (on PATH): install one, or run the command "
                        "above on a machine that has one", 1)
    if plan.batching_file is not None and plan.batching_text is not None:
        write_atomically(plan.batching_file, plan.batching_text)
    argv = [plan.runtime, *plan.argv[1:]]
    proc = subprocess.Popen(argv)
    watcher = threading.Thread(target=_say_when_ready, args=(proc, plan.status_url, on_start), daemon=True)
    watcher.start()
    try:
        return proc.wait()
    except KeyboardInterrupt:
        try:  # the container got the same Ctrl-C (one process group); give it time to stop
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
