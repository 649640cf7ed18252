"""Snapshot of everything `pulumi up` would create for Pulumi.example.yaml.

The checked-in JSON lists every resource (type, name, parent component, inputs, what it waits for),
the count per type and the stack outputs, so a reviewer sees each change to the plan in the diff.
After an intended change, rewrite it with:

    TPUCTL_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/ops/infra/test_snapshot.py
"""

from __future__ import annotations

import difflib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from ground.stackfile import read_stack_config
from infra.mocks import MockRun, plain, run_program

SNAPSHOT = Path(__file__).with_name("example_stack.snapshot.json")


def _normalise(value: Any, base: Path) -> Any:
    if isinstance(value, dict):
        if value.get("asset") == "file":
            return {"asset": "file", "path": Path(value["path"]).relative_to(base).as_posix()}
        return {k: _normalise(v, base) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_normalise(v, base) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)   # the engine hands numbers over as floats; 7 reads better than 7.0
    return value


def _short(urn: str) -> str:
    # urn:pulumi:<stack>::<project>::<type chain>::<name>  ->  <type>::<name>
    _, _, chain, name = urn.split("::", 3)
    return f"{chain.split('$')[-1]}::{name}"


def snapshot_of(run: MockRun, base: Path) -> dict[str, Any]:
    resources = sorted(
        (
            {
                "type": r.type,
                "name": r.name,
                "parent": r.parent_type,
                "inputs": _normalise(plain(r.inputs), base),
                "depends_on": sorted(_short(u) for u in r.dependencies),
            }
            for r in run.resources
        ),
        key=lambda r: (r["type"], r["name"]),
    )
    return {
        "stack": "Pulumi.example.yaml",
        "counts": dict(sorted(Counter(r["type"] for r in resources).items())),
        "resources": resources,
        "outputs": run.outputs,
    }


def test_example_stack_matches_the_checked_in_snapshot(tmp_path):
    # As shipped: plannable on a fresh checkout, where no hub model has been fetched yet.
    values = read_stack_config("example")
    run = run_program(values, stack="example", base_dir=tmp_path)
    actual = json.dumps(snapshot_of(run, tmp_path), indent=2, sort_keys=False) + "\n"

    if os.environ.get("TPUCTL_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(actual)
    assert SNAPSHOT.is_file(), f"{SNAPSHOT.name} is missing; create it with TPUCTL_UPDATE_SNAPSHOTS=1"
    expected = SNAPSHOT.read_text()
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                            "checked-in snapshot", "program now", n=2))
        raise AssertionError(
            "the example stack's resources changed; if intended, rewrite the snapshot with "
            f"TPUCTL_UPDATE_SNAPSHOTS=1 and commit it:\n{diff[:6000]}"
        )


def test_snapshot_is_deterministic_across_runs_and_folders(tmp_path, hub_folder):
    # With the example's commented-out hub model switched on, so uploads are covered too.
    values = {**read_stack_config("example"),
              "tpuctl:hubModels": ["https://tfhub.dev/google/imagenet/mobilenet_v2_100_224/feature_vector/5"]}
    shots = []
    for i in range(2):
        base = tmp_path / f"run{i}"
        hub_folder(values["tpuctl:hubModels"], root=base / ".tpuctl-cache" / "hub")
        shots.append(snapshot_of(run_program(values, stack="example", base_dir=base), base))
    assert shots[0] == shots[1]
    # the model's 3 files, then tensorflow_hub's descriptor and the manifest (written last)
    assert shots[0]["counts"]["gcp:storage/bucketObject:BucketObject"] == 5
