"""`--stack NAME`: outputs read through the Pulumi CLI (`pulumi stack output --json`), bounded in time.

A stand-in `pulumi` executable on PATH plays the CLI: it answers with outputs, fails like Pulumi does, or never
answers (a state backend that does not respond).
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from ground import outputs
from ground.errors import UserError

from clifixtures import error_line, invoke
from stackfixtures import SAMPLE_OUTPUTS


def _fake_pulumi(folder: Path, body: str) -> dict[str, str]:
    """A `pulumi` shell script in ``folder`` that records its arguments, then runs ``body``; env with it on PATH."""
    script = folder / "pulumi"
    script.write_text(f'#!/bin/sh\necho "$@" > "{folder}/args"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def test_outputs_come_from_pulumi_stack_output(tmp_path, monkeypatch):
    (tmp_path / "out.json").write_text(json.dumps(SAMPLE_OUTPUTS))
    env = _fake_pulumi(tmp_path, f'cat "{tmp_path}/out.json"')
    monkeypatch.setenv("PATH", env["PATH"])
    so = outputs.load_outputs(stack="dev")
    assert so.project == "my-project-1" and so.bucket("data") == "tpuctl-my-project-1-data"
    assert (tmp_path / "args").read_text().split() == [
        "stack", "output", "--json", "--show-secrets", "--stack", "dev", "--non-interactive"]


def test_a_failing_pulumi_is_its_last_line(tmp_path):
    env = _fake_pulumi(tmp_path, "echo 'some progress' >&2; echo \"error: no stack named 'dev' found\" >&2; exit 255")
    result = invoke(["runs", "ls", "--dir", tmp_path / "runs", "--stack", "dev"], env=env)
    assert result.exit_code != 0
    [line] = result.stderr.strip().splitlines()     # which stack, then pulumi's own words (not its progress)
    assert line.startswith("error: ") and "stack 'dev'" in line and line.endswith(": error: no stack named 'dev' found")


def test_a_pulumi_that_never_answers_is_stopped_and_named(tmp_path, monkeypatch):
    monkeypatch.setattr(outputs, "PULUMI_TIMEOUT_SECONDS", 1)
    env = _fake_pulumi(tmp_path, "exec sleep 60")
    started = time.monotonic()
    result = invoke(["runs", "ls", "--dir", tmp_path / "runs", "--stack", "dev"], env=env)
    assert time.monotonic() - started < 30
    assert result.exit_code != 0
    [line] = result.stderr.strip().splitlines()
    assert "`pulumi stack output`" in line and "stack 'dev'" in line and "1 s" in line, line
    assert "--outputs FILE" in line, line


def test_without_pulumi_on_path_the_line_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match=r"pulumi stack output --json --show-secrets --stack dev > outputs.json"):
        outputs.load_outputs(stack="dev")


def _without(document: dict, key: str) -> dict:
    trimmed = json.loads(json.dumps(document))
    if "." in key:
        outer, inner = key.split(".", 1)
        trimmed[outer].pop(inner)
    else:
        trimmed.pop(key)
    return trimmed


@pytest.mark.parametrize(("args", "missing", "fix"), [
    (["train", "--target", "vertex", "--dry-run"], "region", "pass --region"),
    (["train", "--target", "tpu-vm", "-a", "v5litepod-8", "--dry-run"], "zone", "pass --zone"),
    (["train", "--target", "tpu-vm", "-a", "v5litepod-8", "--zone", "us-central1-a", "--dry-run"],
     "buckets.artifacts", "pass --model-dir gs://BUCKET/PATH"),
    (["runs", "ls"], "buckets.artifacts", None),
    (["hub-cache", "ls"], "buckets.hub-cache", "pass --bucket"),
])
def test_every_command_names_a_missing_output_the_same_way(tmp_path, args, missing, fix):
    document = {**SAMPLE_OUTPUTS, "zone": "us-central1-a", "buckets": {**SAMPLE_OUTPUTS["buckets"], "hub-cache": "tpuctl-my-project-1-hub"}}
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(_without(document, missing)))
    result = invoke([*args, "--outputs", str(path)])
    assert result.exit_code != 0
    named = "tpu_zone" if missing == "zone" else missing   # a TPU VM's zone: tpu_zone, else zone
    expected = f"the stack outputs name no {named!r}" + (f"; {fix}" if fix else "")
    assert expected in result.output, result.output


def test_a_command_that_needs_outputs_says_how_to_give_them():
    line = error_line(invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-8", "--dry-run"]), 2)
    assert "--target tpu-vm" in line and "--stack NAME" in line and "--outputs FILE" in line, line
