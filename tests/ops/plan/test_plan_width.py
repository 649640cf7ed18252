"""`tpuctl plan` in a real terminal (a pseudo-terminal of 80 and of 120 columns; issue 44: at 80 columns it was 402
lines with cells broken mid-word): at 80 columns a document, one entry per resource, no property broken inside unless
it alone is wider than the line; at 120 the tables."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios

import pytest

from ground.envs import ops_python

from procfixtures import read_terminal


def _plan_on_a_terminal(columns: int) -> list[str]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "TERM": "xterm"}
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([str(ops_python()), "-m", "tpuctl.cli", "plan", "--stack", "example"],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    try:
        screen = read_terminal(master, proc, "the plan on its terminal")
    finally:
        os.close(master)
    assert proc.returncode == 0, screen[-2000:]
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode("utf-8", "replace")).replace("\r", "").splitlines()


@pytest.mark.parametrize("columns", [80, 120])
def test_plan_reads_as_a_document_at_80_columns_and_as_tables_at_120(columns):
    lines = _plan_on_a_terminal(columns)
    text = "\n".join(lines)
    # every resource's name whole on one line, and every property (k=v) whole unless it is wider than a line
    assert "artifacts-training-sa-storage.objectUser" in text
    assert "role=roles/storage.objectUser" in text
    if columns == 80:
        assert len(lines) < 250, len(lines)
        assert "key properties" not in text          # the tables' header: no table of resources
        assert "  storage.BucketIAMMember  artifacts-training-sa-storage.objectUser" in lines
    else:
        assert "key properties" in text and any("│" in line for line in lines)
