"""A ``--command`` program, hostile (issue 56, classes 3 and 6): its output is read in bounded lines (a line of
hundreds of MiB without a newline is cut, said, and never held), and what it detaches from its process group with
``setsid`` is stopped with the run (``tpuctl.services.strays``)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

import pytest

from tpuctl.services import supervisor

from clifixtures import error_line, invoke
from procfixtures import alive, wait_for


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "prog"
    folder.mkdir()
    return folder


def test_a_line_of_hundreds_of_mib_is_cut_and_never_held(project):
    """tpuctl as a process (its peak memory is its own there): before, a 200 MiB line took it to 1.4 GB; this
    120 MiB one was read whole too, and printed whole."""
    (project / "writer.py").write_text(textwrap.dedent("""\
        import sys
        out = sys.stdout.buffer
        out.write(b"start\\n")
        for _ in range(120):
            out.write(b"x" * (1 << 20))
        out.write(b"\\nafter the long line\\n")
        """))
    measure = textwrap.dedent("""\
        import json, resource, subprocess, sys
        p = subprocess.run(sys.argv[1:], capture_output=True)
        print(json.dumps({"code": p.returncode, "peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                          "out": p.stdout.decode(errors="replace"), "err": p.stderr.decode(errors="replace")}))
        """)
    done = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "tpuctl.cli", "train", "--command",
                           "python writer.py"], cwd=project, capture_output=True, text=True, timeout=300)
    run = json.loads(done.stdout)
    assert run["code"] == 0, run["err"][-2000:]
    lines = run["out"].splitlines()
    long = next(line for line in lines if line.startswith("xxx"))
    cut = 120 * (1 << 20) - supervisor.MAX_LINE_BYTES
    assert long.endswith(f"[{cut:,} more bytes of this line cut: lines are shown up to "
                         f"{supervisor.MAX_LINE_BYTES:,} bytes; {supervisor.MAX_LINE_VARIABLE} lifts it]"), long[-300:]
    assert "start" in lines and "after the long line" in lines and len(run["out"]) < 2 * supervisor.MAX_LINE_BYTES
    assert run["peak_kib"] < 120 * 1024, run["peak_kib"]          # below the line itself (before: several times it)


class Chunks(io.RawIOBase):
    """A pipe that gives its bytes in the chunks given (the reads a real pipe may make)."""

    def __init__(self, chunks):
        self.chunks = list(chunks)

    def read(self, size=-1):
        return self.chunks.pop(0) if self.chunks else b""


def test_lines_split_as_a_text_stream_splits_them_and_messages_keep_their_room():
    lines = list(supervisor.bounded_lines(Chunks([b"a\r", b"\nb\rc", b"\r\r\n", b"d" * 10, b"e" * 10, b"\n",
                                                  b"summary: {" + b"1" * 30 + b"}\n", b"tail"]), 12))
    assert lines == [(b"a", 0), (b"b", 0), (b"c", 0), (b"", 0), (b"d" * 10 + b"ee", 8),
                     (b"summary: {" + b"1" * 30 + b"}", 0), (b"tail", 0)]


@pytest.mark.parametrize("line", [
    "progress: " + "9" * 5000 + "/1",          # int() of 5,000 digits raised in the reader's thread
    "epoch-start: " + "9" * 5000 + "/2",
    "epoch-end: 1/" + "9" * 40 + " loss=1",
    "tpuctl-result: " + "[" * 100_000 + "]" * 100_000,     # json.loads: RecursionError
    "summary: {\"n\": " + "1" * 5000 + "}",
])
def test_a_protocol_line_no_process_of_ours_prints_never_stops_the_output_reader(project, monkeypatch, line):
    """Issue 56 (a fresh trial): one such line killed the thread reading the program's output (a traceback), and the
    program, writing on into a pipe nobody drained, never ended. Now it is an ordinary line and the run ends."""
    (project / "p.py").write_text(textwrap.dedent(f"""\
        import sys
        sys.stdout.write({line!r} + "\\n")
        for i in range(20_000):
            print("chatter", i)
        print("the end")
        """))
    monkeypatch.chdir(project)
    result = invoke(["train", "--command", "python p.py"])
    assert result.exit_code == 0, result.output[-2000:]
    assert "the end\n" in result.stdout and "Traceback" not in result.output


def test_a_completion_record_longer_than_any_the_trainer_writes_is_a_plain_line_cut():
    """A ``tpuctl-result:`` line is kept up to MAX_RESULT_BYTES (a trainer's is a few KiB), not up to the 64 MiB a
    summary may take: a program's 200 MiB record was held whole (767 MB)."""
    record = b"tpuctl-result: {\"a\": \"" + b"x" * (supervisor.MAX_RESULT_BYTES + 10) + b"\"}"
    [(kept, cut)] = list(supervisor.bounded_lines(Chunks([record[i:i + 65536] for i in range(0, len(record), 65536)]),
                                                  1000))
    assert len(kept) == supervisor.MAX_RESULT_BYTES and cut == len(record) - supervisor.MAX_RESULT_BYTES


@pytest.mark.parametrize("value", ["12", "1e9", "¹⁰²⁴", "-5", str(supervisor.MAX_LINE_CEILING + 1)])
def test_a_bad_line_bound_is_one_line(project, monkeypatch, value):
    (project / "p.py").write_text("print('hi')\n")
    monkeypatch.chdir(project)
    monkeypatch.setenv(supervisor.MAX_LINE_VARIABLE, value)
    assert supervisor.MAX_LINE_VARIABLE in error_line(invoke(["train", "--command", "python p.py"]))
    assert not list(project.glob("runs/*")), "no run folder is left"


def test_the_line_bound_can_be_lifted(project, monkeypatch):
    (project / "p.py").write_text("print('y' * 100_000)\n")
    monkeypatch.chdir(project)
    monkeypatch.setenv(supervisor.MAX_LINE_VARIABLE, "200000")
    result = invoke(["train", "--command", "python p.py"])
    assert result.exit_code == 0 and "y" * 100_000 + "\n" in result.stdout and "cut" not in result.stdout


def test_the_cause_quoted_is_never_a_native_librarys_log_line(project, monkeypatch):
    """A sixth trial: the failure's "last stderr line" was TensorFlow's `E0000 … cuda_platform.cc:52] failed call to
    cuInit` notice (any process on a machine without a GPU prints it), not what went wrong."""
    (project / "p.py").write_text(
        "import sys\nprint('the shards under data/ are gone', file=sys.stderr)\n"
        "print('E0000 00:00:1796672157.745248   16759 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA "
        "error: Failed call to cuInit: UNKNOWN ERROR (303)', file=sys.stderr)\nsys.exit(3)\n")
    monkeypatch.chdir(project)
    line = error_line(invoke(["train", "--command", "python p.py"]), 3)
    assert "last stderr line: the shards under data/ are gone" in line, line
    # the native line alone (a plug-in that sent the trainer a SIGTERM as it started): no line is quoted
    (project / "p.py").write_text(
        "import sys\nprint('E0000 00:00:1796672157.745248   16759 cuda_platform.cc:52] failed call to cuInit', "
        "file=sys.stderr)\nsys.exit(3)\n")
    line = error_line(invoke(["train", "--command", "python p.py"]), 3)
    assert "cuInit" not in line and "exited with code 3" in line, line


def test_a_process_interrupted_by_something_else_says_so_once(project, monkeypatch):
    """A sixth trial: a plug-in that sent its trainer a SIGINT (the trainer's `error: interrupted`, exit 130) while
    tpuctl itself was not interrupted gave two error lines, tpuctl's repeating the trainer's."""
    (project / "p.py").write_text("import sys\nprint('error: interrupted', file=sys.stderr)\nsys.exit(130)\n")
    monkeypatch.chdir(project)
    assert error_line(invoke(["train", "--command", "python p.py"]), 130) == "error: interrupted"


def test_children_detached_with_setsid_end_with_the_run(project, monkeypatch):
    """A program that leaves a child in a session of its own (``setsid``) and a daemon (a double fork, the middle
    process gone): both are stopped when the run ends, and the run says so."""
    (project / "spawn.py").write_text(textwrap.dedent("""\
        import os, subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
        if os.fork() == 0:                      # a daemon: fork, setsid, fork again, the middle one exits
            os.setsid()
            if os.fork() == 0:
                open("daemon.pid", "w").write(str(os.getpid()))
                os.execv("/bin/sleep", ["sleep", "300"])
            os._exit(0)
        open("child.pid", "w").write(str(child.pid))
        print("spawned", flush=True)
        """))
    monkeypatch.chdir(project)
    result = invoke(["train", "--command", "python spawn.py"])
    assert result.exit_code == 0, result.output
    pids = [int(wait_for(lambda f=f: (project / f).exists() and (project / f).read_text(), f))
            for f in ("child.pid", "daemon.pid")]
    assert not any(alive(pid) for pid in pids), pids
    assert "stopped 2 processes the run left running outside its process group" in result.stderr, result.stderr
