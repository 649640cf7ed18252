"""The CLI's one error printer (tpuctl.cli._error) never lets escape sequences through (issue 28)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))

from clifixtures import invoke


def test_error_line_drops_escape_sequences_from_a_file_name(tmp_path):
    name = tmp_path / "x\x1b]0;pwned\x07\x1b[2Jy.json"   # retitles the terminal window, clears the screen
    r = invoke(["doctor", "--outputs", str(name)])
    assert r.exit_code == 2
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr
    assert r.stderr == f"error: outputs file {tmp_path}/xy.json does not exist (write it with `pulumi stack output " \
                       f"--json > {tmp_path}/xy.json`)\n"


#: ``~name`` where no user ``name`` exists: pathlib raises RuntimeError("Could not determine home directory.").
NO_USER = "~no-such-user-tpuctl"


def test_a_tilde_naming_no_user_is_one_line_wherever_a_local_path_is_read(tmp_path):
    """Found by the CLI fuzz test (`data make-tfrecords SRC ~0`): a traceback. Now every local path goes through
    ``localtree.user_path``; one command per reader (data, runs, hub model source, serving exports, images)."""
    src = tmp_path / "src"
    (src / "cat").mkdir(parents=True)
    (src / "cat" / "a.jpg").write_bytes(b"\xff\xd8\xff")
    commands = [
        (["data", "make-tfrecords", str(src), f"{NO_USER}/out"], "destination"),
        (["data", "make-tfrecords", f"{NO_USER}/src", str(tmp_path / "out")], ""),
        (["runs", "ls", "--dir", f"{NO_USER}/runs"], "run folder"),
        (["hub-cache", "fetch", "https://example.com/m/1", "--from", f"{NO_USER}/m.tar.gz",
          "--dest", str(tmp_path / "hub")], "hub model source"),
        (["serve", f"{NO_USER}/export/1", "--dry-run"], "model"),
        (["predict", "http://127.0.0.1:9/v1/models/m", f"{NO_USER}/cat.jpg"], "image"),
    ]
    for args, what in commands:
        r = invoke(args)
        assert r.exit_code == 2, (args, r.output)
        [line] = r.stderr.strip().splitlines()
        assert line.startswith("error: ") and NO_USER in line and "no user" in line, line
        assert what in line, line
        assert "Traceback" not in r.output and "RuntimeError" not in r.output


HANGING_COMMAND = """
import sys, threading
from tpuctl import cli
from ground.errors import UserError

@cli.app.command("hang")
def hang():
    threading.Thread(target=threading.Event().wait, daemon=False).start()   # blocked for good, joined at exit
    print("partial output")
    raise UserError("gave up waiting", 130, abandoned_threads=True)

sys.exit(cli.run(sys.argv[1:]))
"""


def test_an_error_that_abandoned_threads_ends_the_process_without_joining_them():
    """A library's non-daemon worker still blocked (an upload hanging in the network): after the user gave up, the
    CLI prints the one line, flushes what was written and ends at once instead of joining it at exit."""
    import subprocess

    from ground.envs import ops_python

    proc = subprocess.run([str(ops_python()), "-c", HANGING_COMMAND, "hang"], capture_output=True, text=True,
                          timeout=30)   # with a plain UserError it never ends
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "partial output\n", "error: gave up waiting\n")
