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
