"""`hub-cache add --outputs F` when the outputs list no hub models says so (issue 28: it said "use
--stack/--outputs", which had been given)."""

from __future__ import annotations

import json

from clifixtures import invoke


def test_outputs_without_hub_models_say_what_to_do(tmp_path):
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"project": "my-proj-1", "region": "us-central1",
                                   "buckets": {"hub-cache": "my-proj-1-hub"}, "hub_models": []}))
    r = invoke(["hub-cache", "add", "--outputs", str(outputs)])
    assert r.exit_code == 2, r.output
    assert r.stderr == ("error: the stack outputs list no hub models (hub_models is empty); name a HANDLE, or add it "
                        "to tpuctl:hubModels in the stack config and `pulumi up`\n")
