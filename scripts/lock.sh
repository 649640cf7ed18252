#!/usr/bin/env bash
# Re-resolve requirements/*.in into requirements/*.lock in throw-away virtualenvs.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for env in ops trainer; do
  python3 -m venv "$tmp/$env"
  "$tmp/$env/bin/pip" install -q -r "requirements/$env.in"
  "$tmp/$env/bin/pip" freeze --exclude-editable > "requirements/$env.lock"
  echo "wrote requirements/$env.lock"
done
