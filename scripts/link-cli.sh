#!/usr/bin/env bash
# Put `tpuctl` on PATH the way user-installed Python tools are (pip --user, pipx): a symbolic link in
# ~/.local/bin to this checkout's .venv/bin/tpuctl, made only when ~/.local/bin is on PATH; otherwise it
# says how. A ~/.local/bin/tpuctl that is something else is left alone. TPUCTL_NO_LINK=1: never link.
# Run by scripts/setup.sh after the ops environment is ready.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target="$root/.venv/bin/tpuctl"
bin="$HOME/.local/bin"
if [ ! -x "$target" ]; then
  echo "error: $target is missing; run scripts/setup.sh first" >&2; exit 1
fi
if [ "${TPUCTL_NO_LINK:-}" = 1 ]; then
  echo "setup: run tpuctl as $target (TPUCTL_NO_LINK=1: no link in $bin)"; exit 0
fi
case ":$PATH:" in
  *":$bin:"*|*":$bin/:"*) ;;
  *) echo "setup: run tpuctl as $target, or to type just 'tpuctl': mkdir -p ~/.local/bin && ln -s $target ~/.local/bin/tpuctl and put ~/.local/bin on PATH"
     exit 0 ;;
esac
if [ -e "$bin/tpuctl" ] || [ -L "$bin/tpuctl" ]; then
  if [ "$(readlink -f "$bin/tpuctl")" = "$(readlink -f "$target")" ]; then
    echo "setup: tpuctl is on PATH ($bin/tpuctl -> $target)"; exit 0
  fi
  echo "setup: $bin/tpuctl is another program, left alone; run this checkout's as $target"; exit 0
fi
mkdir -p "$bin"
ln -s "$target" "$bin/tpuctl"
echo "setup: linked $bin/tpuctl -> $target: 'tpuctl' now works in any folder"
