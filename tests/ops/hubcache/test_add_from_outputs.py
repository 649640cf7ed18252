"""`hub-cache add --outputs F` when the outputs list no hub models says so (issue 28: it said "use
--stack/--outputs", which had been given)."""

from __future__ import annotations

import json

from clifixtures import error_line, invoke


def test_outputs_without_hub_models_say_what_to_do(tmp_path):
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"project": "my-proj-1", "region": "us-central1",
                                   "buckets": {"hub-cache": "my-proj-1-hub"}, "hub_models": []}))
    r = invoke(["hub-cache", "add", "--outputs", str(outputs)])
    line = error_line(r, 2, alone=True)      # the output that is empty; the fixes: a HANDLE, or the stack key
    assert "hub_models" in line and "HANDLE" in line and "tpuctl:hubModels" in line and "`pulumi up`" in line, line
