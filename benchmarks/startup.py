"""How fast `tpuctl --help` starts, as a multiple of `import typer` (the floor of any typer CLI).

Usage: .venv/bin/python benchmarks/startup.py [--repeat N]

Each measurement is a fresh interpreter (what a user's shell pays), alternating the two commands so load on
the machine hits both alike. Prints the median of each and the ratio; ``-X importtime`` of one `--help` run
names the five slowest imports of ours, so a regression points at its module. Target: under 3x (commands and
Google clients load only when their command runs; the role snapshot only when a role is looked up).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ground.envs import OPS_PACKAGES

REPO = Path(__file__).resolve().parent.parent
OURS = (*OPS_PACKAGES, "trainer")


def seconds(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def slowest_of_ours(n: int = 5) -> list[tuple[int, str]]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tpuctl.cli", "--help"], cwd=REPO,
                          capture_output=True, text=True, check=True)
    rows = []
    for line in proc.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[0].isdigit() and parts[2].startswith(OURS):
            rows.append((int(parts[1]), parts[2]))
    return sorted(rows, reverse=True)[:n]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    help_s, typer_s = [], []
    for _ in range(args.repeat):
        help_s.append(seconds([sys.executable, "-m", "tpuctl.cli", "--help"]))
        typer_s.append(seconds([sys.executable, "-c", "import typer"]))
    h, t = statistics.median(help_s), statistics.median(typer_s)
    print(f"tpuctl --help  median {h * 1000:.0f} ms over {args.repeat} runs")
    print(f"import typer   median {t * 1000:.0f} ms")
    print(f"ratio          {h / t:.2f}x")
    for micros, module in slowest_of_ours():
        print(f"  {micros / 1000:6.1f} ms cumulative  {module}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
