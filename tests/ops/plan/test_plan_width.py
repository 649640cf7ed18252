"""`tpuctl plan` in a real terminal (a pseudo-terminal of 80 and of 120 columns; issue 44: at 80 columns it was 402
lines with cells broken mid-word): at 80 columns a document, one entry per resource, no property broken inside unless
it alone is wider than the line; at 120 the tables. Issue 57: no line wider than the terminal (the legend's lines and
the principals' grants ran past 80 and the terminal broke them), a member e-mail never broken inside."""

from __future__ import annotations

import pytest

from ground.envs import ops_python

from procfixtures import on_terminal


def _plan_on_a_terminal(columns: int) -> list[str]:
    code, lines = on_terminal([str(ops_python()), "-m", "tpuctl.cli", "plan", "--stack", "example"], columns,
                              "the plan on its terminal")
    assert code == 0, lines[-20:]
    return lines


@pytest.mark.parametrize("columns", [80, 120])
def test_plan_reads_as_a_document_at_80_columns_and_as_tables_at_120(columns):
    lines = _plan_on_a_terminal(columns)
    text = "\n".join(lines)
    # every resource's name whole on one line, and every property (k=v) whole unless it is wider than a line
    assert "artifacts-training-sa-storage.objectUser" in text
    assert "role=roles/storage.objectUser" in text
    wide = [line for line in lines if len(line.rstrip()) > columns]
    assert not wide, wide[:3]
    # no e-mail broken: at 80 columns a member wider than the line is broken after its `serviceAccount:`
    email = "service-800755267080@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"
    shown = [number for number, line in enumerate(lines) if email in line]
    assert shown and text.count("gcp-sa-aiplatform-cc") == len(shown)
    if columns == 80:
        assert lines[shown[0]].strip() == email and lines[shown[0] - 1].endswith("member=serviceAccount:")
    if columns == 80:
        assert len(lines) < 250, len(lines)
        # the access map: each principal whole on its line, its grants below
        at = lines.index("  serviceAccount:tpuctl-builder@my-tpu-project.iam.gserviceaccount.com")
        assert lines[at + 1].startswith("    staging=read,list"), lines[at:at + 2]
        assert "key properties" not in text          # the tables' header: no table of resources
        assert "  storage.BucketIAMMember  artifacts-training-sa-storage.objectUser" in lines
    else:
        assert "key properties" in text and any("│" in line for line in lines)
