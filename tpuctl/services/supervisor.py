"""Processes of the trainer environment, started and supervised: training workers and data tools alike.

Every process runs in its own session (process group), so the supervisor alone decides when it stops:
a terminal Ctrl-C reaches the supervisor, which stops every group it started. When one worker of a
cluster dies, MultiWorkerMirroredStrategy would leave its peers blocked in collectives; the supervisor
notices within a poll interval and stops the rest, then names the worker and the cause. Processes
talk back through the trainer's line protocol (``trainer.protocol``), parsed here as lines arrive.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from ground.envs import trainer_python
from ground.errors import EXIT_INTERRUPTED, UserError
from ground.numbers import is_digits
from ground.polling import ticks, wait_until
from tpuctl.services import strays
from trainer import protocol

#: How long a stopped process gets between SIGTERM and SIGKILL: on SIGTERM the trainer backs up its step first (every
#: worker at one agreed step, trainer/callbacks.py), which on a busy machine takes seconds, not milliseconds.
STOP_GRACE_SECONDS = 15.0
POLL_SECONDS = 0.1
#: A process stopped this long (SIGSTOP, a debugger: it runs nothing and answers no peer) ends the run, named: a
#: parameter-server coordinator waited for its steps for good, MultiWorkerMirrored peers for its collectives.
STOPPED_SECONDS = 10.0

#: Called with each protocol message a process prints; returns True when the line is consumed
#: (not echoed). Plain lines are echoed unless ``echo_plain`` is off.
OnMessage = Callable[[protocol.Message], bool]


class TaskFailed(UserError):
    """A supervised process (or one worker of a cluster) ended unsuccessfully; message says which and why."""
    def __init__(self, message: str, exit_code: int, task: Task | None = None):
        super().__init__(message, exit_code)
        self.task = task


#: The signals that end supervised work as Ctrl-C does (its processes stopped, exit 130): SIGHUP is a closed terminal
#: (issue 56: tpuctl died of it and its --command program ran on, reparented to init), SIGQUIT a Ctrl-\ (it dumped core,
#: the processes ran on). SIGKILL cannot be caught: a tpuctl killed so leaves its processes running (docs/runs.md).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@contextmanager
def signal_handlers(handler, signals=STOP_SIGNALS) -> Iterator[None]:
    """``handler`` for ``signals`` while the block runs, the previous handlers after it (main thread only:
    Python installs signal handlers nowhere else, so elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def raise_interrupt(signum, _frame):
    """The signal handler that makes a signal (SIGTERM) end the work as Ctrl-C does: ``KeyboardInterrupt``."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def require_trainer_python() -> Path:
    python = trainer_python()
    if not python.exists():
        raise UserError(
            f"trainer interpreter {python} does not exist; run scripts/setup.sh to create .venv-trainer "
            "or point TPUCTL_TRAINER_PYTHON at a Python with TensorFlow"
        )
    return python


def trainer_module_argv(module: str, args: Sequence[str]) -> list[str]:
    """``<trainer python> -u -m <module> ARGS`` (unbuffered: protocol lines arrive as they are printed)."""
    return [str(require_trainer_python()), "-u", "-m", module, *args]


def user_program_argv(command: Sequence[str]) -> list[str]:
    """A user's ``--command`` as this machine runs it: ``python``/``python3`` is the trainer environment's Python
    (the one with TensorFlow, as in the trainer image), anything else is found on PATH."""
    words = list(command)
    if words and words[0] in ("python", "python3"):
        words[0] = str(require_trainer_python())
    return words


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (all sockets held open until every port is picked)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def describe_status(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


@dataclass
class Task:
    """One process and what it printed."""
    label: str                      # "trainer", "chief", "worker 0" (as in TF_CONFIG), or a tool's module
    argv: list[str]
    env: dict[str, str]
    on_message: OnMessage | None = None
    #: A server that never exits by itself (parameter-server training's workers and ps): the run is done when
    #: every non-serving task has exited 0, and the servers are then stopped.
    serves: bool = False
    #: False: the run goes on when this task dies (a parameter-server worker: the coordinator re-schedules).
    essential: bool = True
    #: the folder it runs in (None: this process's)
    cwd: str | None = None
    proc: subprocess.Popen | None = None
    last_stderr: deque = field(default_factory=lambda: deque(maxlen=50))
    #: The last payload of each JSON protocol kind (result, summary) the process printed.
    messages: dict[str, Any] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def result(self) -> dict | None:
        return self.messages.get(protocol.RESULT)

    def last_error_line(self) -> str | None:
        """The most telling stderr line: the last ``error: …`` line, else the last non-empty one that is not a
        native library's log line (TensorFlow's ``E0000 00:00:… cuda_platform.cc:52] failed call to cuInit`` on a
        machine without a GPU says nothing of why a run ended: a sixth trial quoted it as the cause; None when the
        process printed nothing else, a plug-in that sent the trainer a SIGTERM while it started)."""
        lines = [line for line in self.last_stderr if line.strip()]
        for line in reversed(lines):
            if line.lstrip().startswith("error:") or "Error" in line:
                return line.strip()
        telling = [line for line in lines if not _NATIVE_LOG.match(line.lstrip())]
        return telling[-1].strip() if telling else None


#: A line of a native library's log (absl/glog: ``E0000 00:00:1796672157.123 3948 file.cc:52] …``) and absl's note
#: that precedes them.
_NATIVE_LOG = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d[.\d]* +\d+ [\w.-]+:\d+\] |WARNING: All log messages before "
                         r"absl::InitializeLog")


@dataclass
class RunOutcome:
    returncode: int
    result: dict | None
    tasks: list[Task]


def write_quietly(sink: TextIO | None, text: str) -> None:
    """Write and flush ``text``, if there is a sink and it is still open."""
    if sink is None:
        return
    with suppress(ValueError, OSError):  # sink closed (e.g. pytest capture torn down)
        sink.write(text)
        sink.flush()


class ErrorLines:
    """The ``error: …`` lines the processes of one run printed on stderr: a line another process of the run printed
    already is not shown again (issue 57: every worker of a cluster fails on the same bad plug-in, or the same missing
    TPU, with the same line, and the screen showed it once per process). Pump threads share it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[str] = set()

    def first(self, text: str) -> bool:
        """Whether ``text`` is to be shown: anything but an ``error:`` line, or one no process printed before."""
        line = text.strip()
        if not line.startswith("error:"):
            return True
        with self._lock:
            if line in self._seen:
                return False
            self._seen.add(line)
            return True


#: A plain output line is shown up to this many bytes; the rest of it is read and dropped, and the line says how
#: much (a program writing hundreds of MiB without a newline kept them all in memory). ``MAX_LINE_VARIABLE`` lifts it.
MAX_LINE_BYTES = 64 * 1024
MAX_LINE_VARIABLE = "TPUCTL_MAX_LINE_BYTES"
#: The largest bound ``MAX_LINE_VARIABLE`` may set.
MAX_LINE_CEILING = 256 * 1024 * 1024
#: A protocol message with a JSON payload (a run's result, a tool's summary: every curve of every run compared) may
#: be longer than a plain line, up to this.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: A run's completion record (a few KiB from the trainer) is kept up to this; a longer one is a plain line, cut.
MAX_RESULT_BYTES = 1024 * 1024
_MESSAGE_BOUNDS = {f"{kind}:".encode(): MAX_RESULT_BYTES if kind == protocol.RESULT else MAX_MESSAGE_BYTES
                   for kind in protocol.JSON_KINDS}
#: stderr lines kept per process to name the failure: each is a short excerpt, never a whole long line.
STDERR_LINE_KEPT = 1000
_LINE_END = re.compile(rb"\r\n|\r|\n")


def max_line_bytes() -> int:
    """The bound of a plain output line: ``MAX_LINE_BYTES``, or ``$TPUCTL_MAX_LINE_BYTES`` (one line when it is not
    a whole number of bytes from 1024 to ``MAX_LINE_CEILING``)."""
    text = os.environ.get(MAX_LINE_VARIABLE)
    if text is None or not text.strip():
        return MAX_LINE_BYTES
    value = text.strip()
    if not is_digits(value) or len(value) > 12 or not 1024 <= int(value) <= MAX_LINE_CEILING:
        raise UserError(f"{MAX_LINE_VARIABLE}={value[:40]!r}: give the longest output line shown, in bytes, from "
                        f"1024 to {MAX_LINE_CEILING}")
    return int(value)


def bounded_lines(stream: BinaryIO, limit: int) -> Iterator[tuple[bytes, int]]:
    """The lines of ``stream`` as a text stream splits them (``\\n``, ``\\r\\n``, ``\\r``), each without its end and
    kept up to ``limit`` bytes (a protocol message with a JSON payload up to ``MAX_MESSAGE_BYTES``): ``(kept, bytes
    cut)``. Reads what the pipe holds as it comes, so the writer never waits on a long line; memory stays bounded."""
    line = bytearray()
    cut = 0
    after_cr = False
    read = getattr(stream, "read1", stream.read)
    while chunk := read(1 << 16):
        start = 1 if after_cr and chunk[:1] == b"\n" else 0
        after_cr = False
        while True:
            end = _LINE_END.search(chunk, start)
            piece = chunk[start:end.start() if end else len(chunk)]
            head = bytes(line[:16]) + piece[:16]
            bound = next((b for prefix, b in _MESSAGE_BOUNDS.items() if head.startswith(prefix)), limit)
            room = max(bound - len(line), 0)
            line += piece[:room]
            cut += max(len(piece) - room, 0)
            if end is None:
                break
            yield bytes(line), cut
            line.clear()
            cut = 0
            start = end.end()
            if end.group() == b"\r" and start == len(chunk):
                after_cr = True      # a "\r\n" cut by the chunk's end is one line end
    if line or cut:
        yield bytes(line), cut


def _cut_note(cut: int, limit: int) -> str:
    return (f" … [{cut:,} more bytes of this line cut: lines are shown up to {limit:,} bytes; "
            f"{MAX_LINE_VARIABLE} lifts it]")


def _pump(task: Task, stream: BinaryIO, sink: TextIO | None, prefix: str, is_stdout: bool, limit: int,
          errors: ErrorLines | None = None) -> None:
    for data, cut in bounded_lines(stream, limit):
        text = data.decode("utf-8", "replace")
        if cut:
            text = text.rstrip("\ufffd") + _cut_note(cut, limit)
        elif is_stdout and _took_message(task, text):
            continue
        if not is_stdout:
            task.last_stderr.append(text[:STDERR_LINE_KEPT])   # the failure names the task's own last line
            if errors is not None and not errors.first(text):
                continue
        write_quietly(sink, f"{prefix}{text}\n")
    stream.close()


def _took_message(task: Task, text: str) -> bool:
    """Records the protocol message on ``text`` and hands it on; True when it was consumed (not to be shown). A line
    whose message cannot be handled (a count or payload no process of ours prints) is shown as a plain line: this
    reader must go on draining the pipe whatever a line holds, or the process writing it blocks (issue 56)."""
    message = protocol.parse(text)
    if message is None:
        return False
    if message.kind in protocol.JSON_KINDS:
        # the first record stands: one printed after it (an atexit handler's, issue 56) changes nothing, and the
        # run's check against its result.json tells a forged first one
        task.messages.setdefault(message.kind, message.payload)
    try:
        return task.on_message is not None and bool(task.on_message(message))
    except (ValueError, TypeError, OverflowError, RecursionError):
        return False


def _start(task: Task, prefix: str, out: TextIO | None, err: TextIO | None, limit: int = MAX_LINE_BYTES,
           errors: ErrorLines | None = None) -> None:
    try:
        task.proc = subprocess.Popen(
            task.argv, env=task.env, cwd=task.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        raise UserError(f"cannot start {task.argv[0]}: {exc.strerror or exc}") from None
    for stream, sink, is_stdout in ((task.proc.stdout, out, True), (task.proc.stderr, err, False)):
        t = threading.Thread(target=_pump, args=(task, stream, sink, prefix, is_stdout, limit, errors), daemon=True)
        t.start()
        task.threads.append(t)


def _signal_group(task: Task, sig: int) -> None:
    if task.proc is None:
        return
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(task.proc.pid, sig)


def exit_status(task: Task) -> int | None:
    """Exit status (negative signal number if killed), or None while running — WITHOUT reaping.

    An unreaped leader keeps its process-group id reserved, so signalling the group stays safe.
    """
    proc = task.proc
    if proc is None:
        return None
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return proc.poll()
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def is_stopped(task: Task) -> bool:
    """The task's process is stopped (state T or t in /proc/<pid>/stat: SIGSTOP, a debugger); False when unknown."""
    if task.proc is None:
        return False
    try:
        stat = Path(f"/proc/{task.proc.pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rpartition(")")[2].split()
    return bool(fields) and fields[0] in ("T", "t")


def stop_tasks(tasks: Sequence[Task], grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM every running task's process group (and SIGCONT, so a stopped process gets it now, not after the
    grace), SIGKILL whatever is left after ``grace`` s, reap all."""
    running = [t for t in tasks if t.proc is not None and exit_status(t) is None]
    for t in running:
        _signal_group(t, signal.SIGTERM)
        _signal_group(t, signal.SIGCONT)
    wait_until(lambda: all(exit_status(t) is not None for t in running), timeout=grace, interval=0.05)
    for t in tasks:
        if t.proc is None or t.proc.returncode is not None:
            continue
        # Leader not reaped yet: the group id is still ours. Children it spawned die with it.
        _signal_group(t, signal.SIGKILL)
        t.proc.wait()


def run_tasks(
    tasks: Sequence[Task],
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    echo_stderr: bool = True,
    prefix_output: bool = False,
    on_started: Callable[[Task], None] | None = None,
) -> RunOutcome:
    """Start every task, stream its output, and supervise: the first failure stops all the others. An ``error:``
    line one task printed is shown once, however many of the tasks print it (``ErrorLines``).

    Raises TaskFailed naming the task that failed first (with its exit status and last stderr line), or the one
    whose process stayed stopped (``STOPPED_SECONDS``: it answers no peer, which would wait for it for good), or
    TaskFailed with exit code 130 on SIGINT/SIGTERM after stopping everything.
    """
    out = out or sys.stdout
    err = (err or sys.stderr) if echo_stderr else None
    limit = max_line_bytes()
    token = strays.new_token()        # in every process of the run: what detaches from its group is found by it
    interrupted: list[int] = []
    failed: Task | None = None
    frozen: Task | None = None
    stopped_since: dict[str, float] = {}
    still_running: list[Task] = []
    ended_first: list[Task] = []
    errors = ErrorLines()
    try:
        with signal_handlers(lambda signum, _frame: interrupted.append(signum)):
            try:
                for task in tasks:
                    task.env = {**task.env, strays.TOKEN_VARIABLE: token}
                    _start(task, f"[{task.label}] " if prefix_output else "", out, err, limit, errors)
                    if on_started:
                        on_started(task)
                lost: set[str] = set()
                for _ in ticks(POLL_SECONDS):
                    if interrupted:
                        break
                    codes = [exit_status(t) for t in tasks]
                    bad = [t for t, c in zip(tasks, codes) if c is not None and c != 0 and t.essential]
                    if bad:
                        failed = bad[0]
                        still_running = [t for t, c in zip(tasks, codes) if c is None]
                        ended_first = [t for t, c in zip(tasks, codes) if c == 0 and t.essential]
                        break
                    for t, c in zip(tasks, codes):
                        if c is not None and c != 0 and not t.essential and t.label not in lost:
                            lost.add(t.label)
                            write_quietly(err, f"{t.label} (pid {t.pid}) {describe_status(c)}; "
                                               "the others go on without it\n")
                    if all(c == 0 for t, c in zip(tasks, codes) if not t.serves):
                        break
                    now = time.monotonic()
                    for t, c in zip(tasks, codes):
                        if c is None and is_stopped(t):
                            stopped_since.setdefault(t.label, now)
                        else:
                            stopped_since.pop(t.label, None)
                    frozen = next((t for t in tasks if now - stopped_since.get(t.label, now) >= STOPPED_SECONDS), None)
                    if frozen is not None:
                        still_running = [t for t, c in zip(tasks, codes) if c is None and t is not frozen]
                        break
            finally:
                stop_tasks(tasks)
                _end_strays(token, err)
    finally:
        _join(tasks)
    if interrupted:
        name = signal.Signals(interrupted[0]).name
        raise TaskFailed(f"interrupted by {name}; stopped {_names(tasks)}", EXIT_INTERRUPTED)
    if frozen is not None:
        stopped = f"; stopped {_names(still_running)}" if still_running else ""
        raise TaskFailed(f"{frozen.label} (pid {frozen.pid}) stopped answering: its process was stopped (SIGSTOP or a "
                         f"debugger) for {STOPPED_SECONDS:g} s{stopped}", 1, frozen)
    if failed is not None:
        for t in ended_first:
            # a peer that ended well while the run went on (issue 56: a worker's plug-in ended its process with status
            # 0; the chief then failed waiting for it and nothing named the worker)
            write_quietly(err, f"{t.label} (pid {t.pid}) had ended with exit status 0 before the run finished: "
                               "the others cannot train without it\n")
        code = failed.proc.returncode
        why = describe_status(code)
        last = failed.last_error_line()
        detail = f"; last stderr line: {last}" if last else ""
        stopped = f"; stopped {_names(still_running)}" if still_running else ""
        exit_code = code if code > 0 else 1
        raise TaskFailed(f"{failed.label} (pid {failed.pid}) {why}{detail}{stopped}", exit_code, failed)
    result = next((t.result for t in tasks if t.result is not None), None)
    return RunOutcome(0, result, list(tasks))


def _end_strays(token: str, err: TextIO | None) -> None:
    """Stop what the run's processes left running outside their process groups (``strays``), and say so."""
    count = strays.end(token)
    if count:
        write_quietly(err, f"stopped {count} process{'es' if count > 1 else ''} the run left running outside its "
                           "process group, or after its process ended (a child it started and left behind)\n")


def _names(tasks: Sequence[Task]) -> str:
    return ", ".join(t.label for t in tasks) or "nothing"


def _join(tasks: Sequence[Task]) -> None:
    for t in tasks:
        for th in t.threads:
            th.join(timeout=5)
