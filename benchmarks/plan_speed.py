"""How long `tpuctl plan` takes on the example stack (target: a few seconds).

Usage: .venv/bin/python benchmarks/plan_speed.py [--repeat N]

Plans Pulumi.example.yaml with its hub model served from a tiny local cache (the real model is not
fetched), as a user runs it (`tpuctl plan --config FILE`, a fresh process: interpreter start,
pulumi/pulumi_gcp imports, program under mocks, policy) and in-process (warm imports), next to
`tpuctl --help` as the floor of any CLI call. Prints one line per measurement and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ground import domain  # noqa: E402


def example_config(tmp: Path) -> Path:
    doc = yaml.safe_load((REPO / "Pulumi.example.yaml").read_text())
    hub = tmp / "hub"
    for handle in doc["config"].get("tpuctl:hubModels") or []:
        folder = hub / domain.hub_cache_key(handle)
        (folder / "variables").mkdir(parents=True, exist_ok=True)
        (folder / "saved_model.pb").write_bytes(b"\x08\x01")
        (folder / "variables" / "variables.index").write_bytes(b"idx")
    doc["config"]["tpuctl:hubCacheSource"] = str(hub)
    path = tmp / "Pulumi.example.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def wall(cmd: list[str], ok: tuple[int, ...] = (0,)) -> float:
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    tpuctl = [sys.executable, "-m", "tpuctl.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        config = example_config(Path(tmp))
        helps = [wall([*tpuctl, "--help"]) for _ in range(args.repeat)]
        texts = [wall([*tpuctl, "plan", "--config", str(config)]) for _ in range(args.repeat)]
        jsons = [wall([*tpuctl, "plan", "--config", str(config), "--json"]) for _ in range(args.repeat)]

        from tpuctl.services.plan import plan

        started = time.perf_counter()
        first = plan(config_file=config)
        cold = time.perf_counter() - started
        warm = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            plan(config_file=config)
            warm.append(time.perf_counter() - started)

    help_s, text_s, json_s = (statistics.median(x) for x in (helps, texts, jsons))
    print(f"tpuctl --help                      {help_s:6.2f} s (median of {args.repeat})")
    print(f"tpuctl plan (example, text)        {text_s:6.2f} s (median of {args.repeat}), {text_s / help_s:4.1f}x --help")
    print(f"tpuctl plan --json (example)       {json_s:6.2f} s (median of {args.repeat}), {json_s / help_s:4.1f}x --help")
    print(f"tpuctl.services.plan.plan()     {cold:6.2f} s first call, {statistics.median(warm):.2f} s warm")
    print(f"planned {len(first.resources)} resources, {len(first.access)} access cells, "
          f"{len(first.violations)} verdicts, exit code {first.exit_code}")


if __name__ == "__main__":
    main()
