"""TensorBoard on a run's (or the stack's) logs, served from the trainer environment on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
from dataclasses import dataclass

from ground.envs import trainer_env
from ground.errors import UserError
from ground.files import printable
from ground.loopback import get_local
from ground.polling import poll
from ground.storagepath import is_gs
from tpuctl.services.supervisor import Task, describe_status, free_ports, stop_tasks, trainer_module_argv

#: How long TensorBoard gets to answer its first HTTP request (it loads TensorFlow first).
START_TIMEOUT_SECONDS = 120.0


#: What TensorBoard's Profile tab reads: ``<run>/plugins/profile/<time>/<host>.xplane.pb`` (the trainer's
#: ``--profile_steps`` writes ``<logs>/profile/<worker>/plugins/profile/…``, trainer/profiling.py).
PROFILE_FOLDER = ("plugins", "profile")
#: The package that gives TensorBoard its Profile tab (TensorBoard itself only shows how to install it: its
#: ``profile_redirect`` plugin, tensorboard/plugins/profile_redirect in tensorboard 2.21).
PROFILE_PLUGIN = "tensorboard-plugin-profile"


@dataclass
class Board:
    url: str
    logdir: str
    task: Task

    def stop(self) -> None:
        stop_tasks([self.task])

    def plugins(self) -> set[str]:
        """The plugins the running TensorBoard loaded (``/data/plugins_listing``: the Profile tab is ``profile``)."""
        body = get_local(self.url + "data/plugins_listing", timeout=10)
        try:
            listing = json.loads(body) if body else {}
        except ValueError:
            return set()
        return set(listing) if isinstance(listing, dict) else set()


def profiles(logdir: str, limit: int = 10_000) -> list[str]:
    """The folders under a local ``logdir`` that hold a captured profile (``…/plugins/profile/<time>/*.xplane.pb``),
    as TensorBoard names their runs (relative to ``logdir``); a ``gs://`` folder is not walked ([])."""
    if is_gs(logdir):
        return []
    found, seen = [], 0
    for top, dirs, files in os.walk(logdir):        # never into a symlinked folder
        seen += len(dirs) + len(files)
        if seen > limit:
            break
        parts = os.path.relpath(top, logdir).split(os.sep)
        if len(parts) >= 3 and tuple(parts[-3:-1]) == PROFILE_FOLDER and any(f.endswith(".xplane.pb") for f in files):
            found.append("/".join(parts[:-3]) or ".")
    return sorted(set(found))


def start(logdir: str, *, port: int | None = None, timeout: float = START_TIMEOUT_SECONDS) -> Board:
    """Start ``tensorboard --logdir LOGDIR`` on 127.0.0.1 and wait until it answers; raise if it does not."""
    if port is None:
        port = free_ports(1)[0]
    elif not 1024 <= port <= 65535:
        raise UserError(f"--port {port} must be 1024-65535")
    else:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                raise UserError(f"port {port} on 127.0.0.1 is in use; pick another with --port")
    # A gs:// logdir is read through TensorFlow's GCS client, as the trainer wrote it (same credentials, proxy and
    # CA): TensorBoard's fast loader has a GCS client of its own, which signs in only through gcloud's user login
    # or the metadata server and otherwise panics in its reloader thread, leaving an empty board (seen with
    # TensorBoard 2.21: "unable to initialize authentication manager: NoAuthMethod").
    fast = ["--load_fast", "false"] if is_gs(logdir) else []
    argv = trainer_module_argv("tensorboard.main", ["--logdir", logdir, "--host", "127.0.0.1", "--port", str(port),
                                                    "--reload_interval", "5", *fast])
    task = Task("tensorboard", argv, trainer_env())
    log = tempfile.TemporaryFile(mode="w+")    # TensorBoard's own chatter: read only if it dies
    try:
        task.proc = subprocess.Popen(argv, env=task.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     text=True, start_new_session=True)
    except OSError as exc:
        raise UserError(f"cannot start TensorBoard: {exc.strerror or exc}") from None
    url = f"http://127.0.0.1:{port}/"

    def answering() -> bool:
        code = task.proc.poll()
        if code is not None:
            log.seek(0)
            tail = log.read().strip().splitlines()
            hint = next((line for line in reversed(tail) if "Error" in line or "error" in line), tail[-1] if tail else "")
            hint = printable(hint, 300)
            raise UserError(f"TensorBoard {describe_status(code)}{': ' + hint if hint else ''} "
                            "(is tensorboard in the trainer environment? scripts/setup.sh installs it)", 1)
        return get_local(url + "data/environment", timeout=2) is not None

    try:
        poll(answering, bool, interval=0.25, timeout=timeout,
             expired=lambda _: f"TensorBoard did not answer on {url} within {timeout:.0f} s")
    except BaseException:   # dead, silent, or Ctrl-C while it loads: no TensorBoard left behind
        stop_tasks([task])
        raise
    return Board(url, logdir, task)
